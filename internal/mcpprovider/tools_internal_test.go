package mcpprovider

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

func page(tools ...string) json.RawMessage {
	b := []byte(`{"tools":[`)
	for i, t := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t...)
	}
	return append(b, "]}"...)
}

func sourceRevision(t *testing.T, raw string) string {
	t.Helper()
	c := Config{Transport: "memory", Server: "x"}.withDefaults("s")
	l, err := newNormalizer("s", c).build([]json.RawMessage{page(raw)}, "2025-06-18", time.Unix(0, 0))
	if err != nil || len(l.tools) != 1 {
		t.Fatalf("%v %+v", err, l)
	}
	return l.tools[0].SourceRevision
}

// The source revision is the RFC 8785 hash of what the server sent:
// formatting and key order do not change it; meaning does, including
// what the SDK's decoded Tool cannot tell apart (absent vs false).
func TestSourceRevisionHashesTheWireCanonically(t *testing.T) {
	base := sourceRevision(t, `{"name":"a","inputSchema":{"type":"object","properties":{"x":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`)
	same := sourceRevision(t, `{ "annotations" : {"readOnlyHint":true},
		"inputSchema":{"properties":{"x":{"type":"integer"}},"type":"object"}, "name":"a" }`)
	if base != same {
		t.Fatal("a reformatted, key-reordered tool changed its hash")
	}
	absent := sourceRevision(t, `{"name":"a","inputSchema":{"type":"object"}}`)
	falseHint := sourceRevision(t, `{"name":"a","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false}}`)
	if absent == falseHint {
		t.Fatal("readOnlyHint absent and false hashed alike")
	}
	for _, changed := range []string{
		`{"name":"a","inputSchema":{"type":"object","properties":{"x":{"type":"number"}}},"annotations":{"readOnlyHint":true}}`,
		`{"name":"a","description":"now deletes","inputSchema":{"type":"object","properties":{"x":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`,
		`{"name":"a","title":"A","inputSchema":{"type":"object","properties":{"x":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`,
	} {
		if sourceRevision(t, changed) == base {
			t.Fatalf("a change of meaning kept the hash: %s", changed)
		}
	}
}

func TestAnnotationsAreAdvisoryDefaults(t *testing.T) {
	c := Config{Transport: "memory", Server: "x"}.withDefaults("s")
	l, err := newNormalizer("s", c).build([]json.RawMessage{page(
		`{"name":"plain","inputSchema":{"type":"object"}}`,
		`{"name":"ro","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"destructiveHint":true}}`,
		`{"name":"safe_write","inputSchema":{"type":"object"},"annotations":{"destructiveHint":false}}`,
	)}, "2025-06-18", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]bool{}
	for _, tl := range l.tools {
		got[tl.Name] = [2]bool{tl.ReadOnly, tl.Destructive}
	}
	want := map[string][2]bool{"plain": {false, true}, "ro": {true, false}, "safe_write": {false, false}}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: readOnly,destructive = %v, want %v", k, got[k], v)
		}
	}
}

func TestTTLAndScopeFromPages(t *testing.T) {
	c := Config{Transport: "memory", Server: "x", TTL: Duration(time.Hour)}.withDefaults("s")
	n := newNormalizer("s", c)
	p1 := json.RawMessage(`{"tools":[],"nextCursor":"1","ttlMs":5000,"cacheScope":"public"}`)
	p2 := json.RawMessage(`{"tools":[],"ttlMs":2000,"cacheScope":"private"}`)
	l, err := n.build([]json.RawMessage{p1, p2}, "2026-07-28", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if l.ttl != 2*time.Second || l.scope != "private" {
		t.Fatalf("ttl %v scope %q: the snapshot lives as long as its shortest page, private if any page is", l.ttl, l.scope)
	}
	l, _ = n.build([]json.RawMessage{json.RawMessage(`{"tools":[]}`)}, "2026-07-28", time.Unix(0, 0))
	if l.ttl != 0 || l.scope != "public" {
		t.Fatalf("missing ttlMs: ttl %v scope %q, want 0 and public", l.ttl, l.scope)
	}
	l, _ = n.build([]json.RawMessage{json.RawMessage(`{"tools":[],"ttlMs":5}`)}, "2025-06-18", time.Unix(0, 0))
	if l.ttl != time.Hour || l.scope != "" {
		t.Fatalf("older revision: ttl %v scope %q, want the configured TTL", l.ttl, l.scope)
	}
}

func TestStateMachine(t *testing.T) {
	for _, tc := range []struct {
		from State
		ev   event
		c    Class
		has  bool
		want State
	}{
		{StateUnknown, evStart, "", false, StateLoading},
		{StateLoading, evSuccess, "", true, StateReady},
		{StateReady, evExpire, "", true, StateStale},
		{StateReady, evHint, "", true, StateStale},
		{StateStale, evStart, "", true, StateRefreshing},
		{StateRefreshing, evFailure, ClassAuthExpired, true, StateAuthRequired},
		{StateLoading, evFailure, ClassPermissionDenied, false, StateAuthRequired},
		{StateLoading, evFailure, ClassProtocolMismatch, false, StateIncompatible},
		{StateLoading, evFailure, ClassUnsupported, false, StateIncompatible},
		{StateRefreshing, evFailure, ClassNetworkUnreachable, true, StateFailed},
		{StateFailed, evHint, "", true, StateFailed},
		{StateAuthRequired, evStart, "", true, StateRefreshing},
	} {
		if got := next(tc.from, tc.ev, tc.c, tc.has); got != tc.want {
			t.Errorf("%s --%d/%s--> %s, want %s", tc.from, tc.ev, tc.c, got, tc.want)
		}
	}
}

func TestDraft07AdaptedOnlyWhenItMeansTheSame(t *testing.T) {
	c := Config{Transport: "memory", Server: "x"}.withDefaults("s")
	n := newNormalizer("s", c)
	d7 := `"$schema":"http://json-schema.org/draft-07/schema#",`
	l, err := n.build([]json.RawMessage{page(
		`{"name":"zod","inputSchema":{`+d7+`"type":"object","properties":{"n":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},"required":["n"],"additionalProperties":false}}`,
		`{"name":"tuple","inputSchema":{`+d7+`"type":"object","properties":{"p":{"type":"array","items":[{"type":"number"},{"type":"number"}]}}}}`,
		`{"name":"deps","inputSchema":{`+d7+`"type":"object","dependencies":{"a":["b"]}}}`,
		`{"name":"refsib","inputSchema":{`+d7+`"type":"object","definitions":{"s":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/s","maxLength":3}}}}`,
		`{"name":"draft4","inputSchema":{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}}`,
	)}, "2025-06-18", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.tools) != 1 || l.tools[0].Name != "zod" {
		t.Fatalf("served %+v", l.tools)
	}
	if string(l.tools[0].Definition.InputSchema) == "" || json.Valid(l.tools[0].Definition.InputSchema) == false {
		t.Fatal("adapted schema is not JSON")
	}
	want := map[string]string{"tuple": `"items" is an array`, "deps": `"dependencies"`, "refsib": `"$ref" beside`, "draft4": "dialect"}
	for _, r := range l.refused {
		if !strings.Contains(r.Reason, want[r.Name]) {
			t.Errorf("%s refused for %q, want %q", r.Name, r.Reason, want[r.Name])
		}
	}
	if len(l.refused) != 4 {
		t.Fatalf("refused %+v", l.refused)
	}
}

// One profile's private snapshots (one per principal) are bounded:
// expired ones go first, then the oldest received past maxPrivate.
func TestEvictPrivateBoundsThePrincipalsSnapshots(t *testing.T) {
	t0 := time.Unix(1000, 0)
	snaps := map[string]*snapshot{}
	for i := range maxPrivate + 2 {
		snaps[strconv.Itoa(i)] = &snapshot{received: t0.Add(time.Duration(i) * time.Second), expires: t0.Add(time.Hour)}
	}
	snaps["expired"] = &snapshot{received: t0.Add(time.Hour), expires: t0}
	evictPrivate(snaps, t0.Add(time.Minute))
	if len(snaps) != maxPrivate {
		t.Fatalf("%d snapshots left, want %d", len(snaps), maxPrivate)
	}
	for _, who := range []string{"expired", "0", "1"} {
		if snaps[who] != nil {
			t.Fatalf("%s's snapshot kept", who)
		}
	}
	if snaps["2"] == nil || snaps[strconv.Itoa(maxPrivate+1)] == nil {
		t.Fatal("a snapshot within the bound was dropped")
	}
}
