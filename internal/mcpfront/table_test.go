package mcpfront

import (
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

func entryFor(id, tenant, principal string) *turnEntry {
	e := &turnEntry{id: id, auth: authority.AccessContext{Tenant: tenant, Principal: principal}, tokens: map[string]minted{}}
	e.tenantKey, e.principalKey = scopeKeys(tenant, principal)
	return e
}

// The table's accounting: what each scope holds is what its entries
// hold; expired tokens are let go (and entries left with none) only when
// a bound is reached; a dropped entry takes its tokens with it and leaves
// no scope behind.
func TestTableAccounting(t *testing.T) {
	var forgot []string
	tab := newTable(Bounds{Turns: 4, TurnsPerTenant: 3, TurnsPerPrincipal: 2, Tokens: 8, TokensPerTenant: 6, TokensPerPrincipal: 4, TokensPerTurn: 3},
		func(tok string) { forgot = append(forgot, tok) })
	t0 := time.Unix(1000, 0)
	a1, a2, a3 := entryFor("t1", "acme", "ada"), entryFor("t2", "acme", "ada"), entryFor("t3", "acme", "ada")
	// (An entry is given its first token as it is added, under one lock.)
	add := func(e *turnEntry, id string, exp, now time.Time) error {
		if err := tab.add(e, "n1", now); err != nil {
			return err
		}
		return tab.addToken(e, id, minted{tok: "tok-" + id, expires: exp}, "n1", now)
	}
	if err := add(a1, "k1", t0.Add(time.Minute), t0); err != nil {
		t.Fatal(err)
	}
	if err := add(a2, "k2", t0.Add(time.Hour), t0); err != nil {
		t.Fatal(err)
	}
	if err := add(a3, "k3", t0.Add(time.Hour), t0); reason.Of(err) != reason.Overloaded {
		t.Fatalf("ada's third turn: %v, want overloaded", err)
	}
	if tab.total != (usage{turns: 2, tokens: 2}) {
		t.Fatalf("total %+v", tab.total)
	}
	// A tenant/principal pair that would share a key without the length
	// prefix ("acme"+"ada" vs "acmea"+"da") is its own principal.
	other := entryFor("t4", "acmea", "da")
	if err := add(other, "k4", t0.Add(time.Hour), t0); err != nil {
		t.Fatal(err)
	}
	if n := len(tab.principals); n != 2 {
		t.Fatalf("%d principals, want 2", n)
	}
	// Past a1's token's expiry, a third turn for ada is taken: a1 goes.
	later := t0.Add(2 * time.Minute)
	if err := add(a3, "k3", t0.Add(time.Hour), later); err != nil {
		t.Fatalf("ada's third turn once a1's token expired: %v", err)
	}
	if tab.turns["t1"] != nil || len(forgot) != 1 || forgot[0] != "tok-k1" {
		t.Fatalf("a1 kept (%v), forgot %v", tab.turns["t1"] != nil, forgot)
	}
	for _, e := range []*turnEntry{a2, a3, other} {
		tab.drop(e)
	}
	if len(tab.turns) != 0 || tab.total != (usage{}) || len(tab.tenants) != 0 || len(tab.principals) != 0 {
		t.Fatalf("after every drop: %d turns, total %+v, %d tenants, %d principals", len(tab.turns), tab.total, len(tab.tenants), len(tab.principals))
	}
	if tab.drop(a2) {
		t.Fatal("dropped an entry twice")
	}
}
