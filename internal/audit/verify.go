package audit

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Violation is one thing wrong with a trail: the turn, the first bad
// sequence number, and what is wrong.
type Violation struct {
	TurnID string `json:"turn_id"`
	Seq    uint64 `json:"seq"`
	Index  int    `json:"index"` // position in the input
	Reason string `json:"reason"`
}

func (v Violation) String() string {
	return fmt.Sprintf("turn %s seq %d (record %d): %s", v.TurnID, v.Seq, v.Index, v.Reason)
}

// Report is the outcome of a verification.
type Report struct {
	Events     int
	Turns      int
	Closed     int
	Violations []Violation
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

type turnState struct {
	next       uint64
	prevHash   string
	catalog    string
	tools      map[[3]string]bool // provider, name, revision
	allowed    map[string]uint64  // call id -> seq of tool.invoked, until completed
	closed     bool
	violations int
}

// Verifier checks a trail record by record, in stream order; turns may
// interleave. Feed it with Add, then call Finish. It checks:
//   - each record's bytes decode to an event whose turn chain continues:
//     seq is the next expected (from 0) and prev_hash is the hash of the
//     turn's previous record's bytes;
//   - every tool.catalog.listed, tool.invoked and tool.completed carries
//     the catalogHash of its turn's tool.catalog.resolved, and every
//     tool.invoked names a tool identity and revision in that catalogue;
//   - every allowed tool.invoked has its tool.completed, and nothing
//     follows turn.closed.
//
// The first violation per turn is reported; later records of a broken
// turn are not judged (one break would otherwise cascade).
type Verifier struct {
	turns  map[string]*turnState
	report Report
	index  int
}

// NewVerifier returns an empty Verifier.
func NewVerifier() *Verifier { return &Verifier{turns: map[string]*turnState{}} }

func (v *Verifier) fail(turnID string, ts *turnState, seq uint64, format string, args ...any) {
	if ts != nil {
		ts.violations++
		if ts.violations > 1 {
			return
		}
	}
	v.report.Violations = append(v.report.Violations, Violation{TurnID: turnID, Seq: seq, Index: v.index, Reason: fmt.Sprintf(format, args...)})
}

// Add verifies the next record's bytes.
func (v *Verifier) Add(data []byte) {
	defer func() { v.index++ }()
	v.report.Events++
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		v.fail("?", nil, 0, "undecodable event: %v", err)
		return
	}
	ts := v.turns[ev.TurnID]
	if ts == nil {
		ts = &turnState{allowed: map[string]uint64{}}
		v.turns[ev.TurnID] = ts
	}
	if ts.violations > 0 {
		return
	}
	switch {
	case ts.closed:
		v.fail(ev.TurnID, ts, ev.Seq, "%s after turn.closed", ev.Type)
		return
	case ev.Seq != ts.next:
		v.fail(ev.TurnID, ts, ts.next, "expected seq %d, found %d (%s): events missing, reordered or inserted", ts.next, ev.Seq, ev.Type)
		return
	case ev.PrevHash != ts.prevHash:
		v.fail(ev.TurnID, ts, ev.Seq, "prev_hash does not match the previous event: the previous event was modified or replaced")
		return
	case ev.Seq == 0 && ev.Type != TurnOpened:
		v.fail(ev.TurnID, ts, ev.Seq, "chain starts with %s, not turn.opened", ev.Type)
		return
	}
	ts.next++
	ts.prevHash = HashData(data)
	v.check(&ev, ts)
}

func (v *Verifier) check(ev *Event, ts *turnState) {
	join := func() bool {
		if ts.catalog == "" {
			v.fail(ev.TurnID, ts, ev.Seq, "%s before any resolved catalogue", ev.Type)
			return false
		}
		if ev.CatalogHash != ts.catalog {
			v.fail(ev.TurnID, ts, ev.Seq, "%s carries catalogHash %q, the turn resolved %q", ev.Type, short(ev.CatalogHash), short(ts.catalog))
			return false
		}
		return true
	}
	switch ev.Type {
	case CatalogResolved:
		if ev.CatalogHash == "" {
			return // a failed resolution holds nothing
		}
		if ts.catalog != "" && ts.catalog != ev.CatalogHash {
			v.fail(ev.TurnID, ts, ev.Seq, "catalogue resolved again with a different catalogHash")
			return
		}
		ts.catalog = ev.CatalogHash
		ts.tools = map[[3]string]bool{}
		if ev.Catalog != nil {
			for _, t := range ev.Catalog.Tools {
				ts.tools[[3]string{t.Provider, t.Name, t.Revision}] = true
			}
		}
	case CatalogListed:
		join()
	case ToolInvoked:
		if !join() || ev.Call == nil {
			return
		}
		if ev.Call.Provider != "" && !ts.tools[[3]string{ev.Call.Provider, ev.Call.Name, ev.Call.Revision}] {
			v.fail(ev.TurnID, ts, ev.Seq, "tool.invoked names %s/%s@%s, which is not in the resolved catalogue", ev.Call.Provider, ev.Call.Name, short(ev.Call.Revision))
			return
		}
		if ev.Call.Decision == "allow" {
			ts.allowed[ev.Call.ID] = ev.Seq
		}
	case ToolCompleted:
		if !join() || ev.Call == nil {
			return
		}
		if _, ok := ts.allowed[ev.Call.ID]; !ok {
			v.fail(ev.TurnID, ts, ev.Seq, "tool.completed for call %s, which was not allowed", ev.Call.ID)
			return
		}
		delete(ts.allowed, ev.Call.ID)
	case TurnClosed:
		ts.closed = true
		if len(ts.allowed) > 0 {
			v.fail(ev.TurnID, ts, ev.Seq, "turn closed with %d allowed calls never completed", len(ts.allowed))
		}
	}
}

// Finish returns the report. openOK says whether turns still open (no
// turn.closed yet) are acceptable — true when reading a live stream.
func (v *Verifier) Finish(openOK bool) Report {
	r := v.report
	r.Turns = len(v.turns)
	ids := make([]string, 0, len(v.turns))
	for id := range v.turns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ts := v.turns[id]
		if ts.closed {
			r.Closed++
			continue
		}
		if !openOK && ts.violations == 0 {
			r.Violations = append(r.Violations, Violation{TurnID: id, Seq: ts.next, Index: -1, Reason: "trail ends before turn.closed: the tail is missing or the turn is still open"})
		}
	}
	return r
}

// Verify checks a whole trail.
func Verify(records [][]byte, openOK bool) Report {
	v := NewVerifier()
	for _, r := range records {
		v.Add(r)
	}
	return v.Finish(openOK)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
