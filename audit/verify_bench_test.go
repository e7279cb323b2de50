package audit_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/auditstore"
)

// benchEvents is how many events the verification benchmark's trail holds.
const benchEvents = 1_000_000

var (
	benchOnce sync.Once
	benchRecs [][]byte
	benchKey  ed25519.PublicKey
	benchN    int // events (checkpoints excluded)
)

// benchTrail is a valid trail of at least benchEvents events, made with
// the real encoder: 100 turns in flight at a time, interleaved like a busy
// node's, each opened, resolved against an 8-tool catalogue, listed, 1-6
// calls (one in seven denied), sometimes a namespace change, closed; and a
// signed checkpoint of the changed turns every 5000 events.
func benchTrail(b *testing.B) [][]byte {
	b.Helper()
	benchOnce.Do(func() {
		seed := sha256.Sum256([]byte("sharedos audit bench"))
		key := ed25519.NewKeyFromSeed(seed[:])
		benchKey = key.Public().(ed25519.PublicKey)
		g := &benchGen{r: rand.New(rand.NewPCG(7, 11)), key: key, base: time.Date(2026, 9, 8, 10, 0, 0, 0, time.UTC), dirty: map[string]*audit.TurnHead{}}
		g.catalog()
		for g.events < benchEvents {
			g.step()
		}
		for len(g.active) > 0 {
			g.advance(0)
		}
		g.checkpoint()
		benchRecs, benchN = g.recs, g.events
	})
	return benchRecs
}

type benchTurn struct {
	id, tenant string
	seq        uint64
	prev       string
	calls      int // still to make
	steps      int
	open       []string // allowed calls not yet completed
	next       int
}

type benchGen struct {
	r       *rand.Rand
	key     ed25519.PrivateKey
	base    time.Time
	recs    [][]byte
	events  int
	turns   int
	active  []*benchTurn
	dirty   map[string]*audit.TurnHead
	cpSeq   uint64
	cpPrev  string
	tools   []audit.Tool
	catHash string
}

func (g *benchGen) catalog() {
	for _, t := range [][3]string{{"calendar", "add", "calendar"}, {"calendar", "between", "calendar"}, {"calendar", "convert", "calendar"},
		{"notes", "get", "notes"}, {"notes", "put", "notes"}, {"notes", "search", "notes"}, {"textkit", "sha256", "text"}, {"textkit", "stats", "text"}} {
		rev := sha256.Sum256([]byte(strings.Join(t[:], "/")))
		g.tools = append(g.tools, audit.Tool{Alias: t[2] + "_" + t[1], Provider: t[0], Name: t[1], Namespace: t[2], Revision: hex.EncodeToString(rev[:])})
	}
	var sb strings.Builder
	sb.WriteString(`{"tools":[`)
	for i, t := range g.tools {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"alias":%q,"revision":%q}`, t.Alias, t.Revision)
	}
	sb.WriteString(`],"v":1}`)
	sum := sha256.Sum256([]byte(sb.String()))
	g.catHash = hex.EncodeToString(sum[:])
}

func (g *benchGen) step() {
	if len(g.active) < 100 {
		g.turns++
		g.active = append(g.active, &benchTurn{
			id:     "node-1." + strconv.Itoa(g.turns),
			tenant: []string{"acme", "globex", "initech"}[g.r.IntN(3)],
			calls:  1 + g.r.IntN(6),
		})
	}
	g.advance(g.r.IntN(len(g.active)))
	if g.events%5000 == 0 {
		g.checkpoint()
	}
}

// advance emits the next event of active turn i.
func (g *benchGen) advance(i int) {
	t := g.active[i]
	ev := &audit.Event{}
	switch {
	case t.next == 0:
		ev.Type, ev.Namespaces = audit.TurnOpened, []string{"notes", "text"}
	case t.next == 1:
		ev.Type, ev.CatalogHash = audit.CatalogResolved, g.catHash
		ev.Catalog = &audit.Catalog{Tools: g.tools, Providers: []audit.ProviderStatus{
			{Provider: "calendar", Status: "ok", Tools: 3, DurationMicros: 1100}, {Provider: "notes", Status: "ok", Tools: 3}, {Provider: "textkit", Status: "ok", Tools: 2}}}
	case t.next == 2:
		ev.Type, ev.CatalogHash, ev.Namespaces = audit.CatalogListed, g.catHash, []string{"notes", "text"}
		ev.Listed = []string{"notes_get", "notes_put", "notes_search", "text_sha256", "text_stats"}
	case len(t.open) > 0 && (t.calls == 0 || g.r.IntN(2) == 0):
		id := t.open[0]
		t.open = t.open[1:]
		tool := g.tools[4]
		ev.Type, ev.CatalogHash = audit.ToolCompleted, g.catHash
		ev.Call = &audit.Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Outcome: "ok", Duration: 400 + g.r.Int64N(300), ResultLen: 75}
	case t.calls > 0 && g.r.IntN(12) == 0:
		ev.Type, ev.Namespaces = audit.NamespacesUpdated, []string{"notes"}
	case t.calls > 0:
		t.calls--
		tool := g.tools[4]
		args := sha256.Sum256([]byte(t.id + strconv.Itoa(t.calls)))
		ev.Type, ev.CatalogHash, ev.Namespaces = audit.ToolInvoked, g.catHash, []string{"notes", "text"}
		call := &audit.Call{ID: "c" + strconv.FormatUint(t.seq, 10), Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision,
			Resource: "notes/" + t.tenant + "/items", ArgsHash: hex.EncodeToString(args[:])}
		if g.r.IntN(7) == 0 {
			call.Decision, call.Reason = "deny", "no_matching_grant"
		} else {
			t.steps++
			call.Decision, call.Step, call.Grant = "allow", t.steps, "ada-notes"
			t.open = append(t.open, call.ID)
		}
		ev.Call = call
	default:
		ev.Type, ev.CatalogHash = audit.TurnClosed, g.catHash
		ev.Close = &audit.Close{Reason: "released", Steps: t.steps, Events: t.seq + 1}
	}
	ev.ID = t.id + "-" + strconv.FormatUint(t.seq, 10)
	ev.Time = g.base.Add(time.Duration(len(g.recs)) * time.Microsecond)
	ev.Node, ev.Tenant, ev.Principal, ev.TurnID, ev.Seq, ev.PrevHash = "node-1", t.tenant, "ada", t.id, t.seq, t.prev
	rec, err := audit.Encode(ev)
	if err != nil {
		panic(err)
	}
	g.recs = append(g.recs, rec.Data)
	g.events++
	g.dirty[t.id] = &audit.TurnHead{TurnID: t.id, Tenant: t.tenant, Seq: t.seq, Hash: rec.Hash, Closed: ev.Type == audit.TurnClosed}
	t.seq++
	t.prev = rec.Hash
	t.next++
	if ev.Type == audit.TurnClosed {
		g.active = slices.Delete(g.active, i, i+1)
	}
}

func (g *benchGen) checkpoint() {
	if len(g.dirty) == 0 {
		return
	}
	heads := make([]audit.TurnHead, 0, len(g.dirty))
	for _, h := range g.dirty {
		heads = append(heads, *h)
	}
	slices.SortFunc(heads, func(a, b audit.TurnHead) int { return strings.Compare(a.TurnID, b.TurnID) })
	clear(g.dirty)
	for len(heads) > 0 {
		n := min(len(heads), auditstore.DefaultCheckpointTurns)
		cp := &audit.Checkpoint{Node: "node-1", Seq: g.cpSeq, PrevHash: g.cpPrev, Time: g.base.Add(time.Duration(len(g.recs)) * time.Microsecond), Events: uint64(g.events), Turns: heads[:n]}
		data, err := audit.SignCheckpoint(cp, g.key)
		if err != nil {
			panic(err)
		}
		g.recs = append(g.recs, data)
		g.cpSeq++
		g.cpPrev = audit.HashData(data)
		heads = heads[n:]
	}
}

// BenchmarkVerify verifies a trail of a million events (and its
// checkpoints) per iteration, with the checkpoints' keys trusted.
//
//	go test -run '^$' -bench '^BenchmarkVerify$' -benchtime 3x ./audit
func BenchmarkVerify(b *testing.B) {
	recs := benchTrail(b)
	bytes := 0
	for _, r := range recs {
		bytes += len(r)
	}
	opts := audit.VerifyOptions{Trusted: []ed25519.PublicKey{benchKey}}
	b.SetBytes(int64(bytes))
	for b.Loop() {
		v, err := audit.NewVerifierWith(opts)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			v.Add(r)
		}
		rep := v.Finish(false)
		if !rep.OK() || rep.Events != benchN || rep.Covered != uint64(benchN) {
			b.Fatalf("events %d (want %d), covered %d, checkpoints %d, violations %v", rep.Events, benchN, rep.Covered, rep.Checkpoints, rep.Violations[:min(3, len(rep.Violations))])
		}
	}
	b.ReportMetric(float64(benchN)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(benchN*b.N), "ns/event")
}
