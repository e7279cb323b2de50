package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// sampleConfig is cluster.yaml with a free port, a temporary data dir and
// HTTP on a free loopback port.
func sampleConfig(t *testing.T, dataDir string) *config.Config {
	t.Helper()
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("port: 4222", "port: 0", "data_dir: ./data", "data_dir: "+dataDir, "http: 127.0.0.1:8321", "http: 127.0.0.1:0").Replace(string(b))
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func start(t *testing.T, cfg *config.Config, ps ...providers.ContextToolProvider) *node.Node {
	t.Helper()
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler), Providers: ps})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startConnected starts a node that shuts down at the test's end, and a
// client connection to it.
func startConnected(t *testing.T, cfg *config.Config, ps ...providers.ContextToolProvider) (*node.Node, *nats.Conn) {
	t.Helper()
	n := start(t, cfg, ps...)
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return n, nc
}

// connectAs connects to n as the identity name, closed at the test's end.
func connectAs(t *testing.T, n *node.Node, name string) *nats.Conn {
	t.Helper()
	nc, err := n.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return c
}

func readAll(t *testing.T, nc *nats.Conn) ([][]byte, []*audit.Event) {
	t.Helper()
	var data [][]byte
	var evs []*audit.Event
	err := auditstore.ReadAll(ctx(t), nc, auditstore.TailOptions{Prefix: "sharedos", Stream: "SHAREDOS_AUDIT"}, func(d []byte, ev *audit.Event) error {
		data = append(data, d)
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return data, evs
}

// The README's turn: open, list, call, refused outside the grant, close;
// the audit stream has it all under one catalogHash and verifies; the
// events survive a restart of the node.
func TestReadmeTurnAndDurableAudit(t *testing.T) {
	dir := t.TempDir()
	n := start(t, sampleConfig(t, dir))
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, nil)
	turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes", "text"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn.ListTools(ctx(t))
	if err != nil || len(l.Tools) != 5 {
		t.Fatalf("list: %v, %d tools", err, len(l.Tools))
	}
	put, err := turn.Invoke(ctx(t), "notes_put", []byte(`{"space":"acme","title":"plan","body":"ship the kernel"}`))
	if err != nil || put.IsError {
		t.Fatalf("put: %+v %v", put, err)
	}
	got, err := turn.Invoke(ctx(t), "notes_get", []byte(`{"space":"acme","title":"plan"}`))
	if err != nil || got.Text != "ship the kernel" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := turn.Invoke(ctx(t), "notes_put", []byte(`{"space":"globex","title":"x","body":"y"}`)); !errors.Is(err, reason.ErrNoMatchingGrant) {
		t.Fatalf("outside the grant: %v", err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	data, evs := readAll(t, connectAs(t, n, "auditor"))
	hashes := map[string]bool{}
	for _, ev := range evs {
		if ev.CatalogHash != "" {
			hashes[ev.CatalogHash] = true
		}
	}
	if len(hashes) != 1 || !hashes[l.CatalogHash] {
		t.Fatalf("catalog hashes in the trail: %v, listing %s", hashes, l.CatalogHash)
	}
	if rep := audit.Verify(data, false); !rep.OK() || rep.Closed != 1 {
		t.Fatalf("verify: %+v", rep)
	}

	// Metrics and health answer on the HTTP port.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), `sharedos_calls_total{outcome="denied",reason="no_matching_grant"} 1`) {
			t.Fatalf("metrics lack the denied call:\n%s", body)
		}
	}
	nc.Close()
	if err := n.Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// Restart on the same data directory: the stream kept every event.
	n2 := start(t, sampleConfig(t, dir))
	defer n2.Shutdown(context.Background())
	nc2, err := n2.Connect("auditor")
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	after, _ := readAll(t, nc2)
	if len(after) < len(data) {
		t.Fatalf("after restart %d records, before %d", len(after), len(data))
	}
	for i := range data {
		if string(after[i]) != string(data[i]) {
			t.Fatalf("event %d changed across restart", i)
		}
	}
	// What follows is the first node's final checkpoint, published when it
	// stopped; it attests every event, and the trail verifies.
	for _, r := range after[len(data):] {
		if !audit.IsCheckpoint(r) {
			t.Fatalf("after restart, not a checkpoint: %s", r)
		}
	}
	if rep := audit.Verify(after, false); !rep.OK() || rep.Checkpoints == 0 || rep.Covered != uint64(rep.Events) {
		t.Fatalf("verify after restart: %+v", rep)
	}
}

func TestShutdownClosesOpenTurnsAndFlushesAudit(t *testing.T) {
	dir := t.TempDir()
	n := start(t, sampleConfig(t, dir))
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc, nil)
	var turns []*client.Turn
	for range 3 {
		tr, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Invoke(ctx(t), "text_stats", []byte(`{"text":"one two two"}`)); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, tr)
	}
	if err := n.Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); err == nil {
		t.Fatal("ready after shutdown")
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := turns[0].ListTools(short); err == nil {
		t.Fatal("a stopped node answered")
	}
	// Every turn's turn.closed (reason shutdown) was flushed to the stream.
	n2 := start(t, sampleConfig(t, dir))
	defer n2.Shutdown(context.Background())
	nc2, err := n2.Connect("auditor")
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	data, evs := readAll(t, nc2)
	closed := 0
	for _, ev := range evs {
		if ev.Type == audit.TurnClosed && ev.Close.Reason == "shutdown" {
			closed++
		}
	}
	if closed != 3 {
		t.Fatalf("%d turns recorded turn.closed at shutdown, want 3", closed)
	}
	if rep := audit.Verify(data, false); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}
}

// withMaxMessageBytes is the sample config with nats.max_message_bytes n.
func withMaxMessageBytes(t *testing.T, cfg *config.Config, n int) *config.Config {
	t.Helper()
	cfg.NATS.MaxMessageBytes = n
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sizeTools: text_len answers the size of its arguments, text_fill a text
// of {"n": N} bytes; namespace text (ada's grant text.* over text/** covers
// them).
func sizeTools() *providers.Memory {
	return providers.NewMemory("sizes", providers.MemoryTool{
		Definition: catalog.Definition{Name: "len", Namespace: "text", Description: "The size of the arguments.",
			Capability: "text.len", Requirement: "text/len", InputSchema: []byte(`{"type":"object"}`)},
		Handler: func(_ context.Context, call providers.Call) (providers.Result, error) {
			return providers.Result{Text: strconv.Itoa(len(call.Arguments))}, nil
		},
	}, providers.MemoryTool{
		Definition: catalog.Definition{Name: "fill", Namespace: "text", Description: "A text of n bytes.",
			Capability: "text.fill", Requirement: "text/fill", InputSchema: []byte(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		Handler: func(_ context.Context, call providers.Call) (providers.Result, error) {
			var a struct{ N int }
			if err := json.Unmarshal(call.Arguments, &a); err != nil {
				return providers.Result{}, err
			}
			return providers.Result{Text: strings.Repeat("y", a.N)}, nil
		},
	})
}

// The embedded server takes exactly nats.max_message_bytes: a request
// just below it is served, one above it is refused with the NATS error
// before it leaves the client.
func TestEmbeddedMaxPayloadIsMaxMessageBytes(t *testing.T) {
	const limit = 128 << 10
	cfg := withMaxMessageBytes(t, sampleConfig(t, t.TempDir()), limit)
	n, nc := startConnected(t, cfg, sizeTools())
	if nc.MaxPayload() != limit || n.Conn().MaxPayload() != limit {
		t.Fatalf("server max payload %d (node's connection %d), configured %d", nc.MaxPayload(), n.Conn().MaxPayload(), limit)
	}
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close(context.Background())
	args := func(size int) []byte { return []byte(`{"s":"` + strings.Repeat("x", size-8) + `"}`) }
	below := args(limit - 1024) // the request's envelope is well under 1 KiB
	got, err := turn.Invoke(ctx(t), "text_len", below)
	if err != nil || got.Text != strconv.Itoa(len(below)) {
		t.Fatalf("a request just below the limit: %+v, %v", got, err)
	}
	if _, err := turn.Invoke(ctx(t), "text_len", args(limit+1)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("a request above the limit: %v, want %v", err, nats.ErrMaxPayload)
	}

	// Replies are bounded by the kernel to fit the same limit, with
	// headroom for the NATS headers and the reply's own fields.
	fill := func(n int) (*messages.InvokeReply, error) {
		return turn.Invoke(ctx(t), "text_fill", []byte(`{"n":`+strconv.Itoa(n)+`}`))
	}
	fits := limit - node.ReplyHeadroom - actors.ReplyOverhead
	if got, err := fill(fits); err != nil || len(got.Text) != fits {
		t.Fatalf("a result of %d bytes, within the bound: %d bytes, %v", fits, len(got.Text), err)
	}
	if _, err := fill(fits + 1); !errors.Is(err, reason.ErrResultTooLarge) {
		t.Fatalf("a result of %d bytes, past the bound: %v, want result_too_large", fits+1, err)
	}
	// The kernel refused it, so the trail (and the metrics it feeds) says so.
	if body := metricsText(t, n); !strings.Contains(body, `sharedos_calls_total{outcome="failed",reason="result_too_large"} 1`) {
		t.Fatalf("the refused result is not counted:\n%s", grep(body, "sharedos_calls_total"))
	}
}

// A node on an external NATS whose max_payload is below
// nats.max_message_bytes refuses to start, saying what to change.
func TestExternalNATSWithSmallerMaxPayloadIsRefused(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Options{JetStream: true, StoreDir: t.TempDir(), MaxPayload: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := withMaxMessageBytes(t, sampleConfig(t, t.TempDir()), 1<<20)
	cfg.NATS.URLs = []string{srv.ClientURL()}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		n.Shutdown(context.Background())
		t.Fatal("started against a server that takes smaller messages than configured")
	}
	if !strings.Contains(err.Error(), "max_message_bytes is 1048576") || !strings.Contains(err.Error(), "at most 262144") {
		t.Fatalf("refusal does not say what is wrong: %v", err)
	}
	// Configured to fit, it starts.
	cfg.NATS.MaxMessageBytes = 256 << 10
	n, err = node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n.Shutdown(context.Background())
}

// metricsText scrapes the node's /metrics.
func metricsText(t *testing.T, n *node.Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A caller whose deadline passes is counted deadline_exceeded, for the
// request and for the call, never internal; the call latency histogram
// has a bucket at the call timeout.
func TestDeadlineExceededIsItsOwnMetricLabel(t *testing.T) {
	slow := providers.NewMemory("slow", providers.MemoryTool{
		Definition: catalog.Definition{Name: "wait", Namespace: "text", Description: "Waits for its deadline.",
			Capability: "text.wait", Requirement: "text/wait", InputSchema: []byte(`{"type":"object"}`)},
		Handler: func(ctx context.Context, _ providers.Call) (providers.Result, error) {
			<-ctx.Done()
			return providers.Result{}, ctx.Err()
		},
	})
	n, nc := startConnected(t, sampleConfig(t, t.TempDir()), slow)
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.ListTools(ctx(t)); err != nil { // resolve outside the short deadline
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := turn.Invoke(short, "text_wait", []byte(`{}`)); !errors.Is(err, reason.ErrDeadlineExceeded) {
		t.Fatalf("invoke past the caller's deadline: %v", err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The front observes after replying and the completion is recorded
	// after the call returns: wait for both to be counted.
	var body string
	for range 200 {
		body = metricsText(t, n)
		if strings.Contains(body, `sharedos_requests_total{code="deadline_exceeded",op="invoke"} 1`) &&
			strings.Contains(body, `sharedos_calls_total{outcome="failed"`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, `sharedos_requests_total{code="deadline_exceeded",op="invoke"} 1`) ||
		!strings.Contains(body, `sharedos_calls_total{outcome="failed",reason="deadline_exceeded"} 1`) {
		t.Fatalf("the deadline is not counted under deadline_exceeded:\n%s", grep(body, "sharedos_requests_total", "sharedos_calls_total"))
	}
	if strings.Contains(body, `code="internal"`) || strings.Contains(body, `reason="internal"`) {
		t.Fatalf("counted as internal:\n%s", grep(body, "internal"))
	}
	if !strings.Contains(body, `sharedos_call_duration_seconds_bucket{le="30"}`) {
		t.Fatalf("no call duration bucket at the call timeout:\n%s", grep(body, "sharedos_call_duration_seconds_bucket"))
	}
}

func grep(text string, words ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
