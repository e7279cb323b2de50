package natsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startT(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func echoRoundTrip(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		_ = m.Respond(append([]byte("echo:"), m.Data...))
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	reply, err := nc.Request(subject, []byte("hello"), 2*time.Second)
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if got := string(reply.Data); got != "echo:hello" {
		t.Fatalf("reply = %q, want %q", got, "echo:hello")
	}
}

func TestStartCoreRequestReplyAndShutdown(t *testing.T) {
	s := startT(t, Options{})

	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatalf("ClientURL %q: %v", s.ClientURL(), err)
	}
	host, portStr, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(portStr)
	if u.Scheme != "nats" || host != DefaultHost || port <= 0 || port == 4222 {
		t.Fatalf("ClientURL = %q: want nats://127.0.0.1:<random port>", s.ClientURL())
	}
	if s.JetStreamEnabled() {
		t.Fatal("JetStreamEnabled() = true for a server started without JetStream")
	}

	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if got := nc.Opts.Name; got != DefaultClientName {
		t.Errorf("connection name = %q, want %q", got, DefaultClientName)
	}
	if got := nc.MaxPayload(); got != int64(DefaultMaxPayload) {
		t.Errorf("MaxPayload = %d, want %d", got, DefaultMaxPayload)
	}
	echoRoundTrip(t, nc, "test.echo")

	// The caller's nats.Name overrides the default.
	named, err := s.Connect(nats.Name("custom"))
	if err != nil {
		t.Fatalf("Connect(Name): %v", err)
	}
	if got := named.Opts.Name; got != "custom" {
		t.Errorf("connection name = %q, want %q", got, "custom")
	}
	named.Close()

	// Shut down twice sequentially, then from 4 goroutines concurrently.
	s.Shutdown()
	s.Shutdown()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
	nc.Close()

	if _, err := s.Connect(); !errors.Is(err, ErrServerShutdown) {
		t.Fatalf("Connect after Shutdown: err = %v, want ErrServerShutdown", err)
	}
	if _, err := s.ConnectInProcess(); !errors.Is(err, ErrServerShutdown) {
		t.Fatalf("ConnectInProcess after Shutdown: err = %v, want ErrServerShutdown", err)
	}
	// And the listener is really gone, not just refused by our wrapper.
	if nc2, err := nats.Connect(s.ClientURL(), nats.Timeout(time.Second)); err == nil {
		nc2.Close()
		t.Fatalf("raw nats.Connect to %s after Shutdown succeeded", s.ClientURL())
	}
}

func TestConnectInProcess(t *testing.T) {
	s := startT(t, Options{})
	nc, err := s.ConnectInProcess()
	if err != nil {
		t.Fatalf("ConnectInProcess: %v", err)
	}
	defer nc.Close()
	echoRoundTrip(t, nc, "test.inproc")

	// In-process and TCP clients share the same server.
	tcp, err := s.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer tcp.Close()
	sub, err := tcp.SubscribeSync("test.cross")
	if err != nil {
		t.Fatalf("SubscribeSync: %v", err)
	}
	if err := tcp.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := nc.Publish("test.cross", []byte("x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("NextMsg: %v", err)
	}
}

func TestMaxPayloadOption(t *testing.T) {
	s := startT(t, Options{MaxPayload: 4096})
	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if got := nc.MaxPayload(); got != 4096 {
		t.Fatalf("MaxPayload = %d, want 4096", got)
	}
	if err := nc.Publish("big", make([]byte, 4097)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("Publish(4097 bytes) err = %v, want ErrMaxPayload", err)
	}
	if s.MaxPayload() != 4096 {
		t.Fatalf("Server.MaxPayload = %d", s.MaxPayload())
	}
	// The largest payload Validate lets through is one nats-server takes.
	top := startT(t, Options{MaxPayload: MaxPayloadLimit})
	tc, err := top.ConnectInProcess()
	if err != nil {
		t.Fatalf("ConnectInProcess: %v", err)
	}
	defer tc.Close()
	if got := tc.MaxPayload(); got != int64(MaxPayloadLimit) {
		t.Fatalf("MaxPayload = %d, want %d", got, MaxPayloadLimit)
	}
}

func TestJetStreamDurableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{JetStream: true, StoreDir: dir, SyncAlways: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	s1 := startT(t, opts)
	if !s1.JetStreamEnabled() {
		t.Fatal("JetStreamEnabled() = false")
	}
	if cfg := s1.ns.JetStreamConfig(); cfg == nil || !cfg.SyncAlways {
		t.Fatalf("server JetStreamConfig = %+v, want SyncAlways", cfg)
	}
	nc1, err := s1.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	js1, err := jetstream.New(nc1)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	if _, err := js1.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EVENTS",
		Subjects: []string{"events.>"},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	for i := 1; i <= 10; i++ {
		ack, err := js1.Publish(ctx, "events.test", fmt.Appendf(nil, "msg-%d", i))
		if err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
		if ack.Sequence != uint64(i) {
			t.Fatalf("Publish %d: ack sequence %d", i, ack.Sequence)
		}
	}
	nc1.Close()
	s1.Shutdown()

	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("JetStream data not under StoreDir/jetstream: %v", err)
	}

	// A brand-new server on the same StoreDir recovers the stream.
	s2 := startT(t, opts)
	if s2.ClientURL() == "" {
		t.Fatal("empty ClientURL")
	}
	nc2, err := s2.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc2.Close()
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	stream, err := js2.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatalf("Stream after restart: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.State.Msgs != 10 || info.State.FirstSeq != 1 || info.State.LastSeq != 10 {
		t.Fatalf("after restart: msgs=%d first=%d last=%d, want 10 messages 1..10",
			info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	}
	if info.Config.Storage != jetstream.FileStorage {
		t.Fatalf("storage = %v, want file", info.Config.Storage)
	}
	for i := uint64(1); i <= 10; i++ {
		m, err := stream.GetMsg(ctx, i)
		if err != nil {
			t.Fatalf("GetMsg(%d): %v", i, err)
		}
		if want := fmt.Sprintf("msg-%d", i); string(m.Data) != want {
			t.Fatalf("GetMsg(%d) = %q, want %q", i, m.Data, want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := []Options{
		{},
		{MaxPayload: MaxPayloadLimit},
		{Host: "127.0.0.1"},
		{Host: "127.0.0.2"},
		{Host: "localhost"},
		{Host: "LOCALHOST"},
		{Host: "::1"},
		{Port: -1},
		{Port: 4222},
		{JetStream: true, StoreDir: "/tmp/x"},
		{Host: "0.0.0.0", AllowNonLoopback: true},
		{Host: "10.1.2.3", AllowNonLoopback: true},
	}
	for _, o := range ok {
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", o, err)
		}
	}

	for _, host := range []string{"0.0.0.0", "::", "10.1.2.3", "192.168.0.1", "example.com", "[::1]"} {
		err := Options{Host: host}.Validate()
		if !errors.Is(err, ErrNonLoopbackHost) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Validate(Host %q) = %v, want ErrNonLoopbackHost and ErrInvalidOptions", host, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, strconv.Quote(host)) || !strings.Contains(msg, "AllowNonLoopback") {
			t.Errorf("Validate(Host %q) message %q should name the host and AllowNonLoopback", host, msg)
		}
	}

	if err := (Options{JetStream: true}).Validate(); !errors.Is(err, ErrStoreDirRequired) || !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("JetStream without StoreDir: %v, want ErrStoreDirRequired", err)
	}
	bad := []Options{
		{Port: -2},
		{Port: 65536},
		{ServerName: "has space"},
		{MaxPayload: -1},
		{MaxPayload: MaxPayloadLimit + 1},
		{ReadyTimeout: -time.Second},
	}
	for _, o := range bad {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}

	// Start refuses before touching the network.
	if s, err := Start(Options{Host: "0.0.0.0"}); !errors.Is(err, ErrNonLoopbackHost) {
		if s != nil {
			s.Shutdown()
		}
		t.Fatalf("Start(0.0.0.0) = %v, want ErrNonLoopbackHost", err)
	}
}

// recordingHandler is a slog.Handler that keeps every record.
type recordingHandler struct {
	mu    *sync.Mutex
	recs  *[]slog.Record
	level slog.Level
	attrs []slog.Attr
}

func newRecordingHandler(level slog.Level) *recordingHandler {
	return &recordingHandler{mu: new(sync.Mutex), recs: new([]slog.Record), level: level}
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}
func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

func (h *recordingHandler) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.recs...)
}

func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

func TestLoggerRoutesServerLogs(t *testing.T) {
	h := newRecordingHandler(slog.LevelDebug)
	s := startT(t, Options{Logger: slog.New(h)})
	s.Shutdown()

	var info, debug bool
	for _, r := range h.records() {
		if v, ok := attr(r, "component"); !ok || v.String() != "nats-server" {
			t.Errorf("record %q lacks component=nats-server", r.Message)
		}
		switch r.Level {
		case slog.LevelInfo:
			info = info || strings.Contains(r.Message, "Server is ready")
		case slog.LevelDebug:
			debug = true
		case LevelTrace:
			t.Errorf("trace record %q with handler at debug level", r.Message)
		}
	}
	if !info {
		t.Error(`no Info record "Server is ready" from Noticef`)
	}
	if !debug {
		t.Error("no Debug record although the handler is enabled for debug")
	}
}

func TestStartFailsFastWhenPortInUse(t *testing.T) {
	first := startT(t, Options{})
	u, _ := url.Parse(first.ClientURL())
	_, portStr, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(portStr)

	h := newRecordingHandler(slog.LevelError)
	start := time.Now()
	s, err := Start(Options{Port: port, ReadyTimeout: 5 * time.Second, Logger: slog.New(h)})
	elapsed := time.Since(start)
	if err == nil {
		s.Shutdown()
		t.Fatal("second server on the same port started")
	}
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("err = %v, want ErrStartFailed", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("Start took %s to fail; fatal errors should not wait out ReadyTimeout", elapsed)
	}
	var fatal bool
	for _, r := range h.records() {
		if v, ok := attr(r, "fatal"); ok && v.Bool() && r.Level == slog.LevelError {
			fatal = true
		}
	}
	if !fatal {
		t.Error("Fatalf was not logged at Error level with fatal=true")
	}
	t.Logf("port-in-use error after %s: %v", elapsed.Round(time.Millisecond), err)
}

func TestStartFailsWhenJetStreamStoreUnusable(t *testing.T) {
	// StoreDir is a regular file: JetStream cannot create its directory.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := Start(Options{JetStream: true, StoreDir: file, ReadyTimeout: 5 * time.Second})
	if err == nil {
		s.Shutdown()
		t.Fatal("started with an unusable StoreDir")
	}
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("err = %v, want ErrStartFailed", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Start took %s to fail", elapsed)
	}
	t.Logf("unusable store error: %v", err)
}
