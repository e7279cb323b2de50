package natsfront_test

// Every request gets an answer, and the answer says what happened (issue
// #10): refusals name their call, replies fit the bus, error replies carry
// the micro error headers, and a request nobody can hear is not run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

func TestRefusedInvokeNamesItsCallAndCarriesErrorHeaders(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	c := client.New(n.nc, nil)
	turn, err := c.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	_, err = turn.Invoke(ctx(t), "notion_search", []byte(`{"workspace":"globex","query":"q"}`))
	var ce *client.CallError
	if !errors.Is(err, reason.ErrNoMatchingGrant) || !errors.As(err, &ce) {
		t.Fatalf("got %v", err)
	}
	if ce.Reply.CallID == "" || ce.Reply.CatalogHash == "" || ce.Reply.Dispatched == nil || *ce.Reply.Dispatched {
		t.Fatalf("refusal reply %+v: want call id, catalog hash and dispatched=false", ce.Reply)
	}
	// The raw reply carries the micro error headers with the reason code.
	access := turn.Access() // the turn and this caller's lease
	req := mustEncode(t, &messages.InvokeRequest{V: 1, Access: access, Tool: "no_such_tool", Args: []byte(`{}`)})
	msg, err := n.nc.Request(messages.TurnSubject("sharedos", "n1", messages.OpInvoke), req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(micro.ErrorCodeHeader); got != string(reason.UnknownTool) || msg.Header.Get(micro.ErrorHeader) == "" {
		t.Fatalf("error headers %v, want code unknown_tool", msg.Header)
	}
	ok, err := turn.Invoke(ctx(t), "notion_search", []byte(`{"workspace":"acme","query":"q"}`))
	if err != nil || ok.Dispatched != nil {
		t.Fatalf("a successful call: %+v %v (dispatched is for failures)", ok, err)
	}
	// The endpoint's stats data counts what was answered, by code, with
	// the time to the reply (micro's own counters see only the hand-off).
	stats, err := n.nc.RequestWithContext(ctx(t), "$SRV.STATS.sharedos", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				Requests       int64            `json:"requests"`
				Errors         int64            `json:"errors"`
				ErrorsByCode   map[string]int64 `json:"errors_by_code"`
				ProcessingTime int64            `json:"processing_time"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(stats.Data, &st); err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Endpoints {
		if e.Name != "invoke" {
			continue
		}
		d := e.Data
		if d.Requests != 3 || d.Errors != 2 || d.ErrorsByCode["no_matching_grant"] != 1 || d.ErrorsByCode["unknown_tool"] != 1 || d.ProcessingTime <= 0 {
			t.Fatalf("invoke endpoint stats %+v: want 3 requests, 2 errors (no_matching_grant, unknown_tool)", d)
		}
		return
	}
	t.Fatalf("no invoke endpoint in %s", stats.Data)
}

// A request without a reply subject is dropped and counted: nobody could
// hear the answer, and a call nobody hears must not run.
func TestRequestWithoutReplyIsDroppedUnrun(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	req := mustEncode(t, &messages.InvokeRequest{V: 1, Access: messages.AccessOf(conformance.Ada), Tool: "notion_search",
		Args: []byte(`{"workspace":"acme","query":"q"}`)})
	if err := n.nc.Publish(messages.OneOpSubject("sharedos", messages.OpInvoke), req); err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; n.front.NoReplyDropped() == 0; i++ {
		if i > 5000 {
			t.Fatal("the request was not counted as dropped")
		}
		time.Sleep(time.Millisecond)
	}
	if got := n.f.Notion.InvokeCalls(); got != 0 {
		t.Fatalf("a request nobody could hear ran %d times", got)
	}
}

// bigNode starts a node on a server whose max payload is 64 KiB, with one
// provider whose 12 tools take ~7 KiB each and return 80 KiB results.
func bigNode(t *testing.T, maxReply int) (*nats.Conn, *conformance.Fixture) {
	t.Helper()
	_, nc := natstest.StartWithOptions(t, natsserver.Options{MaxPayload: 64 << 10})
	f := conformance.NewFixture(t)
	var tools []providers.MemoryTool
	for i := range 12 {
		tools = append(tools, providers.MemoryTool{Definition: catalog.Definition{
			Name: fmt.Sprintf("t%02d", i), Namespace: "notes", Description: strings.Repeat("d", 7<<10),
			InputSchema: json.RawMessage(`{"type":"object"}`), Capability: "notes.put", Requirement: "notes/acme/items",
		}, Handler: func(context.Context, providers.Call) (providers.Result, error) {
			return providers.Result{Text: strings.Repeat("r", 80<<10)}, nil
		}})
	}
	opts := f.Options()
	opts.Providers = append(opts.Providers, providers.NewMemory("big", tools...))
	opts.MaxReplyBytes = maxReply
	serve(t, nc, opts, natsfront.Options{})
	return nc, f
}

// Reproduced on the old node: a listing or a result larger than the bus's
// max payload got no reply at all while the trail recorded it.
func TestEveryReplyFitsTheBus(t *testing.T) {
	nc, _ := bigNode(t, int(64<<10)-16<<10)
	c := client.New(nc, nil)
	turn, err := c.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	first, err := turn.ListPage(ctx(t), "")
	if err != nil || first.NextCursor == "" {
		t.Fatalf("first page: %v (next %q): an 84 KiB listing must be paged", err, first.NextCursor)
	}
	all, err := turn.ListTools(ctx(t))
	if err != nil || len(all.Tools) != 14 {
		t.Fatalf("the client followed the pages to %d tools (%v), want 14", len(all.Tools), err)
	}
	_, err = turn.Invoke(ctx(t), "notes_t00", []byte(`{}`))
	var ce *client.CallError
	if !errors.Is(err, reason.ErrResultTooLarge) || !errors.As(err, &ce) || ce.Reply.Dispatched == nil || !*ce.Reply.Dispatched {
		t.Fatalf("an 80 KiB result over a 64 KiB bus: %v", err)
	}
	// A turn of one operation answers too.
	if _, err := c.Invoke(ctx(t), messages.AccessOf(conformance.Ada), "notes_t01", []byte(`{}`)); !errors.Is(err, reason.ErrResultTooLarge) {
		t.Fatalf("one-operation call: %v", err)
	}
}

// With no reply bound configured in the kernel, the front still answers
// a reply the bus cannot carry: result_too_large, not silence.
func TestFrontAnswersWhatTheBusCannotCarry(t *testing.T) {
	nc, _ := bigNode(t, 0)
	c := client.New(nc, nil)
	turn, err := c.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.ListTools(ctx(t)); !errors.Is(err, reason.ErrResultTooLarge) {
		t.Fatalf("unpaged 84 KiB listing: %v, want result_too_large", err)
	}
	if _, err := turn.Invoke(ctx(t), "notes_t00", []byte(`{}`)); !errors.Is(err, reason.ErrResultTooLarge) {
		t.Fatalf("80 KiB result: %v, want result_too_large", err)
	}
}

// A caller's timeout bounds the execution, and the caller is told
// deadline_exceeded (never internal) with whether the call was dispatched.
func TestCallerTimeoutIsDeadlineExceeded(t *testing.T) {
	_, nc := natstest.Start(t, false)
	f := conformance.NewFixture(t)
	started := make(chan time.Time, 1)
	slow := providers.NewMemory("slow", providers.MemoryTool{Definition: catalog.Definition{
		Name: "wait", Namespace: "notes", Description: "Waits.", InputSchema: json.RawMessage(`{"type":"object"}`),
		Capability: "notes.put", Requirement: "notes/acme/items",
	}, Handler: func(ctx context.Context, _ providers.Call) (providers.Result, error) {
		dl, _ := ctx.Deadline()
		started <- dl
		<-ctx.Done()
		return providers.Result{}, ctx.Err()
	}})
	opts := f.Options()
	opts.Providers = append(opts.Providers, slow)
	opts.CallTimeout = time.Hour
	serve(t, nc, opts, natsfront.Options{})
	c := client.New(nc, nil)
	turn, err := c.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	cc, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	callerDL, _ := cc.Deadline()
	_, err = turn.Invoke(cc, "notes_wait", []byte(`{}`))
	if !errors.Is(err, reason.ErrDeadlineExceeded) {
		t.Fatalf("got %v (code %s), want deadline_exceeded", err, reason.Of(err))
	}
	var ce *client.CallError
	if errors.As(err, &ce) && (ce.Reply.Dispatched == nil || !*ce.Reply.Dispatched) {
		t.Fatalf("the node's answer %+v: the call was dispatched", ce.Reply)
	}
	if dl := <-started; dl.After(callerDL) {
		t.Fatalf("the execution's deadline %s is after the caller's %s", dl, callerDL)
	}
}
