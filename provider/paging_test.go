package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/provider"
	"github.com/sharedos/sharedos/reason"
)

// many returns n tools named t00000… in order, each described by desc(i).
func many(n int, desc func(i int) string) []provider.Tool {
	out := make([]provider.Tool, n)
	for i := range out {
		out[i] = tool(fmt.Sprintf("t%05d", i), desc(i), ok)
	}
	return out
}

// countRequests counts the catalogue requests sent to provider id (a plain
// subscriber sees every request the queue group answers).
func countRequests(t *testing.T, nc *nats.Conn, id string) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	sub, err := nc.Subscribe(messages.ProviderCatalogSubject("sharedos", id), func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// rawCatalog sends one catalogue request and decodes the reply.
func rawCatalog(t *testing.T, nc *nats.Conn, id, cursor string) messages.ProviderCatalogReply {
	t.Helper()
	b, err := messages.Encode(&messages.ProviderCatalogRequest{V: 1, Access: messages.AccessOf(ada), Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(messages.ProviderCatalogSubject("sharedos", id), b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lim := messages.DefaultLimits()
	lim.MaxBytes, lim.MaxItems = 8<<20, 1<<20
	var rep messages.ProviderCatalogReply
	if err := messages.Decode(msg.Data, &rep, lim); err != nil {
		t.Fatal(err)
	}
	return rep
}

// 3,000 tools are served in pages and received whole, in order.
func TestCatalogueOf3000ToolsIsPagedToTheEnd(t *testing.T) {
	_, nc := natstest.Start(t, false)
	tools := many(3000, func(i int) string { return "tool " + fmt.Sprint(i) })
	serve(t, nc, "big", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		return tools, nil
	}), time.Minute)
	requests := countRequests(t, nc, "big")
	cat, err := providers.NewRemote(nc, "big", "sharedos").Catalog(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Definitions) != 3000 {
		t.Fatalf("received %d tools, want 3000", len(cat.Definitions))
	}
	for i, d := range cat.Definitions {
		if want := fmt.Sprintf("t%05d", i); d.Name != want || d.Description != "tool "+fmt.Sprint(i) || d.Token == "" {
			t.Fatalf("tool %d is %s (%q), want %s", i, d.Name, d.Description, want)
		}
	}
	if cat.Freshness.TTL != time.Minute {
		t.Fatalf("freshness %+v", cat.Freshness)
	}
	if n := requests.Load(); n != 3000/provider.DefaultPageTools {
		t.Fatalf("%d catalogue requests, want %d pages", n, 3000/provider.DefaultPageTools)
	}
}

// A catalogue larger than the server's max payload arrives in pages that
// each fit (one reply would be refused by NATS).
func TestCataloguePagesFitTheMaxPayload(t *testing.T) {
	_, nc := natstest.StartWithOptions(t, natsserver.Options{MaxPayload: 64 << 10})
	tools := many(100, func(i int) string { return strings.Repeat("d", 2000) + fmt.Sprint(i) })
	serve(t, nc, "wide", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		return tools, nil
	}), 0)
	cat, err := providers.NewRemote(nc, "wide", "sharedos").Catalog(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Definitions) != 100 || cat.Definitions[99].Description != strings.Repeat("d", 2000)+"99" {
		t.Fatalf("received %d tools", len(cat.Definitions))
	}
}

// A catalogue that changes between pages is refused capability_changed
// for the later page, never mixed: the node starts again and gets one
// whole catalogue.
func TestCatalogueChangedBetweenPagesIsDetected(t *testing.T) {
	_, nc := natstest.Start(t, false)
	var calls atomic.Int32
	serve(t, nc, "moving", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		v := "v1"
		if calls.Add(1) > 1 {
			v = "v2"
		}
		return many(700, func(int) string { return v }), nil
	}), 0)

	first := rawCatalog(t, nc, "moving", "")
	if first.Error != nil || len(first.Tools) != provider.DefaultPageTools || first.NextCursor == "" {
		t.Fatalf("first page: %d tools, cursor %q, error %+v", len(first.Tools), first.NextCursor, first.Error)
	}
	second := rawCatalog(t, nc, "moving", first.NextCursor)
	if second.Error == nil || second.Error.Code != string(reason.CapabilityChanged) || len(second.Tools) != 0 {
		t.Fatalf("a page of a changed catalogue: %d tools, error %+v; want capability_changed", len(second.Tools), second.Error)
	}

	calls.Store(0)
	cat, err := providers.NewRemote(nc, "moving", "sharedos").Catalog(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Definitions) != 700 {
		t.Fatalf("received %d tools, want 700", len(cat.Definitions))
	}
	for _, d := range cat.Definitions {
		if d.Description != "v2" {
			t.Fatalf("tool %s from %s: two catalogues were mixed", d.Name, d.Description)
		}
	}

	// A catalogue that changes on every request never settles: refused.
	var n atomic.Int32
	serve(t, nc, "churning", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		v := fmt.Sprint(n.Add(1))
		return many(700, func(int) string { return v }), nil
	}), 0)
	if _, err := providers.NewRemote(nc, "churning", "sharedos").Catalog(ctx(t), ada); reason.Of(err) != reason.ProviderError {
		t.Fatalf("a catalogue changing on every page: %v, want provider_error", err)
	}
}

// Cursors the provider did not issue are refused invalid_request.
func TestMalformedCursorsAreRefused(t *testing.T) {
	_, nc := natstest.Start(t, false)
	serve(t, nc, "p", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		return many(3, func(int) string { return "d" }), nil
	}), 0)
	first := rawCatalog(t, nc, "p", "")
	if first.Error != nil || len(first.Tools) != 3 || first.NextCursor != "" {
		t.Fatalf("a one-page catalogue: %+v", first)
	}
	snapshot := strings.Repeat("0", 32)
	for _, c := range []string{"garbage", "c1.", "c1.1", "c1.x." + snapshot, "c1.0." + snapshot, "c1.-1." + snapshot,
		"c1.1." + strings.Repeat("g", 32), "c1.1." + strings.Repeat("0", 31), "c2.1." + snapshot, "c1.99999999999." + snapshot} {
		rep := rawCatalog(t, nc, "p", c)
		if rep.Error == nil || rep.Error.Code != string(reason.InvalidRequest) || len(rep.Tools) != 0 {
			t.Errorf("cursor %q: %+v, want invalid_request", c, rep)
		}
	}
}

// Paging keeps the ledger: a tool advertised on a later page runs.
func TestToolOnALaterPageRuns(t *testing.T) {
	_, nc := natstest.Start(t, false)
	tools := many(1200, func(int) string { return "d" })
	serve(t, nc, "big", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		return tools, nil
	}), time.Minute)
	r := providers.NewRemote(nc, "big", "sharedos", providers.WithSigner(nodeKey))
	cat, err := r.Catalog(ctx(t), ada)
	if err != nil || len(cat.Definitions) != 1200 {
		t.Fatalf("%d tools, %v", len(cat.Definitions), err)
	}
	last := cat.Definitions[1199]
	inTurn := ada
	inTurn.TurnID = "n1.t1"
	res, err := r.Invoke(ctx(t), providers.Call{Access: inTurn, Node: "n1", CallID: "c", Tool: catalog.Identity{Provider: "big", Name: last.Name}, Token: last.Token,
		Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Text != "ran "+last.Name {
		t.Fatalf("invoke %s: %+v %v", last.Name, res, err)
	}
}
