package audit_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/providers"
)

var quiet = slog.New(slog.DiscardHandler)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// realTrail is the audit stream of a real kernel (the sample cluster.yaml's
// static providers and principals) behind a JetStreamSink and a
// Checkpointer on an embedded JetStream server, read back with ReadAll.
type realTrail struct {
	recs   [][]byte
	key    ed25519.PublicKey
	anchor []byte // the final checkpoint: what a node's state file holds
}

var (
	trailOnce sync.Once
	trailVal  realTrail
	trailErr  error
)

// theTrail builds the real trail once per test binary; callers copy it.
func theTrail(t *testing.T) realTrail {
	t.Helper()
	trailOnce.Do(func() { trailVal, trailErr = buildTrail(t) })
	if trailErr != nil {
		t.Fatal(trailErr)
	}
	return trailVal
}

func buildTrail(t *testing.T) (realTrail, error) {
	ctx := ctxFor(t, 30*time.Second)
	b, err := os.ReadFile("../cluster.yaml")
	if err != nil {
		return realTrail{}, err
	}
	cfg, err := config.Parse(b)
	if err != nil {
		return realTrail{}, err
	}
	auth, err := cfg.AuthoritySource()
	if err != nil {
		return realTrail{}, err
	}
	static, err := cfg.StaticProviders(providers.Builtins())
	if err != nil {
		return realTrail{}, err
	}
	var ps []providers.ContextToolProvider
	for _, s := range static {
		ps = append(ps, s)
	}

	_, nc := natstest.Start(t, true)
	sink, err := auditstore.NewJetStreamSink(ctx, nc, auditstore.JetStreamOptions{Logger: quiet})
	if err != nil {
		return realTrail{}, err
	}
	defer sink.Close(context.Background())
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	cp, err := auditstore.StartCheckpointer(ctx, nc, sink, auditstore.CheckpointOptions{Node: "node-1", Key: key, Interval: -1, Logger: quiet})
	if err != nil {
		return realTrail{}, err
	}
	// Hashing text needs an approver's approval.
	rules, err := approval.NewLive([]approval.RuleSpec{{Tenant: "acme", Name: "hash", Provider: "textkit", Tool: "sha256"}})
	if err != nil {
		return realTrail{}, err
	}
	approvals := &approval.Requests{B: approval.NewMemory()}
	k, err := actors.New(actors.Options{Node: "node-1", Providers: ps, Authority: auth, Sink: cp, Logger: quiet,
		Approvals: actors.Approvals{Rules: rules, Store: approvals}})
	if err != nil {
		return realTrail{}, err
	}
	defer k.Shutdown(context.Background())

	var script error
	step := func(err error) {
		if err != nil && script == nil {
			script = err
		}
	}
	type turnH struct {
		who   authority.AccessContext
		lease string
	}
	open := func(principal string, ns ...string) turnH {
		who := authority.AccessContext{Tenant: "acme", Principal: principal, EnabledNamespaces: ns}
		o, err := k.Open(ctx, who)
		step(err)
		who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
		return turnH{who, o.LeaseID}
	}
	call := func(h turnH, alias, args string) {
		_, err := k.Invoke(ctx, h.who, alias, []byte(args))
		_ = err // refusals are part of the trail
	}
	list := func(h turnH) {
		_, err := k.ListTools(ctx, h.who)
		step(err)
	}
	closeT := func(h turnH) { step(k.Close(ctx, h.who, h.lease)) }

	// Ada's README turn: list, write, read, refused outside her grant,
	// namespace switched off mid-turn.
	a := open("ada", "notes", "text")
	list(a)
	call(a, "notes_put", `{"space":"acme","title":"plan","body":"ship the kernel"}`)
	call(a, "notes_get", `{"space":"acme","title":"plan"}`)
	call(a, "notes_put", `{"space":"globex","title":"x","body":"y"}`)
	step(k.UpdateNamespaces(ctx, a.who, []string{"text"}))
	call(a, "notes_get", `{"space":"acme","title":"plan"}`)
	call(a, "text_stats", `{"text":"one two two"}`)
	closeT(a)
	// Bob may read, not write.
	bob := open("bob", "notes")
	list(bob)
	// A second connection of bob's runtime attaches, lists, and leaves.
	o2, err := k.Open(ctx, bob.who)
	step(err)
	bob2 := turnH{bob.who, o2.LeaseID}
	bob2.who.LeaseID = o2.LeaseID
	list(bob2)
	closeT(bob2)
	call(bob, "notes_get", `{"space":"acme","title":"plan"}`)
	call(bob, "notes_put", `{"space":"acme","title":"plan","body":"no"}`)
	closeT(bob)
	if _, err := cp.Checkpoint(ctx); err != nil {
		return realTrail{}, err
	}
	// A turn open across the next checkpoint, and a turn of one operation.
	c := open("ada", "text")
	list(c)
	call(c, "text_sha256", `{"text":"abc"}`) // approval_required: approval.requested
	if sts, err := approvals.List(ctx, "acme"); err != nil || len(sts) != 1 {
		step(fmt.Errorf("approval requests: %v %v", sts, err))
	} else {
		st, err := approvals.Decide(ctx, "acme", sts[0].ID, approval.Decision{Approve: true, By: "carol", Reason: "fine"})
		step(err)
		dc := audit.NewPolicyChain("node-1", "a0")
		rs, err := dc.EmitApproval(cp, time.Now(), audit.Approval{ID: st.ID, Rule: st.Rule, Tenant: st.Tenant, Principal: st.Principal,
			Turn: st.Turn, CallID: st.CallID, Provider: st.Provider, Name: st.Tool, Revision: st.Revision, ArgsHash: st.ArgsHash,
			ExpiresAt: st.ExpiresAt, Decision: string(st.Status), By: st.DecidedBy, Reason: st.Reason})
		step(err)
		rs = append(rs, dc.Close(cp, time.Now()))
		for _, r := range rs {
			step(audit.Wait(ctx, r))
		}
		call(c, "text_sha256", `{"text":"abc"}`) // runs on the approval
	}
	_, err = k.ListTools(ctx, authority.AccessContext{Tenant: "acme", Principal: "bob", EnabledNamespaces: []string{"notes"}})
	step(err)
	if _, err := cp.Checkpoint(ctx); err != nil {
		return realTrail{}, err
	}
	call(c, "unknown_tool", `{}`)
	call(c, "text_stats", `{"text":"x"}`)
	// The node's policy chain: a grant changed by an admin, a binding
	// removed; closed when the node stops.
	pc := audit.NewPolicyChain("node-1", "p0")
	for _, ch := range []audit.PolicyChange{
		{Key: "grants.acme.ada", Op: "change", PrevRevision: 1, Revision: 5, PrevHash: strings.Repeat("a", 64), Hash: strings.Repeat("b", 64), By: "admin"},
		{Key: "credentials.acme.work", Op: "remove", PrevRevision: 2, Revision: 6, PrevHash: strings.Repeat("c", 64), By: "admin"},
	} {
		rs, err := pc.Emit(cp, time.Now(), ch)
		step(err)
		for _, r := range rs {
			step(audit.Wait(ctx, r))
		}
	}
	// An approver accepts a tool's changed contract.
	rs, err := pc.EmitReview(cp, time.Now(), audit.ContractReview{Tenant: "acme", Provider: "notes", Tool: "put", Decision: "accepted",
		Revision: strings.Repeat("d", 64), Previous: strings.Repeat("e", 64), Classes: []string{"description_changed"}, By: "carol", Why: "reviewed"})
	step(err)
	for _, r := range rs {
		step(audit.Wait(ctx, r))
	}
	// A tenant admin refused a key outside its tenants.
	rs, err = pc.EmitRefusal(cp, time.Now(), audit.PolicyRefusal{Op: "put", Key: "providers.notes", By: "admin-acme", Code: "policy_forbidden", Tenants: []string{"acme"}})
	step(err)
	for _, r := range rs {
		step(audit.Wait(ctx, r))
	}
	// Concurrent turns interleave in the stream.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := open("ada", "notes", "text")
			list(h)
			for j := range 3 {
				call(h, "notes_put", fmt.Sprintf(`{"space":"acme","title":"t%d-%d","body":"b"}`, i, j))
			}
			closeT(h)
		}()
	}
	wg.Wait()
	closeT(c)
	// Left open: closed by the shutdown, like a node stopping.
	d := open("bob", "notes")
	call(d, "notes_search", `{"space":"acme","query":"plan"}`)
	if script != nil {
		return realTrail{}, script
	}
	if err := k.Shutdown(ctx); err != nil {
		return realTrail{}, err
	}
	if err := audit.Wait(ctx, pc.Close(cp, time.Now())); err != nil {
		return realTrail{}, err
	}
	if err := cp.Close(ctx); err != nil {
		return realTrail{}, err
	}
	var recs [][]byte
	if err := auditstore.ReadAll(ctx, nc, auditstore.TailOptions{}, func(data []byte, _ *audit.Event) error {
		recs = append(recs, data)
		return nil
	}); err != nil {
		return realTrail{}, err
	}
	return realTrail{recs: recs, key: pub, anchor: cp.Last()}, nil
}

// rec is one record of the trail, decoded.
type rec struct {
	i   int
	ev  *audit.Event // nil for a checkpoint
	cp  *audit.ParsedCheckpoint
	raw []byte
}

func decode(t *testing.T, recs [][]byte) []rec {
	t.Helper()
	out := make([]rec, len(recs))
	for i, b := range recs {
		out[i] = rec{i: i, raw: b}
		if audit.IsCheckpoint(b) {
			p, err := audit.ParseCheckpoint(b)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			out[i].cp = p
			continue
		}
		var ev audit.Event
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		out[i].ev = &ev
	}
	return out
}

// place is where a violation is reported.
type place struct {
	turn       string
	checkpoint bool
	seq        uint64
}

func (p place) String() string {
	if p.checkpoint {
		return fmt.Sprintf("checkpoint %d", p.seq)
	}
	return fmt.Sprintf("%s@%d", p.turn, p.seq)
}

func places(rep audit.Report) []place {
	var out []place
	for _, v := range rep.Violations {
		out = append(out, place{turn: v.TurnID, checkpoint: v.Checkpoint, seq: v.Seq})
	}
	return out
}

func verify(t *testing.T, recs [][]byte, opts audit.VerifyOptions, openOK bool) audit.Report {
	t.Helper()
	v, err := audit.NewVerifierWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		v.Add(r)
	}
	return v.Finish(openOK)
}

func without(recs [][]byte, drop ...int) [][]byte {
	var out [][]byte
	for i, r := range recs {
		if !slices.Contains(drop, i) {
			out = append(out, r)
		}
	}
	return out
}

func inserted(recs [][]byte, at int, r []byte) [][]byte {
	return slices.Insert(slices.Clone(recs), at, r)
}

func replaced(recs [][]byte, at int, r []byte) [][]byte {
	out := slices.Clone(recs)
	out[at] = r
	return out
}

// mustReplace replaces the first occurrence of old in b, which must occur.
func mustReplace(t *testing.T, b []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%q not in %s", old, b)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

// expect checks that the turn violations are exactly want (in any order),
// and that the only other violations are checkpoint ones in allowed.
func expect(t *testing.T, name string, rep audit.Report, want []place, allowedCheckpoint bool) {
	t.Helper()
	var turns []place
	for _, p := range places(rep) {
		if p.checkpoint {
			if !allowedCheckpoint {
				t.Errorf("%s: unexpected %v; violations %v", name, p, rep.Violations)
			}
			continue
		}
		turns = append(turns, p)
	}
	sortPlaces := func(ps []place) {
		slices.SortFunc(ps, func(a, b place) int { return strings.Compare(a.String(), b.String()) })
	}
	sortPlaces(turns)
	want = slices.Clone(want)
	sortPlaces(want)
	if !slices.Equal(turns, want) {
		t.Errorf("%s: detected at %v, want %v; violations %v", name, turns, want, rep.Violations)
	}
}

func TestRealTrailVerifiesClean(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	types := map[audit.Type]int{}
	checkpoints := 0
	for _, r := range rs {
		if r.cp != nil {
			checkpoints++
			continue
		}
		types[r.ev.Type]++
	}
	for _, ty := range audit.Types() {
		if types[ty] == 0 {
			t.Errorf("the trail has no %s event", ty)
		}
	}
	if checkpoints != 3 {
		t.Fatalf("%d checkpoints, want 3", checkpoints)
	}
	for name, opts := range map[string]audit.VerifyOptions{
		"embedded": {},
		"trusted":  {Trusted: []ed25519.PublicKey{tr.key}},
		"anchored": {Trusted: []ed25519.PublicKey{tr.key}, Anchors: [][]byte{tr.anchor}},
	} {
		rep := verify(t, tr.recs, opts, false)
		if !rep.OK() {
			t.Fatalf("%s: violations %v", name, rep.Violations)
		}
		events := len(tr.recs) - checkpoints
		if rep.Events != events || rep.Checkpoints != 3 || rep.Closed != rep.Turns || rep.Covered != uint64(events) {
			t.Fatalf("%s: report %+v; %d events", name, rep, events)
		}
		if len(rep.Heads) != 1 || rep.Heads[0].Seq != 2 || rep.Heads[0].Events != uint64(events) {
			t.Fatalf("%s: heads %+v", name, rep.Heads)
		}
	}
	if rep := audit.Verify(tr.recs, false); rep.Trust != audit.TrustEmbedded || !rep.OK() {
		t.Fatalf("Verify: %+v", rep)
	}
	// Records of different turns may interleave in any order: swap two
	// neighbours of different turns.
	a, b := -1, -1
	for i := 0; i+1 < len(rs) && a < 0; i++ {
		if rs[i].ev != nil && rs[i+1].ev != nil && rs[i].ev.TurnID != rs[i+1].ev.TurnID {
			a, b = i, i+1
		}
	}
	if a < 0 {
		t.Fatal("no two neighbouring events of different turns")
	}
	swapped := slices.Clone(tr.recs)
	swapped[a], swapped[b] = swapped[b], swapped[a]
	if rep := verify(t, swapped, audit.VerifyOptions{}, false); !rep.OK() {
		t.Fatalf("records of two turns swapped: %v", rep.Violations)
	}
	// A checkpoint stored before the events it attests (out of order) is
	// still satisfied by them: move the final one to just after the one
	// before it.
	last, prevCP := len(rs)-1, len(rs)-2
	for rs[prevCP].cp == nil {
		prevCP--
	}
	early := inserted(without(tr.recs, last), prevCP+1, tr.recs[last])
	if rep := verify(t, early, audit.VerifyOptions{}, false); !rep.OK() {
		t.Fatalf("final checkpoint moved first: %v", rep.Violations)
	}
}

// Every way to tamper with every event of a real trail is detected, at the
// tampered turn and the first sequence number that cannot be trusted.
func TestTamperingDetectedAtItsPlace(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	lastSeq := map[string]uint64{}
	for _, r := range rs {
		if r.ev != nil {
			lastSeq[r.ev.TurnID] = max(lastSeq[r.ev.TurnID], r.ev.Seq)
		}
	}
	trusted := audit.VerifyOptions{Trusted: []ed25519.PublicKey{tr.key}}
	cases := 0
	check := func(name string, recs [][]byte, want []place, countViolation bool) {
		t.Helper()
		cases++
		// Whether or not the verifier may accept open turns, and whatever
		// keys it trusts, the place is the same.
		expect(t, name+" (live, embedded keys)", verify(t, recs, audit.VerifyOptions{}, true), want, countViolation)
		expect(t, name+" (closed, trusted keys)", verify(t, recs, trusted, false), want, countViolation)
	}

	for _, r := range rs {
		if r.ev == nil {
			continue
		}
		ev := r.ev
		at := place{turn: ev.TurnID, seq: ev.Seq}
		id := fmt.Sprintf("%s seq %d (%s)", ev.TurnID, ev.Seq, ev.Type)

		// Delete the event.
		check("delete "+id, without(tr.recs, r.i), []place{at}, true)

		// Modify a field: its id, and a field that matters.
		check("modify id of "+id, replaced(tr.recs, r.i, mustReplace(t, r.raw, `"id":"`, `"id":"x`)), []place{at}, false)
		check("modify principal of "+id, replaced(tr.recs, r.i, mustReplace(t, r.raw, `"principal":"`, `"principal":"eve-`)), []place{at}, false)
		if ev.Seq > 0 {
			check("modify prev_hash of "+id, replaced(tr.recs, r.i, mustReplace(t, r.raw, `"prev_hash":"`, `"prev_hash":"0`)), []place{at}, false)
		}
		if ev.Type == audit.ToolInvoked && ev.Call.Decision == "deny" {
			check("turn a refusal into an allowance at "+id, replaced(tr.recs, r.i, mustReplace(t, r.raw, `"decision":"deny"`, `"decision":"allow"`)), []place{at}, false)
		}

		// Insert a forged event before it: a copy with another id links
		// correctly to the previous event and takes its seq.
		forged := mustReplace(t, r.raw, `"id":"`, `"id":"forged-`)
		check("insert forged before "+id, inserted(tr.recs, r.i, forged), []place{at}, false)
		// A forged event that links to nothing, in the same place.
		if ev.Seq > 0 {
			loose := mustReplace(t, forged, `"prev_hash":"`, `"prev_hash":"f`)
			check("insert unlinked forged before "+id, inserted(tr.recs, r.i, loose), []place{at}, false)
		}

		// Change a catalogHash.
		if ev.CatalogHash != "" {
			check("change catalogHash of "+id, replaced(tr.recs, r.i, mustReplace(t, r.raw, `"catalog_hash":"`+ev.CatalogHash, `"catalog_hash":"`+strings.Repeat("0", 64))), []place{at}, false)
		}

		// Truncate the turn's tail from here.
		var drop []int
		for _, o := range rs {
			if o.ev != nil && o.ev.TurnID == ev.TurnID && o.ev.Seq >= ev.Seq {
				drop = append(drop, o.i)
			}
		}
		check("truncate from "+id, without(tr.recs, drop...), []place{at}, true)

		// Reorder: swap it with the turn's next event.
		if ev.Seq < lastSeq[ev.TurnID] {
			for _, o := range rs[r.i+1:] {
				if o.ev != nil && o.ev.TurnID == ev.TurnID {
					swapped := slices.Clone(tr.recs)
					swapped[r.i], swapped[o.i] = swapped[o.i], swapped[r.i]
					check("swap "+id+" with the next", swapped, []place{at}, false)
					break
				}
			}
		}

		// A forged event appended after turn.closed.
		if ev.Type == audit.TurnClosed {
			next := *ev
			next.ID, next.Seq, next.PrevHash = ev.ID+"-forged", ev.Seq+1, audit.HashData(r.raw)
			next.Type, next.Close = audit.ToolInvoked, nil
			next.Call = &audit.Call{ID: "c99", Alias: "notes_put", Decision: "allow"}
			fr, err := audit.Encode(&next)
			if err != nil {
				t.Fatal(err)
			}
			check("append after "+id, inserted(tr.recs, r.i+1, fr.Data), []place{{turn: ev.TurnID, seq: ev.Seq + 1}}, false)
		}
	}
	t.Logf("%d tamperings of %d records, each verified 2 ways", cases, len(tr.recs))
}

// A whole turn rewritten consistently (another catalogue, every hash
// recomputed) has valid links; the checkpoints attest another chain.
func TestRewrittenChainDetectedByCheckpoint(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	turn := rs[0].ev.TurnID
	recs := slices.Clone(tr.recs)
	var last uint64
	prev := ""
	for _, r := range rs {
		if r.ev == nil || r.ev.TurnID != turn {
			continue
		}
		ev := *r.ev
		ev.PrevHash = prev
		if ev.Type == audit.ToolInvoked && ev.Call.Decision == "deny" {
			c := *ev.Call
			c.Decision, c.Reason = "allow", ""
			ev.Call = &c
		}
		out, err := audit.Encode(&ev)
		if err != nil {
			t.Fatal(err)
		}
		recs[r.i], prev, last = out.Data, out.Hash, ev.Seq
	}
	rep := verify(t, recs, audit.VerifyOptions{}, true)
	// Without the checkpoint, the rewrite is internally consistent except
	// for the allowed calls that never completed.
	if len(rep.Violations) != 1 || rep.Violations[0].TurnID != turn || rep.Violations[0].Seq != last {
		t.Fatalf("violations %v", rep.Violations)
	}
	if !strings.Contains(rep.Violations[0].Reason, "never completed") && !strings.Contains(rep.Violations[0].Reason, "attests") {
		t.Fatalf("reason: %s", rep.Violations[0].Reason)
	}
	// Let the rewrite complete its forged calls too: only the checkpoint
	// tells. Rewriting a denied call the same way keeps the chain valid.
	recs = slices.Clone(tr.recs)
	prev = ""
	for _, r := range rs {
		if r.ev == nil || r.ev.TurnID != turn {
			continue
		}
		ev := *r.ev
		ev.PrevHash = prev
		ev.Principal = "mallory"
		out, err := audit.Encode(&ev)
		if err != nil {
			t.Fatal(err)
		}
		recs[r.i], prev = out.Data, out.Hash
	}
	rep = verify(t, recs, audit.VerifyOptions{}, true)
	if len(rep.Violations) != 1 || rep.Violations[0].TurnID != turn || rep.Violations[0].Seq != last ||
		!strings.Contains(rep.Violations[0].Reason, "checkpoint 0 of node node-1 attests") {
		t.Fatalf("violations %v", rep.Violations)
	}
}

func TestCheckpointTamperingDetected(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	var cps []rec
	for _, r := range rs {
		if r.cp != nil {
			cps = append(cps, r)
		}
	}
	trusted := audit.VerifyOptions{Trusted: []ed25519.PublicKey{tr.key}}
	chainAt := func(seq uint64) []place { return []place{{checkpoint: true, seq: seq}} }
	onlyChain := func(name string, rep audit.Report, want []place) {
		t.Helper()
		got := places(rep)
		if !slices.Equal(got, want) {
			t.Errorf("%s: detected at %v, want %v; %v", name, got, want, rep.Violations)
		}
	}

	// Delete the middle checkpoint: the chain breaks at it.
	onlyChain("delete checkpoint 1", verify(t, without(tr.recs, cps[1].i), trusted, true), chainAt(1))
	// Alter a checkpoint's content: its signature fails, and the genuine
	// checkpoint 0 is then missing from the chain.
	altered := mustReplace(t, cps[0].raw, `"events":`, `"events":1`)
	rep := verify(t, replaced(tr.recs, cps[0].i, altered), trusted, true)
	onlyChain("altered checkpoint", rep, []place{chainAt(0)[0], chainAt(0)[0]})
	if !strings.Contains(rep.Violations[0].Reason, "bad signature") {
		t.Errorf("altered checkpoint: %v", rep.Violations)
	}
	// Sign a forged checkpoint with another key: untrusted with --trust;
	// without, the node's key changed.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged := cps[1].cp.Checkpoint
	forged.Turns = nil
	fdata, err := audit.SignCheckpoint(&forged, other)
	if err != nil {
		t.Fatal(err)
	}
	swapped := replaced(tr.recs, cps[1].i, fdata)
	for name, opts := range map[string]audit.VerifyOptions{"trusted": trusted, "embedded": {}} {
		rep := verify(t, swapped, opts, true)
		if got := places(rep); len(got) < 1 || got[0] != chainAt(1)[0] {
			t.Errorf("forged checkpoint (%s): %v", name, rep.Violations)
		}
	}
	// A checkpoint signed by a trusted key is refused when it is not the
	// one trusted.
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	rep = verify(t, tr.recs, audit.VerifyOptions{Trusted: []ed25519.PublicKey{stranger.Public().(ed25519.PublicKey)}}, true)
	if len(rep.Violations) != 3 || !strings.Contains(rep.Violations[0].Reason, "not trusted") {
		t.Errorf("untrusted keys: %v", rep.Violations)
	}
	// A duplicated checkpoint record (a retried publish) is harmless.
	if rep := verify(t, inserted(tr.recs, cps[1].i+1, cps[1].raw), trusted, false); !rep.OK() {
		t.Errorf("duplicated checkpoint: %v", rep.Violations)
	}
}

// Cutting the stream's tail — the last events and the final checkpoint —
// leaves a trail that is consistent in itself; an anchor (the node's state
// file) or requiring closed turns shows it.
func TestTruncatedStreamTail(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	cut := len(rs) - 1
	for cut > 0 && rs[cut-1].cp == nil {
		cut-- // back to just after checkpoint 1
	}
	// Cut halfway through the events after checkpoint 1.
	cut += (len(rs) - cut) / 2
	kept := tr.recs[:cut]
	want := map[string]uint64{}
	for _, r := range rs[cut:] {
		if r.ev != nil {
			if s, ok := want[r.ev.TurnID]; !ok || r.ev.Seq < s {
				want[r.ev.TurnID] = r.ev.Seq
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range rs[:cut] {
		if r.ev != nil {
			seen[r.ev.TurnID] = true
		}
	}
	// Every cut turn, at its first missing seq; visible: those the kept
	// trail still shows.
	var wantPlaces, visible []place
	for turn, seq := range want {
		wantPlaces = append(wantPlaces, place{turn: turn, seq: seq})
		if seen[turn] {
			visible = append(visible, place{turn: turn, seq: seq})
		}
	}
	if len(visible) == len(wantPlaces) {
		t.Fatal("the cut removes no whole turn; the test would not show the anchor's value")
	}

	// A live reader, accepting open turns, with no anchor cannot tell.
	if rep := verify(t, kept, audit.VerifyOptions{}, true); !rep.OK() {
		t.Fatalf("without an anchor: %v", rep.Violations)
	}
	// Requiring closed turns names every cut turn the trail still shows,
	// where it was cut; the anchor names every cut turn, even on a live
	// reading.
	expect(t, "closed turns required", verify(t, kept, audit.VerifyOptions{}, false), visible, false)
	rep := verify(t, kept, audit.VerifyOptions{Trusted: []ed25519.PublicKey{tr.key}, Anchors: [][]byte{tr.anchor}}, true)
	expect(t, "anchored", rep, wantPlaces, true)
	if got := places(rep); len(got) == 0 || !slices.Contains(got, place{checkpoint: true, seq: 2}) {
		t.Fatalf("anchored: the checkpoint chain's cut is not reported: %v", rep.Violations)
	}
	// An anchor must be genuine.
	if _, err := audit.NewVerifierWith(audit.VerifyOptions{Anchors: [][]byte{mustReplace(t, tr.anchor, `"events":`, `"events":9`)}}); err == nil {
		t.Fatal("an altered anchor was accepted")
	}
}

// The restricted verifier (a trail read with --tenant or --turn) does not
// expect other turns.
func TestRestrictedVerification(t *testing.T) {
	tr := theTrail(t)
	rs := decode(t, tr.recs)
	turn := rs[0].ev.TurnID
	var only [][]byte
	for _, r := range rs {
		if r.cp != nil || r.ev.TurnID == turn {
			only = append(only, r.raw)
		}
	}
	if rep := verify(t, only, audit.VerifyOptions{TurnID: turn}, false); !rep.OK() || rep.Turns != 1 {
		t.Fatalf("one turn: %+v", rep)
	}
	if rep := verify(t, only, audit.VerifyOptions{}, false); rep.OK() {
		t.Fatal("an unrestricted verifier accepted a trail missing attested turns")
	}
	if rep := verify(t, tr.recs, audit.VerifyOptions{Tenant: "acme"}, false); !rep.OK() {
		t.Fatalf("tenant: %v", rep.Violations)
	}
	if rep := verify(t, tr.recs, audit.VerifyOptions{Tenant: "globex"}, false); !rep.OK() || rep.Events != 0 {
		t.Fatalf("another tenant: %+v", rep)
	}
}

// Every record of a real trail validates against its type's JSON Schema
// in docs/schemas, and the schemas name every field the event types have.
func TestSchemasDescribeRealRecords(t *testing.T) {
	tr := theTrail(t)
	dir := "../docs/schemas"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	schemas := map[string]*jsonschema.Schema{}
	fields := map[string]bool{}
	names := append([]string{string(audit.CheckpointType)}, func() (s []string) {
		for _, ty := range audit.Types() {
			s = append(s, string(ty))
		}
		return
	}()...)
	for _, name := range names {
		path, err := filepath.Abs(filepath.Join(dir, name+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("schema of %s: %v", name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("schema %s: %v", path, err)
		}
		collectProperties(doc, fields)
		if err := c.AddResource(path, doc); err != nil {
			t.Fatal(err)
		}
		if schemas[name], err = c.Compile(path); err != nil {
			t.Fatalf("schema %s: %v", path, err)
		}
	}
	seen := map[string]int{}
	for i, raw := range tr.recs {
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			t.Fatal(err)
		}
		s := schemas[probe.Type]
		if s == nil {
			t.Fatalf("record %d: no schema for type %q", i, probe.Type)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(inst); err != nil {
			t.Errorf("record %d (%s) does not match its schema: %v\n%s", i, probe.Type, err, raw)
		}
		seen[probe.Type]++
	}
	for _, name := range names {
		if seen[name] == 0 {
			t.Errorf("no real %s record validated", name)
		}
	}
	// Fields the Go types can carry that no schema names: a field was
	// added without documenting it.
	for _, typ := range []any{audit.Event{}, audit.Catalog{}, audit.Tool{}, audit.ProviderStatus{}, audit.Call{}, audit.Close{}, audit.Checkpoint{}, audit.TurnHead{}} {
		rt := reflect.TypeOf(typ)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name != "" && !fields[name] {
				t.Errorf("%s.%s (%q) is in no schema under docs/schemas", rt.Name(), rt.Field(i).Name, name)
			}
		}
	}
	// A record with a field its schema does not allow is refused (the
	// schemas are closed, so they cannot silently drift).
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(strings.Replace(string(tr.recs[0]), `{"id"`, `{"extra":1,"id"`, 1)))
	if err := schemas[string(audit.TurnOpened)].Validate(inst); err == nil {
		t.Error("turn.opened schema accepts an unknown field")
	}
}

func collectProperties(doc any, into map[string]bool) {
	switch d := doc.(type) {
	case map[string]any:
		if props, ok := d["properties"].(map[string]any); ok {
			for k := range props {
				into[k] = true
			}
		}
		for _, v := range d {
			collectProperties(v, into)
		}
	case []any:
		for _, v := range d {
			collectProperties(v, into)
		}
	}
}

// The verifier reads what tail and export write: a JSON-lines export of
// the real trail verifies like the stream.
func TestVerifyJSONLinesExport(t *testing.T) {
	tr := theTrail(t)
	var buf bytes.Buffer
	for _, r := range tr.recs {
		buf.Write(r)
		buf.WriteByte('\n')
	}
	v := audit.NewVerifier()
	dec := json.NewDecoder(&buf)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		v.Add(raw)
	}
	if rep := v.Finish(false); !rep.OK() || rep.Checkpoints != 3 {
		t.Fatalf("%+v", rep)
	}
}

// A node started from the sample cluster.yaml signs checkpoints with the
// key in its data directory, publishes a final one when it stops,
// continues its chain when restarted, and its trail verifies against that
// key and its state file.
func TestNodeCheckpoints(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("port: 4222", "port: 0", "data_dir: ./data", "data_dir: "+dir, "http: 127.0.0.1:8321", "http: off").Replace(string(b))
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 30*time.Second)
	runTurn := func() [][]byte {
		n, err := node.Start(ctx, cfg, node.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		k := n.Kernel()
		who := authority.AccessContext{Tenant: "acme", Principal: "ada", EnabledNamespaces: []string{"text"}}
		o, err := k.Open(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
		if _, err := k.Invoke(ctx, who, "text_stats", []byte(`{"text":"a b"}`)); err != nil {
			t.Fatal(err)
		}
		if err := k.Close(ctx, who, o.LeaseID); err != nil {
			t.Fatal(err)
		}
		if err := n.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		// Read the stream back through a node that writes nothing.
		n2, err := node.Start(ctx, cfg, node.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer n2.Shutdown(context.Background())
		var recs [][]byte
		if err := auditstore.ReadAll(ctx, n2.Conn(), auditstore.TailOptions{}, func(d []byte, _ *audit.Event) error {
			recs = append(recs, d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return recs
	}

	first := runTurn()
	keyFile := auditstore.DefaultKeyFile(dir)
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	key, err := audit.ReadPrivateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	if !audit.IsCheckpoint(first[len(first)-1]) {
		t.Fatal("the stream does not end with the node's final checkpoint")
	}
	second := runTurn()
	anchor, err := os.ReadFile(auditstore.DefaultStateFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	rep := verify(t, second, audit.VerifyOptions{Trusted: trusted, Anchors: [][]byte{anchor}}, false)
	if !rep.OK() || rep.Checkpoints != 2 || rep.Closed != 2 || rep.Covered != uint64(rep.Events) || rep.Heads[0].Seq != 1 {
		t.Fatalf("%+v", rep)
	}
}
