package natsfront_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
)

// cutProxy forwards TCP connections to a NATS server; cut drops every
// connection and refuses new ones until resume: a client's connection
// lost mid-request, the way a node's server restarting loses it.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	held   bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.held {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

// cut drops every connection and holds new ones off until resume.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) resume() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
}

// A call whose answer is lost while the client's connection is down is
// sent again once it is back (the same request id), and the turn answers
// it with the first execution's answer: the tool ran once, one call is
// recorded, and the caller gets its result rather than deadline_exceeded.
func TestLostAnswerIsRecoveredByResending(t *testing.T) {
	srv, nc := natstest.Start(t, false)
	f := conformance.NewFixture(t)
	release := make(chan struct{})
	var runs atomic.Int32
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: providers.HeldHandler(release, &runs, func(int32) providers.Result {
		return providers.Result{Text: "the answer"}
	})})
	serve(t, nc, f.Options(), natsfront.Options{})

	proxy := startCutProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	down := make(chan struct{}, 1)
	cnc, err := nats.Connect(proxy.url(), nats.IgnoreDiscoveredServers(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case down <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	c := client.New(cnc, &client.Options{ResendAfter: 200 * time.Millisecond})
	c10 := ctx(t)
	tr, err := c.Open(c10, client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		rep string
		err error
	}
	got := make(chan answer, 1)
	go func() {
		rep, err := tr.Invoke(c10, "notion_search", []byte(`{"workspace":"acme","query":"q"}`))
		if err != nil {
			got <- answer{err: err}
			return
		}
		got <- answer{rep: rep.Text}
	}()
	for runs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	proxy.cut()
	<-down
	// The tool answers while the caller is away: its reply goes nowhere.
	close(release)
	for len(eventsOf(f, tr.Handle.TurnID, audit.ToolCompleted)) == 0 {
		if c10.Err() != nil {
			t.Fatal("the call never completed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.resume()
	a := <-got
	if a.err != nil || a.rep != "the answer" {
		t.Fatalf("the caller got %q, %v; want the first execution's answer", a.rep, a.err)
	}
	if runs.Load() != 1 || len(eventsOf(f, tr.Handle.TurnID, audit.ToolInvoked)) != 1 {
		t.Fatalf("the tool ran %d times, %d calls recorded; want 1 and 1", runs.Load(), len(eventsOf(f, tr.Handle.TurnID, audit.ToolInvoked)))
	}
	if c.Resent() == 0 {
		t.Fatal("the client never sent the call again")
	}
}

func eventsOf(f *conformance.Fixture, turnID string, typ audit.Type) []*audit.Event {
	var out []*audit.Event
	for _, ev := range f.Sink.Events(turnID) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}
