package audit

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
)

// These tests hold the verifier to "--trust means every event is
// attested": the forgeries are built as someone who can write the stream
// (but not sign as a node) would build them — well-formed, re-chained
// turns and chain extensions that link to genuine events — and placed
// among genuinely signed checkpoints.

// attestTrail is node-1's genuine trail: turn a, checkpoint 0 (a), turn b
// and the start of turn c, checkpoint 1 (b; c's first events were stored
// before it but noted after its snapshot), the rest of c, checkpoint 2 (c).
// cps holds the three checkpoints' positions in recs.
type attestTrail struct {
	key  ed25519.PrivateKey
	recs [][]byte
	cps  []int
}

func newAttestTrail(t *testing.T) attestTrail {
	t.Helper()
	key := cpKey(t)
	a, ar := rechain(t, rcTurn("node-1", "acme", "a"))
	b, br := rechain(t, rcTurn("node-1", "acme", "b"))
	c, cr := rechain(t, rcTurn("node-1", "acme", "c"))
	cp0 := rcCheckpoint(t, key, "node-1", 0, nil, 7, head("acme", "a", ar[6], true))
	cp1 := rcCheckpoint(t, key, "node-1", 1, cp0, 14, head("acme", "b", br[6], true))
	cp2 := rcCheckpoint(t, key, "node-1", 2, cp1, 21, head("acme", "c", cr[6], true))
	var tr attestTrail
	tr.key = key
	add := func(rs ...[]byte) { tr.recs = append(tr.recs, rs...) }
	addCP := func(cp []byte) { tr.cps = append(tr.cps, len(tr.recs)); add(cp) }
	add(a...)
	addCP(cp0)
	add(b...)
	add(c[:3]...)
	addCP(cp1)
	add(c[3:]...)
	addCP(cp2)
	return tr
}

func (tr attestTrail) trusted(all bool) VerifyOptions {
	return VerifyOptions{Trusted: []ed25519.PublicKey{tr.key.Public().(ed25519.PublicKey)}, AllAttested: all}
}

// The genuine trail is attested throughout, including the events stored
// before checkpoint 1 that only checkpoint 2 attests.
func TestGenuineTrailIsAttested(t *testing.T) {
	tr := newAttestTrail(t)
	for _, all := range []bool{false, true} {
		rep := rcVerify(t, tr.recs, tr.trusted(all), false)
		if !rep.OK() || rep.Trust != TrustKeys || rep.Unattested != 0 || rep.Covered != 21 || rep.UnattestedNodes != nil {
			t.Fatalf("AllAttested %v: %+v", all, rep)
		}
	}
}

// A re-chained forged turn of node-1 (every link valid, turn id unused)
// inserted among node-1's trusted checkpoints is never "trusted": before
// the last two checkpoint groups it is a violation as soon as the group
// after next begins; before the last checkpoints it is unattested (and a
// violation with AllAttested).
func TestForgedTurnBeforeATrustedCheckpoint(t *testing.T) {
	tr := newAttestTrail(t)
	forged, _ := rechain(t, rcTurn("node-1", "acme", "f"))
	at := func(i int) [][]byte { return slices.Concat(tr.recs[:i], forged, tr.recs[i:]) }

	// Before checkpoint 0: checkpoints 0 and 1 had to attest it; found
	// when checkpoint 2 arrives, even on a live stream.
	rep := rcVerify(t, at(tr.cps[0]), tr.trusted(false), true)
	wantOne(t, "before checkpoint 0", rep, "f", 0, "no checkpoint attests seq 0..6: seq 0 was stored before checkpoint 0 of node node-1 and is in none of its checkpoints up to 1: inserted")
	if v := rep.Violations; len(v) == 1 && v[0].Index != tr.cps[2]+len(forged) {
		t.Errorf("found at record %d, want checkpoint 2 at %d", v[0].Index, tr.cps[2]+len(forged))
	}

	// Before the last checkpoints the next group may still attest it:
	// unattested, not trusted; with AllAttested, a violation.
	for _, cp := range tr.cps[1:] {
		trail := at(cp)
		rep := rcVerify(t, trail, tr.trusted(false), true)
		want := []NodeUnattested{{Node: "node-1", Events: 7, Turns: 1, Checkpoints: true}}
		if !rep.OK() || rep.Trust != TrustUnattested || rep.Unattested != 7 || !slices.Equal(rep.UnattestedNodes, want) || rep.Covered != 21 {
			t.Errorf("before record %d (a checkpoint): %+v", cp, rep)
		}
		wantOne(t, "before the last checkpoints, all attested", rcVerify(t, trail, tr.trusted(true), false), "f", 0,
			"no checkpoint attests seq 0..6 (the trail's last checkpoint of node node-1 is 2): inserted")
	}
}

// A node id with events and no checkpoint at all is unattested under
// --trust (never trusted), and a violation with AllAttested.
func TestNodeWithoutCheckpointsIsNotTrusted(t *testing.T) {
	tr := newAttestTrail(t)
	forged, _ := rechain(t, rcTurn("node-9", "acme", "f"))
	trail := slices.Concat(forged, tr.recs)
	rep := rcVerify(t, trail, tr.trusted(false), false)
	want := []NodeUnattested{{Node: "node-9", Events: 7, Turns: 1}}
	if !rep.OK() || rep.Trust != TrustUnattested || rep.Unattested != 7 || !slices.Equal(rep.UnattestedNodes, want) {
		t.Fatalf("a node without checkpoints: %+v", rep)
	}
	rep = rcVerify(t, trail, tr.trusted(true), false)
	wantOne(t, "all attested", rep, "f", 0, "no checkpoint attests seq 0..6 (the trail holds no checkpoint of node node-9)")
	if rep.Violations[0].Node != "node-9" {
		t.Errorf("violation of node %q", rep.Violations[0].Node)
	}
	// Embedded keys do not make it attested either.
	if rep := rcVerify(t, trail, VerifyOptions{}, false); !rep.OK() || rep.Trust != TrustEmbedded || rep.Unattested != 7 {
		t.Fatalf("embedded: %+v", rep)
	}
}

// More events of a node than its checkpoints attest: a forger extends an
// open turn past its attested head (the extension links to the genuine
// head, so the chain holds). Stored before checkpoint 1, the extension
// had to be attested by checkpoint 2 at the latest: a violation when
// checkpoint 3 arrives. After the last checkpoint it is unattested.
func TestMoreEventsThanAttested(t *testing.T) {
	key := cpKey(t)
	// The forger's b is the genuine b continued: its first four records
	// are the genuine ones, byte for byte.
	b, br := rechain(t, rcTurn("node-1", "acme", "b"))
	genuineB := b[:4]
	a, ar := rechain(t, rcTurn("node-1", "acme", "a"))
	c, cr := rechain(t, rcTurn("node-1", "acme", "c"))
	d, dr := rechain(t, rcTurn("node-1", "acme", "d"))
	e, er := rechain(t, rcTurn("node-1", "acme", "e"))
	cp0 := rcCheckpoint(t, key, "node-1", 0, nil, 11, head("acme", "a", ar[6], true), head("acme", "b", br[3], false))
	cp1 := rcCheckpoint(t, key, "node-1", 1, cp0, 18, head("acme", "c", cr[6], true))
	cp2 := rcCheckpoint(t, key, "node-1", 2, cp1, 25, head("acme", "d", dr[6], true))
	cp3 := rcCheckpoint(t, key, "node-1", 3, cp2, 32, head("acme", "e", er[6], true))
	opts := VerifyOptions{Trusted: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}

	genuine := slices.Concat(a, genuineB, [][]byte{cp0}, c, [][]byte{cp1}, d, [][]byte{cp2}, e, [][]byte{cp3})
	if rep := rcVerify(t, genuine, opts, true); !rep.OK() || rep.Trust != TrustKeys || rep.Unattested != 0 {
		t.Fatalf("genuine: %+v", rep)
	}

	extended := slices.Concat(a, genuineB, [][]byte{cp0}, b[4:], c, [][]byte{cp1}, d, [][]byte{cp2}, e, [][]byte{cp3})
	rep := rcVerify(t, extended, opts, true)
	wantOne(t, "extension before checkpoint 1", rep, "b", 4, "no checkpoint attests seq 4..6: seq 4 was stored before checkpoint 1 of node node-1 and is in none of its checkpoints up to 2: inserted")
	// The old count check only caught fewer events than attested.
	if !strings.Contains(rep.Violations[0].String(), "turn b seq 4") {
		t.Errorf("violation %s", rep.Violations[0])
	}

	tail := slices.Concat(genuine, b[4:])
	rep = rcVerify(t, tail, opts, true)
	if !rep.OK() || rep.Trust != TrustUnattested || rep.Unattested != 3 || rep.Events != 35 {
		t.Fatalf("extension after the last checkpoint: %+v", rep)
	}
	opts.AllAttested = true
	wantOne(t, "extension after the last checkpoint, all attested", rcVerify(t, tail, opts, false), "b", 4,
		"no checkpoint attests seq 4..6 (the trail's last checkpoint of node node-1 is 3)")
}
