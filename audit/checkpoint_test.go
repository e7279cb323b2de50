package audit

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// cpTurn returns a valid chain of one turn: opened, resolved, calls
// (invoked + completed), and turn.closed when closed.
func cpTurn(t testing.TB, node, tenant, turnID string, calls int, closed bool) []*Record {
	t.Helper()
	tool := Tool{Alias: "notes_get", Provider: "notes", Name: "get", Namespace: "notes", Revision: strings.Repeat("ab", 32)}
	catHash := catalogHashOf([]leanTool{{alias: []byte(tool.Alias), revision: []byte(tool.Revision)}})
	var out []*Record
	prev := ""
	base := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	add := func(ev *Event) {
		seq := uint64(len(out))
		ev.ID, ev.Time, ev.Node, ev.Tenant, ev.Principal = turnID+"-"+strconv.FormatUint(seq, 10), base.Add(time.Duration(seq)), node, tenant, "ada"
		ev.TurnID, ev.Seq, ev.PrevHash = turnID, seq, prev
		r, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
		out = append(out, r)
	}
	add(&Event{Type: TurnOpened, Namespaces: []string{"notes"}})
	add(&Event{Type: CatalogResolved, CatalogHash: catHash, Catalog: &Catalog{Tools: []Tool{tool}, Providers: []ProviderStatus{{Provider: "notes", Status: "ok", Tools: 1}}}})
	for i := range calls {
		id := "c" + strconv.Itoa(i+1)
		add(&Event{Type: ToolInvoked, CatalogHash: catHash, Call: &Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Step: i + 1, Decision: "allow", ArgsHash: strings.Repeat("0", 64)}})
		add(&Event{Type: ToolCompleted, CatalogHash: catHash, Call: &Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Outcome: "ok", Duration: 5}})
	}
	if closed {
		add(&Event{Type: TurnClosed, CatalogHash: catHash, Close: &Close{Reason: "closed", Steps: calls, Events: uint64(len(out)) + 1}})
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

func TestCheckpointSignAndParse(t *testing.T) {
	key := cpKey(t)
	pub := key.Public().(ed25519.PublicKey)
	cp := &Checkpoint{Node: "node-1", Seq: 7, PrevHash: strings.Repeat("1", 64), Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Events: 42,
		Turns: []TurnHead{{TurnID: "a", Tenant: "acme", Seq: 3, Hash: strings.Repeat("2", 64)}, {TurnID: "b<&>", Tenant: "ü", Seq: 9, Hash: strings.Repeat("3", 64), Closed: true}}}
	data, err := SignCheckpoint(cp, key)
	if err != nil {
		t.Fatal(err)
	}
	if !IsCheckpoint(data) {
		t.Fatalf("IsCheckpoint(%s) = false", data)
	}
	p, err := ParseCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.VerifySignature(pub); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Checkpoint, *cp) || p.Hash != HashData(data) || p.KeyID != KeyID(pub) {
		t.Fatalf("parsed %+v, signed %+v", p.Checkpoint, *cp)
	}
	// The unsigned form is what encoding/json writes, so any JSON reader
	// sees the same document.
	want, _ := json.Marshal(cp)
	if !bytes.Equal(p.Body, want) {
		t.Fatalf("canonical form\n%s\nencoding/json\n%s", p.Body, want)
	}

	// Any change to the signed bytes fails the signature; any change to
	// the form fails parsing.
	for i := range len(p.Body) - 1 {
		mod := bytes.Clone(data)
		mod[i] ^= 0x01
		q, err := ParseCheckpoint(mod)
		if err != nil {
			continue
		}
		if q.VerifySignature(pub) == nil {
			t.Fatalf("flipping byte %d (%q) went unnoticed", i, data[i])
		}
	}
	for name, bad := range map[string]string{
		"spaces":        strings.Replace(string(data), `"v":1,`, `"v": 1,`, 1),
		"key order":     strings.Replace(string(data), `{"type":"audit.checkpoint","v":1,`, `{"v":1,"type":"audit.checkpoint",`, 1),
		"duplicate key": strings.Replace(string(data), `"events":42,`, `"events":42,"events":42,`, 1),
		"unknown field": strings.Replace(string(data), `"events":42,`, `"events":42,"x":1,`, 1),
		"no sig":        string(p.Body),
		"short sig":     string(data[:len(data)-4]) + `"}`,
		"not hex sig":   string(data[:len(data)-3]) + `x"}`,
		"version":       strings.Replace(string(data), `"v":1,`, `"v":2,`, 1),
	} {
		if _, err := ParseCheckpoint([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	other := cpKey(t).Public().(ed25519.PublicKey)
	if err := p.VerifySignature(other); err == nil {
		t.Fatal("verified under another key")
	}
	if _, err := SignCheckpoint(&Checkpoint{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, key); err == nil {
		t.Fatal("signed an unencodable time")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := DefaultKeyFile(dir)
	if _, err := ReadPrivateKey(path); !errors.Is(err, fs.ErrNotExist) {
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
	if _, err := ReadPrivateKey(ecPath); err == nil {
		t.Fatal("an ECDSA key was accepted")
	}
}

func TestParsePublicKeys(t *testing.T) {
	a, b := cpKey(t).Public().(ed25519.PublicKey), cpKey(t).Public().(ed25519.PublicKey)
	der, _ := x509.MarshalPKIXPublicKey(a)
	pemA := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	der, _ = x509.MarshalPKIXPublicKey(b)
	pemB := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	js := fmt.Sprintf(`{"keys":[{"node":"node-1","public_key":%q},{"public_key":%q}]}`, hex.EncodeToString(a), hex.EncodeToString(b))
	lines := fmt.Sprintf("# trusted audit keys\nnode-1 %s\n\n%s  # node-2\n", hex.EncodeToString(a), hex.EncodeToString(b))
	for name, in := range map[string]string{"pem": string(pemA) + string(pemB), "json": js, "lines": lines, "dup": lines + hex.EncodeToString(a)} {
		keys, err := ParsePublicKeys([]byte(in))
		if err != nil || len(keys) != 2 || !keys[0].Equal(a) || !keys[1].Equal(b) {
			t.Errorf("%s: %v %v", name, keys, err)
		}
	}
	for name, in := range map[string]string{
		"empty": "", "comment only": "# none\n", "bad line": "node-1 abc\n", "bad json": `{"keys":[{"public_key":"zz"}]}`,
		"private pem": "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
		// What the stream's checkpoints claim is not a trust anchor, and
		// a key_id must be its key's.
		"stream key":   fmt.Sprintf(`{"keys":[{"public_key":%q,"source":"local"},{"public_key":%q,"source":"stream"}]}`, hex.EncodeToString(a), hex.EncodeToString(b)),
		"wrong key_id": fmt.Sprintf(`{"keys":[{"public_key":%q,"key_id":%q}]}`, hex.EncodeToString(a), KeyID(b)),
	} {
		if _, err := ParsePublicKeys([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
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

func (s *cpStack) emit(t *testing.T, recs []*Record) {
	t.Helper()
	ctx := cpCtx(t, 5*time.Second)
	for _, r := range recs {
		if err := Wait(ctx, s.cp.Emit(r)); err != nil {
			t.Fatal(err)
		}
	}
}

func cpReadAll(t *testing.T, nc *nats.Conn) [][]byte {
	t.Helper()
	var out [][]byte
	if err := ReadAll(cpCtx(t, 10*time.Second), nc, TailOptions{}, func(d []byte, _ *Event) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func cpVerify(t *testing.T, recs [][]byte, opts VerifyOptions, openOK bool) Report {
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

func TestCheckpointerPublishesChangedTurns(t *testing.T) {
	_, nc := natstest.Start(t, true)
	key := cpKey(t)
	state := filepath.Join(t.TempDir(), "audit", "checkpoint.json")
	s := cpStart(t, nc, CheckpointOptions{Key: key, StateFile: state, MaxTurns: 2})
	ctx := cpCtx(t, 10*time.Second)

	if recs, err := s.cp.Checkpoint(ctx); err != nil || recs != nil {
		t.Fatalf("nothing written: %v %v", recs, err)
	}
	turns := make([][]*Record, 5)
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
		p, err := ParseCheckpoint(r)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seq != uint64(i) || p.Node != "node-1" || len(p.Turns) != min(2, 5-2*i) {
			t.Fatalf("checkpoint %d: %+v", i, p.Checkpoint)
		}
		for _, h := range p.Turns {
			tr := turns[h.TurnID[1]-'0']
			last := tr[len(tr)-1]
			if h.Seq != last.Event.Seq || h.Hash != last.Hash || h.Closed != (last.Event.Type == TurnClosed) || h.Tenant != "acme" {
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
	p, _ := ParseCheckpoint(recs[0])
	if len(p.Turns) != 1 || p.Turns[0].TurnID != "t1" || !p.Turns[0].Closed || p.Seq != 3 || p.Events != total+uint64(len(more)-len(turns[1])) {
		t.Fatalf("%+v", p.Checkpoint)
	}

	trail := cpReadAll(t, nc)
	rep := cpVerify(t, trail, VerifyOptions{Trusted: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, Anchors: [][]byte{b}}, true)
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
	if p, _ := ParseCheckpoint(recs[0]); p.Seq != 1 {
		t.Fatalf("resumed at %d, want 1", p.Seq)
	}
	if rep := cpVerify(t, cpReadAll(t, nc), VerifyOptions{}, false); !rep.OK() || rep.Checkpoints != 2 {
		t.Fatalf("%+v", rep)
	}

	// The stream loses checkpoint 1; the state file still has it.
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, CheckpointSubject(DefaultPrefix, "node-1"))
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
	if p, _ := ParseCheckpoint(recs[0]); p.Seq != 2 {
		t.Fatalf("resumed at %d, want 2", p.Seq)
	}
	rep := cpVerify(t, cpReadAll(t, nc), VerifyOptions{}, false)
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
	p, err := ParseCheckpoint(s.cp.Last())
	if err != nil || len(p.Turns) != 1 || !p.Turns[0].Closed {
		t.Fatalf("final checkpoint %+v (%v)", p, err)
	}
	if rep := cpVerify(t, cpReadAll(t, nc), VerifyOptions{Trusted: []ed25519.PublicKey{s.cp.PublicKey()}}, false); !rep.OK() || rep.Covered != 5 {
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
		if _, err := StartCheckpointer(context.Background(), nc, Discard{}, opts); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}

// The verifier's fast decoder reads exactly what encoding/json reads
// wherever it accepts a record, and accepts everything Encode writes for
// plain strings.
func TestFastDecoderAgreesWithJSON(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	words := []string{"", "a", "node-1", "notes_get", "x<y", "a&b", `q"uote`, "back\\slash", "ü", "tab\t", "\u2028"}
	str := func() string {
		if r.IntN(3) > 0 {
			return strings.Repeat("ab", r.IntN(4)) + strconv.Itoa(r.IntN(100))
		}
		return words[r.IntN(len(words))]
	}
	strs := func() []string {
		var s []string
		for range r.IntN(3) {
			s = append(s, str())
		}
		return s
	}
	plain := func(ev *Event) bool {
		b, _ := json.Marshal(ev)
		for _, c := range b {
			if c >= 0x7f || c == '\\' {
				return false
			}
		}
		return true
	}
	for i := range 4000 {
		ev := &Event{ID: str(), Type: Types()[r.IntN(len(Types()))], Time: time.Unix(r.Int64N(1e10), r.Int64N(1e9)).UTC(), Node: str(),
			Tenant: str(), Principal: str(), CredentialProfile: str(), TurnID: str(), OneOperation: r.IntN(2) == 0,
			Seq: r.Uint64(), PrevHash: str(), CatalogHash: str(), Namespaces: strs(), Listed: strs()}
		if r.IntN(2) == 0 {
			ev.Catalog = &Catalog{}
			for range r.IntN(3) {
				ev.Catalog.Tools = append(ev.Catalog.Tools, Tool{str(), str(), str(), str(), str()})
			}
			for range r.IntN(3) {
				ev.Catalog.Providers = append(ev.Catalog.Providers, ProviderStatus{str(), str(), str(), str(), r.IntN(9) - 2, strs(), r.Int64N(1e6)})
			}
		}
		if r.IntN(2) == 0 {
			ev.Call = &Call{str(), str(), str(), str(), str(), r.IntN(5), str(), str(), str(), str(), str(), str(), r.Int64N(100) - 50, r.IntN(5)}
		}
		if r.IntN(3) == 0 {
			ev.Close = &Close{Reason: str(), Steps: r.IntN(5), Events: r.Uint64()}
		}
		rec, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		var fast leanEvent
		ok := fast.parse(rec.Data)
		if plain(ev) && !ok {
			t.Fatalf("event %d: the fast decoder refused %s", i, rec.Data)
		}
		if ok {
			cpSameLean(t, rec.Data, &fast)
		}
		// Damaged records: never a panic, never another reading.
		for range 4 {
			mod := bytes.Clone(rec.Data)
			switch r.IntN(3) {
			case 0:
				mod = mod[:r.IntN(len(mod))]
			case 1:
				mod[r.IntN(len(mod))] = "{}[]\",:0a-\\"[r.IntN(11)]
			case 2:
				j := r.IntN(len(mod))
				mod = append(mod[:j:j], append([]byte(" "), mod[j:]...)...)
			}
			var f leanEvent
			if f.parse(mod) {
				cpSameLean(t, mod, &f)
			}
		}
	}
}

func cpSameLean(t *testing.T, data []byte, fast *leanEvent) {
	t.Helper()
	var full Event
	if err := json.Unmarshal(data, &full); err != nil {
		// The fast decoder skips time values it does not judge;
		// encoding/json refuses an invalid one. Nothing else may differ.
		if !strings.Contains(err.Error(), "time") && !strings.Contains(err.Error(), "parsing") {
			t.Fatalf("fast decoder accepted what encoding/json refuses (%v): %s", err, data)
		}
		return
	}
	var slow leanEvent
	slow.fromEvent(&full)
	norm := func(e *leanEvent) string {
		var b strings.Builder
		for _, f := range [][]byte{e.typ, e.node, e.tenant, e.turn, e.prevHash, e.catalogHash, e.call.id, e.call.alias, e.call.provider, e.call.name, e.call.revision, e.call.decision} {
			fmt.Fprintf(&b, "%q,", f)
		}
		fmt.Fprintf(&b, "%d,%v,%v,%d,", e.seq, e.hasCall, e.hasClose, e.closeEvents)
		for _, tl := range e.tools {
			fmt.Fprintf(&b, "[%q %q %q %q %q]", tl.alias, tl.provider, tl.name, tl.namespace, tl.revision)
		}
		fmt.Fprintf(&b, "%q", e.listed)
		return b.String()
	}
	if a, b := norm(fast), norm(&slow); a != b {
		t.Fatalf("readings differ for %s:\nfast %s\njson %s", data, a, b)
	}
}
