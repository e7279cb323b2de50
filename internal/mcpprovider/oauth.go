package mcpprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/reason"
)

// An OAuth credential profile (Credential.OAuth) is authorized before
// every discovery and call: authorize asks the node's OAuth store for a
// usable token (refreshing it, serialized across nodes) and compares the
// grant's identity with the one the profile's session and snapshots were
// made with. What holds:
//
//   - A grant whose identity changed (a re-authorization, an account
//     switch, a refresh granting other scopes) is a discovery event: the
//     profile's snapshots are dropped (and keyed by grant, so none is
//     served again), its session is closed, and the next turn discovers
//     anew with the new token.
//   - A grant that cannot be used (never authorized, refresh refused,
//     revoked) moves the profile to auth_required with the reason; its
//     snapshots go stale, so no tool runs from them: a turn that pinned
//     the catalogue keeps it, and its calls fail auth_required.
//   - The access token is put on each HTTP request to the configured
//     endpoint only (teeRoundTripper), never in a log, an error or a
//     status.

// authorize makes pr's grant current and returns its identity ("" for a
// profile that is not OAuth).
func (p *Provider) authorize(ctx context.Context, pr *profile) (string, error) {
	if pr.client == nil {
		return "", nil
	}
	if p.opts.OAuth == nil {
		f := &failure{class: ClassAuthExpired, code: reason.AuthRequired, msg: "this host has no OAuth store: an oauth credential profile cannot be used"}
		p.authLost(pr, f)
		return "", f
	}
	tok, err := p.opts.OAuth.Token(ctx, pr.ref, pr.client)
	if err != nil {
		if errors.Is(err, oauth.ErrAuthRequired) {
			f := &failure{class: ClassAuthExpired, code: reason.AuthRequired, msg: "authentication expired: " + err.Error()}
			p.authLost(pr, f)
			return "", f
		}
		return "", &failure{class: ClassNetworkUnreachable, msg: "authorization server: " + err.Error()}
	}
	pr.mu.Lock()
	changed := pr.grant != "" && pr.grant != tok.Identity
	pr.grant, pr.bearer = tok.Identity, tok.Access
	var cs *mcp.ClientSession
	if changed {
		clear(pr.snaps)
		pr.gen++
		cs, pr.session = pr.session, nil
		pr.state, pr.since = next(pr.state, evHint, ClassNone, true), p.opts.Now()
	}
	pr.mu.Unlock()
	if changed {
		if cs != nil {
			_ = cs.Close()
		}
		p.log.Info("mcp authorization changed: the catalogue is discovered again", "profile", pr.key)
	}
	return tok.Identity, nil
}

// authLost records that pr's grant cannot be used: auth_required with
// the reason, every snapshot stale (shown as last-known, never run), the
// session closed.
func (p *Provider) authLost(pr *profile, f *failure) {
	pr.mu.Lock()
	for _, s := range pr.snaps {
		s.stale = true
	}
	pr.state, pr.class, pr.lastErr, pr.since = StateAuthRequired, ClassAuthExpired, f.msg, p.opts.Now()
	cs := pr.session
	pr.session = nil
	pr.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// bearer is the access token for one HTTP request of pr's session.
func (p *Provider) bearer(ctx context.Context, pr *profile) (string, error) {
	if p.opts.OAuth == nil {
		return "", errors.New("mcpprovider: no OAuth store")
	}
	tok, err := p.opts.OAuth.Token(ctx, pr.ref, pr.client)
	if err != nil {
		return "", err
	}
	return tok.Access, nil
}

// UsesOAuth reports whether any credential profile of c is OAuth.
func (c *Config) UsesOAuth() bool {
	for _, cr := range c.Credentials {
		if cr.OAuth != nil {
			return true
		}
	}
	return false
}

// BeginLogin starts the authorization of an authorization_code profile
// for principal (ignored for a shared profile): the link for the person
// to follow, whose redirect completes it on a node's callback. It asks
// for the profile's scopes and extra ones (step-up: what an
// insufficient_scope refusal named).
func (p *Provider) BeginLogin(ctx context.Context, tenant, profile, principal string, extra []string) (oauth.Login, error) {
	_, cred, ok := p.cfg.profileFor(tenant, profile)
	if !ok || cred == nil || cred.OAuth == nil {
		return oauth.Login{}, fmt.Errorf("mcp server %s: no oauth credential profile %s/%s", p.id, tenant, profile)
	}
	if p.opts.OAuth == nil {
		return oauth.Login{}, errors.New("mcpprovider: this host has no OAuth store")
	}
	o := cred.OAuth
	if o.Flow != oauth.FlowAuthorizationCode {
		return oauth.Login{}, fmt.Errorf("mcp server %s: profile %s/%s uses %s: it needs no login", p.id, tenant, profile, o.Flow)
	}
	if !o.perPrincipal() {
		principal = ""
	} else if principal == "" {
		return oauth.Login{}, fmt.Errorf("mcp server %s: profile %s/%s is authorized per principal: name the principal", p.id, tenant, profile)
	}
	ref := oauth.Ref{Server: p.id, Tenant: tenant, Profile: profile, Principal: principal}
	scopes := slices.Clone(o.Scopes)
	for _, s := range extra {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return p.opts.OAuth.BeginLogin(ctx, ref, &oauth.Client{Flow: o.Flow, ClientID: o.ClientID, Scopes: scopes, Resource: p.cfg.URL, Issuer: o.Issuer})
}

// ClientSecret is the client secret of ref's profile (a login completing).
func (p *Provider) ClientSecret(ref oauth.Ref) (string, error) {
	_, cred, ok := p.cfg.profileFor(ref.Tenant, ref.Profile)
	if ref.Server != p.id || !ok || cred == nil || cred.OAuth == nil {
		return "", fmt.Errorf("mcp server %s: no oauth credential profile %s/%s", p.id, ref.Tenant, ref.Profile)
	}
	return cred.OAuth.clientSecret()
}

// Logout withdraws one grant of an OAuth profile: principal's for a
// per-principal profile (required), the profile's own for a shared or
// service one (principal ignored). The grant is deleted from the OAuth
// store, so every node's next discovery or call with it is auth_required
// (a service's grant is obtained anew), and this node lets go of the
// session and snapshots made with it at once; a later login is a new
// grant identity, so no node serves what was discovered with this one.
func (p *Provider) Logout(ctx context.Context, tenant, profile, principal string) error {
	key, cred, ok := p.cfg.profileFor(tenant, profile)
	if !ok || cred == nil || cred.OAuth == nil {
		return fmt.Errorf("mcp server %s: no oauth credential profile %s/%s", p.id, tenant, profile)
	}
	if p.opts.OAuth == nil {
		return errors.New("mcpprovider: this host has no OAuth store")
	}
	if !cred.OAuth.perPrincipal() {
		principal = ""
	} else if principal == "" {
		return fmt.Errorf("mcp server %s: profile %s/%s is authorized per principal: name the principal", p.id, tenant, profile)
	} else {
		key += "#" + principal
	}
	if err := p.opts.OAuth.Forget(ctx, oauth.Ref{Server: p.id, Tenant: tenant, Profile: profile, Principal: principal}); err != nil {
		return err
	}
	p.mu.Lock()
	if pr := p.profiles[key]; pr != nil && !p.closed {
		p.evictLocked(key, pr)
	}
	p.mu.Unlock()
	p.log.Info("mcp oauth grant withdrawn", "profile", key)
	return nil
}
