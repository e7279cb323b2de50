package node_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/examples/mcpserver"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/reason"
)

// bearerLog is an MCP server on loopback that records every
// Authorization header it receives.
type bearerLog struct {
	mu   sync.Mutex
	seen map[string]int
}

func (b *bearerLog) count(h string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[h]
}

func startBearerLog(t *testing.T) (*bearerLog, string) {
	t.Helper()
	b := &bearerLog{seen: map[string]int{}}
	srv := mcpserver.New()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen[r.Header.Get("Authorization")]++
		b.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return b, hs.URL + "/mcp"
}

// The reproduction of a credential profile reaching a caller it was never
// bound to: an MCP server behind the node holds acme's admin token under
// profile "admin". globex's runtime naming "admin" for its own principal,
// and a runtime narrowed to acme/ada naming it for ada, are refused
// credential_forbidden, and the server never receives acme's token; the
// admin principal it is bound to lists the server's tools with it. A
// second acme runtime cannot attach to the admin's turn by its id.
func TestCredentialProfileReachesOnlyItsPrincipal(t *testing.T) {
	log, url := startBearerLog(t)
	t.Setenv("SHAREDOS_TEST_ACME_ADMIN", "acme-admin-token")
	cfg := sampleConfig(t, t.TempDir())
	grant := []authority.GrantSpec{{ID: "gh", Capability: "mcp.gh.*", Resource: "mcp/gh/**"}}
	cfg.Principals = append(cfg.Principals,
		config.Principal{Tenant: "acme", Principal: "admin", Grants: grant},
		config.Principal{Tenant: "globex", Principal: "gus", Grants: grant})
	cfg.CredentialProfiles = []config.CredentialProfile{{Tenant: "acme", Profile: "admin", Principals: []string{"admin"}}}
	cfg.Providers = append(cfg.Providers, config.Provider{ID: "gh", Kind: "mcp", MCP: &mcpprovider.Config{
		Transport: "http", URL: url,
		Credentials: []mcpprovider.Credential{{Tenant: "acme", Profile: "admin", Env: "SHAREDOS_TEST_ACME_ADMIN"}}}})
	cfg.Identities = append(cfg.Identities,
		config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}},
		config.Identity{Name: "ada-rt", Role: "runtime", Tenants: []string{"acme"}, Principals: []string{"acme/ada"}},
		config.Identity{Name: "acme-rt2", Role: "runtime", Tenants: []string{"acme"}},
	)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := start(t, cfg)
	t.Cleanup(func() { _ = n.Shutdown(ctx(t)) })

	for _, a := range []struct {
		as     string
		access client.Access
	}{
		{"globex-rt", client.Access{Tenant: "globex", Principal: "gus", Credential: "admin", Namespaces: []string{"gh"}}},
		{"ada-rt", client.Access{Tenant: "acme", Principal: "ada", Credential: "admin", Namespaces: []string{"gh"}}},
	} {
		c := client.New(connectAs(t, n, a.as), nil)
		if _, err := c.Open(ctx(t), a.access); !errors.Is(err, reason.ErrCredentialForbidden) {
			t.Fatalf("%s opening %s/%s with admin: %v, want credential_forbidden", a.as, a.access.Tenant, a.access.Principal, err)
		}
		if _, err := c.ListTools(ctx(t), a.access); !errors.Is(err, reason.ErrCredentialForbidden) {
			t.Fatalf("%s listing %s/%s with admin: %v, want credential_forbidden", a.as, a.access.Tenant, a.access.Principal, err)
		}
	}
	if got := log.count("Bearer acme-admin-token"); got != 0 {
		t.Fatalf("the server received acme's admin token %d times from refused callers", got)
	}

	admin := client.Access{Tenant: "acme", Principal: "admin", Credential: "admin", Namespaces: []string{"gh"}}
	turn, err := client.New(connectAs(t, n, "runtime"), nil).Open(ctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	list, err := turn.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) == 0 {
		t.Fatalf("the admin sees no tools of the server (degraded: %+v)", list)
	}
	if log.count("Bearer acme-admin-token") == 0 {
		t.Fatal("the admin's listing did not reach the server with the admin's token")
	}
	if _, err := client.New(connectAs(t, n, "acme-rt2"), nil).Attach(ctx(t), turn.Handle, admin); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another runtime of acme attached to the admin's turn: %v, want turn_not_found", err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
}
