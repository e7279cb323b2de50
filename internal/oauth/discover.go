package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// serverMeta is what discovery found for one MCP server: its resource
// identifier, the issuer it uses and that issuer's metadata, and the
// scopes its challenge or metadata asked for.
type serverMeta struct {
	resource string
	issuer   string
	as       *oauthex.AuthServerMeta
	scopes   []string
	at       time.Time
}

// metaTTL is how long discovery's answer is reused.
const metaTTL = 10 * time.Minute

// discover finds resourceURL's authorization server: an unauthenticated
// request's 401 names the protected-resource metadata (RFC 9728 §5.1),
// else the well-known URLs are tried; the metadata's resource must be
// resourceURL (its origin for the root document); the issuer is pin when
// set (and must be listed), else the first listed; its metadata (RFC
// 8414, checked by the SDK: issuer equality and PKCE) is fetched.
func (m *Manager) discover(ctx context.Context, resourceURL, pin string) (*serverMeta, error) {
	m.mu.Lock()
	if sm := m.meta[resourceURL+"\n"+pin]; sm != nil && m.now().Sub(sm.at) < metaTTL {
		m.mu.Unlock()
		return sm, nil
	}
	m.mu.Unlock()

	var challenges []oauthex.Challenge
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, resourceURL, nil)
	if err != nil {
		return nil, fmt.Errorf("oauth: server url: %w", err)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, &Error{kind: ErrUnavailable, msg: "reaching the server for its authorization metadata: " + bounded(err.Error())}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		challenges, _ = oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	}

	var prm *oauthex.ProtectedResourceMetadata
	var errs []error
	for _, c := range prmCandidates(challengeParam(challenges, "resource_metadata"), resourceURL) {
		p, err := oauthex.GetProtectedResourceMetadata(ctx, c.url, c.resource, m.hc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		prm = p
		break
	}
	if prm == nil {
		return nil, &Error{kind: ErrUnavailable, msg: "no protected-resource metadata: " + bounded(errors.Join(errs...).Error())}
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, &Error{kind: ErrAuthRequired, msg: "the server's protected-resource metadata names no authorization server"}
	}
	issuer := prm.AuthorizationServers[0]
	if pin != "" {
		if !slices.Contains(prm.AuthorizationServers, pin) {
			return nil, &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("the server does not name the configured issuer %s among its authorization servers", pin)}
		}
		issuer = pin
	}
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, m.hc)
	if err != nil {
		return nil, &Error{kind: ErrUnavailable, msg: "authorization server metadata: " + bounded(err.Error())}
	}
	if asm == nil {
		return nil, &Error{kind: ErrUnavailable, msg: "the authorization server " + issuer + " publishes no metadata"}
	}
	sm := &serverMeta{resource: prm.Resource, issuer: asm.Issuer, as: asm, at: m.now()}
	if s := challengeParam(challenges, "scope"); s != "" {
		sm.scopes = strings.Fields(s)
	} else {
		sm.scopes = prm.ScopesSupported
	}
	m.mu.Lock()
	m.meta[resourceURL+"\n"+pin] = sm
	m.mu.Unlock()
	return sm, nil
}

// forget drops discovery's answer for resourceURL (a grant failed: the
// server may have moved to another authorization server).
func (m *Manager) forget(resourceURL, pin string) {
	m.mu.Lock()
	delete(m.meta, resourceURL+"\n"+pin)
	m.mu.Unlock()
}

type prmCandidate struct{ url, resource string }

// prmCandidates are where protected-resource metadata may be, in order:
// the challenge's URL, the path-inserted well-known URL, the root one
// (whose resource is the origin).
func prmCandidates(fromChallenge, resourceURL string) []prmCandidate {
	var out []prmCandidate
	if fromChallenge != "" {
		out = append(out, prmCandidate{fromChallenge, resourceURL})
	}
	ru, err := url.Parse(resourceURL)
	if err != nil {
		return out
	}
	mu := *ru
	mu.RawQuery, mu.Fragment = "", ""
	if p := strings.TrimLeft(ru.Path, "/"); p != "" {
		mu.Path = "/.well-known/oauth-protected-resource/" + p
		out = append(out, prmCandidate{mu.String(), resourceURL})
	}
	mu.Path = "/.well-known/oauth-protected-resource"
	origin := *ru
	origin.Path, origin.RawQuery, origin.Fragment = "", "", ""
	return append(out, prmCandidate{mu.String(), origin.String()})
}

// challengeParam is param of the first Bearer challenge that has it.
func challengeParam(cs []oauthex.Challenge, param string) string {
	for _, c := range cs {
		if c.Scheme == "bearer" && c.Params[param] != "" {
			return c.Params[param]
		}
	}
	return ""
}

// Challenge is what a server's WWW-Authenticate Bearer challenge says.
type Challenge struct {
	Error string   // "invalid_token", "insufficient_scope", ...
	Scope []string // the scopes the request needs
}

// ParseChallenge reads the Bearer challenge of WWW-Authenticate values
// (bounded: at most 8 KiB are read); ok=false when there is none.
func ParseChallenge(values []string) (Challenge, bool) {
	n := 0
	for i, v := range values {
		n += len(v)
		if n > 8<<10 {
			values = values[:i]
			break
		}
	}
	cs, err := oauthex.ParseWWWAuthenticate(values)
	if err != nil {
		return Challenge{}, false
	}
	for _, c := range cs {
		if c.Scheme == "bearer" {
			return Challenge{Error: c.Params["error"], Scope: strings.Fields(c.Params["scope"])}, true
		}
	}
	return Challenge{}, false
}
