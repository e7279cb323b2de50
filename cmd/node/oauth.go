package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/reason"
)

var oauthSubcommands = []string{"login"}

const oauthUsage = `usage: node oauth login --provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]

  login   start authorizing an MCP server's authorization_code credential
          profile: prints the link for the person to open; their
          authorization server sends them back to a node's /oauth/callback,
          which stores the grant (sealed) for every node of the cluster.
          A per-principal profile names the principal whose account it is;
          --scope asks for scopes beyond the profile's (what an
          insufficient_scope refusal named).

The identity is an admin (--as admin by default; docs/security.md). Also takes
--config FILE, --nats URL, --prefix P, --creds FILE, --as NAME,
--inbox-prefix P and --timeout D. Prints {"url": ..., "expires": ...}; a
refusal prints {"refused": CODE, "message": ...} and exits 3.`

func oauthCmd(args []string) error {
	sub, args, err := group("oauth", oauthUsage, args, oauthSubcommands...)
	if err != nil {
		return err
	}
	fs := newFlags("oauth "+sub, "--provider ID --tenant T --profile P [--principal NAME] [--scope S,S] [flags]",
		"Starts an OAuth authorization (authorization code with PKCE) of an MCP server's credential\n"+
			"profile and prints the link to open; see docs/discovery.md, \"OAuth\".")
	var c conn
	c.flags(fs, false)
	c.as = config.DefaultAdminIdentity
	fs.Lookup("as").DefValue = config.DefaultAdminIdentity
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the node's answer")
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
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := nc.Request(oauth.LoginSubject(c.prefix), b, *timeout)
	if err != nil {
		return fmt.Errorf("oauth login: %w", err)
	}
	var rep oauth.LoginReply
	if len(m.Data) > 64<<10 || json.Unmarshal(m.Data, &rep) != nil || (rep.Login == nil && rep.Error == nil) {
		return errors.New("oauth login: a malformed answer")
	}
	if rep.Error != nil {
		return policyRefusal(reason.New(reason.Code(rep.Error.Code), "%s", rep.Error.Message))
	}
	fmt.Fprintf(stderr, "Open this link to authorize %s/%s on %s (until %s):\n%s\n", req.Tenant, req.Profile, req.Provider, rep.Login.Expires.Format(time.RFC3339), rep.Login.URL)
	return printJSON(rep.Login)
}
