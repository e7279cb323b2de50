package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// nodeOAuth is the node's OAuth store (internal/oauth), opened when a
// configured MCP server has an oauth credential profile, and the bus
// subscription that starts logins.
type nodeOAuth struct {
	m   *oauth.Manager
	sub *nats.Subscription
}

// oauthBucketSuffix names the grants' bucket beside the policy bucket:
// "<policy bucket>_OAUTH" (and "<policy bucket>_OAUTH_login").
const oauthBucketSuffix = "_OAUTH"

// startOAuth opens the OAuth store when a configured MCP server uses
// OAuth. Its sealing key is in the credentials directory (the data
// directory with an external cluster), created once; its buckets are
// replicated like the policy's.
func (n *Node) startOAuth(cfg *config.Config) (*oauth.Manager, error) {
	uses := false
	for _, p := range cfg.Providers {
		if p.Kind == "mcp" && p.MCP != nil && p.MCP.UsesOAuth() {
			uses = true
		}
	}
	if !uses {
		return nil, nil
	}
	if n.oauth != nil && n.oauth.m != nil {
		return n.oauth.m, nil
	}
	dir := n.credsDir
	if dir == "" {
		dir = cfg.Node.DataDir
	}
	sealer, err := oauth.LoadOrCreateKey(dir)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		return nil, fmt.Errorf("node: oauth: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := oauth.New(ctx, js, sealer, &oauth.Options{Bucket: cfg.Policy.Bucket + oauthBucketSuffix, Replicas: cfg.Policy.Replicas,
		Holder: cfg.Node.ID, Logger: n.log})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.oauth = &nodeOAuth{m: m}
	return m, nil
}

// serveOAuth mounts the callback (GET /oauth/callback, beside /mcp: its
// URL is the MCP front's with /mcp replaced) and answers admins' login
// requests on oauth.LoginSubject.
func (n *Node) serveOAuth(mux *http.ServeMux) error {
	if n.oauth == nil {
		n.oauth = &nodeOAuth{} // no OAuth profile: logins are answered, refused
	}
	if n.oauth.m != nil {
		if u := n.MCPURL(); u != "" {
			n.oauth.m.SetRedirectURL(strings.TrimSuffix(u, mcpfront.Path) + oauth.CallbackPath)
		}
		mux.Handle("GET "+oauth.CallbackPath, n.oauth.m.Callback(func(ref oauth.Ref) (string, error) {
			if mp, ok := n.mcpProvider(ref.Server); ok {
				return mp.ClientSecret(ref)
			}
			return "", fmt.Errorf("no mcp server %s", ref.Server)
		}))
	}
	sub, err := n.nc.QueueSubscribe(oauth.LoginSubject(n.cfg.NATS.Prefix), "sharedos-oauth", n.answerLogin)
	if err != nil {
		return fmt.Errorf("node: oauth logins: %w", err)
	}
	n.oauth.sub = sub
	return nil
}

// answerLogin starts a login for an admin: the link to give the person.
func (n *Node) answerLogin(m *nats.Msg) {
	rep := oauth.LoginReply{}
	refuse := func(code reason.Code, format string, args ...any) {
		rep.Error = &oauth.ReplyError{Code: string(code), Message: fmt.Sprintf(format, args...)}
	}
	defer func() {
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	}()
	var ci struct {
		Account string `json:"acc"`
	}
	info := m.Header.Get("Nats-Request-Info")
	if len(info) > 4096 || json.Unmarshal([]byte(info), &ci) != nil || ci.Account == "" {
		refuse(reason.PolicyForbidden, "the request did not come through an admin identity's account")
		return
	}
	id, ok := n.identities().Lookup(ci.Account)
	if !ok || id.Role != identity.Admin {
		refuse(reason.PolicyForbidden, "bus identity %q is not an admin", ci.Account)
		return
	}
	var req oauth.LoginRequest
	if len(m.Data) > 4096 || json.Unmarshal(m.Data, &req) != nil || len(req.Scopes) > 64 {
		refuse(reason.InvalidRequest, "a login request is {provider, tenant, profile, principal}")
		return
	}
	if !adminScope(id).Covers(policy.Key{Kind: policy.Credentials, Tenant: req.Tenant, Name: req.Profile}) {
		refuse(reason.PolicyForbidden, "admin %s is bound to tenants %v: it authorizes only their credential profiles", ci.Account, id.Tenants)
		return
	}
	if mp, ok := n.mcpProvider(req.Provider); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := mp.BeginLogin(ctx, req.Tenant, req.Profile, req.Principal, req.Scopes)
		if err != nil {
			refuse(reason.InvalidRequest, "%s", err.Error())
			return
		}
		n.log.Info("oauth: login started", "by", ci.Account, "provider", req.Provider, "tenant", req.Tenant, "profile", req.Profile, "principal", req.Principal)
		rep.Login = &l
		return
	}
	refuse(reason.InvalidRequest, "no mcp provider %q on this node", req.Provider)
}

// stopOAuth ends the login subscription and the store's connections.
func (n *Node) stopOAuth() {
	if n.oauth == nil {
		return
	}
	if n.oauth.sub != nil {
		_ = n.oauth.sub.Unsubscribe()
	}
	if n.oauth.m != nil {
		n.oauth.m.Close()
	}
}
