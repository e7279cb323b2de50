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

var oauthSubcommands = []string{"login", "logout", "reseal"}

const oauthUsage = `usage: node oauth login --provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]
       node oauth logout --provider ID --tenant T --profile P [--principal NAME] [flags]
       node oauth reseal [flags]

  login   start authorizing an MCP server's authorization_code credential
          profile: prints the link for the person to open; their
          authorization server sends them back to a node's /oauth/callback,
          which stores the grant (sealed) for every node of the cluster.
          A per-principal profile names the principal whose account it is;
          --scope asks for scopes beyond the profile's (what an
          insufficient_scope refusal named).
  logout  withdraw one grant: a per-principal profile's principal's (named
          with --principal), else the profile's own. It is deleted for
          every node; the principal's next turn is auth_required until they
          log in again, and nothing discovered with it is served again.
  reseal  seal every stored grant under the answering node's current key
          (after a key rotation; docs/security.md, "Rotating the OAuth
          sealing key"): prints how many were resealed and the grants it
          could not open, with the id of the key that sealed them.

The identity is an admin (--as admin by default; docs/security.md). Also takes
--config FILE, --nats URL, --prefix P, --creds FILE, --as NAME,
--inbox-prefix P and --timeout D. login prints {"url": ..., "expires": ...};
logout prints {"withdrawn": true}; reseal prints its report; a refusal prints {"refused": CODE, "message": ...}
and exits 3.`

func oauthCmd(args []string) error {
	sub, args, err := group("oauth", oauthUsage, args, oauthSubcommands...)
	if err != nil {
		return err
	}
	switch sub {
	case "logout":
		return oauthLogout(args)
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

// oauthRequest sends req to subject(prefix) as c and decodes the answer
// into rep (bounded); answer gives rep's refusal (nil when none) and
// whether rep is a whole answer (a refusal or a result). Its errors
// are prefixed "oauth sub".
func oauthRequest(sub string, c *conn, subject func(prefix string) string, req any, timeout time.Duration, rep any, answer func() (*oauth.ReplyError, bool)) error {
	if err := oauthExchange(c, subject, req, timeout, rep, answer); err != nil {
		return fmt.Errorf("oauth %s: %w", sub, err)
	}
	return nil
}

func oauthExchange(c *conn, subject func(prefix string) string, req any, timeout time.Duration, rep any, answer func() (*oauth.ReplyError, bool)) error {
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
	re, ok := answer()
	if re != nil {
		return policyRefusal(reason.New(reason.Code(re.Code), "%s", re.Message))
	}
	if !ok {
		return errors.New("a malformed answer")
	}
	return nil
}

// grantFlags are the flags naming one grant: --provider, --tenant,
// --profile and --principal.
func grantFlags(fs *flag.FlagSet, provider, tenant, profile, principal *string) {
	fs.StringVar(provider, "provider", "", "the MCP provider's id (providers[].id)")
	fs.StringVar(tenant, "tenant", "", "the credential profile's tenant")
	fs.StringVar(profile, "profile", "", "the credential profile")
	fs.StringVar(principal, "principal", "", "whose grant (a per-principal profile)")
}

func oauthLogin(args []string) error {
	fs, c, timeout := oauthFlags("login", "--provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]",
		"Starts an OAuth authorization (authorization code with PKCE) of an MCP server's credential\n"+
			"profile and prints the link to open; see docs/discovery.md, \"OAuth\".")
	var req oauth.LoginRequest
	grantFlags(fs, &req.Provider, &req.Tenant, &req.Profile, &req.Principal)
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
	if err := oauthRequest("login", c, oauth.LoginSubject, req, *timeout, &rep, func() (*oauth.ReplyError, bool) { return rep.Error, rep.Login != nil }); err != nil {
		return err
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
	if err := oauthRequest("reseal", c, oauth.ResealSubject, struct{}{}, *timeout, &rep, func() (*oauth.ReplyError, bool) { return rep.Error, rep.Report != nil }); err != nil {
		return err
	}
	return printJSON(rep.Report)
}

func oauthLogout(args []string) error {
	fs, c, timeout := oauthFlags("logout", "--provider ID --tenant T --profile P [--principal NAME] [flags]",
		"Withdraws one OAuth grant of an MCP server's credential profile (deleted for every node);\n"+
			"see docs/discovery.md, \"OAuth\".")
	var req oauth.LogoutRequest
	grantFlags(fs, &req.Provider, &req.Tenant, &req.Profile, &req.Principal)
	if err := parse(fs, args); err != nil {
		return err
	}
	if req.Provider == "" || req.Tenant == "" || req.Profile == "" || fs.NArg() != 0 {
		return usageError{errors.New("oauth logout needs --provider, --tenant and --profile (node oauth logout -h for usage)")}
	}
	var rep oauth.LogoutReply
	if err := oauthRequest("logout", c, oauth.LogoutSubject, req, *timeout, &rep, func() (*oauth.ReplyError, bool) { return rep.Error, rep.Withdrawn }); err != nil {
		return err
	}
	return printJSON(&rep)
}
