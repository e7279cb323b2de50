package providers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

var acme = authority.AccessContext{Tenant: "acme", Principal: "ada"}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// fake answers catalogue requests for provider id with page(cursor).
func fake(t *testing.T, nc *nats.Conn, id string, page func(cursor string) *messages.ProviderCatalogReply) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	sub, err := nc.QueueSubscribe(messages.ProviderCatalogSubject("sharedos", id), messages.ProviderQueueGroup(id), func(m *nats.Msg) {
		n.Add(1)
		var req messages.ProviderCatalogRequest
		if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		rep := page(req.Cursor)
		rep.V = messages.Version
		b, err := messages.Encode(rep)
		if err != nil {
			t.Errorf("encode: %v", err)
			return
		}
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

func tools(from, n int) []messages.ProviderTool {
	out := make([]messages.ProviderTool, n)
	for i := range out {
		out[i] = messages.ProviderTool{Name: fmt.Sprintf("t%d", from+i), InputSchema: []byte(`{"type":"object"}`), Revision: "r"}
	}
	return out
}

// A provider whose next_cursor comes back is cut off, not followed forever.
func TestLoopingCursorIsCutOff(t *testing.T) {
	_, nc := natstest.Start(t, false)
	calls := fake(t, nc, "loop", func(cursor string) *messages.ProviderCatalogReply {
		next := "a"
		if cursor == "a" {
			next = "b"
		} else if cursor == "b" {
			next = "a"
		}
		return &messages.ProviderCatalogReply{Tools: tools(0, 1), NextCursor: next}
	})
	_, err := providers.NewRemote(nc, "loop", "sharedos").Catalog(testCtx(t), acme)
	if reason.Of(err) != reason.ProviderError || !strings.Contains(err.Error(), "repeated") {
		t.Fatalf("a looping cursor: %v, want provider_error", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests; the loop is seen at the third page", n)
	}
}

// A provider that hands out a fresh cursor forever is cut off by the page
// bound.
func TestEndlessPaginationIsCutOff(t *testing.T) {
	_, nc := natstest.Start(t, false)
	calls := fake(t, nc, "endless", func(cursor string) *messages.ProviderCatalogReply {
		return &messages.ProviderCatalogReply{NextCursor: cursor + "x"}
	})
	_, err := providers.NewRemote(nc, "endless", "sharedos").Catalog(testCtx(t), acme)
	if reason.Of(err) != reason.ProviderError {
		t.Fatalf("endless pages: %v, want provider_error", err)
	}
	if n := calls.Load(); n != providers.MaxCatalogPages {
		t.Fatalf("%d requests, want the page bound %d", n, providers.MaxCatalogPages)
	}
}

// More than MaxCatalogTools tools in all is refused whole; exactly the
// bound is taken.
func TestCatalogueTotalBound(t *testing.T) {
	_, nc := natstest.Start(t, false)
	const page = 1000
	serveUpTo := func(id string, total int) {
		fake(t, nc, id, func(cursor string) *messages.ProviderCatalogReply {
			from := 0
			if cursor != "" {
				fmt.Sscan(cursor, &from)
			}
			n := min(page, total-from)
			rep := &messages.ProviderCatalogReply{Tools: tools(from, n)}
			if from+n < total {
				rep.NextCursor = fmt.Sprint(from + n)
			}
			return rep
		})
	}
	serveUpTo("at", providers.MaxCatalogTools)
	serveUpTo("over", providers.MaxCatalogTools+1)
	cat, err := providers.NewRemote(nc, "at", "sharedos").Catalog(testCtx(t), acme)
	if err != nil || len(cat.Definitions) != providers.MaxCatalogTools {
		t.Fatalf("a catalogue at the bound: %d tools, %v", len(cat.Definitions), err)
	}
	if cat.Definitions[providers.MaxCatalogTools-1].Name != fmt.Sprintf("t%d", providers.MaxCatalogTools-1) {
		t.Fatalf("out of order: %s", cat.Definitions[providers.MaxCatalogTools-1].Name)
	}
	if _, err := providers.NewRemote(nc, "over", "sharedos").Catalog(testCtx(t), acme); reason.Of(err) != reason.ProviderError {
		t.Fatalf("a catalogue over the bound: %v, want provider_error", err)
	}
	// The bound also holds for a single page, and can be lowered.
	fake(t, nc, "onepage", func(string) *messages.ProviderCatalogReply {
		return &messages.ProviderCatalogReply{Tools: tools(0, 11)}
	})
	if _, err := providers.NewRemote(nc, "onepage", "sharedos", providers.WithMaxCatalogTools(10)).Catalog(testCtx(t), acme); reason.Of(err) != reason.ProviderError {
		t.Fatalf("one page over a bound of 10: %v", err)
	}
}

func TestOversizedCursorIsRefused(t *testing.T) {
	_, nc := natstest.Start(t, false)
	fake(t, nc, "big", func(string) *messages.ProviderCatalogReply {
		return &messages.ProviderCatalogReply{Tools: tools(0, 1), NextCursor: strings.Repeat("c", messages.MaxCursorBytes+1)}
	})
	if _, err := providers.NewRemote(nc, "big", "sharedos").Catalog(testCtx(t), acme); reason.Of(err) != reason.ProviderError {
		t.Fatalf("a cursor over %d bytes: %v", messages.MaxCursorBytes, err)
	}
}

// capture records log records.
type capture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r)
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// lines returns "level message reason" for every record.
func (c *capture) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.records {
		line := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				line += " " + a.Value.String()
			}
			return true
		})
		out = append(out, line)
	}
	return out
}

// A provider that is down is logged once, not once per turn; coming back
// is logged once.
func TestDownProviderIsLoggedOncePerStateChange(t *testing.T) {
	_, nc := natstest.Start(t, false)
	logs := &capture{}
	r := providers.NewRemote(nc, "p", "sharedos", providers.WithLogger(slog.New(logs)))
	if st := r.State(); st.Known {
		t.Fatalf("state before any request: %+v", st)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Catalog(testCtx(t), acme); reason.Of(err) != reason.ProviderUnavailable {
				t.Errorf("no provider: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := logs.lines(); len(got) != 1 || got[0] != "WARN provider down provider_unavailable" {
		t.Fatalf("50 failing catalogues logged %q, want one down line", got)
	}
	if st := r.State(); !st.Known || st.Up || st.Class != reason.ProviderUnavailable {
		t.Fatalf("state: %+v", st)
	}

	fake(t, nc, "p", func(string) *messages.ProviderCatalogReply { return &messages.ProviderCatalogReply{Tools: tools(0, 1)} })
	for range 50 {
		if _, err := r.Catalog(testCtx(t), acme); err != nil {
			t.Fatal(err)
		}
	}
	if got := logs.lines(); len(got) != 2 || got[1] != "INFO provider up" {
		t.Fatalf("logged %q, want one up line after the down line", got)
	}
	if st := r.State(); !st.Up || st.Class != "" {
		t.Fatalf("state: %+v", st)
	}

	// A call that finds no instance marks it down, once.
	for range 3 {
		if _, err := r.Invoke(testCtx(t), providers.Call{Access: acme, Tool: catalog.Identity{Provider: "p", Name: "t0"}}); reason.Of(err) != reason.ProviderUnavailable || !errors.Is(err, providers.ErrNotDispatched) {
			t.Fatalf("invoke with no instance: %v (want provider_unavailable, not dispatched: nobody got it)", err)
		}
	}
	if got := logs.lines(); len(got) != 3 || got[2] != "WARN provider down provider_unavailable" {
		t.Fatalf("logged %q, want one more down line", got)
	}
	if _, err := r.Catalog(testCtx(t), acme); err != nil {
		t.Fatal(err)
	}

	// The caller's own cancellation says nothing about the provider.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Catalog(cancelled, acme); err == nil {
		t.Fatal("a cancelled catalogue succeeded")
	}
	if got := logs.lines(); len(got) != 4 {
		t.Fatalf("the caller's own cancellation changed the state: %q", got)
	}
}
