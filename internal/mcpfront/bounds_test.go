package mcpfront_test

import (
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/reason"
)

// gina is a principal of a second tenant, globex.
var gina = authority.AccessContext{Tenant: "globex", Principal: "gina", CredentialProfile: "globex-notion", EnabledNamespaces: []string{"notion", "notes"}}

// twoTenants gives the kernel the fixture's principals and gina, each
// with its own credential profile.
func twoTenants(t *testing.T) func(*actors.Options) {
	return func(o *actors.Options) {
		src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{
			{"acme", "ada"}:    {{ID: "ada-notion", Capability: "notion.*", Resource: "notion/workspace/acme/**"}},
			{"acme", "bob"}:    {{ID: "bob-notion", Capability: "notion.*", Resource: "notion/workspace/acme/**"}},
			{"globex", "gina"}: {{ID: "gina-notion", Capability: "notion.*", Resource: "notion/workspace/globex/**"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		creds, err := authority.NewStaticCredentials([]authority.CredentialBinding{
			{Tenant: "acme", Profile: conformance.Ada.CredentialProfile, Principals: []string{"ada"}},
			{Tenant: "acme", Profile: conformance.Bob.CredentialProfile, Principals: []string{"bob"}},
			{Tenant: "globex", Profile: gina.CredentialProfile, Principals: []string{"gina"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		o.Authority, o.Credentials = src, creds
		o.MaxTurnsPerPrincipal = 1 << 12
	}
}

func overloaded(err error) bool { return errors.Is(err, &reason.Error{Code: reason.Overloaded}) }

// Attack: one runtime opens a turn, mints long-lived tokens for it and
// closes it, over and over, many times the front's bounds. Each close
// takes the turn's entry, tokens and server out: the front holds nothing
// afterwards, a flood token is refused 403 as closed, and another
// tenant's mint and MCP call succeed.
func TestOpenMintCloseFloodLeavesNothingBehind(t *testing.T) {
	e := newEnv(t, twoTenants(t), func(o *mcpfront.Options) {
		o.Bounds = mcpfront.Bounds{Turns: 8, TurnsPerTenant: 4, TurnsPerPrincipal: 2, Tokens: 32, TokensPerTenant: 16, TokensPerPrincipal: 8, TokensPerTurn: 4}
	})
	ctx := testCtx(t)
	seen := map[string]bool{}
	var stale mcpfront.Token
	for i := range 200 {
		who, tok := e.open(t, conformance.Ada)
		if seen[who.TurnID] {
			t.Fatalf("turn id %s given twice", who.TurnID)
		}
		seen[who.TurnID] = true
		for range 3 {
			if _, err := e.front.Mint(ctx, who, mcpfront.MaxTokenLifetime); err != nil {
				t.Fatalf("flood turn %d: %v", i, err)
			}
		}
		if err := e.k.Close(ctx, who, who.LeaseID); err != nil {
			t.Fatal(err)
		}
		stale = tok
	}
	if turns, tokens, tenants, principals := e.front.Held(); turns+tokens+tenants+principals != 0 {
		t.Fatalf("after the flood's closes the front holds %d turns, %d tokens, %d tenants, %d principals; want nothing", turns, tokens, tenants, principals)
	}
	if n := mcpfront.VerifiedTokens(e.front); n != 0 {
		t.Fatalf("the front remembers %d verified tokens of closed turns", n)
	}
	st, hdr, body := post(t, e.url, stale.Token, listBody, nil)
	refusedHTTP(t, "a flood turn's token after its close", st, hdr, body, 403, "is closed")

	_, tok := e.open(t, gina)
	s := e.connect(t, tok.Token, "")
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("globex")})
	if err != nil || res.IsError {
		t.Fatalf("globex's call after acme's flood: %v %+v", err, res)
	}
	if turns, _, _, _ := e.front.Held(); turns != 1 {
		t.Fatalf("the front holds %d turns, want globex's one", turns)
	}
}

// Attack: principals of one tenant hold their turns open and mint all the
// tokens they may. Each is refused overloaded at its own share and at its
// tenant's, and the other tenant still mints turns and tokens.
func TestHeldTurnsOfOneTenantNeverRefuseAnother(t *testing.T) {
	e := newEnv(t, twoTenants(t), func(o *mcpfront.Options) {
		o.Bounds = mcpfront.Bounds{Turns: 6, TurnsPerTenant: 4, TurnsPerPrincipal: 3, Tokens: 12, TokensPerTenant: 8, TokensPerPrincipal: 6, TokensPerTurn: 4}
	})
	ctx := testCtx(t)
	var adas []authority.AccessContext
	for range 3 {
		who, _ := e.open(t, conformance.Ada)
		adas = append(adas, who)
	}
	o, err := e.k.Open(ctx, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	fourth := conformance.Ada
	fourth.TurnID, fourth.LeaseID = o.TurnID, o.LeaseID
	if _, err := e.front.Mint(ctx, fourth, 0); !overloaded(err) {
		t.Fatalf("ada's fourth turn: %v, want overloaded (turns per principal)", err)
	}
	// Ada's tokens: three held, three more, then her share is full.
	for range 3 {
		if _, err := e.front.Mint(ctx, adas[0], 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.front.Mint(ctx, adas[1], 0); !overloaded(err) {
		t.Fatalf("ada's seventh token: %v, want overloaded (tokens per principal)", err)
	}
	bob, _ := e.open(t, conformance.Bob)
	o, err = e.k.Open(ctx, conformance.Bob)
	if err != nil {
		t.Fatal(err)
	}
	bob2 := conformance.Bob
	bob2.TurnID, bob2.LeaseID = o.TurnID, o.LeaseID
	if _, err := e.front.Mint(ctx, bob2, 0); !overloaded(err) {
		t.Fatalf("a fifth acme turn: %v, want overloaded (turns per tenant)", err)
	}
	if _, err := e.front.Mint(ctx, bob, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.front.Mint(ctx, bob, 0); !overloaded(err) {
		t.Fatalf("a ninth acme token: %v, want overloaded (tokens per tenant)", err)
	}
	// globex: two turns, and tokens up to the front's total.
	g1, tok := e.open(t, gina)
	e.open(t, gina)
	for range 2 {
		if _, err := e.front.Mint(ctx, g1, 0); err != nil {
			t.Fatalf("globex's token beside acme's full share: %v", err)
		}
	}
	s := e.connect(t, tok.Token, "")
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("globex")}); err != nil || res.IsError {
		t.Fatalf("globex's call: %v %+v", err, res)
	}
	if turns, tokens, tenants, principals := e.front.Held(); turns != 6 || tokens != 12 || tenants != 2 || principals != 3 {
		t.Fatalf("the front holds %d turns, %d tokens, %d tenants, %d principals; want 6, 12, 2, 3", turns, tokens, tenants, principals)
	}
	// Closing gives a share back.
	if err := e.k.Close(ctx, adas[0], adas[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.front.Mint(ctx, fourth, 0); err != nil {
		t.Fatalf("ada's fourth turn once one closed: %v", err)
	}
}

// Bounds refuse a tenant's share that is the whole front (one tenant
// could then refuse every other) and shares larger than their scope's.
func TestBoundsValidate(t *testing.T) {
	for _, c := range []struct {
		b  mcpfront.Bounds
		ok bool
	}{
		{mcpfront.Bounds{}, true},
		{mcpfront.Bounds{Turns: 100}, true},
		{mcpfront.Bounds{Turns: 100, TurnsPerTenant: 100}, false},
		{mcpfront.Bounds{Tokens: 100, TokensPerTenant: 200}, false},
		{mcpfront.Bounds{TurnsPerTenant: 10, TurnsPerPrincipal: 11}, false},
		{mcpfront.Bounds{TokensPerPrincipal: 10, TokensPerTurn: 11}, false},
		{mcpfront.Bounds{Turns: -1}, false},
		{mcpfront.Bounds{Turns: 1}, false},
	} {
		if err := c.b.Validate(); (err == nil) != c.ok || (err != nil && !errors.Is(err, mcpfront.ErrBounds)) {
			t.Errorf("%+v: %v, want ok %v", c.b, err, c.ok)
		}
	}
	d := mcpfront.DefaultBounds()
	if d.Turns != 65536 || d.TurnsPerTenant != 16384 || d.TurnsPerPrincipal != 1024 || d.Tokens != 262144 || d.TokensPerTenant != 65536 || d.TokensPerPrincipal != 8192 || d.TokensPerTurn != 1024 {
		t.Fatalf("defaults %+v", d)
	}
}
