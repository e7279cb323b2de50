package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Violation is one thing wrong with a trail: the turn, the first bad
// sequence number, and what is wrong. A violation of a node's checkpoint
// chain names the node and the checkpoint's sequence number instead of a
// turn.
type Violation struct {
	TurnID string `json:"turn_id,omitempty"`
	// Node is the node that wrote the turn, or whose checkpoint chain is
	// broken.
	Node string `json:"node,omitempty"`
	// Checkpoint is true when Seq is a checkpoint's sequence number.
	Checkpoint bool   `json:"checkpoint,omitempty"`
	Seq        uint64 `json:"seq"`
	// Index is the record's position in the input, -1 when the violation
	// was found at the end (something missing).
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

func (v Violation) String() string {
	where := "turn " + v.TurnID
	if v.Checkpoint {
		where = "checkpoint chain of node " + v.Node
	}
	at := fmt.Sprintf("record %d", v.Index)
	if v.Index < 0 {
		at = "end of trail"
	}
	return fmt.Sprintf("%s seq %d (%s): %s", where, v.Seq, at, v.Reason)
}

// Trust modes reported by Report.Trust.
const (
	// TrustEmbedded: checkpoint signatures were checked against the keys
	// the checkpoints carry, each node held to the first key it used. This
	// proves the checkpoints consistent with each other, not who made them.
	TrustEmbedded = "embedded"
	// TrustKeys: checkpoints had to be signed by a trusted key, and
	// every event is attested by one.
	TrustKeys = "trusted"
	// TrustUnattested: checkpoints had to be signed by a trusted key, but
	// some events are attested by none yet (Report.Unattested): they may
	// be genuine events no checkpoint could attest yet, or insertions.
	TrustUnattested = "unattested"
)

// NodeUnattested counts the events of one node that no verified
// checkpoint attests at the end of the trail.
type NodeUnattested struct {
	Node string `json:"node"`
	// Events is the number of those events, in Turns turns.
	Events uint64 `json:"events"`
	Turns  int    `json:"turns"`
	// Checkpoints is false when the trail holds no verified checkpoint of
	// the node at all.
	Checkpoints bool `json:"checkpoints"`
}

// NodeHead is the last verified checkpoint of one node.
type NodeHead struct {
	Node  string `json:"node"`
	Seq   uint64 `json:"seq"`
	Hash  string `json:"hash"`
	KeyID string `json:"key_id"`
	Time  string `json:"time"`
	// Events is the node's event count the checkpoint attests.
	Events uint64 `json:"events"`
}

// Report is the outcome of a verification.
type Report struct {
	Events int
	// Turns and Closed count turns' chains; PolicyChains the nodes'
	// policy chains (tenant PolicyTenant), which are not turns.
	Turns        int
	Closed       int
	PolicyChains int
	// Checkpoints is the number of checkpoint records whose signature and
	// chain link verified.
	Checkpoints int
	// Covered is the number of events a verified checkpoint attests
	// (events up to each turn's last attested head): deleting any of them
	// would have been detected even without turn.closed.
	Covered uint64
	// Unattested is the number of events no verified checkpoint attests
	// (counted in Events, not in Covered, and in no violated turn), and
	// UnattestedNodes says whose they are, by node.
	Unattested      uint64
	UnattestedNodes []NodeUnattested
	// Trust is TrustEmbedded, TrustKeys or TrustUnattested.
	Trust string
	// Heads are the nodes' last verified checkpoints, by node.
	Heads      []NodeHead
	Violations []Violation
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// VerifyOptions configures a Verifier. The zero value verifies a whole
// trail and checks checkpoint signatures against the keys they embed.
type VerifyOptions struct {
	// Trusted are the public keys checkpoints must be signed with. Empty:
	// the embedded keys are used (TrustEmbedded).
	Trusted []ed25519.PublicKey
	// Tenant and TurnID say the trail was read with these filters:
	// checkpoint entries about other turns are not expected in it, and
	// the nodes' event counts are not compared.
	Tenant, TurnID string
	// Anchors are checkpoint records known to be genuine from elsewhere
	// (a node's state file, a subscriber's last seen checkpoint). Each
	// node's chain in the trail must reach its anchor, and the anchor's
	// turn heads are checked like any checkpoint's: a trail whose tail was
	// cut after the anchor was taken is detected.
	Anchors [][]byte
	// AllAttested requires every event to be attested by a verified
	// checkpoint at the end of the trail: an unattested event is a
	// violation instead of being counted in Report.Unattested. It suits
	// the trail of stopped nodes, each of which publishes a checkpoint
	// after its last event.
	AllAttested bool
}

// turnKey identifies a chain: turn ids are unique per node.
type turnKey struct{ node, turn string }

type claim struct {
	seq    uint64
	hash   [32]byte
	closed bool
	from   string // "checkpoint 3 of node node-1", for messages
}

type suspectLink struct {
	seq       uint64
	hash      [32]byte
	index     int // the suspect record's position
	prevIndex int // its predecessor's
}

type turnState struct {
	key       turnKey
	tenant    string
	lastIndex int // position of the last accepted record
	next      uint64
	prevHash  [32]byte // hash of the event at next-1 (zero before seq 0)
	catalog   *heldCatalog
	allowed   map[string]uint64 // call id -> seq of tool.invoked, until completed
	closed    bool
	broken    bool    // a violation was reported; later records are not judged
	lastTime  timeKey // time of the event at next-1

	// Checkpoint claims: hist holds the seqs base..next-1 that no claim
	// has covered yet; pending holds claims about seqs not seen yet, in
	// increasing order. queued says the turn is on its node's unattested
	// list.
	base     uint64
	hist     []histEntry
	queued   bool
	claimed  bool
	claimSeq uint64
	pending  []claim
	// suspect is a prev_hash mismatch not yet attributed: either the event
	// before it or the event itself was altered; the next event (or a
	// checkpoint) tells which.
	suspect *suspectLink
}

// histEntry is an event no checkpoint has attested yet: its hash, and the
// number of its node's checkpoint groups that had begun when it was read.
type histEntry struct {
	hash  [32]byte
	group uint32
}

// heldCatalog is a resolved catalogue, shared by the turns that hold the
// same one.
type heldCatalog struct {
	hash    string
	tools   []leanTool
	byRev   map[string]int // revision -> index in tools
	aliases map[string]bool
}

type nodeState struct {
	turns    map[string]*turnState
	next     uint64
	prevHash string
	key      ed25519.PublicKey // pinned in embedded trust mode
	head     *NodeHead
	events   uint64 // events of this node in the trail
	attested uint64 // the last checkpoint's Events
	anchors  map[uint64]string

	// A checkpoint group is the run of consecutive checkpoints made from
	// one snapshot of the node's turn heads: they carry the same Events,
	// which grows from one snapshot to the next. groups counts the groups
	// begun; groupSeq[g-1] is the seq of group g's first checkpoint.
	groups   uint32
	groupSeq []uint64
	// unattested lists the turns that had an unattested event when they
	// were queued, in that order (a turn whose events were attested since
	// is dropped when the list is next walked).
	unattested []*turnState
}

// Verifier checks a trail record by record, in stream order; turns and
// checkpoints may interleave. Feed it with Add, then call Finish. It checks:
//   - each event's turn chain continues: seq is the next expected (from 0),
//     prev_hash is the hash of the turn's previous record's bytes, and the
//     chain starts with turn.opened;
//   - tool.catalog.resolved's catalogHash is the hash of the tools it
//     lists; every tool.catalog.listed, tool.invoked, tool.completed and
//     turn.closed carries the catalogHash of its turn's resolved
//     catalogue; listed aliases and invoked tools (identity, revision,
//     alias) are in it;
//   - within a turn, an event's time is never earlier than its
//     predecessor's (equal is fine);
//   - every allowed tool.invoked has its tool.completed before
//     turn.closed, nothing follows turn.closed, and turn.closed counts the
//     chain's events;
//   - checkpoints: canonical, signed (by a trusted key, or consistently by
//     the key they embed), each node's chain continuous from seq 0; every
//     turn head a checkpoint attests is in the trail with that hash; a
//     node's trail holds at least the events its last checkpoint counts;
//   - attestation: an event stored before a node's checkpoint group (the
//     checkpoints of one snapshot) is attested by that group or the next
//     one (see overdue); events not attested at the end of the trail are
//     counted in Report.Unattested (a violation with AllAttested), and the
//     trust is then TrustUnattested, never TrustKeys.
//
// The first violation per turn is reported, at the first sequence number
// that cannot be trusted; later records of a broken turn are not judged
// (one break would otherwise cascade). A Verifier is not safe for
// concurrent use; it keeps per turn its chain position and the hashes no
// checkpoint has attested yet, and does not retain the records it is given.
type Verifier struct {
	opts     VerifyOptions
	nodes    map[string]*nodeState // turns are kept per node
	catalogs map[string]*heldCatalog
	report   Report
	index    int
	ev       leanEvent // reused decode buffer
	anchors  []*ParsedCheckpoint
	finished bool
}

// NewVerifier returns a Verifier with zero VerifyOptions.
func NewVerifier() *Verifier {
	v, _ := NewVerifierWith(VerifyOptions{})
	return v
}

// NewVerifierWith returns a Verifier; it fails for an anchor that is not a
// validly signed checkpoint (by a trusted key, when keys are given).
func NewVerifierWith(opts VerifyOptions) (*Verifier, error) {
	v := &Verifier{
		opts:     opts,
		nodes:    map[string]*nodeState{},
		catalogs: map[string]*heldCatalog{},
	}
	v.report.Trust = TrustEmbedded
	if len(opts.Trusted) > 0 {
		v.report.Trust = TrustKeys
	}
	for i, a := range opts.Anchors {
		p, err := ParseCheckpoint(bytes.TrimSpace(a))
		if err != nil {
			return nil, fmt.Errorf("audit: anchor %d: %w", i, err)
		}
		pub, err := v.keyFor(p)
		if err != nil {
			return nil, fmt.Errorf("audit: anchor %d: %w", i, err)
		}
		if err := p.VerifySignature(pub); err != nil {
			return nil, fmt.Errorf("audit: anchor %d: %w", i, err)
		}
		ns := v.node(p.Node)
		if len(opts.Trusted) == 0 {
			ns.key = pub // the anchor pins its node's key
		}
		if ns.anchors == nil {
			ns.anchors = map[uint64]string{}
		}
		ns.anchors[p.Seq] = p.Hash
		v.anchors = append(v.anchors, p)
	}
	return v, nil
}

// keyFor is the key p must verify under: a trusted key with p's key id,
// or (embedded mode) the key p carries.
func (v *Verifier) keyFor(p *ParsedCheckpoint) (ed25519.PublicKey, error) {
	if len(v.opts.Trusted) == 0 {
		return p.PublicKeyBytes()
	}
	for _, k := range v.opts.Trusted {
		if KeyID(k) == p.KeyID {
			return k, nil
		}
	}
	return nil, fmt.Errorf("signed by key %s, which is not trusted", p.KeyID)
}

func (v *Verifier) node(id string) *nodeState {
	ns := v.nodes[id]
	if ns == nil {
		ns = &nodeState{turns: map[string]*turnState{}}
		v.nodes[id] = ns
	}
	return ns
}

// turn returns the state of node's turn, creating it.
func (v *Verifier) turn(ns *nodeState, node string, turn []byte, tenant string) *turnState {
	ts := ns.turns[string(turn)]
	if ts == nil {
		ts = &turnState{key: turnKey{node: node, turn: string(turn)}, tenant: tenant, lastIndex: -1}
		ns.turns[ts.key.turn] = ts
	}
	return ts
}

func (v *Verifier) turnFail(ts *turnState, seq uint64, index int, format string, args ...any) {
	if ts.broken {
		return
	}
	ts.broken = true
	ts.hist, ts.pending, ts.suspect = nil, nil, nil
	v.report.Violations = append(v.report.Violations, Violation{TurnID: ts.key.turn, Node: ts.key.node, Seq: seq, Index: index, Reason: fmt.Sprintf(format, args...)})
}

func (v *Verifier) chainFail(node string, seq uint64, index int, format string, args ...any) {
	v.report.Violations = append(v.report.Violations, Violation{Node: node, Checkpoint: true, Seq: seq, Index: index, Reason: fmt.Sprintf(format, args...)})
}

// Add verifies the next record's bytes: an event or a checkpoint.
func (v *Verifier) Add(data []byte) {
	defer func() { v.index++ }()
	if IsCheckpoint(data) {
		v.addCheckpoint(data)
		return
	}
	ev := &v.ev
	if !ev.parse(data) {
		var full Event
		if err := json.Unmarshal(data, &full); err != nil {
			v.report.Events++
			v.report.Violations = append(v.report.Violations, Violation{TurnID: "?", Index: v.index, Reason: "undecodable record: " + err.Error()})
			return
		}
		if full.Type == CheckpointType {
			v.addCheckpoint(data)
			return
		}
		ev.fromEvent(&full)
	}
	v.addEvent(data, ev)
}

func (v *Verifier) addEvent(data []byte, ev *leanEvent) {
	if v.opts.TurnID != "" && string(ev.turn) != v.opts.TurnID || v.opts.Tenant != "" && string(ev.tenant) != v.opts.Tenant {
		return // the reader filtered by header or subject; this one slipped through
	}
	v.report.Events++
	ns := v.nodes[string(ev.node)]
	if ns == nil {
		ns = v.node(string(ev.node))
	}
	ns.events++
	ts := ns.turns[string(ev.turn)]
	if ts == nil {
		ts = v.turn(ns, string(ev.node), ev.turn, string(ev.tenant))
	}
	if ts.broken {
		return
	}
	seq := ev.seq
	hash := sha256.Sum256(data)
	if ts.suspect != nil {
		// The previous event did not link to its predecessor. If this one
		// links to it, it is genuine and its predecessor was altered.
		s := ts.suspect
		var prev [32]byte
		if seq == s.seq+1 && decodeHash(ev.prevHash, &prev) && prev == s.hash {
			v.turnFail(ts, s.seq-1, s.prevIndex, "seq %d was modified or replaced: its hash is not the prev_hash of seq %d, which seq %d confirms", s.seq-1, s.seq, s.seq+1)
		} else {
			v.turnFail(ts, s.seq, s.index, "seq %d was forged, modified or inserted: it does not link to seq %d, and the next record does not link to it", s.seq, s.seq-1)
		}
		return
	}
	switch {
	case ts.closed:
		v.turnFail(ts, seq, v.index, "%s after turn.closed (seq %d): forged or replayed", ev.typ, ts.next-1)
		return
	case seq > ts.next:
		v.turnFail(ts, ts.next, v.index, "expected seq %d, found %d (%s): seq %d..%d missing (deleted) or out of order", ts.next, seq, ev.typ, ts.next, seq-1)
		return
	case seq < ts.next:
		v.turnFail(ts, seq, v.index, "a second event with seq %d (%s), expected %d: forged, replayed or reordered", seq, ev.typ, ts.next)
		return
	}
	if !ev.linksTo(seq, &ts.prevHash) {
		if seq == 0 {
			v.turnFail(ts, 0, v.index, "seq 0 has a prev_hash: modified or forged")
			return
		}
		ts.suspect = &suspectLink{seq: seq, hash: hash, index: v.index, prevIndex: ts.lastIndex}
		return
	}
	if seq == 0 && string(ev.typ) != string(TurnOpened) {
		v.turnFail(ts, 0, v.index, "chain starts with %s, not turn.opened", ev.typ)
		return
	}
	ts.next++
	ts.prevHash = hash
	ts.lastIndex = v.index
	if len(ts.hist) == 0 && !ts.queued {
		ts.queued = true
		ns.unattested = append(ns.unattested, ts)
	}
	ts.hist = append(ts.hist, histEntry{hash: hash, group: ns.groups})
	v.check(ts, ev)
	for !ts.broken && len(ts.pending) > 0 && ts.pending[0].seq == seq {
		// Take the claim off first: a claim that fails breaks the turn,
		// which drops every pending claim.
		c := ts.pending[0]
		ts.pending = ts.pending[1:]
		v.settle(ts, c, v.index)
	}
}

func (v *Verifier) check(ts *turnState, ev *leanEvent) {
	seq := ev.seq
	if seq > 0 && bytes.Compare(ev.time[:], ts.lastTime[:]) < 0 {
		v.turnFail(ts, seq, v.index, "time regressed: seq %d (%s) is at %sZ, before seq %d at %sZ", seq, ev.typ, ev.time[:], seq-1, ts.lastTime[:])
		return
	}
	ts.lastTime = ev.time
	join := func() bool {
		if ts.catalog == nil {
			v.turnFail(ts, seq, v.index, "%s before any resolved catalogue", ev.typ)
			return false
		}
		if string(ev.catalogHash) != ts.catalog.hash {
			v.turnFail(ts, seq, v.index, "%s carries catalogHash %q, the turn resolved %q", ev.typ, short(string(ev.catalogHash)), short(ts.catalog.hash))
			return false
		}
		return true
	}
	policyChain := ts.tenant == PolicyTenant
	switch t := Type(ev.typ); {
	case t == PolicyChanged && !policyChain:
		v.turnFail(ts, seq, v.index, "policy.changed in the chain of tenant %q: policy changes are recorded only in a node's policy chain (tenant %s)", ts.tenant, PolicyTenant)
		return
	case t == PolicyChanged && !ev.hasPolicy:
		v.turnFail(ts, seq, v.index, "policy.changed names no key or no author")
		return
	case t == PolicyRefused && !policyChain:
		v.turnFail(ts, seq, v.index, "policy.refused in the chain of tenant %q: policy refusals are recorded only in a node's policy chain (tenant %s)", ts.tenant, PolicyTenant)
		return
	case t == PolicyRefused && !ev.hasRefusal:
		v.turnFail(ts, seq, v.index, "policy.refused names no operation or no admin")
		return
	case t == ContractReviewed && !policyChain:
		v.turnFail(ts, seq, v.index, "contract.reviewed in the chain of tenant %q: reviews are recorded only in a node's policy chain (tenant %s)", ts.tenant, PolicyTenant)
		return
	case t == ApprovalDecided && !policyChain:
		v.turnFail(ts, seq, v.index, "approval.decided in the chain of tenant %q: decisions are recorded only in a node's policy chain (tenant %s)", ts.tenant, PolicyTenant)
		return
	case t == ApprovalRequested && policyChain:
		v.turnFail(ts, seq, v.index, "approval.requested in a policy chain: a request is recorded in the chain of the turn that made it")
		return
	case policyChain && t != TurnOpened && t != PolicyChanged && t != PolicyRefused && t != ContractReviewed && t != ApprovalDecided && t != TurnClosed:
		v.turnFail(ts, seq, v.index, "%s in a policy chain, which holds only turn.opened, policy.changed, policy.refused, contract.reviewed, approval.decided and turn.closed", t)
		return
	}
	switch Type(ev.typ) {
	case CatalogResolved:
		if len(ev.catalogHash) == 0 {
			return // a failed resolution holds nothing
		}
		if ts.catalog != nil && ts.catalog.hash != string(ev.catalogHash) {
			v.turnFail(ts, seq, v.index, "catalogue resolved again with a different catalogHash")
			return
		}
		hc, why := v.held(ev)
		if hc == nil {
			v.turnFail(ts, seq, v.index, "%s", why)
			return
		}
		ts.catalog = hc
	case CatalogListed:
		if !join() {
			return
		}
		for _, a := range ev.listed {
			if !ts.catalog.aliases[string(a)] {
				v.turnFail(ts, seq, v.index, "tool.catalog.listed shows %q, which is not in the resolved catalogue", a)
				return
			}
		}
	case ToolInvoked:
		if !join() || !ev.hasCall {
			return
		}
		c := &ev.call
		if len(c.provider) > 0 {
			i, ok := ts.catalog.byRev[string(c.revision)]
			if !ok || string(ts.catalog.tools[i].provider) != string(c.provider) || string(ts.catalog.tools[i].name) != string(c.name) {
				v.turnFail(ts, seq, v.index, "tool.invoked names %s/%s@%s, which is not in the resolved catalogue", c.provider, c.name, short(string(c.revision)))
				return
			}
			if string(ts.catalog.tools[i].alias) != string(c.alias) {
				v.turnFail(ts, seq, v.index, "tool.invoked calls %s/%s as %q; the resolved catalogue shows it as %q", c.provider, c.name, c.alias, ts.catalog.tools[i].alias)
				return
			}
		}
		if string(c.decision) == "allow" {
			if ts.allowed == nil {
				ts.allowed = map[string]uint64{}
			}
			ts.allowed[string(c.id)] = seq
		}
	case ToolCompleted:
		if !join() || !ev.hasCall {
			return
		}
		if _, ok := ts.allowed[string(ev.call.id)]; !ok {
			v.turnFail(ts, seq, v.index, "tool.completed for call %s, which was not allowed (or completed twice)", ev.call.id)
			return
		}
		delete(ts.allowed, string(ev.call.id))
	case TurnClosed:
		ts.closed = true
		if len(ev.catalogHash) > 0 && !join() {
			return
		}
		if len(ts.allowed) > 0 {
			v.turnFail(ts, seq, v.index, "turn closed with %d allowed calls never completed", len(ts.allowed))
			return
		}
		if ev.hasClose && ev.closeEvents != seq+1 {
			v.turnFail(ts, seq, v.index, "turn.closed counts %d events, its chain has %d", ev.closeEvents, seq+1)
		}
	}
}

// held returns the resolved catalogue of ev, checking that its tools hash
// to its catalogHash; turns holding the same catalogue share one.
func (v *Verifier) held(ev *leanEvent) (*heldCatalog, string) {
	if hc := v.catalogs[string(ev.catalogHash)]; hc != nil {
		if !slices.EqualFunc(hc.tools, ev.tools, leanTool.equal) {
			return nil, "tool.catalog.resolved lists other tools than an earlier catalogue with the same catalogHash"
		}
		return hc, ""
	}
	if got := catalogHashOf(ev.tools); got != string(ev.catalogHash) {
		return nil, fmt.Sprintf("tool.catalog.resolved's tools hash to %s, not its catalogHash %s: the catalogue record was altered", short(got), short(string(ev.catalogHash)))
	}
	hc := &heldCatalog{hash: string(ev.catalogHash), byRev: make(map[string]int, len(ev.tools)), aliases: make(map[string]bool, len(ev.tools))}
	for i, t := range ev.tools {
		t = t.clone()
		hc.tools = append(hc.tools, t)
		hc.byRev[string(t.revision)] = i
		hc.aliases[string(t.alias)] = true
	}
	v.catalogs[hc.hash] = hc
	return hc, ""
}

// catalogHashOf is the catalogHash of tools in the order listed:
// SHA-256 of {"tools":[{"alias":A,"revision":R},...],"v":1} in RFC 8785
// form (see docs/architecture.md).
func catalogHashOf(tools []leanTool) string {
	b := make([]byte, 0, 16+len(tools)*100)
	b = append(b, `{"tools":[`...)
	for i, t := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"alias":`...)
		b = appendJCSString(b, t.alias)
		b = append(b, `,"revision":`...)
		b = appendJCSString(b, t.revision)
		b = append(b, '}')
	}
	b = append(b, `],"v":1}`...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// appendJCSString writes s as RFC 8785 does: only '"', '\\' and control
// characters are escaped.
func appendJCSString(b, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func (v *Verifier) addCheckpoint(data []byte) {
	index := v.index
	p, err := ParseCheckpoint(data)
	if err != nil {
		node := "?"
		var probe struct {
			Node string `json:"node"`
			Seq  uint64 `json:"seq"`
		}
		if json.Unmarshal(data, &probe) == nil && probe.Node != "" {
			node = probe.Node
		}
		v.chainFail(node, probe.Seq, index, "invalid checkpoint record: %v", err)
		return
	}
	ns := v.node(p.Node)
	if ns.head != nil && p.Seq+1 == ns.next && p.Hash == ns.head.Hash {
		return // the same record stored twice (a retried publish): harmless
	}
	pub, err := v.keyFor(p)
	if err == nil {
		err = p.VerifySignature(pub)
	}
	if err == nil && ns.key != nil && !ns.key.Equal(pub) {
		err = fmt.Errorf("signed by key %s, but node %s signed with key %s before; pass the trusted keys (--trust) to accept a rotated key", p.KeyID, p.Node, KeyID(ns.key))
	}
	if err != nil {
		v.chainFail(p.Node, p.Seq, index, "checkpoint %d of node %s: %v: forged or altered", p.Seq, p.Node, err)
		return
	}
	switch {
	case p.Seq != ns.next:
		if p.Seq > ns.next {
			v.chainFail(p.Node, ns.next, index, "expected checkpoint %d, found %d: checkpoints %d..%d missing (deleted) or out of order", ns.next, p.Seq, ns.next, p.Seq-1)
		} else {
			v.chainFail(p.Node, p.Seq, index, "a second checkpoint %d (expected %d): forged, replayed or forked (two nodes with one id?)", p.Seq, ns.next)
		}
		// Resynchronize on this validly signed checkpoint, so one gap is
		// reported once and its turn heads are still checked.
	case p.PrevHash != ns.prevHash:
		v.chainFail(p.Node, p.Seq, index, "checkpoint %d does not link to checkpoint %d: the earlier one was altered or replaced", p.Seq, p.Seq-1)
	}
	if want, ok := ns.anchors[p.Seq]; ok && want != p.Hash {
		v.chainFail(p.Node, p.Seq, index, "checkpoint %d differs from the anchor with the same sequence number", p.Seq)
	}
	if len(v.opts.Trusted) == 0 && ns.key == nil {
		ns.key = pub
	}
	if ns.head == nil || p.Events != ns.attested {
		ns.groups++
		ns.groupSeq = append(ns.groupSeq, p.Seq)
		v.overdue(ns, p.Node, index)
	}
	ns.next, ns.prevHash = p.Seq+1, p.Hash
	ns.attested = p.Events
	ns.head = &NodeHead{Node: p.Node, Seq: p.Seq, Hash: p.Hash, KeyID: p.KeyID, Time: p.Time.Format("2006-01-02T15:04:05.999999999Z07:00"), Events: p.Events}
	v.report.Checkpoints++
	v.applyClaims(p, index)
}

// overdue reports the events of node ns that should have been attested
// once its group ns.groups has begun. A node snapshots its turn heads,
// waits until the stream stored the events they name, then publishes the
// snapshot's checkpoints; a record is handed to the stream only after its
// head was noted. So an event stored before group g's first checkpoint was
// noted before that checkpoint was stored, hence before snapshot g+1 was
// taken: group g or g+1 attests it. Once group g+2 begins, group g+1 is
// complete, and an event read before group g began (its histEntry.group
// is g-1) that no checkpoint attests was not written by the node as it
// stands: it was inserted, or it belongs to a node that stopped before
// checkpointing it. The walk also drops the turns attested meanwhile, so
// the list holds only turns whose unattested events are not due yet, or
// that a pending claim covers.
func (v *Verifier) overdue(ns *nodeState, node string, index int) {
	g := ns.groups
	if g < 3 {
		return
	}
	kept := ns.unattested[:0]
	for _, ts := range ns.unattested {
		if ts.broken || len(ts.hist) == 0 {
			ts.queued = false
			continue
		}
		if len(ts.pending) > 0 {
			// A claim about a later seq covers every event held: whether
			// it holds is settled when that seq arrives, or at the end.
			kept = append(kept, ts)
			continue
		}
		if s := ts.hist[0].group; s+3 <= g {
			last := ts.base + uint64(len(ts.hist)) - 1
			v.turnFail(ts, ts.base, index, "no checkpoint attests seq %d..%d: seq %d was stored before checkpoint %d of node %s and is in none of its checkpoints up to %d: inserted (or written by a node that stopped before checkpointing it)",
				ts.base, last, ts.base, ns.groupSeq[s], node, ns.groupSeq[g-1]-1)
			ts.queued = false
			continue
		}
		kept = append(kept, ts)
	}
	clear(ns.unattested[len(kept):])
	ns.unattested = kept
}

// applyClaims checks a verified checkpoint's turn heads against the trail.
func (v *Verifier) applyClaims(p *ParsedCheckpoint, index int) {
	from := fmt.Sprintf("checkpoint %d of node %s", p.Seq, p.Node)
	for _, h := range p.Turns {
		if v.opts.TurnID != "" && h.TurnID != v.opts.TurnID || v.opts.Tenant != "" && h.Tenant != v.opts.Tenant {
			continue
		}
		c := claim{seq: h.Seq, closed: h.Closed, from: from}
		ts := v.turn(v.node(p.Node), p.Node, []byte(h.TurnID), h.Tenant)
		if ts.broken {
			continue
		}
		if !decodeHash([]byte(h.Hash), &c.hash) {
			v.turnFail(ts, h.Seq, index, "%s attests hash %q, which is not a hex SHA-256", from, h.Hash)
			continue
		}
		if s := ts.suspect; s != nil && c.seq == s.seq {
			// The checkpoint says which side of the broken link is genuine.
			if c.hash == s.hash {
				v.turnFail(ts, s.seq-1, s.prevIndex, "seq %d was modified or replaced: its hash is not the prev_hash of seq %d, which %s attests", s.seq-1, s.seq, from)
			} else {
				v.turnFail(ts, s.seq, s.index, "seq %d was forged, modified or inserted: it does not link to seq %d, and %s attests another chain", s.seq, s.seq-1, from)
			}
			continue
		}
		switch {
		case c.seq >= ts.next:
			if n := len(ts.pending); n > 0 && ts.pending[n-1].seq >= c.seq {
				v.turnFail(ts, c.seq, index, "%s attests seq %d, not after an earlier attested seq %d", from, c.seq, ts.pending[n-1].seq)
				continue
			}
			ts.pending = append(ts.pending, c)
		case c.seq < ts.base:
			if !ts.claimed || c.seq != ts.claimSeq {
				v.turnFail(ts, c.seq, index, "%s attests seq %d, before seq %d an earlier checkpoint attested", from, c.seq, ts.claimSeq)
			}
		default:
			v.settle(ts, c, index)
		}
	}
}

// settle checks a claim about a seq the trail has shown (base <= seq < next).
func (v *Verifier) settle(ts *turnState, c claim, index int) {
	i := c.seq - ts.base
	if ts.hist[i].hash != c.hash {
		v.turnFail(ts, c.seq, index, "%s attests seq %d with hash %s; the trail's seq %d hashes to %s: it was modified or replaced (or the chain rewritten up to it)",
			c.from, c.seq, short(hex.EncodeToString(c.hash[:])), c.seq, short(hex.EncodeToString(ts.hist[i].hash[:])))
		return
	}
	if c.closed != (ts.closed && c.seq == ts.next-1) {
		v.turnFail(ts, c.seq, index, "%s says the turn closed at seq %d: the trail disagrees", c.from, c.seq)
		return
	}
	ts.claimed, ts.claimSeq = true, c.seq
	ts.base = c.seq + 1
	ts.hist = slices.Delete(ts.hist, 0, int(i)+1)
	if len(ts.hist) == 0 {
		ts.hist = nil
	}
}

// Finish returns the report. openOK says whether turns still open (no
// turn.closed yet) are acceptable — true when reading a live stream. A
// Verifier is finished once.
func (v *Verifier) Finish(openOK bool) Report {
	if !v.finished {
		v.finished = true
		v.finish(openOK)
	}
	r := v.report
	r.Violations = slices.Clone(r.Violations)
	return r
}

func (v *Verifier) finish(openOK bool) {
	// Anchors not reached by the trail's chains: the trail lost its tail.
	for _, a := range v.anchors {
		ns := v.node(a.Node)
		if ns.next > a.Seq {
			continue
		}
		last := "none of its checkpoints are in the trail"
		if ns.head != nil {
			last = fmt.Sprintf("the trail's last is checkpoint %d", ns.head.Seq)
		}
		v.chainFail(a.Node, ns.next, -1, "the anchor is checkpoint %d of node %s, %s: checkpoints %d..%d and the events after them are missing (the tail was truncated)", a.Seq, a.Node, last, ns.next, a.Seq)
		v.applyClaims(a, -1)
	}

	var all []*turnState
	for _, ns := range v.nodes {
		for _, ts := range ns.turns {
			all = append(all, ts)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].key.node != all[j].key.node {
			return all[i].key.node < all[j].key.node
		}
		return all[i].key.turn < all[j].key.turn
	})
	r := &v.report
	r.Turns = 0
	for _, ts := range all {
		policyChain := ts.tenant == PolicyTenant
		if (ts.next > 0 || ts.broken) && !policyChain {
			r.Turns++
		}
		if ts.next > 0 && policyChain {
			r.PolicyChains++
		}
		if s := ts.suspect; s != nil && !ts.broken {
			v.turnFail(ts, s.seq-1, s.prevIndex, "seq %d or seq %d was altered: the hash of seq %d is not the prev_hash of seq %d (the trail ends before it could tell which)", s.seq-1, s.seq, s.seq-1, s.seq)
		}
		if !ts.broken && len(ts.pending) > 0 {
			c := ts.pending[len(ts.pending)-1]
			if ts.next == 0 {
				v.turnFail(ts, 0, -1, "%s attests this turn up to seq %d; none of its events are in the trail (deleted)", c.from, c.seq)
			} else {
				v.turnFail(ts, ts.next, -1, "%s attests seq %d; the trail ends at seq %d: seq %d..%d missing (the tail was truncated or deleted)", c.from, c.seq, ts.next-1, ts.next, c.seq)
			}
		}
		if ts.closed && !policyChain {
			r.Closed++
		}
		if ts.claimed && !ts.broken {
			r.Covered += ts.claimSeq + 1
		}
		if !ts.closed && !ts.broken && !openOK && ts.next > 0 {
			v.turnFail(ts, ts.next, -1, "trail ends before turn.closed: the tail is missing or the turn is still open")
		}
		if n := uint64(len(ts.hist)); n > 0 && !ts.broken {
			ns := v.nodes[ts.key.node]
			if v.opts.AllAttested {
				where := "the trail holds no checkpoint of node " + ts.key.node
				if ns.head != nil {
					where = fmt.Sprintf("the trail's last checkpoint of node %s is %d", ts.key.node, ns.head.Seq)
				}
				v.turnFail(ts, ts.base, -1, "no checkpoint attests seq %d..%d (%s): inserted, or not checkpointed yet (the node still runs, or stopped before checkpointing them)", ts.base, ts.base+n-1, where)
				continue
			}
			r.Unattested += n
			if k := len(r.UnattestedNodes); k == 0 || r.UnattestedNodes[k-1].Node != ts.key.node {
				r.UnattestedNodes = append(r.UnattestedNodes, NodeUnattested{Node: ts.key.node, Checkpoints: ns.head != nil})
			}
			u := &r.UnattestedNodes[len(r.UnattestedNodes)-1]
			u.Events += n
			u.Turns++
		}
	}
	if r.Trust == TrustKeys && r.Unattested > 0 {
		r.Trust = TrustUnattested
	}

	ids := make([]string, 0, len(v.nodes))
	for id := range v.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ns := v.nodes[id]
		if ns.head == nil {
			continue
		}
		r.Heads = append(r.Heads, *ns.head)
		if v.opts.Tenant == "" && v.opts.TurnID == "" && ns.events < ns.attested {
			v.chainFail(id, ns.head.Seq, -1, "checkpoint %d of node %s counts %d events written; the trail holds %d of them: events were deleted", ns.head.Seq, id, ns.attested, ns.events)
		}
	}
}

// Verify checks a whole trail with zero VerifyOptions.
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

func decodeHash(h []byte, out *[32]byte) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.Decode(out[:], h)
	return err == nil
}

// ---- decoding ----

// leanEvent is the part of an event the verifier judges, as sub-slices of
// the record (no copies).
type leanEvent struct {
	typ, node, tenant, turn, prevHash, catalogHash []byte
	time                                           timeKey
	seq                                            uint64
	tools                                          []leanTool
	listed                                         [][]byte
	hasCall                                        bool
	call                                           leanCall
	hasClose                                       bool
	closeEvents                                    uint64
	// hasPolicy: the event carries a policy change; hasRefusal a policy
	// refusal (only ever decoded by encoding/json: the fast path takes
	// neither member).
	hasPolicy, hasRefusal bool
}

type leanTool struct{ alias, provider, name, namespace, revision []byte }

// timeKey is an event's time as bytes that compare as the instants do:
// "2006-01-02T15:04:05.000000000" in UTC (events have years 0-9999).
type timeKey [29]byte

const timeKeyLayout = "2006-01-02T15:04:05.000000000"

func (k *timeKey) set(t time.Time) { t.UTC().AppendFormat(k[:0], timeKeyLayout) }

// parse reads an RFC 3339 time. The form Encode writes for a UTC time
// (2006-01-02T15:04:05[.fraction]Z) is copied without parsing; any other
// is parsed and converted to UTC.
func (k *timeKey) parse(s []byte) bool {
	if n := len(s); n >= 20 && n <= 30 && n != 21 && s[n-1] == 'Z' && (n == 20 || s[19] == '.') {
		ok := true
		for i, c := range s[:n-1] {
			switch i {
			case 4, 7:
				ok = ok && c == '-'
			case 10:
				ok = ok && c == 'T'
			case 13, 16:
				ok = ok && c == ':'
			case 19:
			default:
				ok = ok && c >= '0' && c <= '9'
			}
		}
		if ok {
			copy(k[:], s[:n-1])
			k[19] = '.'
			for i := max(n-1, 20); i < len(k); i++ {
				k[i] = '0'
			}
			return true
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		return false
	}
	// The key holds a UTC time of years 0-9999: an offset can carry a time
	// written as 9999-12-31 into year 10000 (or 0000-01-01 into year -1).
	if u := t.UTC(); u.Year() < 0 || u.Year() > 9999 {
		return false
	}
	k.set(t)
	return true
}

func (t leanTool) equal(u leanTool) bool {
	return bytes.Equal(t.alias, u.alias) && bytes.Equal(t.provider, u.provider) && bytes.Equal(t.name, u.name) &&
		bytes.Equal(t.namespace, u.namespace) && bytes.Equal(t.revision, u.revision)
}

func (t leanTool) clone() leanTool {
	return leanTool{bytes.Clone(t.alias), bytes.Clone(t.provider), bytes.Clone(t.name), bytes.Clone(t.namespace), bytes.Clone(t.revision)}
}

type leanCall struct{ id, alias, provider, name, revision, decision []byte }

// linksTo reports whether the event's prev_hash is prev (or empty at seq 0).
func (e *leanEvent) linksTo(seq uint64, prev *[32]byte) bool {
	if seq == 0 {
		return len(e.prevHash) == 0
	}
	var h [32]byte
	return decodeHash(e.prevHash, &h) && h == *prev
}

func (e *leanEvent) fromEvent(ev *Event) {
	*e = leanEvent{
		typ: []byte(ev.Type), node: []byte(ev.Node), tenant: []byte(ev.Tenant), turn: []byte(ev.TurnID),
		prevHash: []byte(ev.PrevHash), catalogHash: []byte(ev.CatalogHash), seq: ev.Seq,
	}
	e.time.set(ev.Time)
	if ev.Catalog != nil {
		for _, t := range ev.Catalog.Tools {
			e.tools = append(e.tools, leanTool{[]byte(t.Alias), []byte(t.Provider), []byte(t.Name), []byte(t.Namespace), []byte(t.Revision)})
		}
	}
	for _, l := range ev.Listed {
		e.listed = append(e.listed, []byte(l))
	}
	if c := ev.Call; c != nil {
		e.hasCall = true
		e.call = leanCall{[]byte(c.ID), []byte(c.Alias), []byte(c.Provider), []byte(c.Name), []byte(c.Revision), []byte(c.Decision)}
	}
	if ev.Close != nil {
		e.hasClose, e.closeEvents = true, ev.Close.Events
	}
	e.hasPolicy = ev.Policy != nil && ev.Policy.Key != "" && ev.Policy.By != ""
	e.hasRefusal = ev.PolicyRefusal != nil && ev.PolicyRefusal.Op != "" && ev.PolicyRefusal.By != ""
}

// parse decodes data if it is exactly in the form Encode writes (field
// order, no whitespace, plain strings without escapes or non-ASCII). It
// reports false otherwise, and the caller decodes with encoding/json:
// the fast path accepts only input on which both readings agree.
func (e *leanEvent) parse(data []byte) bool {
	tools, listed := e.tools[:0], e.listed[:0]
	*e = leanEvent{tools: tools, listed: listed}
	p := parser{b: data}
	var ok bool
	if !p.lit(`{"id":`) || !p.skipStr() || !p.lit(`,"type":`) {
		return false
	}
	if e.typ, ok = p.str(); !ok || !p.lit(`,"time":`) {
		return false
	}
	if t, ok := p.str(); !ok || !e.time.parse(t) {
		return false
	}
	if p.lit(`,"node":`) {
		if e.node, ok = p.str(); !ok {
			return false
		}
	}
	if !p.lit(`,"tenant":`) {
		return false
	}
	if e.tenant, ok = p.str(); !ok || !p.lit(`,"principal":`) || !p.skipStr() {
		return false
	}
	if p.lit(`,"credential_profile":`) && !p.skipStr() {
		return false
	}
	if !p.lit(`,"turn_id":`) {
		return false
	}
	if e.turn, ok = p.str(); !ok {
		return false
	}
	p.lit(`,"one_operation":true`)
	if !p.lit(`,"seq":`) {
		return false
	}
	if e.seq, ok = p.uint(); !ok || !p.lit(`,"prev_hash":`) {
		return false
	}
	if e.prevHash, ok = p.str(); !ok {
		return false
	}
	if p.lit(`,"catalog_hash":`) {
		if e.catalogHash, ok = p.str(); !ok {
			return false
		}
	}
	if p.lit(`,"namespaces":`) && !p.strs(nil) {
		return false
	}
	if p.lit(`,"catalog":`) && !e.parseCatalog(&p) {
		return false
	}
	if p.lit(`,"listed":`) && !p.strs(&e.listed) {
		return false
	}
	if p.lit(`,"call":`) {
		if !e.parseCall(&p) {
			return false
		}
		e.hasCall = true
	}
	if p.lit(`,"close":{"reason":`) {
		if !p.skipStr() || !p.lit(`,"steps":`) || !p.int() || !p.lit(`,"events":`) {
			return false
		}
		if e.closeEvents, ok = p.uint(); !ok || !p.lit(`}`) {
			return false
		}
		e.hasClose = true
	}
	return p.lit(`}`) && p.i == len(p.b)
}

func (e *leanEvent) parseCatalog(p *parser) bool {
	if !p.lit(`{"tools":`) {
		return false
	}
	if !p.lit(`null`) {
		if !p.lit(`[`) {
			return false
		}
		for first := true; !p.lit(`]`); first = false {
			if !first && !p.lit(`,`) {
				return false
			}
			var t leanTool
			var ok bool
			if !p.lit(`{"alias":`) {
				return false
			}
			if t.alias, ok = p.str(); !ok || !p.lit(`,"provider":`) {
				return false
			}
			if t.provider, ok = p.str(); !ok || !p.lit(`,"name":`) {
				return false
			}
			if t.name, ok = p.str(); !ok || !p.lit(`,"namespace":`) {
				return false
			}
			if t.namespace, ok = p.str(); !ok || !p.lit(`,"revision":`) {
				return false
			}
			if t.revision, ok = p.str(); !ok || !p.lit(`}`) {
				return false
			}
			e.tools = append(e.tools, t)
		}
	}
	if !p.lit(`,"providers":`) {
		return false
	}
	if p.lit(`null`) {
		return p.lit(`}`)
	}
	if !p.lit(`[`) {
		return false
	}
	for first := true; !p.lit(`]`); first = false {
		if !first && !p.lit(`,`) {
			return false
		}
		if !p.lit(`{"provider":`) || !p.skipStr() || !p.lit(`,"status":`) || !p.skipStr() {
			return false
		}
		if p.lit(`,"reason":`) && !p.skipStr() {
			return false
		}
		if p.lit(`,"error":`) && !p.skipStr() {
			return false
		}
		if !p.lit(`,"tools":`) || !p.int() {
			return false
		}
		if p.lit(`,"refused":`) && !p.strs(nil) {
			return false
		}
		if !p.lit(`,"duration_us":`) || !p.int() {
			return false
		}
		if p.lit(`,"pending_review":`) && !p.strs(nil) {
			return false
		}
		if p.lit(`,"drift":[`) && !p.skipDrift() {
			return false
		}
		if !p.lit(`}`) {
			return false
		}
	}
	return p.lit(`}`)
}

// skipDrift skips a provider's drift entries, after their "[".
func (p *parser) skipDrift() bool {
	for first := true; !p.lit(`]`); first = false {
		if !first && !p.lit(`,`) {
			return false
		}
		if !p.lit(`{"tool":`) || !p.skipStr() || !p.lit(`,"revision":`) || !p.skipStr() || !p.lit(`,"decision":`) || !p.skipStr() {
			return false
		}
		if p.lit(`,"classes":`) && !p.strs(nil) {
			return false
		}
		if p.lit(`,"accepted":`) && !p.skipStr() {
			return false
		}
		if !p.lit(`}`) {
			return false
		}
	}
	return true
}

func (e *leanEvent) parseCall(p *parser) bool {
	c := &e.call
	var ok bool
	if !p.lit(`{"id":`) {
		return false
	}
	if c.id, ok = p.str(); !ok || !p.lit(`,"alias":`) {
		return false
	}
	if c.alias, ok = p.str(); !ok {
		return false
	}
	for _, f := range [...]struct {
		key string
		dst *[]byte
	}{{`,"provider":`, &c.provider}, {`,"name":`, &c.name}, {`,"revision":`, &c.revision}} {
		if p.lit(f.key) {
			if *f.dst, ok = p.str(); !ok {
				return false
			}
		}
	}
	if p.lit(`,"step":`) && !p.int() {
		return false
	}
	if p.lit(`,"decision":`) {
		if c.decision, ok = p.str(); !ok {
			return false
		}
	}
	for _, key := range [...]string{`,"reason":`, `,"resource":`, `,"grant":`, `,"args_sha256":`, `,"outcome":`} {
		if p.lit(key) && !p.skipStr() {
			return false
		}
	}
	if p.lit(`,"duration_us":`) && !p.int() {
		return false
	}
	if p.lit(`,"result_bytes":`) && !p.int() {
		return false
	}
	if p.lit(`,"approval":`) && !p.skipStr() {
		return false
	}
	return p.lit(`}`)
}

// parser reads the canonical encoding; every method reports false (and
// the caller gives up) on anything else.
type parser struct {
	b []byte
	i int
}

func (p *parser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// str reads a string that needs no unescaping: printable ASCII without
// '\\' (which is also all Encode leaves unescaped, but '<', '>', '&').
func (p *parser) str() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[p.i+1 : j : j]
			p.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (p *parser) skipStr() bool {
	_, ok := p.str()
	return ok
}

func (p *parser) strs(out *[][]byte) bool {
	if !p.lit(`[`) {
		return false
	}
	for first := true; !p.lit(`]`); first = false {
		if !first && !p.lit(`,`) {
			return false
		}
		s, ok := p.str()
		if !ok {
			return false
		}
		if out != nil {
			*out = append(*out, s)
		}
	}
	return true
}

// uint reads a canonical unsigned integer (no leading zeros) that fits
// in 64 bits.
func (p *parser) uint() (uint64, bool) {
	j := p.i
	var n uint64
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		d := uint64(p.b[j] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
		j++
	}
	if j == p.i || p.b[p.i] == '0' && j-p.i > 1 {
		return 0, false
	}
	p.i = j
	return n, true
}

// int skips a canonical integer that fits in 63 bits.
func (p *parser) int() bool {
	neg := p.lit(`-`)
	n, ok := p.uint()
	return ok && n <= 1<<63-1 && !(neg && n == 0)
}
