package actors

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/sharedos/sharedos/catalog"
)

func registryOf(t *testing.T, token string, names ...string) *catalog.Registry {
	t.Helper()
	var tools []*catalog.Tool
	for _, n := range names {
		tool, err := catalog.Normalize("p", catalog.Definition{
			Name: n, Namespace: "ns", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`),
			Capability: "ns." + n, Requirement: "ns/" + n, Token: token,
		}, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	r, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryInternSharesTheSameCatalogueOnly(t *testing.T) {
	in := newRegistryIntern()
	a := registryOf(t, "", "x", "y")
	if in.share(a) != a {
		t.Fatal("first registry not kept")
	}
	// Built again from the same definitions (other *Tool values): shared.
	if got := in.share(registryOf(t, "", "x", "y")); got != a {
		t.Fatal("the same catalogue was not shared")
	}
	// Another catalogue: its own.
	b := registryOf(t, "", "x")
	if in.share(b) != b || in.len() != 2 {
		t.Fatalf("another catalogue: len %d", in.len())
	}
	// The same contracts under other provider tokens: not shared (the
	// token is sent back on invoke), and it replaces the held one.
	c := registryOf(t, "t2", "x", "y")
	if c.Hash() != a.Hash() {
		t.Fatal("tokens must not change catalogHash")
	}
	if in.share(c) != c {
		t.Fatal("a catalogue with other tokens was shared")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

func TestRegistryInternForgetsWhatNoTurnHolds(t *testing.T) {
	in := newRegistryIntern()
	in.share(registryOf(t, "", "x"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		in.mu.Lock()
		n := len(in.m)
		in.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after the registry was collected", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
