package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/reason"
)

var oauthSubcommands = []string{"login", "reseal"}

const oauthUsage = `usage: node oauth login --provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]
       node oauth reseal [flags]

  login   start authorizing an MCP server's authorization_code credential
          profile: prints the link for the person to open; their
          authorization server sends them back to a node's /oauth/callback,
          which stores the grant (sealed) for every node of the cluster.
          A per-principal profile names the principal whose account it is;
          --scope asks for scopes beyond the profile's (what an
          insufficient_scope refusal named).
  reseal  seal every stored grant under the answering node's current key
          (after a key rotation; docs/security.md, "Rotating the OAuth
          sealing key"): prints how many were resealed and the grants it
          could not open, with the id of the key that sealed them.

The identity is an admin (--as admin by default; docs/security.md). Also takes
--config FILE, --nats URL, --prefix P, --creds FILE, --as NAME,
--inbox-prefix P and --timeout D. login prints {"url": ..., "expires": ...};
reseal prints its report; a refusal prints {"refused": CODE, "message": ...}
and exits 3.`

func oauthCmd(args []string) error {
	sub, args, err := group("oauth", oauthUsage, args, oauthSubcommands...)
	if err != nil {
		return err
	}
	switch sub {
	case "reseal":
		return oauthReseal(args)
	}
	return oauthLogin(args)
}

// oauthFlags are an oauth subcommand's flags: the connection (as the
// admin by default) and the timeout.
func oauthFlags(sub, synopsis, about string) (*flag.FlagSet, *conn, *time.Duration) {
	fs := newFlags("oauth "+sub, synopsis, about)
	c := &conn{}
	c.flags(fs, false)
	c.as = config.DefaultAdminIdentity
	fs.Lookup("as").DefValue = config.DefaultAdminIdentity
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the node's answer")
	return fs, c, timeout
}

// oauthRequest sends req to subject(prefix) as c and decodes the answer into rep
// (bounded); refusal is rep's error, nil when it has none.
func oauthRequest(c *conn, subject func(prefix string) string, req any, timeout time.Duration, rep any, refusal func() *oauth.ReplyError) error {
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := nc.Request(subject(c.prefix), b, timeout) // the prefix is resolved by dial
	if err != nil {
		return err
	}
	if len(m.Data) > 1<<20 || json.Unmarshal(m.Data, rep) != nil {
		return errors.New("a malformed answer")
	}
	if re := refusal(); re != nil {
		return policyRefusal(reason.New(reason.Code(re.Code), "%s", re.Message))
	}
	return nil
}

func oauthLogin(args []string) error {
	fs, c, timeout := oauthFlags("login", "--provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]",
		"Starts an OAuth authorization (authorization code with PKCE) of an MCP server's credential\n"+
			"profile and prints the link to open; see docs/discovery.md, \"OAuth\".")
	var req oauth.LoginRequest
	fs.StringVar(&req.Provider, "provider", "", "the MCP provider's id (providers[].id)")
	fs.StringVar(&req.Tenant, "tenant", "", "the credential profile's tenant")
	fs.StringVar(&req.Profile, "profile", "", "the credential profile")
	fs.StringVar(&req.Principal, "principal", "", "whose account (a per-principal profile)")
	scopes := fs.String("scope", "", "scopes to ask for beyond the profile's, comma-separated (step-up)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *scopes != "" {
		req.Scopes = strings.Split(*scopes, ",")
	}
	if req.Provider == "" || req.Tenant == "" || req.Profile == "" || fs.NArg() != 0 {
		return usageError{errors.New("oauth login needs --provider, --tenant and --profile (node oauth login -h for usage)")}
	}
	var rep oauth.LoginReply
	err := oauthRequest(c, oauth.LoginSubject, req, *timeout, &rep, func() *oauth.ReplyError { return rep.Error })
	if err == nil && rep.Login == nil {
		err = errors.New("a malformed answer")
	}
	if err != nil {
		return fmt.Errorf("oauth login: %w", err)
	}
	fmt.Fprintf(stderr, "Open this link to authorize %s/%s on %s (until %s):\n%s\n", req.Tenant, req.Profile, req.Provider, rep.Login.Expires.Format(time.RFC3339), rep.Login.URL)
	return printJSON(rep.Login)
}

func oauthReseal(args []string) error {
	fs, c, timeout := oauthFlags("reseal", "[flags]",
		"Seals every stored OAuth grant under the answering node's current sealing key; see\n"+
			"docs/security.md, \"Rotating the OAuth sealing key\".")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("oauth reseal takes no arguments (node oauth reseal -h for usage)")}
	}
	var rep oauth.ResealReply
	err := oauthRequest(c, oauth.ResealSubject, struct{}{}, *timeout, &rep, func() *oauth.ReplyError { return rep.Error })
	if err == nil && rep.Report == nil {
		err = errors.New("a malformed answer")
	}
	if err != nil {
		return fmt.Errorf("oauth reseal: %w", err)
	}
	return printJSON(rep.Report)
}
