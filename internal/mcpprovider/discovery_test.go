package mcpprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/reason"
)

func TestTenThousandToolsPaginatedToTheEnd(t *testing.T) {
	raw := make([]json.RawMessage, 10000)
	for i := range raw {
		raw[i] = json.RawMessage(tool(fmt.Sprintf("t%05d", i), `{"type":"object"}`))
	}
	f := newFake(t, nil)
	f.setRaw(raw)
	f.pageSize = 500
	// Generous bounds: 10,000 schemas under the race detector on a shared machine.
	long := mcpprovider.Config{ListTimeout: mcpprovider.Duration(5 * time.Minute)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := start(t, setup{servers: one(f), cfg: long})
	cat, err := p.Catalog(ctx, access(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Definitions) != 10000 || f.lists.Load() != 20 {
		t.Fatalf("%d tools in %d pages, want 10000 in 20", len(cat.Definitions), f.lists.Load())
	}
	// One more than the bound fails the listing as a whole: not a truncated catalogue.
	f.setRaw(append(raw, json.RawMessage(tool("t10000", `{"type":"object"}`))))
	p2 := start(t, setup{servers: one(f), cfg: long})
	_, err = p2.Catalog(ctx, access(""))
	if reason.Of(err) != reason.ProviderError || p2.Status()[0].Class != mcpprovider.ClassMalformedResponse {
		t.Fatalf("err %v status %+v", err, p2.Status())
	}
}

func TestPagesBoundedWhenPaginationNeverEnds(t *testing.T) {
	raw := make([]json.RawMessage, 50)
	for i := range raw {
		raw[i] = json.RawMessage(tool(fmt.Sprintf("t%d", i), `{"type":"object"}`))
	}
	f := newFake(t, nil)
	f.setRaw(raw)
	f.pageSize = 1
	p := start(t, setup{servers: one(f), cfg: mcpprovider.Config{Limits: mcpprovider.Limits{MaxPages: 10}}})
	_, err := p.Catalog(ctxT(t), access(""))
	if err == nil || p.Status()[0].Class != mcpprovider.ClassServerBug {
		t.Fatalf("err %v status %+v", err, p.Status())
	}
	if n := f.lists.Load(); n > 12 {
		t.Fatalf("%d pages asked for; bound 10", n)
	}
}

// Two credential profiles see different tools; neither's cache ever
// answers the other, and a profile not configured gets nothing.
func TestAuthDependentListsNeverMix(t *testing.T) {
	a := newFake(t, nil, tool("read_repo", objSchema), tool("create_issue", objSchema))
	b := newFake(t, nil, tool("read_repo", objSchema))
	p := start(t, setup{
		servers: func(profile string) *fake { return map[string]*fake{"acme/acct-a": a, "acme/acct-b": b}[profile] },
		cfg: mcpprovider.Config{Credentials: []mcpprovider.Credential{
			{Tenant: "acme", Profile: "acct-a", Env: "MCPTEST_A"}, {Tenant: "acme", Profile: "acct-b", Env: "MCPTEST_B"}}},
	})
	for range 2 { // the second round is answered from each profile's own cache
		ca, err := p.Catalog(ctxT(t), access("acct-a"))
		if err != nil {
			t.Fatal(err)
		}
		cb, err := p.Catalog(ctxT(t), access("acct-b"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(ca), []string{"read_repo", "create_issue"}) || !slices.Equal(names(cb), []string{"read_repo"}) {
			t.Fatalf("a %v b %v", names(ca), names(cb))
		}
	}
	if _, err := p.Catalog(ctxT(t), access("acct-c")); reason.Of(err) != reason.ProviderUnavailable {
		t.Fatalf("an unconfigured profile: %v", err)
	}
}

func TestCacheHonoursTTLAndCountsOneDiscoveryPerLifetime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		ttlMs    *int
		cfgTTL   time.Duration
		life     time.Duration
	}{
		{"2025-06-18 uses the configured ttl", []string{v2025}, nil, 30 * time.Second, 30 * time.Second},
		{"2026-07-28 uses ttlMs", []string{v2026}, ptr(10000), time.Hour, 10 * time.Second},
		{"2026-07-28 missing ttlMs is 0", []string{v2026}, nil, time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.versions, tool("search", objSchema))
			f.ttlMs = tc.ttlMs
			clk := newClock()
			p := start(t, setup{servers: one(f), clock: clk, cfg: mcpprovider.Config{TTL: mcpprovider.Duration(tc.cfgTTL)}})
			for range 100 {
				if _, err := p.Catalog(ctxT(t), access("")); err != nil {
					t.Fatal(err)
				}
			}
			want := int64(1)
			if tc.life == 0 {
				want = 100
			}
			if got := p.Discoveries(); got != want {
				t.Fatalf("%d discoveries for 100 turns within one lifetime, want %d", got, want)
			}
			if p.Status()[0].Protocol != tc.versions[0] {
				t.Fatalf("protocol %s", p.Status()[0].Protocol)
			}
			if tc.life == 0 {
				return
			}
			clk.Advance(tc.life) // expired cache
			if p.Status()[0].State != mcpprovider.StateStale {
				t.Fatalf("state %s after the ttl, want stale", p.Status()[0].State)
			}
			if _, err := p.Catalog(ctxT(t), access("")); err != nil || p.Discoveries() != 2 {
				t.Fatalf("after expiry: %v, %d discoveries", err, p.Discoveries())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestConcurrentTurnsShareOneDiscovery(t *testing.T) {
	f := newFake(t, nil, tool("search", objSchema))
	f.ttlMs = ptr(3600000) // with no ttlMs every turn after the first answer may re-discover
	p := start(t, setup{servers: one(f)})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := access("")
			a.Principal = fmt.Sprint("p", i)
			if _, err := p.Catalog(ctxT(t), a); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p.Discoveries() != 1 {
		t.Fatalf("%d discoveries for 50 concurrent turns", p.Discoveries())
	}
}

// list_changed is a hint: the cache goes stale and one authoritative
// re-discovery follows; the notification never edits the catalogue.
func TestListChangedTriggersAuthoritativeRediscovery(t *testing.T) {
	for _, v := range []string{v2025, v2026} {
		t.Run(v, func(t *testing.T) {
			f := newFake(t, []string{v}, tool("a", objSchema))
			f.ttlMs = ptr(3600000)
			p := start(t, setup{servers: one(f), cfg: mcpprovider.Config{TTL: mcpprovider.Duration(time.Hour)}})
			if _, err := p.Catalog(ctxT(t), access("")); err != nil {
				t.Fatal(err)
			}
			f.set(tool("a", objSchema), tool("b", objSchema))
			f.notifyChanged()
			waitFor(t, func() bool { return p.Discoveries() >= 2 })
			cat, err := p.Catalog(ctxT(t), access(""))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(cat), []string{"a", "b"}) {
				t.Fatalf("after list_changed: %v", names(cat))
			}
		})
	}
}

// A session that drops (the server goes away) leaves the snapshot
// last-known; the next use reconnects and revalidates.
func TestDroppedSessionRevalidates(t *testing.T) {
	f := newFake(t, nil, tool("a", objSchema))
	f.ttlMs = ptr(3600000)
	p := start(t, setup{servers: one(f), cfg: mcpprovider.Config{TTL: mcpprovider.Duration(time.Hour)}})
	if _, err := p.Catalog(ctxT(t), access("")); err != nil {
		t.Fatal(err)
	}
	f.drop(0) // the session, and its subscription stream, drop
	waitFor(t, func() bool { st := p.Status()[0]; return st.LastKnown && st.State == mcpprovider.StateStale })
	f.set(tool("a", objSchema), tool("c", objSchema))
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(cat), []string{"a", "c"}) || p.Discoveries() != 2 {
		t.Fatalf("after reconnect: %v, %d discoveries", names(cat), p.Discoveries())
	}
}

func TestUnreachableServerIsTypedFailureOthersServe(t *testing.T) {
	good := newFake(t, nil, tool("a", objSchema))
	pg := start(t, setup{id: "good", servers: one(good)})
	pd := start(t, setup{id: "down", servers: func(string) *fake { return nil }})
	if _, err := pd.Catalog(ctxT(t), access("")); err == nil {
		t.Fatal("an unreachable server answered")
	}
	if st := pd.Status()[0]; st.State != mcpprovider.StateFailed {
		t.Fatalf("status %+v", st)
	}
	if _, err := pg.Catalog(ctxT(t), access("")); err != nil {
		t.Fatal(err)
	}
}

// Over streamable HTTP: credentials from env per profile, each profile's
// server chosen by its Authorization header, 401 classified auth_expired.
func TestHTTPCredentialsProfilesAndAuthFailure(t *testing.T) {
	a := newFake(t, nil, tool("read_repo", objSchema), tool("create_issue", objSchema))
	b := newFake(t, []string{v2025}, tool("read_repo", objSchema))
	a.ttlMs = ptr(60000)
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		switch r.Header.Get("Authorization") {
		case "Bearer token-a":
			return a.srv
		case "Bearer token-b":
			return b.srv
		}
		return nil
	}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth := r.Header.Get("Authorization"); auth != "Bearer token-a" && auth != "Bearer token-b" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer closeServer(srv)
	t.Setenv("MCPTEST_A", "token-a")
	t.Setenv("MCPTEST_B", "token-b")
	t.Setenv("MCPTEST_BAD", "token-expired")
	p, err := mcpprovider.New("gh", mcpprovider.Config{Transport: "http", URL: srv.URL, Credentials: []mcpprovider.Credential{
		{Tenant: "acme", Profile: "acct-a", Env: "MCPTEST_A"}, {Tenant: "acme", Profile: "acct-b", Env: "MCPTEST_B"},
		{Tenant: "acme", Profile: "expired", Env: "MCPTEST_BAD"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ca, err := p.Catalog(ctxT(t), access("acct-a"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := p.Catalog(ctxT(t), access("acct-b"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(ca), []string{"read_repo", "create_issue"}) || !slices.Equal(names(cb), []string{"read_repo"}) {
		t.Fatalf("a %v b %v", names(ca), names(cb))
	}
	_, err = p.Catalog(ctxT(t), access("expired"))
	if reason.Of(err) != reason.ProviderUnavailable {
		t.Fatalf("err %v", err)
	}
	for _, st := range p.Status() {
		want := mcpprovider.StateReady
		if st.Profile == "acme/expired" {
			want = mcpprovider.StateAuthRequired
			if st.Class != mcpprovider.ClassAuthExpired {
				t.Errorf("class %s, want auth_expired", st.Class)
			}
		}
		if st.State != want {
			t.Errorf("%s: state %s, want %s", st.Profile, st.State, want)
		}
		for _, s := range []string{"token-a", "token-b", "token-expired"} {
			if b, _ := json.Marshal(st); strings.Contains(string(b), s) {
				t.Fatalf("status carries a secret: %s", b)
			}
		}
	}
	if err != nil && strings.Contains(err.Error(), "token-expired") {
		t.Fatal("the error carries the secret")
	}
}

// An answer over the response bound is refused before the SDK decodes
// it, over every transport, as a malformed response.
func TestOversizedAnswerRefusedOnEveryTransport(t *testing.T) {
	var tools []string
	for i := range 40 {
		tools = append(tools, tool(fmt.Sprintf("t%d", i), objSchema))
	}
	lim := mcpprovider.Limits{MaxResponseBytes: 2000}
	check := func(t *testing.T, p *mcpprovider.Provider) {
		t.Helper()
		_, err := p.Catalog(ctxT(t), access(""))
		if reason.Of(err) != reason.ProviderError || p.Status()[0].Class != mcpprovider.ClassMalformedResponse {
			t.Fatalf("err %v status %+v", err, p.Status())
		}
	}
	t.Run("memory", func(t *testing.T) {
		f := newFake(t, nil, tools...)
		check(t, start(t, setup{servers: one(f), cfg: mcpprovider.Config{Limits: lim}}))
	})
	for _, jsonResp := range []bool{false, true} {
		t.Run(fmt.Sprintf("http json=%v", jsonResp), func(t *testing.T) {
			f := newFake(t, nil, tools...)
			srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.srv }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResp}))
			defer closeServer(srv)
			p, err := mcpprovider.New("work", mcpprovider.Config{Transport: "http", URL: srv.URL, Limits: lim}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			check(t, p)
			// Under the bound the same server is served, through the tee.
			p2, err := mcpprovider.New("work", mcpprovider.Config{Transport: "http", URL: srv.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Close()
			cat, err := p2.Catalog(ctxT(t), access(""))
			if err != nil || len(cat.Definitions) != 40 {
				t.Fatalf("%v %d", err, len(cat.Definitions))
			}
		})
	}
}

// Over streamable HTTP, on both protocol generations: list_changed
// arrives (2026-07-28: on the subscriptions/listen stream the SDK opens)
// and triggers a re-discovery; a dropped stream marks the snapshot stale
// so the next use revalidates.
func TestHTTPListChangedAndDroppedStream(t *testing.T) {
	for _, v := range []string{v2025, v2026} {
		t.Run(v, func(t *testing.T) {
			f := newFake(t, []string{v}, tool("a", objSchema))
			f.ttlMs = ptr(3600000)
			// The SDK's HTTP server speaks 2026-07-28 when stateless.
			srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.srv }, &mcp.StreamableHTTPOptions{Stateless: v == v2026}))
			defer closeServer(srv)
			p, err := mcpprovider.New("work", mcpprovider.Config{Transport: "http", URL: srv.URL, TTL: mcpprovider.Duration(time.Hour)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Catalog(ctxT(t), access("")); err != nil {
				t.Fatal(err)
			}
			if p.Status()[0].Protocol != v {
				t.Fatalf("protocol %s", p.Status()[0].Protocol)
			}
			f.set(tool("a", objSchema), tool("b", objSchema))
			// The notification can only be delivered once the stream is up; bump until it is.
			waitFor(t, func() bool { f.notifyChanged(); time.Sleep(20 * time.Millisecond); return p.Discoveries() >= 2 })
			cat, err := p.Catalog(ctxT(t), access(""))
			if err != nil || !slices.Equal(names(cat), []string{"a", "b"}) {
				t.Fatalf("%v %v", names(cat), err)
			}
			n := p.Discoveries()
			srv.CloseClientConnections() // the stream drops
			waitFor(t, func() bool { return p.Status()[0].LastKnown })
			if _, err := p.Catalog(ctxT(t), access("")); err != nil || p.Discoveries() <= n {
				t.Fatalf("after the drop: %v, %d discoveries", err, p.Discoveries())
			}
		})
	}
}

// A session that ended without the provider noticing is retried once on
// a new session: the turn gets the catalogue, not a transport error.
func TestUnnoticedDeadSessionRetriedOnce(t *testing.T) {
	f := newFake(t, nil, tool("a", objSchema)) // ttlMs absent: every turn re-discovers
	p := start(t, setup{servers: one(f)})
	if _, err := p.Catalog(ctxT(t), access("")); err != nil {
		t.Fatal(err)
	}
	f.drop(0)
	for range 3 {
		if _, err := p.Catalog(ctxT(t), access("")); err != nil {
			t.Fatalf("a dead session surfaced: %v", err)
		}
	}
}

// A credential goes to the configured endpoint only: a redirect elsewhere
// is not followed, and the other server never sees it.
func TestCredentialNeverFollowsARedirect(t *testing.T) {
	var leaked atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer closeServer(other)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer closeServer(redirecting)
	t.Setenv("MCPTEST_TOKEN", "s3cret-token")
	p, err := mcpprovider.New("gh", mcpprovider.Config{Transport: "http", URL: redirecting.URL,
		Credentials: []mcpprovider.Credential{{Tenant: "acme", Profile: "default", Env: "MCPTEST_TOKEN"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Catalog(ctxT(t), access("default")); err == nil {
		t.Fatal("a redirected endpoint served a catalogue")
	} else if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error carries the secret: %v", err)
	}
	if leaked.Load() != 0 {
		t.Fatal("the credential reached the server the endpoint redirected to")
	}
}

// A private answer (cacheScope private, 2026-07-28) is never served to
// another principal, even under the same credential profile.
func TestPrivateScopeIsPerPrincipal(t *testing.T) {
	f := newFake(t, []string{v2026}, tool("mine", objSchema))
	f.ttlMs, f.scope = ptr(3600000), "private"
	p := start(t, setup{servers: one(f)})
	ada, bob := access(""), access("")
	bob.Principal = "bob"
	for range 2 {
		for _, a := range []authority.AccessContext{ada, bob} {
			cat, err := p.Catalog(ctxT(t), a)
			if err != nil {
				t.Fatal(err)
			}
			if cat.Freshness.Scope != "principal" {
				t.Fatalf("freshness %+v: a private answer is the principal's", cat.Freshness)
			}
		}
	}
	if p.Discoveries() != 2 {
		t.Fatalf("%d discoveries: one per principal, each then cached", p.Discoveries())
	}
}

// closeServer drops the server's connections first: a stream a client
// left open must not hold Close (httptest waits for every request).
func closeServer(s *httptest.Server) {
	s.CloseClientConnections()
	s.Close()
}

// A credential is one tenant's: the same profile name in two tenants is
// two secrets, a tenant naming another tenant's profile gets nothing
// (and the server never sees that tenant's secret), and a turn naming no
// profile is sent no credential at all.
func TestCredentialsAreKeyedByTenantAndProfile(t *testing.T) {
	f := newFake(t, nil, tool("read_repo", objSchema))
	var mu sync.Mutex
	seen := map[string]int{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.srv }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")]++
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	defer closeServer(srv)
	t.Setenv("MCPTEST_ACME_ADMIN", "acme-admin-token")
	t.Setenv("MCPTEST_GLOBEX_ADMIN", "globex-admin-token")
	t.Setenv("MCPTEST_ACME_ONLY", "acme-only-token")
	p, err := mcpprovider.New("gh", mcpprovider.Config{Transport: "http", URL: srv.URL, Credentials: []mcpprovider.Credential{
		{Tenant: "acme", Profile: "admin", Env: "MCPTEST_ACME_ADMIN"},
		{Tenant: "globex", Profile: "admin", Env: "MCPTEST_GLOBEX_ADMIN"},
		{Tenant: "acme", Profile: "acme-only", Env: "MCPTEST_ACME_ONLY"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	globex := func(profile string) authority.AccessContext {
		return authority.AccessContext{Tenant: "globex", Principal: "gus", CredentialProfile: profile}
	}
	if _, err := p.Catalog(ctxT(t), globex("admin")); err != nil {
		t.Fatal(err)
	}
	for _, a := range []authority.AccessContext{globex("acme-only"), globex(""), access("")} {
		if _, err := p.Catalog(ctxT(t), a); reason.Of(err) != reason.ProviderUnavailable {
			t.Fatalf("%s/%q: %v, want a refusal (no credential for it)", a.Tenant, a.CredentialProfile, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["Bearer globex-admin-token"] == 0 {
		t.Fatalf("globex's admin profile did not reach the server with globex's secret: %v", seen)
	}
	for _, secret := range []string{"Bearer acme-admin-token", "Bearer acme-only-token", ""} {
		if seen[secret] != 0 {
			t.Errorf("the server received %q (%d requests): only globex's secret was asked for", secret, seen[secret])
		}
	}
}
