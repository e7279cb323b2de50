package natsfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type node struct {
	nc    *nats.Conn
	k     *actors.Kernel
	front *natsfront.Front
	f     *conformance.Fixture
}

func startNode(t *testing.T, opts natsfront.Options) *node {
	t.Helper()
	_, nc := natstest.Start(t, false)
	f := conformance.NewFixture(t)
	k, front := serve(t, nc, f.Options(), opts)
	return &node{nc: nc, k: k, front: front, f: f}
}

// serve starts a kernel with kopts and its front on nc, both stopped at
// the test's end.
func serve(t *testing.T, nc *nats.Conn, kopts actors.Options, opts natsfront.Options) (*actors.Kernel, *natsfront.Front) {
	t.Helper()
	k, err := actors.New(kopts)
	if err != nil {
		t.Fatal(err)
	}
	front, err := natsfront.Serve(nc, k, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = front.Stop(context.Background())
		_ = k.Shutdown(context.Background())
	})
	return k, front
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestBadFramesGetInvalidRequestAndTheNodeKeepsServing(t *testing.T) {
	n := startNode(t, natsfront.Options{Limits: messages.Limits{MaxBytes: 64 << 10, MaxDepth: 16, MaxItems: 4096}})
	c := client.New(n.nc, nil)
	frames := map[string][]byte{
		"not msgpack":         []byte("hello, node"),
		"empty":               {},
		"array32 length bomb": {0xdd, 0xff, 0xff, 0xff, 0xff},
		"map32 length bomb":   {0xdf, 0xff, 0xff, 0xff, 0xff},
		"str32 length bomb":   {0xdb, 0xff, 0xff, 0xff, 0xff},
		"bin32 length bomb":   {0xc6, 0xff, 0xff, 0xff, 0xff},
		"deep nesting":        append(bytes.Repeat([]byte{0x91}, 10000), 0xc0),
		"oversized":           append([]byte{0xc6, 0x00, 0x02, 0x00, 0x00}, make([]byte, 128<<10)...),
		"wrong shape":         {0x93, 0x01, 0x02, 0x03},
		"wrong version":       mustEncode(t, &messages.TurnRequest{V: 99, Access: messages.Access{Tenant: "acme", Principal: "ada"}}),
		"reserved byte":       {0xc1},
		"trailing garbage":    append(mustEncode(t, &messages.TurnRequest{V: 1}), 0xc0),
	}
	subjects := []string{
		messages.OpenSubject("sharedos"),
		messages.OneOpSubject("sharedos", messages.OpInvoke),
		messages.TurnSubject("sharedos", "n1", messages.OpList),
		messages.TurnSubject("sharedos", "n1", messages.OpClose),
	}
	for name, frame := range frames {
		for _, subj := range subjects {
			msg, err := n.nc.RequestWithContext(ctx(t), subj, frame)
			if err != nil {
				t.Fatalf("%s on %s: no reply: %v", name, subj, err)
			}
			var rep messages.AckReply // every reply starts {v, error}
			if err := messages.Decode(msg.Data, &rep, messages.DefaultLimits()); err != nil {
				t.Fatalf("%s on %s: undecodable reply: %v", name, subj, err)
			}
			if rep.Error == nil || rep.Error.Code != string(reason.InvalidRequest) {
				t.Fatalf("%s on %s: reply %+v, want invalid_request", name, subj, rep.Error)
			}
		}
		// After every bad frame a real turn still works end to end.
		turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
		if err != nil {
			t.Fatalf("after %s: open: %v", name, err)
		}
		if _, err := turn.Invoke(ctx(t), "notion_search", []byte(`{"workspace":"acme","query":"q"}`)); err != nil {
			t.Fatalf("after %s: invoke: %v", name, err)
		}
		if err := turn.Close(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

func mustEncode(t *testing.T, m messages.Message) []byte {
	t.Helper()
	b, err := messages.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoneNodeAnswersPromptly(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	c := client.New(n.nc, nil)
	turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
	if err != nil {
		t.Fatal(err)
	}
	ghost := c.Resume(client.Handle{Node: "node-that-left", TurnID: turn.Handle.TurnID}, turn.LeaseID, turn.Access())
	// A client that waited for a timeout would get a deadline error, not
	// turn_not_found: the code alone shows the gone node was answered at
	// once (NATS "no responders"), without a timing assert.
	if _, err := ghost.ListTools(context.Background()); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("turn on a gone node: %v, want turn_not_found", err)
	}
	missing := c.Resume(client.Handle{Node: turn.Handle.Node, TurnID: "n1.not-a-turn"}, "", turn.Access())
	if _, err := missing.Invoke(ctx(t), "notion_search", nil); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("unknown turn on a live node: %v", err)
	}
	_ = n.front.Stop(context.Background())
	if _, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada"}); !errors.Is(err, reason.ErrNodeUnavailable) {
		t.Fatalf("open with no node serving: %v, want node_unavailable", err)
	}
}

func TestSubjectsSayWhatARequestIs(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	c := client.New(n.nc, nil)
	access := messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.chosen-by-caller"}
	var rep messages.OpenReply
	msg, err := n.nc.RequestWithContext(ctx(t), messages.OpenSubject("sharedos"), mustEncode(t, &messages.OpenRequest{V: 1, Access: access}))
	if err != nil {
		t.Fatal(err)
	}
	if err := messages.Decode(msg.Data, &rep, messages.DefaultLimits()); err != nil || rep.Error == nil || rep.Error.Code != string(reason.InvalidRequest) {
		t.Fatalf("open naming a turn id: %+v %v", rep.Error, err)
	}
	turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Attach(ctx(t), turn.Handle, client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
	if err != nil || !second.Attached || second.LeaseID == turn.LeaseID {
		t.Fatalf("attach: %+v %v", second, err)
	}
	if _, err := c.Attach(ctx(t), turn.Handle, client.Access{Tenant: "acme", Principal: "mallory"}); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("attach by another principal: %v", err)
	}
}

func TestOverloadIsRefusedNotQueued(t *testing.T) {
	n := startNode(t, natsfront.Options{MaxConcurrent: 1})
	release := n.f.Notion.Gate()
	c := client.New(n.nc, nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}}
	blocked := make(chan error, 1)
	go func() {
		_, err := c.ListTools(ctx(t), access) // resolves; the provider is gated
		blocked <- err
	}()
	// Wait until the first request holds the only slot (it is inside the
	// gated provider), then every other request is refused at once.
	for n.f.Notion.CatalogCalls() == 0 {
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.ListTools(ctx(t), access)
		if errors.Is(err, reason.ErrOverloaded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never refused overloaded: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
}

// `nats micro ls/info` are requests on $SRV subjects; the node answers
// them with its endpoints.
func TestRegisteredAsMicroService(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	msg, err := n.nc.RequestWithContext(ctx(t), "$SRV.INFO.sharedos", nil)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Name      string            `json:"name"`
		Metadata  map[string]string `json:"metadata"`
		Endpoints []struct {
			Name       string `json:"name"`
			Subject    string `json:"subject"`
			QueueGroup string `json:"queue_group"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "sharedos" || info.Metadata["node"] != "n1" {
		t.Fatalf("info: %+v", info)
	}
	subjects := map[string]string{}
	for _, e := range info.Endpoints {
		subjects[e.Subject] = e.QueueGroup
	}
	if subjects["sharedos.turn.open"] != messages.QueueGroup {
		t.Fatalf("open endpoint: %v", subjects)
	}
	if _, ok := subjects["sharedos.turn.n1.invoke"]; !ok || len(subjects) != 11 || subjects["sharedos.turn.n1.token"] != messages.NodeQueueGroup("n1") {
		t.Fatalf("endpoints: %v", subjects)
	}
}
