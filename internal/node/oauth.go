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
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// nodeOAuth is the node's OAuth store (internal/oauth), opened when a
// configured MCP server has an oauth credential profile, and the bus
// subscription that starts logins.
type nodeOAuth struct {
	m    *oauth.Manager
	subs []*nats.Subscription
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
	for _, h := range []struct {
		subject string
		answer  nats.MsgHandler
	}{
		{oauth.LoginSubject(n.cfg.NATS.Prefix), n.answerLogin},
		{oauth.LogoutSubject(n.cfg.NATS.Prefix), n.answerLogout},
		{oauth.ResealSubject(n.cfg.NATS.Prefix), n.answerReseal},
	} {
		sub, err := n.nc.QueueSubscribe(h.subject, "sharedos-oauth", h.answer)
		if err != nil {
			return fmt.Errorf("node: oauth %s: %w", h.subject, err)
		}
		n.oauth.subs = append(n.oauth.subs, sub)
	}
	return nil
}

// adminOf is the admin identity m came from (its account, from the
// server-set Nats-Request-Info), or the refusal for one that is not.
func (n *Node) adminOf(m *nats.Msg) (*identity.Identity, *oauth.ReplyError) {
	var ci struct {
		Account string `json:"acc"`
	}
	info := m.Header.Get("Nats-Request-Info")
	if len(info) > 4096 || json.Unmarshal([]byte(info), &ci) != nil || ci.Account == "" {
		return nil, &oauth.ReplyError{Code: string(reason.PolicyForbidden), Message: "the request did not come through an admin identity's account"}
	}
	id, ok := n.identities().Lookup(ci.Account)
	if !ok || id.Role != identity.Admin {
		return nil, &oauth.ReplyError{Code: string(reason.PolicyForbidden), Message: fmt.Sprintf("bus identity %q is not an admin", ci.Account)}
	}
	return id, nil
}

// grantRequest is the admin m came from, with m's body (at most 4 KiB)
// decoded into req, and the MCP provider serving provider(req); else the
// refusal (usage says what a request is). A tenant admin is refused
// every profile outside its tenants, tenant(req) and profile(req).
func grantRequest[R any](n *Node, m *nats.Msg, req *R, usage string, named func(*R) (provider, tenant, profile string)) (*identity.Identity, *mcpprovider.Provider, *oauth.ReplyError) {
	id, rerr := n.adminOf(m)
	if rerr != nil {
		return nil, nil, rerr
	}
	if len(m.Data) > 4096 || json.Unmarshal(m.Data, req) != nil {
		return nil, nil, &oauth.ReplyError{Code: string(reason.InvalidRequest), Message: usage}
	}
	provider, tenant, profile := named(req)
	if !adminScope(id).Covers(policy.Key{Kind: policy.Credentials, Tenant: tenant, Name: profile}) {
		return nil, nil, &oauth.ReplyError{Code: string(reason.PolicyForbidden),
			Message: fmt.Sprintf("admin %s is bound to tenants %v: it authorizes only their credential profiles", id.Name, id.Tenants)}
	}
	mp, ok := n.mcpProvider(provider)
	if !ok {
		return nil, nil, &oauth.ReplyError{Code: string(reason.InvalidRequest), Message: fmt.Sprintf("no mcp provider %q on this node", provider)}
	}
	return id, mp, nil
}

// respond answers m with rep as JSON.
func respond(m *nats.Msg, rep any) {
	b, _ := json.Marshal(rep)
	_ = m.Respond(b)
}

// answerLogin starts a login for an admin: the link to give the person.
func (n *Node) answerLogin(m *nats.Msg) {
	rep := oauth.LoginReply{}
	defer respond(m, &rep)
	refuse := func(code reason.Code, format string, args ...any) {
		rep.Error = &oauth.ReplyError{Code: string(code), Message: fmt.Sprintf(format, args...)}
	}
	var req oauth.LoginRequest
	id, mp, rerr := grantRequest(n, m, &req, "a login request is {provider, tenant, profile, principal, scopes}",
		func(r *oauth.LoginRequest) (string, string, string) { return r.Provider, r.Tenant, r.Profile })
	if rerr != nil {
		rep.Error = rerr
		return
	}
	if len(req.Scopes) > 64 {
		refuse(reason.InvalidRequest, "a login asks for at most 64 scopes")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := mp.BeginLogin(ctx, req.Tenant, req.Profile, req.Principal, req.Scopes)
	if err != nil {
		refuse(reason.InvalidRequest, "%s", err.Error())
		return
	}
	n.log.Info("oauth: login started", "by", id.Name, "provider", req.Provider, "tenant", req.Tenant, "profile", req.Profile, "principal", req.Principal)
	rep.Login = &l
}

// answerLogout withdraws one grant for an admin (mcpprovider's Logout):
// deleted for every node, let go of here.
func (n *Node) answerLogout(m *nats.Msg) {
	rep := oauth.LogoutReply{}
	defer respond(m, &rep)
	var req oauth.LogoutRequest
	id, mp, rerr := grantRequest(n, m, &req, "a logout request is {provider, tenant, profile, principal}",
		func(r *oauth.LogoutRequest) (string, string, string) { return r.Provider, r.Tenant, r.Profile })
	if rerr != nil {
		rep.Error = rerr
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mp.Logout(ctx, req.Tenant, req.Profile, req.Principal); err != nil {
		rep.Error = &oauth.ReplyError{Code: string(reason.InvalidRequest), Message: err.Error()}
		return
	}
	n.log.Info("oauth: grant withdrawn", "by", id.Name, "provider", req.Provider, "tenant", req.Tenant, "profile", req.Profile, "principal", req.Principal)
	rep.Withdrawn = true
}

// answerReseal reseals the stored grants under this node's current key
// for an admin (oauth.Manager.Reseal).
func (n *Node) answerReseal(m *nats.Msg) {
	rep := oauth.ResealReply{}
	defer respond(m, &rep)
	id, rerr := n.adminOf(m)
	if rerr != nil {
		rep.Error = rerr
		return
	}
	if !id.ClusterAdmin() {
		rep.Error = &oauth.ReplyError{Code: string(reason.PolicyForbidden),
			Message: fmt.Sprintf("admin %s is bound to tenants %v: resealing moves every tenant's grants, a cluster admin's operation", id.Name, id.Tenants)}
		return
	}
	if n.oauth.m == nil {
		rep.Error = &oauth.ReplyError{Code: string(reason.InvalidRequest), Message: "no mcp provider of this node uses OAuth"}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := n.oauth.m.Reseal(ctx)
	if err != nil {
		rep.Error = &oauth.ReplyError{Code: string(reason.ProviderUnavailable), Message: err.Error()}
		return
	}
	n.log.Info("oauth: grants resealed", "by", id.Name, "key_id", r.KeyID, "resealed", r.Resealed, "unreadable", len(r.Unreadable))
	rep.Report = &r
}

// stopOAuth ends the login subscription and the store's connections.
func (n *Node) stopOAuth() {
	if n.oauth == nil {
		return
	}
	for _, sub := range n.oauth.subs {
		_ = sub.Unsubscribe()
	}
	if n.oauth.m != nil {
		n.oauth.m.Close()
	}
}
