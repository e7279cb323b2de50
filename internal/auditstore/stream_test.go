package auditstore

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

func TestSubjectCoversAndCollides(t *testing.T) {
	for _, c := range []struct {
		filter, sub      string
		covers, collides bool
	}{
		{"a.audit.seg.*", "a.audit.seg.*", true, true},
		{"a.audit.seg.>", "a.audit.seg.*", true, true},
		{"a.audit.>", "a.audit.seg.*", true, true},
		{"a.>", "a.audit.checkpoint.*", true, true},
		{">", "a.audit.seg.*", true, true},
		{"a.*.seg.*", "a.audit.seg.*", true, true},
		{"a.audit.seg.acme", "a.audit.seg.*", false, true},
		{"a.audit.seg.*", "a.audit.seg.>", false, true},
		{"a.audit.seg", "a.audit.seg.*", false, false},
		{"a.audit.seg.*.x", "a.audit.seg.*", false, false},
		{"b.audit.seg.*", "a.audit.seg.*", false, false},
		{"a.audit.seg.*", "a.audit.live.*.*.>", false, false},
		{"a.audit.>", "a.audit.live.*.*.>", true, true},
		{"a.audit.*.*.tool.>", "a.audit.live.*.*.>", false, true},
		{"a.audit.checkpoint.*", "a.audit.live.*.*.>", false, false},
		{"a.audit.seg.>", "a.audit.live.*.*.>", false, false},
		{"a.audit.*.*", "a.audit.live.*.*.>", false, false},
	} {
		if got := subjectCovers(c.filter, c.sub); got != c.covers {
			t.Errorf("subjectCovers(%q, %q) = %v", c.filter, c.sub, got)
		}
		if got := subjectsCollide(c.filter, c.sub); got != c.collides {
			t.Errorf("subjectsCollide(%q, %q) = %v", c.filter, c.sub, got)
		}
		if got := subjectsCollide(c.sub, c.filter); got != c.collides {
			t.Errorf("subjectsCollide(%q, %q) = %v", c.sub, c.filter, got)
		}
	}
}

// Problems is a plain function of a stream's config: a table of streams an
// operator might have, what the node says of each.
func TestStreamNeedsProblems(t *testing.T) {
	needs := StreamNeeds{Stream: "S", Prefix: "p", Replicas: 3, DuplicateWindow: 2 * time.Minute, MaxSegmentBytes: 512 << 10, Live: true}
	good := needs.Config()
	good.MaxBytes, good.MaxAge, good.DenyDelete, good.DenyPurge = 1<<30, time.Hour, false, false // the operator's
	with := func(f func(*jetstream.StreamConfig)) jetstream.StreamConfig {
		c := good
		c.Subjects = slices.Clone(good.Subjects)
		f(&c)
		return c
	}
	for _, c := range []struct {
		name string
		cfg  jetstream.StreamConfig
		want []string // one substring per problem, in order
	}{
		{"as created", needs.Config(), nil},
		{"operator's limits and flags", good, nil},
		{"more replicas, longer window, wider subjects", with(func(c *jetstream.StreamConfig) {
			c.Replicas, c.Duplicates, c.Subjects = 5, time.Hour, []string{"p.audit.*.*", "other.>"}
		}), nil},
		{"max msg size that fits", with(func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1 << 20 }), nil},
		{"no live copies: capturing them is harmless", with(func(c *jetstream.StreamConfig) { c.Subjects = []string{"p.audit.>", "x"} }), nil},
		{"checkpoint subject missing", with(func(c *jetstream.StreamConfig) { c.Subjects = []string{"p.audit.seg.*", "other.>"} }),
			[]string{"do not capture p.audit.checkpoint.*, which the node writes — fix: nats stream edit S --subjects 'other.>,p.audit.seg.*,p.audit.checkpoint.*'"}},
		{"one tenant only", with(func(c *jetstream.StreamConfig) { c.Subjects = []string{"p.audit.seg.acme", "p.audit.checkpoint.*"} }),
			[]string{"do not capture p.audit.seg.*, which the node writes — fix: nats stream edit S --subjects 'p.audit.seg.*,p.audit.checkpoint.*'"}},
		{"captures the live copies", with(func(c *jetstream.StreamConfig) { c.Subjects = []string{"p.audit.>", "other"} }),
			[]string{"subjects 'p.audit.>' capture the live copies p.audit.live.*.*.>, so every record would be stored twice — fix: nats stream edit S --subjects 'other,p.audit.seg.*,p.audit.checkpoint.*'"}},
		{"a tenant named seg has its live copies under live, not seg", with(func(c *jetstream.StreamConfig) { c.Subjects = []string{"p.audit.seg.>", "p.audit.checkpoint.*"} }), nil},
		{"captures one tenant's live copies", with(func(c *jetstream.StreamConfig) {
			c.Subjects = []string{"p.audit.seg.*", "p.audit.checkpoint.*", "p.audit.live.acme.>"}
		}),
			[]string{"subjects 'p.audit.live.acme.>' capture the live copies p.audit.live.*.*.>"}},
		{"memory", with(func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }), []string{"storage is memory"}},
		{"fewer replicas", with(func(c *jetstream.StreamConfig) { c.Replicas = 1 }), []string{"replicas 1, fewer than audit.replicas 3 — fix: nats stream edit S --replicas 3"}},
		{"short window", with(func(c *jetstream.StreamConfig) { c.Duplicates = time.Minute }),
			[]string{"duplicate window 1m0s, shorter than audit.duplicate_window 2m0s (a segment or checkpoint published again within it must be stored once) — fix: nats stream edit S --dupe-window 2m0s"}},
		{"interest", with(func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }), []string{"fix: nats stream edit S --retention limits"}},
		{"work queue", with(func(c *jetstream.StreamConfig) { c.Retention = jetstream.WorkQueuePolicy }), []string{"retention is workqueue"}},
		{"no ack", with(func(c *jetstream.StreamConfig) { c.NoAck = true }), []string{"fix: nats stream edit S --ack"}},
		{"small messages", with(func(c *jetstream.StreamConfig) { c.MaxMsgSize = 64 << 10 }), []string{"max message size 65536, smaller than a segment (audit.segment_max_bytes 524288 plus headers) — fix: nats stream edit S --max-msg-size 524544"}},
		{"sealed", with(func(c *jetstream.StreamConfig) { c.Sealed = true }), []string{"sealed"}},
		{"mirror", with(func(c *jetstream.StreamConfig) { c.Subjects, c.Mirror = nil, &jetstream.StreamSource{Name: "M"} }), []string{"a mirror of M"}},
		{"everything at once", with(func(c *jetstream.StreamConfig) {
			c.Subjects, c.Storage, c.Replicas = []string{"p.audit.seg.*"}, jetstream.MemoryStorage, 1
		}), []string{"do not capture p.audit.checkpoint.*", "storage is memory", "--replicas 3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := needs
			if c.name == "no live copies: capturing them is harmless" {
				n.Live = false
			}
			ps := n.Problems(c.cfg)
			if len(ps) != len(c.want) {
				t.Fatalf("%d problems, want %d: %q", len(ps), len(c.want), ps)
			}
			for i, p := range ps {
				if !strings.Contains(p.String(), c.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, p, c.want[i])
				}
			}
		})
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(ctxT(t, 5*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// edit changes a stream as `nats stream edit` does: read its config,
// change it, update.
func edit(t *testing.T, js jetstream.JetStream, name string, f func(*jetstream.StreamConfig)) jetstream.StreamConfig {
	t.Helper()
	cfg := streamConfig(t, js, name)
	f(&cfg)
	st, err := js.UpdateStream(ctxT(t, 5*time.Second), cfg)
	if err != nil {
		t.Fatalf("operator's edit: %v", err)
	}
	return st.CachedInfo().Config
}

// sameConfig fails unless the stream's config is still want.
func sameConfig(t *testing.T, js jetstream.JetStream, name string, want jetstream.StreamConfig) {
	t.Helper()
	if got := streamConfig(t, js, name); !reflect.DeepEqual(got, want) {
		t.Fatalf("the node changed the stream's config:\n got  %+v\n want %+v", got, want)
	}
}

// roundTrip emits a turn through sink and reads it back from the stream.
func roundTrip(t *testing.T, nc *nats.Conn, sink *JetStreamSink, turnID string) {
	t.Helper()
	recs := buildTurn(t, "acme", turnID, 6)
	emitAll(t, sink, recs)
	got := readAllData(t, nc, TailOptions{Filter: TailFilter{TurnID: turnID}})
	equalData(t, turnID, got, dataOf(recs, func(*audit.Event) bool { return true }))
}

// A missing stream is created hardened: file storage, limits retention,
// the segment and checkpoint subjects, deny delete and purge, discard old,
// the configured retention, replicas and duplicate window.
func TestStreamCreatedHardened(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	sink := newSink(t, nc, JetStreamOptions{MaxAge: 48 * time.Hour, MaxBytes: 64 << 20, DuplicateWindow: 5 * time.Minute})
	cfg := streamConfig(t, js, DefaultStream)
	if !slices.Equal(cfg.Subjects, audit.StreamSubjects(DefaultPrefix)) {
		t.Errorf("subjects %q, want %q", cfg.Subjects, audit.StreamSubjects(DefaultPrefix))
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"storage", cfg.Storage, jetstream.FileStorage},
		{"retention", cfg.Retention, jetstream.LimitsPolicy},
		{"deny_delete", cfg.DenyDelete, true},
		{"deny_purge", cfg.DenyPurge, true},
		{"discard", cfg.Discard, jetstream.DiscardOld},
		{"max_age", cfg.MaxAge, 48 * time.Hour},
		{"max_bytes", cfg.MaxBytes, int64(64 << 20)},
		{"duplicate_window", cfg.Duplicates, 5 * time.Minute},
		{"replicas", cfg.Replicas, 1},
		{"no_ack", cfg.NoAck, false},
		{"persist_mode", cfg.PersistMode, jetstream.DefaultPersistMode},
		{"allow_rollup", cfg.AllowRollup, false},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	roundTrip(t, nc, sink, "n1.created")
	// Deny delete holds: the trail cannot be edited through the API.
	st, _ := js.Stream(ctxT(t, 5*time.Second), DefaultStream)
	if err := st.DeleteMsg(ctxT(t, 5*time.Second), 1); err == nil {
		t.Error("a message was deleted from the hardened stream")
	}
	if err := st.Purge(ctxT(t, 5*time.Second)); err == nil {
		t.Error("the hardened stream was purged")
	}

	// Defaults: unlimited bytes, 30 days, 2 minutes.
	_, nc2 := natstest.Start(t, true)
	js2, _ := jetstream.New(nc2)
	newSink(t, nc2, JetStreamOptions{})
	cfg = streamConfig(t, js2, DefaultStream)
	if cfg.MaxBytes != -1 || cfg.MaxAge != DefaultMaxAge || cfg.Duplicates != DuplicateWindow {
		t.Errorf("defaults: max_bytes %d max_age %s duplicates %s", cfg.MaxBytes, cfg.MaxAge, cfg.Duplicates)
	}
}

// Nodes starting together on a missing stream all start: the first
// creates it, the others find it. Their retentions differ, so a node that
// loses the race is refused "name already in use" (the same config would
// be created again without error) and checks the winner's stream.
func TestStreamCreatedConcurrently(t *testing.T) {
	_, nc := natstest.Start(t, true)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	sinks := make([]*JetStreamSink, 4)
	for i := range sinks {
		wg.Go(func() {
			sinks[i], errs[i] = NewJetStreamSink(ctxT(t, 5*time.Second), nc,
				JetStreamOptions{Logger: quietLogger, MaxAge: time.Duration(i+1) * time.Hour})
		})
	}
	wg.Wait()
	for i, s := range sinks {
		if errs[i] != nil {
			t.Errorf("sink %d: %v", i, errs[i])
		}
		if s != nil {
			_ = s.Close(context.Background())
		}
	}
}

// An operator's edits (max bytes, max age, placement of limits) survive the
// sink's restart, even when the sink's own options say otherwise.
func TestStreamOperatorEditSurvivesRestart(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	opts := JetStreamOptions{MaxAge: time.Hour, MaxBytes: 1 << 30}
	first := newSink(t, nc, opts)
	roundTrip(t, nc, first, "n1.before")
	if err := first.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := edit(t, js, DefaultStream, func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.MaxAge, c.MaxMsgsPerSubject, c.Description = 8<<20, 3*time.Hour, 100000, "ours now"
	})
	second := newSink(t, nc, opts)
	sameConfig(t, js, DefaultStream, want)
	roundTrip(t, nc, second, "n1.after")
	sameConfig(t, js, DefaultStream, want)
}

// A stream the operator made (or hardened) with deny delete and purge, and
// limits of their own, is accepted as it is and served.
func TestStreamOperatorHardeningAccepted(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	// As a node before this change created it: no deny flags.
	if _, err := js.CreateStream(ctxT(t, 5*time.Second), jetstream.StreamConfig{
		Name: DefaultStream, Subjects: audit.StreamSubjects(DefaultPrefix), Storage: jetstream.FileStorage,
		MaxAge: DefaultMaxAge, Duplicates: DuplicateWindow,
	}); err != nil {
		t.Fatal(err)
	}
	// nats stream edit SHAREDOS_AUDIT --deny-delete --deny-purge --max-bytes 16MiB
	want := edit(t, js, DefaultStream, func(c *jetstream.StreamConfig) {
		c.DenyDelete, c.DenyPurge, c.MaxBytes = true, true, 16<<20
	})
	sink := newSink(t, nc, JetStreamOptions{})
	roundTrip(t, nc, sink, "n1.hardened")
	sameConfig(t, js, DefaultStream, want)
}

// A compatible stream the operator created beforehand (wider subjects,
// longer window, other limits) is served and left as it is.
func TestStreamPreexistingCompatible(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctxT(t, 5*time.Second), jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{"sharedos.audit.*.*", "archive.>"},
		Storage: jetstream.FileStorage, MaxAge: 90 * 24 * time.Hour, MaxBytes: 256 << 20, Duplicates: 10 * time.Minute,
		Discard: jetstream.DiscardNew, MaxMsgSize: 4 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := st.CachedInfo().Config
	sink := newSink(t, nc, JetStreamOptions{})
	roundTrip(t, nc, sink, "n1.pre")
	sameConfig(t, js, DefaultStream, want)
}

// A stream that cannot serve is refused with one message naming each
// problem and its fix, and left unchanged.
func TestStreamRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  jetstream.StreamConfig
		opts JetStreamOptions
		want []string
	}{
		{"missing the checkpoint subject",
			jetstream.StreamConfig{Subjects: []string{"sharedos.audit.seg.*"}, Storage: jetstream.FileStorage},
			JetStreamOptions{},
			[]string{"(1) subjects 'sharedos.audit.seg.*' do not capture sharedos.audit.checkpoint.*, which the node writes — fix: nats stream edit SHAREDOS_AUDIT --subjects 'sharedos.audit.seg.*,sharedos.audit.checkpoint.*'"}},
		{"memory storage",
			jetstream.StreamConfig{Subjects: audit.StreamSubjects(DefaultPrefix), Storage: jetstream.MemoryStorage},
			JetStreamOptions{},
			[]string{"(1) storage is memory; the audit trail needs file storage — fix: storage cannot be edited"}},
		{"fewer replicas than configured",
			jetstream.StreamConfig{Subjects: audit.StreamSubjects(DefaultPrefix), Storage: jetstream.FileStorage},
			JetStreamOptions{Replicas: 3},
			[]string{"(1) replicas 1, fewer than audit.replicas 3 — fix: nats stream edit SHAREDOS_AUDIT --replicas 3"}},
		{"all three, and a short window",
			jetstream.StreamConfig{Subjects: []string{"sharedos.audit.seg.*"}, Storage: jetstream.MemoryStorage, Duplicates: 30 * time.Second},
			JetStreamOptions{Replicas: 3},
			[]string{"(1) subjects", "(2) storage is memory", "(3) replicas 1, fewer than audit.replicas 3", "(4) duplicate window 30s", "--dupe-window 2m0s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, nc := natstest.Start(t, true)
			js, _ := jetstream.New(nc)
			c.cfg.Name = DefaultStream
			st, err := js.CreateStream(ctxT(t, 5*time.Second), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := st.CachedInfo().Config
			c.opts.Logger = quietLogger
			sink, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, c.opts)
			if err == nil {
				_ = sink.Close(context.Background())
				t.Fatal("the sink started on a stream that cannot serve it")
			}
			if !errors.Is(err, ErrStreamUnusable) {
				t.Errorf("error %v is not ErrStreamUnusable", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "audit: the audit stream cannot serve this node: stream SHAREDOS_AUDIT (left unchanged): ") {
				t.Errorf("message %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q\n does not say %q", msg, w)
				}
			}
			if n := strings.Count(msg, " — fix: "); n != len(c.want) && c.name != "all three, and a short window" {
				t.Errorf("%d problems named, want %d: %q", n, len(c.want), msg)
			}
			sameConfig(t, js, DefaultStream, want)
		})
	}
}

// A stream made before segments — subjects "<prefix>.audit.>" — is moved
// to the segment subjects once; nothing else of it changes (here: the
// operator's deny flags and max bytes), and a second start finds nothing
// to do.
func TestStreamLegacyMovedOnce(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctxT(t, 5*time.Second), jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{DefaultPrefix + ".audit.>"}, Storage: jetstream.FileStorage,
		MaxAge: DefaultMaxAge, MaxBytes: 32 << 20, Duplicates: DuplicateWindow, DenyDelete: true, DenyPurge: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := st.CachedInfo().Config
	want.Subjects = audit.StreamSubjects(DefaultPrefix)
	var logs logBuffer
	first := newSink(t, nc, JetStreamOptions{Logger: logs.logger()})
	sameConfig(t, js, DefaultStream, want)
	if !strings.Contains(logs.String(), "its subjects moved") {
		t.Errorf("the move was not logged: %q", logs.String())
	}
	roundTrip(t, nc, first, "n1.moved")
	if err := first.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var again logBuffer
	newSink(t, nc, JetStreamOptions{Logger: again.logger()})
	if strings.Contains(again.String(), "moved") {
		t.Errorf("moved again: %q", again.String())
	}
	sameConfig(t, js, DefaultStream, want)
}

// A legacy stream that could not serve even once moved is refused before
// anything is changed.
func TestStreamLegacyRefusedUnchanged(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctxT(t, 5*time.Second), jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{DefaultPrefix + ".audit.>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := st.CachedInfo().Config
	_, err = NewJetStreamSink(ctxT(t, 5*time.Second), nc, JetStreamOptions{Logger: quietLogger})
	if !errors.Is(err, ErrStreamUnusable) || !strings.Contains(err.Error(), "storage is memory") || !strings.Contains(err.Error(), "made before segments") {
		t.Fatalf("err = %v", err)
	}
	sameConfig(t, js, DefaultStream, want)
}

// logBuffer collects a logger's text output.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
