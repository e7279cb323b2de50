package audit

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tamper tests in verify_test.go edit one record in place, so the hash
// chain catches them first. A forger who rewrites consistently re-encodes
// every record after the change and re-chains it (seq and prev_hash), so
// the links hold and only the checks beyond the chain can catch the
// rewrite. These tests build such trails and assert which check refused:
// the violation's turn, seq and reason.

var (
	rcT0   = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	rcGet  = Tool{Alias: "notes_get", Provider: "notes", Name: "get", Namespace: "notes", Revision: strings.Repeat("a1", 32)}
	rcStat = Tool{Alias: "text_stats", Provider: "text", Name: "stats", Namespace: "text", Revision: strings.Repeat("b2", 32)}
)

func rcHash(tools ...Tool) string {
	var lean []leanTool
	for _, t := range tools {
		lean = append(lean, leanTool{alias: []byte(t.Alias), revision: []byte(t.Revision)})
	}
	return catalogHashOf(lean)
}

// rcTurn is a well-formed turn of node, one second between events:
// opened, resolved (two tools), listed, an allowed call and its
// completion, a denied call, closed.
func rcTurn(node, tenant, turn string) []*Event {
	h := rcHash(rcGet, rcStat)
	evs := []*Event{
		{Type: TurnOpened, Namespaces: []string{"notes", "text"}},
		{Type: CatalogResolved, CatalogHash: h, Catalog: &Catalog{Tools: []Tool{rcGet, rcStat}, Providers: []ProviderStatus{{Provider: "notes", Status: "ok", Tools: 1}, {Provider: "text", Status: "ok", Tools: 1}}}},
		{Type: CatalogListed, CatalogHash: h, Namespaces: []string{"notes", "text"}, Listed: []string{"notes_get", "text_stats"}},
		{Type: ToolInvoked, CatalogHash: h, Namespaces: []string{"notes", "text"}, Call: &Call{ID: "c1", Alias: "notes_get", Provider: "notes", Name: "get", Revision: rcGet.Revision, Step: 1, Decision: "allow", Resource: "notes/x", Grant: "g", ArgsHash: strings.Repeat("0", 64)}},
		{Type: ToolCompleted, CatalogHash: h, Call: &Call{ID: "c1", Alias: "notes_get", Provider: "notes", Name: "get", Revision: rcGet.Revision, Outcome: "ok", Duration: 5}},
		{Type: ToolInvoked, CatalogHash: h, Namespaces: []string{"notes", "text"}, Call: &Call{ID: "c2", Alias: "text_stats", Provider: "text", Name: "stats", Revision: rcStat.Revision, Decision: "deny", Reason: "no_matching_grant", ArgsHash: strings.Repeat("0", 64)}},
		{Type: TurnClosed, CatalogHash: h, Close: &Close{Reason: "closed", Steps: 1, Events: 7}},
	}
	for i, ev := range evs {
		ev.Time = rcT0.Add(time.Duration(i) * time.Second)
		ev.Node, ev.Tenant, ev.Principal, ev.TurnID = node, tenant, "ada", turn
	}
	return evs
}

// rechain encodes evs in order, numbering each turn's events from 0 and
// linking each to the hash of its turn's previous record, as a forger who
// rewrites a trail consistently would. turn.closed's count is fixed up too.
func rechain(t *testing.T, evs []*Event) ([][]byte, []*Record) {
	t.Helper()
	type key struct{ node, turn string }
	next := map[key]uint64{}
	prev := map[key]string{}
	var data [][]byte
	var recs []*Record
	for _, ev := range evs {
		k := key{ev.Node, ev.TurnID}
		ev.Seq, ev.PrevHash = next[k], prev[k]
		ev.ID = fmt.Sprintf("%s-%d", ev.TurnID, ev.Seq)
		if ev.Close != nil && ev.Close.Events != 0 {
			ev.Close.Events = ev.Seq + 1
		}
		r, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		next[k]++
		prev[k] = r.Hash
		data = append(data, r.Data)
		recs = append(recs, r)
	}
	return data, recs
}

func rcVerify(t *testing.T, recs [][]byte, opts VerifyOptions, openOK bool) Report {
	t.Helper()
	v, err := NewVerifierWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		v.Add(r)
	}
	return v.Finish(openOK)
}

// wantOne checks that rep has exactly one violation, of turn at seq, whose
// reason contains want.
func wantOne(t *testing.T, name string, rep Report, turn string, seq uint64, want string) {
	t.Helper()
	if len(rep.Violations) != 1 {
		t.Errorf("%s: %d violations, want 1: %v", name, len(rep.Violations), rep.Violations)
		return
	}
	v := rep.Violations[0]
	if v.TurnID != turn || v.Seq != seq || v.Checkpoint || !strings.Contains(v.Reason, want) {
		t.Errorf("%s: violation %v, want turn %s seq %d with %q", name, v, turn, seq, want)
	}
}

func TestRechainedTamperingDetectedByItsCheck(t *testing.T) {
	clean, _ := rechain(t, rcTurn("node-1", "acme", "t1"))
	if rep := rcVerify(t, clean, VerifyOptions{}, false); !rep.OK() || rep.Events != 7 || rep.Turns != 1 || rep.Closed != 1 {
		t.Fatalf("the clean turn: %+v", rep)
	}
	other := rcHash(rcGet)
	for _, tc := range []struct {
		name   string
		edit   func(evs []*Event) []*Event
		seq    uint64
		reason string // "" when the edit is legitimate
	}{
		{"a second resolution with another catalogue", func(evs []*Event) []*Event {
			again := &Event{Type: CatalogResolved, CatalogHash: other, Catalog: &Catalog{Tools: []Tool{rcGet}, Providers: []ProviderStatus{}}}
			again.Time, again.Node, again.Tenant, again.TurnID = evs[2].Time, "node-1", "acme", "t1"
			return slices.Insert(evs, 3, again)
		}, 3, "catalogue resolved again with a different catalogHash"},
		{"a second resolution of the same catalogue", func(evs []*Event) []*Event {
			again := *evs[1]
			again.Time = evs[2].Time
			return slices.Insert(evs, 3, &again)
		}, 0, ""},
		{"a failed resolution after the held one", func(evs []*Event) []*Event {
			again := &Event{Type: CatalogResolved, Catalog: &Catalog{Tools: []Tool{}, Providers: []ProviderStatus{{Provider: "notes", Status: "failed"}}}}
			again.Time, again.Node, again.Tenant, again.TurnID = evs[2].Time, "node-1", "acme", "t1"
			return slices.Insert(evs, 3, again)
		}, 0, ""},
		{"a resolution whose tools do not hash to its catalogHash", func(evs []*Event) []*Event {
			evs[1].Catalog.Tools = []Tool{rcGet}
			return evs
		}, 1, "tools hash to"},
		{"turn.closed joined to another catalogue", func(evs []*Event) []*Event {
			evs[6].CatalogHash = other
			return evs
		}, 6, "turn.closed carries catalogHash"},
		{"turn.closed without a catalogHash", func(evs []*Event) []*Event {
			evs[6].CatalogHash = ""
			return evs
		}, 0, ""},
		{"tool.completed joined to another catalogue", func(evs []*Event) []*Event {
			evs[4].CatalogHash = other
			return evs
		}, 4, "tool.completed carries catalogHash"},
		{"tool.invoked names another provider than its revision's", func(evs []*Event) []*Event {
			evs[3].Call.Provider = "text"
			return evs
		}, 3, "tool.invoked names text/get@"},
		{"tool.invoked names another tool than its revision's", func(evs []*Event) []*Event {
			evs[3].Call.Name = "stats"
			return evs
		}, 3, "tool.invoked names notes/stats@"},
		{"tool.invoked names another tool's identity with this revision", func(evs []*Event) []*Event {
			evs[3].Call.Provider, evs[3].Call.Name = "text", "stats"
			return evs
		}, 3, "which is not in the resolved catalogue"},
		{"tool.invoked names a revision not in the catalogue", func(evs []*Event) []*Event {
			evs[3].Call.Revision = strings.Repeat("c3", 32)
			return evs
		}, 3, "which is not in the resolved catalogue"},
		{"tool.invoked under another tool's alias", func(evs []*Event) []*Event {
			evs[3].Call.Alias = "text_stats"
			return evs
		}, 3, `as "text_stats"; the resolved catalogue shows it as "notes_get"`},
		{"a denied call of an unknown alias names no tool", func(evs []*Event) []*Event {
			evs[5].Call = &Call{ID: "c2", Alias: "nope", Decision: "deny", Reason: "unknown_tool"}
			return evs
		}, 0, ""},
		{"tool.catalog.listed shows an alias not resolved", func(evs []*Event) []*Event {
			evs[2].Listed = []string{"notes_get", "notes_put"}
			return evs
		}, 2, `shows "notes_put"`},
		{"a listing before any resolution", func(evs []*Event) []*Event {
			evs[1], evs[2] = evs[2], evs[1]
			evs[1].Time, evs[2].Time = evs[2].Time, evs[1].Time
			return evs
		}, 1, "tool.catalog.listed before any resolved catalogue"},
		{"a denied call completed", func(evs []*Event) []*Event {
			done := *evs[4]
			done.Call = &Call{ID: "c2", Alias: "text_stats", Provider: "text", Name: "stats", Revision: rcStat.Revision, Outcome: "ok"}
			done.Time = evs[5].Time
			return slices.Insert(evs, 6, &done)
		}, 6, "tool.completed for call c2, which was not allowed"},
		{"a call completed twice", func(evs []*Event) []*Event {
			again := *evs[4]
			again.Time = evs[4].Time
			return slices.Insert(evs, 5, &again)
		}, 5, "tool.completed for call c1, which was not allowed (or completed twice)"},
		{"an allowed call never completed", func(evs []*Event) []*Event {
			return slices.Delete(evs, 4, 5)
		}, 5, "turn closed with 1 allowed calls never completed"},
		{"turn.closed miscounts its chain", func(evs []*Event) []*Event {
			evs[6].Close.Events = 0 // rechain leaves a zero count alone
			return evs
		}, 6, "turn.closed counts 0 events, its chain has 7"},
		{"a chain that does not start with turn.opened", func(evs []*Event) []*Event {
			return evs[1:]
		}, 0, "chain starts with tool.catalog.resolved, not turn.opened"},
		{"an event after turn.closed", func(evs []*Event) []*Event {
			extra := *evs[2]
			extra.Time = evs[6].Time
			return append(evs, &extra)
		}, 7, "tool.catalog.listed after turn.closed (seq 6)"},
		// Issue #10: within a turn, time never decreases with seq.
		{"an event earlier than its predecessor", func(evs []*Event) []*Event {
			evs[3].Time = evs[1].Time.Add(-time.Nanosecond)
			return evs
		}, 3, "time regressed"},
		{"the last event a nanosecond earlier", func(evs []*Event) []*Event {
			evs[6].Time = evs[5].Time.Add(-time.Nanosecond)
			return evs
		}, 6, "time regressed"},
		{"a fraction shorter than its predecessor's but later", func(evs []*Event) []*Event {
			evs[2].Time = evs[1].Time.Add(500 * time.Millisecond) // "…:10.5Z" after "…:10Z"
			evs[3].Time = evs[1].Time.Add(time.Second)            // "…:11Z" after "…:10.5Z"
			return evs
		}, 0, ""},
		{"every event at the same instant", func(evs []*Event) []*Event {
			for _, ev := range evs {
				ev.Time = rcT0
			}
			return evs
		}, 0, ""},
		{"a time written with a zone offset, not earlier", func(evs []*Event) []*Event {
			evs[2].Time = evs[2].Time.In(time.FixedZone("x", -3*3600)) // decoded through encoding/json
			return evs
		}, 0, ""},
		{"a time written with a zone offset, earlier", func(evs []*Event) []*Event {
			evs[2].Time = evs[0].Time.In(time.FixedZone("x", 5*3600))
			return evs
		}, 2, "time regressed"},
	} {
		evs := tc.edit(rcTurn("node-1", "acme", "t1"))
		recs, _ := rechain(t, evs)
		if tc.name == "a time written with a zone offset, not earlier" || tc.name == "a time written with a zone offset, earlier" {
			// Encode writes UTC; a forger's encoder need not.
			recs[2] = []byte(strings.Replace(string(recs[2]), `"time":"`+evs[2].Time.UTC().Format(time.RFC3339Nano)+`"`,
				`"time":"`+evs[2].Time.Format(time.RFC3339Nano)+`"`, 1))
		}
		rep := rcVerify(t, recs, VerifyOptions{}, false)
		if tc.reason == "" {
			if !rep.OK() {
				t.Errorf("%s: a legitimate trail refused: %v", tc.name, rep.Violations)
			}
			continue
		}
		wantOne(t, tc.name, rep, "t1", tc.seq, tc.reason)
	}
}

// A turn that claims the catalogue another turn resolved (same hash) with
// other tools is refused.
func TestRechainedSharedCatalogueMustMatch(t *testing.T) {
	a := rcTurn("node-1", "acme", "a")
	b := rcTurn("node-1", "acme", "b")
	b[1].Catalog.Tools = []Tool{rcGet, {Alias: "text_stats", Provider: "text", Name: "stats", Namespace: "evil", Revision: rcStat.Revision}}
	recs, _ := rechain(t, append(a, b...))
	wantOne(t, "same catalogHash, other tools", rcVerify(t, recs, VerifyOptions{}, false), "b", 1,
		"lists other tools than an earlier catalogue with the same catalogHash")
	// The same catalogue in two turns is one held catalogue.
	recs, _ = rechain(t, append(rcTurn("node-1", "acme", "a"), rcTurn("node-1", "acme", "b")...))
	if rep := rcVerify(t, recs, VerifyOptions{}, false); !rep.OK() || rep.Turns != 2 {
		t.Fatalf("two turns, one catalogue: %+v", rep)
	}
}

// rcCheckpoint signs a checkpoint of node attesting heads.
func rcCheckpoint(t *testing.T, key ed25519.PrivateKey, node string, seq uint64, prev []byte, events uint64, heads ...TurnHead) []byte {
	t.Helper()
	p := ""
	if prev != nil {
		p = HashData(prev)
	}
	data, err := SignCheckpoint(&Checkpoint{Node: node, Seq: seq, PrevHash: p, Time: rcT0, Events: events, Turns: heads}, key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func head(tenant, turn string, r *Record, closed bool) TurnHead {
	return TurnHead{TurnID: turn, Tenant: tenant, Seq: r.Event.Seq, Hash: r.Hash, Closed: closed}
}

// A later checkpoint may repeat the head an earlier one attested (the turn
// did not move) but never attest an older one.
func TestLaterCheckpointAttestingAnOlderHead(t *testing.T) {
	key := cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	cp0 := rcCheckpoint(t, key, "node-1", 0, nil, 4, head("acme", "t1", recs[3], false))
	same := rcCheckpoint(t, key, "node-1", 1, cp0, 4, head("acme", "t1", recs[3], false))
	older := rcCheckpoint(t, key, "node-1", 1, cp0, 4, head("acme", "t1", recs[1], false))

	trail := append(slices.Clone(data[:4]), cp0, same)
	trail = append(trail, data[4:]...)
	if rep := rcVerify(t, trail, VerifyOptions{}, false); !rep.OK() || rep.Checkpoints != 2 || rep.Covered != 4 {
		t.Fatalf("a repeated head: %+v", rep)
	}
	trail = append(slices.Clone(data[:4]), cp0, older)
	trail = append(trail, data[4:]...)
	wantOne(t, "an older head", rcVerify(t, trail, VerifyOptions{}, false), "t1", 1,
		"checkpoint 1 of node node-1 attests seq 1, before seq 3 an earlier checkpoint attested")

	// Claims about seqs not yet in the trail must increase too.
	ahead0 := rcCheckpoint(t, key, "node-1", 0, nil, 7, head("acme", "t1", recs[5], false))
	ahead1 := rcCheckpoint(t, key, "node-1", 1, ahead0, 7, head("acme", "t1", recs[4], false))
	wantOne(t, "pending claims out of order", rcVerify(t, append([][]byte{ahead0, ahead1}, data...), VerifyOptions{}, false), "t1", 4,
		"checkpoint 1 of node node-1 attests seq 4, not after an earlier attested seq 5")
	ahead1 = rcCheckpoint(t, key, "node-1", 1, ahead0, 7, head("acme", "t1", recs[6], true))
	if rep := rcVerify(t, append([][]byte{ahead0, ahead1}, data...), VerifyOptions{}, false); !rep.OK() || rep.Covered != 7 {
		t.Fatalf("increasing pending claims: %+v", rep)
	}
	// A checkpoint that says the turn closed where it did not.
	wrong := rcCheckpoint(t, key, "node-1", 0, nil, 7, head("acme", "t1", recs[5], true))
	wantOne(t, "closed at the wrong seq", rcVerify(t, append(slices.Clone(data), wrong), VerifyOptions{}, false), "t1", 5,
		"says the turn closed at seq 5: the trail disagrees")
	// A consistently rewritten turn (every link valid) differs from what
	// the checkpoint attests.
	forged := rcTurn("node-1", "acme", "t1")
	forged[5].Call.Decision, forged[5].Call.Reason = "deny", "step_ceiling_exceeded"
	fdata, _ := rechain(t, forged)
	honest := rcCheckpoint(t, key, "node-1", 0, nil, 7, head("acme", "t1", recs[6], true))
	wantOne(t, "rewritten after the fact", rcVerify(t, append(fdata, honest), VerifyOptions{}, false), "t1", 6,
		"checkpoint 0 of node node-1 attests seq 6 with hash")
}

// --turn and --tenant verify part of a trail: checkpoint entries and
// events of other turns are not expected, and the node's event count is
// not compared; the selected turns are still fully judged.
func TestRestrictedVerificationOfARechainedTrail(t *testing.T) {
	key := cpKey(t)
	adata, arecs := rechain(t, rcTurn("node-1", "acme", "a"))
	bdata, brecs := rechain(t, rcTurn("node-1", "globex", "b"))
	cp := rcCheckpoint(t, key, "node-1", 0, nil, 14, head("acme", "a", arecs[6], true), head("globex", "b", brecs[6], true))
	full := append(append(slices.Clone(adata), bdata...), cp)
	if rep := rcVerify(t, full, VerifyOptions{}, false); !rep.OK() || rep.Events != 14 || rep.Turns != 2 || rep.Covered != 14 {
		t.Fatalf("the whole trail: %+v", rep)
	}
	onlyA := append(slices.Clone(adata), cp)
	// Unrestricted, b's absence is a deletion: its attested head and the
	// node's event count both say so.
	rep := rcVerify(t, onlyA, VerifyOptions{}, false)
	if len(rep.Violations) != 2 || rep.Violations[0].TurnID != "b" || !strings.Contains(rep.Violations[0].Reason, "none of its events are in the trail") ||
		!rep.Violations[1].Checkpoint || !strings.Contains(rep.Violations[1].Reason, "counts 14 events written; the trail holds 7") {
		t.Fatalf("a's part verified as the whole: %v", rep.Violations)
	}
	for _, opts := range []VerifyOptions{{TurnID: "a"}, {Tenant: "acme"}, {TurnID: "a", Tenant: "acme"}} {
		if rep := rcVerify(t, onlyA, opts, false); !rep.OK() || rep.Events != 7 || rep.Turns != 1 || rep.Covered != 7 {
			t.Errorf("%+v over a's part: %+v", opts, rep)
		}
		// Records of other turns that slip through the reader's filter are
		// neither counted nor judged.
		if rep := rcVerify(t, append(slices.Clone(bdata[:3]), onlyA...), opts, false); !rep.OK() || rep.Events != 7 {
			t.Errorf("%+v with b's records slipped in: %+v", opts, rep)
		}
		// a's own tail cut is still found, from the checkpoint.
		cut := append(slices.Clone(adata[:5]), cp)
		wantOne(t, fmt.Sprintf("%+v, a's tail cut", opts), rcVerify(t, cut, opts, true), "a", 5, "attests seq 6; the trail ends at seq 4")
	}
	// A restriction to the other turn or tenant judges nothing of a.
	for _, opts := range []VerifyOptions{{TurnID: "b"}, {Tenant: "globex"}, {TurnID: "a", Tenant: "globex"}} {
		rep := rcVerify(t, onlyA, opts, false)
		if rep.Events != 0 {
			t.Errorf("%+v judged %d events of a", opts, rep.Events)
		}
		if opts.TurnID == "b" || opts.Tenant == "globex" && opts.TurnID == "" {
			wantOne(t, fmt.Sprintf("%+v", opts), rep, "b", 0, "none of its events are in the trail")
		}
	}
}

// An anchor of a node none of whose checkpoints (nor events) are in the
// trail: the tail was cut before the node's first checkpoint. It is
// reported, with the turns the anchor attests, and does not panic.
func TestAnchorOfANodeWithoutCheckpoints(t *testing.T) {
	key := cpKey(t)
	data, recs := rechain(t, rcTurn("node-2", "acme", "t2"))
	anchor := rcCheckpoint(t, key, "node-2", 0, nil, 7, head("acme", "t2", recs[6], true))
	other, _ := rechain(t, rcTurn("node-1", "acme", "t1"))
	for name, trail := range map[string][][]byte{
		"no record of node-2":                other,
		"node-2's events, no checkpoint":     append(slices.Clone(other), data...),
		"node-2's events cut, no checkpoint": append(slices.Clone(other), data[:3]...),
	} {
		var rep Report
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: panic: %v", name, r)
				}
			}()
			rep = rcVerify(t, trail, VerifyOptions{Anchors: [][]byte{anchor}}, true)
		}()
		var chain, turn []Violation
		for _, v := range rep.Violations {
			if v.Checkpoint {
				chain = append(chain, v)
			} else {
				turn = append(turn, v)
			}
		}
		if len(chain) != 1 || chain[0].Node != "node-2" || chain[0].Seq != 0 || chain[0].Index != -1 ||
			!strings.Contains(chain[0].Reason, "the anchor is checkpoint 0 of node node-2, none of its checkpoints are in the trail") {
			t.Errorf("%s: chain violations %v", name, chain)
		}
		switch name {
		case "no record of node-2":
			if len(turn) != 1 || turn[0].TurnID != "t2" || turn[0].Node != "node-2" || !strings.Contains(turn[0].Reason, "none of its events are in the trail") {
				t.Errorf("%s: turn violations %v", name, turn)
			}
		case "node-2's events, no checkpoint":
			if len(turn) != 0 {
				t.Errorf("%s: turn violations %v", name, turn)
			}
		default:
			if len(turn) != 1 || turn[0].TurnID != "t2" || turn[0].Seq != 3 || !strings.Contains(turn[0].Reason, "the trail ends at seq 2") {
				t.Errorf("%s: turn violations %v", name, turn)
			}
		}
	}
}

// A checkpoint read before the events it attests leaves a pending claim;
// when the event arrives and differs, the turn breaks (dropping its
// pending claims) and the violation is reported, without a panic. Found
// by a random search over trails with checkpoints and anchors.
func TestPendingClaimThatFailsWhenItsEventArrives(t *testing.T) {
	key := cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	wrongHash := head("acme", "t1", recs[3], false)
	wrongHash.Hash = recs[2].Hash
	wrongClose := head("acme", "t1", recs[3], true)
	for _, tc := range []struct {
		name   string
		h      TurnHead
		reason string
	}{
		{"another hash", wrongHash, "checkpoint 0 of node node-1 attests seq 3 with hash"},
		{"closed where it is not", wrongClose, "says the turn closed at seq 3: the trail disagrees"},
	} {
		cp := rcCheckpoint(t, key, "node-1", 0, nil, 7, tc.h)
		for _, anchored := range []bool{false, true} {
			opts := VerifyOptions{}
			if anchored {
				opts.Anchors = [][]byte{cp}
			}
			var rep Report
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s (anchored %v): panic: %v", tc.name, anchored, r)
					}
				}()
				rep = rcVerify(t, append([][]byte{cp}, data...), opts, false)
			}()
			wantOne(t, tc.name, rep, "t1", 3, tc.reason)
		}
	}
}

// The verifier's RFC 8785 string form agrees with encoding/json (HTML
// escaping off) on every ASCII byte: only '"', '\\' and control
// characters are escaped, \b \f \n \r \t in short form, others as \u00xx.
func TestCatalogHashEscapesLikeRFC8785(t *testing.T) {
	for c := 0; c < 0x7f; c++ {
		alias := "a" + string(rune(c)) + "b"
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"tools": []map[string]string{{"alias": alias, "revision": "r" + string(rune(c))}}, "v": 1}); err != nil {
			t.Fatal(err)
		}
		want := HashData([]byte(strings.TrimSuffix(buf.String(), "\n")))
		got := catalogHashOf([]leanTool{{alias: []byte(alias), revision: []byte("r" + string(rune(c)))}})
		if got != want {
			t.Errorf("byte 0x%02x: catalogHash %s, want %s (%s)", c, short(got), short(want), buf.String())
		}
	}
	// Several tools are comma-separated, in the order given.
	two := catalogHashOf([]leanTool{{alias: []byte("a"), revision: []byte("1")}, {alias: []byte("b"), revision: []byte("2")}})
	if two != HashData([]byte(`{"tools":[{"alias":"a","revision":"1"},{"alias":"b","revision":"2"}],"v":1}`)) {
		t.Errorf("two tools: %s", two)
	}
	if catalogHashOf(nil) != HashData([]byte(`{"tools":[],"v":1}`)) {
		t.Error("no tools")
	}
}

func TestViolationString(t *testing.T) {
	for _, tc := range []struct {
		v    Violation
		want string
	}{
		{Violation{TurnID: "t1", Node: "n", Seq: 3, Index: 7, Reason: "why"}, "turn t1 seq 3 (record 7): why"},
		{Violation{TurnID: "t1", Seq: 0, Index: 0, Reason: "why"}, "turn t1 seq 0 (record 0): why"},
		{Violation{TurnID: "t1", Seq: 3, Index: -1, Reason: "why"}, "turn t1 seq 3 (end of trail): why"},
		{Violation{Node: "n", Checkpoint: true, Seq: 2, Index: 5, Reason: "why"}, "checkpoint chain of node n seq 2 (record 5): why"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

// The report's figures and heads, field by field.
func TestReportFigures(t *testing.T) {
	key := cpKey(t)
	pub := key.Public().(ed25519.PublicKey)
	adata, arecs := rechain(t, rcTurn("node-1", "acme", "a"))
	bdata, brecs := rechain(t, rcTurn("node-1", "acme", "b"))
	cdata, _ := rechain(t, rcTurn("node-2", "acme", "c"))
	cp0 := rcCheckpoint(t, key, "node-1", 0, nil, 9, head("acme", "a", arecs[6], true), head("acme", "b", brecs[1], false))
	cp1 := rcCheckpoint(t, key, "node-1", 1, cp0, 12, head("acme", "b", brecs[4], false))
	trail := append(slices.Clone(adata), bdata[:2]...)
	trail = append(trail, cp0)
	trail = append(trail, bdata[2:5]...)
	trail = append(trail, cp1, cp1) // a retried publish: stored twice
	trail = append(trail, cdata[:3]...)
	for _, opts := range []VerifyOptions{{}, {Trusted: []ed25519.PublicKey{pub}}} {
		rep := rcVerify(t, trail, opts, true)
		// node-2 has no checkpoint: its three events are unattested, so
		// trusted keys do not make the trail trusted.
		wantTrust := TrustEmbedded
		if len(opts.Trusted) > 0 {
			wantTrust = TrustUnattested
		}
		if !rep.OK() || rep.Events != 15 || rep.Turns != 3 || rep.Closed != 1 || rep.Checkpoints != 2 || rep.Covered != 7+5 || rep.Trust != wantTrust {
			t.Fatalf("report %+v", rep)
		}
		if want := []NodeUnattested{{Node: "node-2", Events: 3, Turns: 1}}; rep.Unattested != 3 || !slices.Equal(rep.UnattestedNodes, want) {
			t.Fatalf("unattested %d %+v, want 3 %+v", rep.Unattested, rep.UnattestedNodes, want)
		}
		p, _ := ParseCheckpoint(cp1)
		want := []NodeHead{{Node: "node-1", Seq: 1, Hash: HashData(cp1), KeyID: KeyID(pub), Time: "2026-05-06T07:08:09Z", Events: 12}}
		if !slices.Equal(rep.Heads, want) || p.KeyID != KeyID(pub) {
			t.Fatalf("heads %+v, want %+v", rep.Heads, want)
		}
		// Closed turns required: b and c are open.
		rep = rcVerify(t, trail, opts, false)
		if len(rep.Violations) != 2 || rep.Violations[0].TurnID != "b" || rep.Violations[0].Seq != 5 || rep.Violations[1].TurnID != "c" || rep.Violations[1].Seq != 3 ||
			!strings.Contains(rep.Violations[0].Reason, "trail ends before turn.closed") {
			t.Fatalf("open turns: %v", rep.Violations)
		}
	}
	// Fewer events of node-1 than its last checkpoint counts.
	short := slices.DeleteFunc(slices.Clone(trail), func(b []byte) bool { return string(b) == string(adata[0]) })
	rep := rcVerify(t, append(short, rcCheckpoint(t, key, "node-1", 2, cp1, 13)), VerifyOptions{}, true)
	found := false
	for _, v := range rep.Violations {
		if v.Checkpoint && v.Node == "node-1" && v.Seq == 2 && v.Index == -1 && strings.Contains(v.Reason, "counts 13 events written; the trail holds 11") {
			found = true
		}
	}
	if !found {
		t.Fatalf("event count: %v", rep.Violations)
	}
}

// Without trusted keys, an anchor pins its node's key: a trail whose
// checkpoints of that node are signed by another key is refused, even if
// they are consistent among themselves.
func TestAnchorPinsTheNodeKeyInEmbeddedMode(t *testing.T) {
	genuine, forger := cpKey(t), cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	anchor := rcCheckpoint(t, genuine, "node-1", 0, nil, 7, head("acme", "t1", recs[6], true))
	forged := rcCheckpoint(t, forger, "node-1", 0, nil, 7, head("acme", "t1", recs[6], true))
	rep := rcVerify(t, append(slices.Clone(data), forged), VerifyOptions{Anchors: [][]byte{anchor}}, false)
	if len(rep.Violations) == 0 || !rep.Violations[0].Checkpoint || rep.Violations[0].Seq != 0 ||
		!strings.Contains(rep.Violations[0].Reason, "signed by key "+KeyID(forger.Public().(ed25519.PublicKey))+", but node node-1 signed with key "+KeyID(genuine.Public().(ed25519.PublicKey))) {
		t.Fatalf("violations %v", rep.Violations)
	}
	// The genuine checkpoint passes; without the anchor the forged one is
	// the first key seen, and passes too (embedded trust proves consistency only).
	if rep := rcVerify(t, append(slices.Clone(data), anchor), VerifyOptions{Anchors: [][]byte{anchor}}, false); !rep.OK() {
		t.Fatalf("genuine: %v", rep.Violations)
	}
	if rep := rcVerify(t, append(slices.Clone(data), forged), VerifyOptions{}, false); !rep.OK() {
		t.Fatalf("forged, no anchor: %v", rep.Violations)
	}
}

// A violation names the record's position in the input; an undecodable
// record is counted as an event and named by its position.
func TestViolationIndexAndUndecodableRecords(t *testing.T) {
	adata, _ := rechain(t, rcTurn("node-1", "acme", "a"))
	bevs := rcTurn("node-1", "acme", "b")
	bevs[4].Time = bevs[2].Time.Add(-time.Second)
	bdata, _ := rechain(t, bevs)
	var trail [][]byte
	for i := range adata { // interleaved: a0 b0 a1 b1 ...
		trail = append(trail, adata[i], bdata[i])
	}
	trail = append(trail, []byte(`{"id":`), []byte(`not json`))
	rep := rcVerify(t, trail, VerifyOptions{}, false)
	want := []Violation{
		{TurnID: "b", Node: "node-1", Seq: 4, Index: 9},
		{TurnID: "?", Index: 14},
		{TurnID: "?", Index: 15},
	}
	if len(rep.Violations) != len(want) {
		t.Fatalf("violations %v", rep.Violations)
	}
	for i, w := range want {
		g := rep.Violations[i]
		if g.TurnID != w.TurnID || g.Node != w.Node || g.Seq != w.Seq || g.Index != w.Index {
			t.Errorf("violation %d: %v, want %+v", i, g, w)
		}
	}
	if !strings.Contains(rep.Violations[0].Reason, "time regressed: seq 4 (tool.completed)") || !strings.HasPrefix(rep.Violations[1].Reason, "undecodable record: ") {
		t.Errorf("reasons: %v", rep.Violations)
	}
	if rep.Events != 16 || rep.Turns != 2 {
		t.Errorf("events %d, turns %d", rep.Events, rep.Turns)
	}
}

// The reasons name the seqs involved.
func TestViolationReasonsNameTheSeqs(t *testing.T) {
	data, _ := rechain(t, rcTurn("node-1", "acme", "t1"))
	wantOne(t, "two missing", rcVerify(t, without2(data, 2, 3), VerifyOptions{}, true), "t1", 2,
		"expected seq 2, found 4 (tool.completed): seq 2..3 missing (deleted) or out of order")
	evs := rcTurn("node-1", "acme", "t1")
	evs[5].Time = evs[4].Time.Add(-time.Millisecond)
	data, _ = rechain(t, evs)
	wantOne(t, "time", rcVerify(t, data, VerifyOptions{}, true), "t1", 5,
		"time regressed: seq 5 (tool.invoked) is at 2026-05-06T07:08:12.999000000Z, before seq 4 at 2026-05-06T07:08:13.000000000Z")
}

func without2(recs [][]byte, drop ...int) [][]byte {
	var out [][]byte
	for i, r := range recs {
		if !slices.Contains(drop, i) {
			out = append(out, r)
		}
	}
	return out
}

// A call or a completion before any resolution is refused at the join,
// whatever the call names.
func TestCallsBeforeAnyResolution(t *testing.T) {
	for _, typ := range []int{3, 4} { // tool.invoked, tool.completed
		evs := rcTurn("node-1", "acme", "t1")
		evs = append(evs[:1], evs[typ:]...) // no resolution, no listing
		data, _ := rechain(t, evs)
		var rep Report
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: panic: %v", evs[1].Type, r)
				}
			}()
			rep = rcVerify(t, data, VerifyOptions{}, true)
		}()
		wantOne(t, string(evs[1].Type), rep, "t1", 1, string(evs[1].Type)+" before any resolved catalogue")
	}
}

// Checkpoint chains: a gap names the missing range, a bad signature is
// refused, a node's key is pinned without trusted keys and may rotate
// among trusted keys.
func TestCheckpointChainChecks(t *testing.T) {
	k1, k2 := cpKey(t), cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	cp0 := rcCheckpoint(t, k1, "node-1", 0, nil, 2, head("acme", "t1", recs[1], false))
	cp1by2 := rcCheckpoint(t, k2, "node-1", 1, cp0, 4, head("acme", "t1", recs[3], false))
	cp1 := rcCheckpoint(t, k1, "node-1", 1, cp0, 4, head("acme", "t1", recs[3], false))
	cp2 := rcCheckpoint(t, k1, "node-1", 2, cp1, 7, head("acme", "t1", recs[6], true))
	trail := func(cps ...[]byte) [][]byte {
		out := slices.Clone(data[:2])
		out = append(out, cps[0])
		out = append(out, data[2:4]...)
		out = append(out, cps[1:]...)
		return append(out, data[4:]...)
	}
	chainOnly := func(name string, rep Report, seq uint64, want string) {
		t.Helper()
		if len(rep.Violations) != 1 || !rep.Violations[0].Checkpoint || rep.Violations[0].Node != "node-1" || rep.Violations[0].Seq != seq ||
			!strings.Contains(rep.Violations[0].Reason, want) {
			t.Errorf("%s: %v, want checkpoint %d: %q", name, rep.Violations, seq, want)
		}
	}
	pub1, pub2 := k1.Public().(ed25519.PublicKey), k2.Public().(ed25519.PublicKey)
	if rep := rcVerify(t, trail(cp0, cp1, cp2), VerifyOptions{}, false); !rep.OK() || rep.Checkpoints != 3 {
		t.Fatalf("clean: %+v", rep)
	}
	chainOnly("a gap", rcVerify(t, trail(cp0, cp2), VerifyOptions{}, false), 1,
		"expected checkpoint 1, found 2: checkpoints 1..1 missing (deleted) or out of order")
	// Another key within the chain: refused without trusted keys ...
	chainOnly("a key change, embedded", rcVerify(t, trail(cp0, cp1by2), VerifyOptions{}, false), 1,
		"signed by key "+KeyID(pub2)+", but node node-1 signed with key "+KeyID(pub1)+" before")
	// ... accepted when both keys are trusted (a rotation), refused when only one is.
	if rep := rcVerify(t, trail(cp0, cp1by2), VerifyOptions{Trusted: []ed25519.PublicKey{pub1, pub2}}, false); !rep.OK() || rep.Checkpoints != 2 {
		t.Errorf("a rotation among trusted keys: %v", rep.Violations)
	}
	chainOnly("an untrusted key", rcVerify(t, trail(cp0, cp1by2), VerifyOptions{Trusted: []ed25519.PublicKey{pub1}}, false), 1,
		"signed by key "+KeyID(pub2)+", which is not trusted")
	// A signature that does not verify (one hex digit of it changed).
	bad := slices.Clone(cp1)
	i := strings.LastIndex(string(bad), `"`) - 1
	if bad[i] == '0' {
		bad[i] = '1'
	} else {
		bad[i] = '0'
	}
	for _, opts := range []VerifyOptions{{}, {Trusted: []ed25519.PublicKey{pub1}}} {
		chainOnly("a bad signature", rcVerify(t, trail(cp0, bad), opts, false), 1, "forged or altered")
	}
}

// timeKey.parse agrees with time.Parse (RFC 3339, converted to UTC) on
// every input, and reads the form Encode writes without parsing or
// allocating: the verifier judges every event's time.
func TestTimeKeyAgreesWithTimeParse(t *testing.T) {
	inputs := []string{
		"2026-05-06T07:08:09Z", "2026-05-06T07:08:09.5Z", "2026-05-06T07:08:09.000000001Z", "2026-05-06T07:08:09.123456789Z",
		"0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "2026-05-06T07:08:09.12Z",
		"2026-05-06T07:08:09+02:00", "2026-05-06T07:08:09.5-03:30", "2026-05-06T07:08:09.Z", "2026-05-06T07:08:09.1234567890Z",
		"2026-05-06t07:08:09Z", "2026-05-06T07:08:09z", "2026-05-06 07:08:09Z", "2026/05/06T07:08:09Z", "2026-05-06T07-08-09Z",
		"2026-05-06T07:08:0xZ", "x026-05-06T07:08:09Z", "2026-05-06T07:08:09", "2026-05-06T07:08:09ZZ", "2026-05-06T07:08:09,5Z",
		"2026-05-06T07:08:09.5", "2026-05-06T07:08:9Z", "", "Z", "2026-05-06T07:08:09.a5Z", "2026-05-06T07:08:09.5aZ",
		"2026-05-06T07:08:60Z", "2026-13-06T07:08:09Z",
	}
	// Every single-byte change of a canonical time, too.
	base := "2026-05-06T07:08:09.25Z"
	for i := range base {
		for _, c := range []byte("09-:.TZ/ a") {
			inputs = append(inputs, base[:i]+string(c)+base[i+1:])
		}
	}
	for _, s := range inputs {
		var k timeKey
		ok := k.parse([]byte(s))
		ref, err := time.Parse(time.RFC3339Nano, s)
		if ok != (err == nil) {
			// The fast path does not check ranges (month 13, second 60):
			// it compares the digits as written, which order the same.
			if ok && err != nil && strings.Contains(err.Error(), "out of range") {
				continue
			}
			t.Errorf("%q: parse %v, time.Parse %v", s, ok, err)
			continue
		}
		if ok {
			var want timeKey
			want.set(ref)
			if k != want {
				t.Errorf("%q: key %s, want %s", s, k[:], want[:])
			}
		}
	}
	// An offset that carries the instant out of years 0-9999 in UTC has no
	// key: the record is refused, not compared by a truncated key.
	for _, s := range []string{"9999-12-31T23:00:00-05:00", "0000-01-01T01:00:00+05:00"} {
		var k timeKey
		if k.parse([]byte(s)) {
			t.Errorf("%q: parsed to %s; its UTC year is outside 0-9999", s, k[:])
		}
	}
	for _, s := range []string{"2026-05-06T07:08:09Z", "2026-05-06T07:08:09.5Z", "2026-05-06T07:08:09.123456789Z"} {
		b := []byte(s)
		var k timeKey
		if n := testing.AllocsPerRun(100, func() { k.parse(b) }); n != 0 {
			t.Errorf("%q: %v allocations: not read on the fast path", s, n)
		}
	}
}

// Claims settle against the hashes the trail has shown; what is left
// after a claim is kept for the next one.
func TestSuccessiveClaimsSettleAgainstTheRest(t *testing.T) {
	key := cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	cp0 := rcCheckpoint(t, key, "node-1", 0, nil, 5, head("acme", "t1", recs[2], false))
	cp1 := rcCheckpoint(t, key, "node-1", 1, cp0, 5, head("acme", "t1", recs[4], false))
	trail := append(slices.Clone(data[:5]), cp0, cp1)
	trail = append(trail, data[5:]...)
	var rep Report
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic: %v", r)
			}
		}()
		rep = rcVerify(t, trail, VerifyOptions{}, false)
	}()
	if !rep.OK() || rep.Covered != 5 {
		t.Fatalf("%+v", rep)
	}
}

// A broken link is attributed by a checkpoint attesting the suspect seq.
func TestCheckpointAttributesABrokenLink(t *testing.T) {
	key := cpKey(t)
	data, recs := rechain(t, rcTurn("node-1", "acme", "t1"))
	altered := []byte(strings.Replace(string(data[3]), `"resource":"notes/x"`, `"resource":"notes/y"`, 1))
	genuine := rcCheckpoint(t, key, "node-1", 0, nil, 5, head("acme", "t1", recs[4], false))
	trail := append(slices.Clone(data[:3]), altered, data[4], genuine)
	rep := rcVerify(t, trail, VerifyOptions{}, true)
	wantOne(t, "the earlier record altered", rep, "t1", 3, "seq 3 was modified or replaced: its hash is not the prev_hash of seq 4, which checkpoint 0 of node node-1 attests")
	if rep.Violations[0].Index != 3 {
		t.Errorf("index %d", rep.Violations[0].Index)
	}
	other := head("acme", "t1", recs[4], false)
	other.Hash = recs[1].Hash
	rep = rcVerify(t, append(slices.Clone(data[:3]), altered, data[4], rcCheckpoint(t, key, "node-1", 0, nil, 5, other)), VerifyOptions{}, true)
	wantOne(t, "the later record forged", rep, "t1", 4, "seq 4 was forged, modified or inserted: it does not link to seq 3, and checkpoint 0 of node node-1 attests another chain")
}

// Violations found at the end are sorted by node, then turn; anchors'
// claims are reported at the end of the trail (index -1); turns only a
// checkpoint names are not counted as turns of the trail.
func TestEndOfTrailViolationsSortedAndCounted(t *testing.T) {
	key := cpKey(t)
	var evs []*Event
	for _, nt := range [][2]string{{"node-2", "a"}, {"node-1", "c"}, {"node-1", "b"}} {
		evs = append(evs, rcTurn(nt[0], "acme", nt[1])[:3]...)
	}
	data, _ := rechain(t, evs)
	rep := rcVerify(t, data, VerifyOptions{}, false)
	var got []string
	for _, v := range rep.Violations {
		got = append(got, v.Node+"/"+v.TurnID)
		if v.Index != -1 || v.Seq != 3 {
			t.Errorf("%v", v)
		}
	}
	if want := []string{"node-1/b", "node-1/c", "node-2/a"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	_, recs := rechain(t, rcTurn("node-3", "acme", "z"))
	anchor := rcCheckpoint(t, key, "node-3", 0, nil, 7, head("acme", "z", recs[6], true))
	rep = rcVerify(t, data, VerifyOptions{Anchors: [][]byte{anchor}}, true)
	if rep.Turns != 3 || len(rep.Violations) != 2 || rep.Violations[1].TurnID != "z" || rep.Violations[1].Index != -1 {
		t.Fatalf("turns %d, violations %v", rep.Turns, rep.Violations)
	}
	// The anchor's turn is in the trail, rewritten: the anchor's claim
	// settles against it at the end of the trail.
	forged := rcTurn("node-3", "acme", "z")
	forged[3].Call.Resource = "notes/evil"
	fdata, _ := rechain(t, forged)
	rep = rcVerify(t, fdata, VerifyOptions{Anchors: [][]byte{anchor}}, true)
	if len(rep.Violations) != 2 || rep.Violations[1].TurnID != "z" || rep.Violations[1].Seq != 6 || rep.Violations[1].Index != -1 ||
		!strings.Contains(rep.Violations[1].Reason, "checkpoint 0 of node node-3 attests seq 6 with hash") {
		t.Fatalf("rewritten anchored turn: %v", rep.Violations)
	}
}

// Two turns holding one catalogue hash must list the same tools in every
// field, not only in those the hash covers (alias, revision).
func TestSharedCatalogueComparesEveryField(t *testing.T) {
	for name, edit := range map[string]func(tl *Tool){
		"provider":  func(tl *Tool) { tl.Provider = "evil" },
		"name":      func(tl *Tool) { tl.Name = "evil" },
		"namespace": func(tl *Tool) { tl.Namespace = "evil" },
	} {
		b := rcTurn("node-1", "acme", "b")
		tl := rcStat
		edit(&tl)
		b[1].Catalog.Tools = []Tool{rcGet, tl}
		recs, _ := rechain(t, append(rcTurn("node-1", "acme", "a"), b...))
		wantOne(t, name, rcVerify(t, recs, VerifyOptions{}, false), "b", 1, "lists other tools than an earlier catalogue with the same catalogHash")
	}
}

// Hashes in reasons are shortened to 12 hex digits.
func TestReasonsShortenHashes(t *testing.T) {
	evs := rcTurn("node-1", "acme", "t1")
	other := rcHash(rcGet)
	evs[6].CatalogHash = other
	data, _ := rechain(t, evs)
	wantOne(t, "short hashes", rcVerify(t, data, VerifyOptions{}, false), "t1", 6,
		fmt.Sprintf("turn.closed carries catalogHash %q, the turn resolved %q", other[:12], rcHash(rcGet, rcStat)[:12]))
	if short("abc") != "abc" || short(other) != other[:12] {
		t.Fatal("short")
	}
}
