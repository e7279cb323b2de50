package auditstore

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// cpCatalogHash is the catalogue hash of cpTurn's one tool (the verifier
// recomputes it, so a wrong value fails every test verifying cpTurn).
const cpCatalogHash = "b676f6d0badd6515a8e91d2a0b839b94b0017e4160ba5f20d96d40e6177ede4b"

// cpTurn returns a valid chain of one turn: opened, resolved, calls
// (invoked + completed), and turn.closed when closed.
func cpTurn(t testing.TB, node, tenant, turnID string, calls int, closed bool) []*audit.Record {
	t.Helper()
	tool := audit.Tool{Alias: "notes_get", Provider: "notes", Name: "get", Namespace: "notes", Revision: strings.Repeat("ab", 32)}
	catHash := cpCatalogHash
	var out []*audit.Record
	prev := ""
	base := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	add := func(ev *audit.Event) {
		seq := uint64(len(out))
		ev.ID, ev.Time, ev.Node, ev.Tenant, ev.Principal = turnID+"-"+strconv.FormatUint(seq, 10), base.Add(time.Duration(seq)), node, tenant, "ada"
		ev.TurnID, ev.Seq, ev.PrevHash = turnID, seq, prev
		r, err := audit.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
		out = append(out, r)
	}
	add(&audit.Event{Type: audit.TurnOpened, Namespaces: []string{"notes"}})
	add(&audit.Event{Type: audit.CatalogResolved, CatalogHash: catHash, Catalog: &audit.Catalog{Tools: []audit.Tool{tool}, Providers: []audit.ProviderStatus{{Provider: "notes", Status: "ok", Tools: 1}}}})
	for i := range calls {
		id := "c" + strconv.Itoa(i+1)
		add(&audit.Event{Type: audit.ToolInvoked, CatalogHash: catHash, Call: &audit.Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Step: i + 1, Decision: "allow", ArgsHash: strings.Repeat("0", 64)}})
		add(&audit.Event{Type: audit.ToolCompleted, CatalogHash: catHash, Call: &audit.Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Outcome: "ok", Duration: 5}})
	}
	if closed {
		add(&audit.Event{Type: audit.TurnClosed, CatalogHash: catHash, Close: &audit.Close{Reason: "closed", Steps: calls, Events: uint64(len(out)) + 1}})
	}
	return out
}

func cpKey(t testing.TB) ed25519.PrivateKey {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := DefaultKeyFile(dir)
	if _, err := audit.ReadPrivateKey(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing key: %v", err)
	}
	key, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	again, err := LoadOrCreateKey(path)
	if err != nil || !again.Equal(key) {
		t.Fatalf("reloaded another key (%v)", err)
	}
	// The file is the standard PKCS #8 PEM (what openssl genpkey writes).
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil || !k.(ed25519.PrivateKey).Equal(key) {
		t.Fatalf("not PKCS #8: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key was used: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPath := filepath.Join(dir, "ec.key")
	if err := os.WriteFile(ecPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.ReadPrivateKey(ecPath); err == nil {
		t.Fatal("an ECDSA key was accepted")
	}
}

// cpStack is a JetStream server, a sink and a Checkpointer on it.
type cpStack struct {
	nc   *nats.Conn
	sink *JetStreamSink
	cp   *Checkpointer
}

func cpStart(t *testing.T, nc *nats.Conn, opts CheckpointOptions) *cpStack {
	t.Helper()
	sink := newCPSink(t, nc)
	if opts.Node == "" {
		opts.Node = "node-1"
	}
	if opts.Interval == 0 {
		opts.Interval = -1
	}
	opts.Logger = quietCPLogger
	cp, err := StartCheckpointer(cpCtx(t, 5*time.Second), nc, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Close(context.Background()) })
	return &cpStack{nc: nc, sink: sink, cp: cp}
}

var quietCPLogger = slog.New(slog.DiscardHandler)

func cpCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newCPSink(t *testing.T, nc *nats.Conn) *JetStreamSink {
	t.Helper()
	s, err := NewJetStreamSink(cpCtx(t, 5*time.Second), nc, JetStreamOptions{Logger: quietCPLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func (s *cpStack) emit(t *testing.T, recs []*audit.Record) {
	t.Helper()
	ctx := cpCtx(t, 5*time.Second)
	for _, r := range recs {
		if err := audit.Wait(ctx, s.cp.Emit(r)); err != nil {
			t.Fatal(err)
		}
	}
}

func cpReadAll(t *testing.T, nc *nats.Conn) [][]byte {
	t.Helper()
	var out [][]byte
	if err := ReadAll(cpCtx(t, 10*time.Second), nc, TailOptions{}, func(d []byte, _ *audit.Event) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func cpVerify(t *testing.T, recs [][]byte, opts audit.VerifyOptions, openOK bool) audit.Report {
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

func TestCheckpointerPublishesChangedTurns(t *testing.T) {
	_, nc := natstest.Start(t, true)
	key := cpKey(t)
	state := filepath.Join(t.TempDir(), "audit", "checkpoint.json")
	s := cpStart(t, nc, CheckpointOptions{Key: key, StateFile: state, MaxTurns: 2})
	ctx := cpCtx(t, 10*time.Second)

	if recs, err := s.cp.Checkpoint(ctx); err != nil || recs != nil {
		t.Fatalf("nothing written: %v %v", recs, err)
	}
	turns := make([][]*audit.Record, 5)
	for i := range turns {
		turns[i] = cpTurn(t, "node-1", "acme", fmt.Sprintf("t%d", i), i, i%2 == 0)
		s.emit(t, turns[i])
	}
	recs, err := s.cp.Checkpoint(ctx)
	if err != nil || len(recs) != 3 {
		t.Fatalf("5 turns, 2 per checkpoint: %d checkpoints, %v", len(recs), err)
	}
	var total uint64
	for i, r := range recs {
		p, err := audit.ParseCheckpoint(r)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seq != uint64(i) || p.Node != "node-1" || len(p.Turns) != min(2, 5-2*i) {
			t.Fatalf("checkpoint %d: %+v", i, p.Checkpoint)
		}
		for _, h := range p.Turns {
			tr := turns[h.TurnID[1]-'0']
			last := tr[len(tr)-1]
			if h.Seq != last.Event.Seq || h.Hash != last.Hash || h.Closed != (last.Event.Type == audit.TurnClosed) || h.Tenant != "acme" {
				t.Fatalf("head %+v, last event %+v", h, last.Event)
			}
			total += h.Seq + 1
		}
	}
	if recs, err := s.cp.Checkpoint(ctx); err != nil || recs != nil {
		t.Fatalf("nothing changed: %d checkpoints, %v", len(recs), err)
	}
	b, err := os.ReadFile(state)
	if err != nil || !bytes.Equal(bytes.TrimSpace(b), recs2last(recs)) || !bytes.Equal(s.cp.Last(), recs2last(recs)) {
		t.Fatalf("state file %q (%v)", b, err)
	}

	// Only the turn that changed is in the next checkpoint.
	more := cpTurn(t, "node-1", "acme", "t1", 2, true)
	s.emit(t, more[len(turns[1]):])
	recs, err = s.cp.Checkpoint(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d checkpoints, %v", len(recs), err)
	}
	p, _ := audit.ParseCheckpoint(recs[0])
	if len(p.Turns) != 1 || p.Turns[0].TurnID != "t1" || !p.Turns[0].Closed || p.Seq != 3 || p.Events != total+uint64(len(more)-len(turns[1])) {
		t.Fatalf("%+v", p.Checkpoint)
	}

	trail := cpReadAll(t, nc)
	rep := cpVerify(t, trail, audit.VerifyOptions{Trusted: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, Anchors: [][]byte{b}}, true)
	if !rep.OK() || rep.Checkpoints != 4 || rep.Covered != uint64(rep.Events) {
		t.Fatalf("%+v", rep)
	}
}

func recs2last(recs [][]byte) []byte { return recs[len(recs)-1] }

// A restarted node continues its chain; if the stream lost the chain's
// tail, the next checkpoint shows the gap.
func TestCheckpointerResumes(t *testing.T) {
	_, nc := natstest.Start(t, true)
	key := cpKey(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "checkpoint.json")
	ctx := cpCtx(t, 10*time.Second)
	// The stream the node would create denies deletes; an operator's
	// stream that allows them (which the node accepts) lets the test lose
	// a checkpoint below.
	js, _ := jetstream.New(nc)
	scfg := StreamNeeds{Stream: DefaultStream, Prefix: DefaultPrefix, Replicas: 1, DuplicateWindow: DuplicateWindow}.Config()
	scfg.DenyDelete = false
	if _, err := js.CreateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}

	first := cpStart(t, nc, CheckpointOptions{Key: key, StateFile: state})
	first.emit(t, cpTurn(t, "node-1", "acme", "a", 1, true))
	if err := first.cp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.cp.Close(ctx); err != nil {
		t.Fatal("Close is not idempotent:", err)
	}

	// From the stream, with the state file gone.
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	second := cpStart(t, nc, CheckpointOptions{Key: key, StateFile: state})
	second.emit(t, cpTurn(t, "node-1", "acme", "b", 1, true))
	recs, err := second.cp.Checkpoint(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatal(err)
	}
	if p, _ := audit.ParseCheckpoint(recs[0]); p.Seq != 1 {
		t.Fatalf("resumed at %d, want 1", p.Seq)
	}
	if rep := cpVerify(t, cpReadAll(t, nc), audit.VerifyOptions{}, false); !rep.OK() || rep.Checkpoints != 2 {
		t.Fatalf("%+v", rep)
	}

	// The stream loses checkpoint 1; the state file still has it.
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, audit.CheckpointSubject(DefaultPrefix, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	third := cpStart(t, nc, CheckpointOptions{Key: key, StateFile: state})
	third.emit(t, cpTurn(t, "node-1", "acme", "c", 1, true))
	if recs, err = third.cp.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := audit.ParseCheckpoint(recs[0]); p.Seq != 2 {
		t.Fatalf("resumed at %d, want 2", p.Seq)
	}
	rep := cpVerify(t, cpReadAll(t, nc), audit.VerifyOptions{}, false)
	if len(rep.Violations) < 1 || !rep.Violations[0].Checkpoint || rep.Violations[0].Seq != 1 {
		t.Fatalf("the lost checkpoint went unnoticed: %+v", rep.Violations)
	}
	// Turn b, which only checkpoint 1 attested, is not reported missing
	// (its events are all there), but the gap is.
	for _, v := range rep.Violations {
		if !v.Checkpoint {
			t.Fatalf("turn violation %v", v)
		}
	}

	// A state file of another node, or not a checkpoint, stops the start.
	if err := os.WriteFile(state, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := StartCheckpointer(ctx, nc, newCPSink(t, nc), CheckpointOptions{Node: "node-1", Key: key, StateFile: state, Interval: -1, Logger: quietCPLogger}); err == nil {
		t.Fatal("started on a damaged state file")
	}
}

func TestCheckpointerPeriodicAndFinal(t *testing.T) {
	_, nc := natstest.Start(t, true)
	s := cpStart(t, nc, CheckpointOptions{KeyFile: filepath.Join(t.TempDir(), "k.key"), Interval: 20 * time.Millisecond})
	s.emit(t, cpTurn(t, "node-1", "acme", "a", 1, false))
	deadline := time.Now().Add(10 * time.Second)
	for s.cp.Last() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no periodic checkpoint")
		}
		time.Sleep(5 * time.Millisecond)
	}
	closing := cpTurn(t, "node-1", "acme", "a", 1, true)
	s.emit(t, closing[len(closing)-1:])
	if err := s.cp.Close(cpCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	p, err := audit.ParseCheckpoint(s.cp.Last())
	if err != nil || len(p.Turns) != 1 || !p.Turns[0].Closed {
		t.Fatalf("final checkpoint %+v (%v)", p, err)
	}
	if rep := cpVerify(t, cpReadAll(t, nc), audit.VerifyOptions{Trusted: []ed25519.PublicKey{s.cp.PublicKey()}}, false); !rep.OK() || rep.Covered != 5 {
		t.Fatalf("%+v", rep)
	}
}

// A checkpoint that fails to publish is retried byte for byte, and no
// new checkpoint is made meanwhile.
func TestCheckpointerRetries(t *testing.T) {
	_, nc := natstest.Start(t, true)
	s := cpStart(t, nc, CheckpointOptions{Key: cpKey(t)})
	ctx := cpCtx(t, 10*time.Second)
	s.emit(t, cpTurn(t, "node-1", "acme", "a", 1, true))
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := s.cp.Checkpoint(short); err == nil {
		t.Fatal("published without a stream")
	}
	failed := bytes.Clone(s.cp.pending[0])
	newCPSink(t, nc) // recreates the stream
	recs, err := s.cp.Checkpoint(ctx)
	if err != nil || len(recs) != 1 || !bytes.Equal(recs[0], failed) {
		t.Fatalf("retry published %d records (%v)", len(recs), err)
	}
}

func TestStartCheckpointerRefusesBadOptions(t *testing.T) {
	_, nc := natstest.Start(t, false)
	for name, opts := range map[string]CheckpointOptions{
		"no node":      {Key: cpKey(t)},
		"dotted node":  {Node: "a.b", Key: cpKey(t)},
		"no key":       {Node: "n"},
		"short key":    {Node: "n", Key: ed25519.PrivateKey{1}},
		"bad prefix":   {Node: "n", Key: cpKey(t), Prefix: "a..b"},
		"bad key file": {Node: "n", KeyFile: filepath.Join(t.TempDir(), "missing-dir", "\x00")},
	} {
		if _, err := StartCheckpointer(context.Background(), nc, audit.Discard{}, opts); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}

// Checkpointer notes a record as its turn's head before the next sink
// takes it: the next sink (the stream) cannot store a record that a
// snapshot taken after the store would miss.
func TestCheckpointerNotesTheHeadBeforeHandingOn(t *testing.T) {
	probe := &headProbe{}
	c := &Checkpointer{next: probe, heads: map[string]*audit.TurnHead{}}
	probe.c = c
	for _, r := range cpTurn(t, "node-1", "acme", "t1", 1, true) {
		if err := c.Emit(r).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if probe.n != 5 || probe.missed != 0 {
		t.Fatalf("%d records handed on, %d of them before their head was noted", probe.n, probe.missed)
	}
}

// headProbe is a Sink that checks, as it takes each record, that its
// Checkpointer already holds it as its turn's head.
type headProbe struct {
	c         *Checkpointer
	n, missed int
}

func (p *headProbe) Emit(rec *audit.Record) audit.Receipt {
	p.c.mu.Lock()
	h := p.c.heads[rec.Event.TurnID]
	if h == nil || h.Seq != rec.Event.Seq || h.Hash != rec.Hash {
		p.missed++
	}
	p.c.mu.Unlock()
	p.n++
	return audit.Completed(nil)
}
