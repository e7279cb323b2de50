package mcpfront_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// bridge runs ServeStdio with opts and returns a function sending one
// line and reading the bridge's answer to it.
func bridge(t *testing.T, opts mcpfront.StdioOptions) func(line string) map[string]json.RawMessage {
	t.Helper()
	write, read := bridgeLines(t, opts)
	return func(line string) map[string]json.RawMessage {
		t.Helper()
		write(line)
		return read()
	}
}

// bridgeLines runs ServeStdio with opts and returns functions writing one
// line to it and reading the next line it writes.
func bridgeLines(t *testing.T, opts mcpfront.StdioOptions) (write func(line string), read func() map[string]json.RawMessage) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		done <- mcpfront.ServeStdio(ctx, inR, outW, opts)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close() // what the bridge still writes fails rather than blocks
		cancel()
		<-done
	})
	sc := bufio.NewScanner(outR)
	sc.Buffer(nil, 1<<20)
	write = func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	read = func() map[string]json.RawMessage {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("no answer: %v", sc.Err())
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("answer %s: %v", sc.Bytes(), err)
		}
		return m
	}
	return write, read
}

// A notification is never answered, even when the endpoint refuses it (a
// closed turn's token is refused 403): what the sandbox reads next is the
// answer to its next request. (A response without an id breaks an SDK
// client's reader, and every call it has in flight fails with it.)
func TestStdioBridgeNeverAnswersANotification(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, tok := e.open(t, conformance.Ada)
	write, read := bridgeLines(t, mcpfront.StdioOptions{URL: e.url, Token: tok.Token})
	write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if init := read(); string(init["id"]) != "1" || init["error"] != nil {
		t.Fatalf("initialize: %s %s", init["error"], init["result"])
	}
	if err := e.k.Close(testCtx(t), who, who.LeaseID); err != nil {
		t.Fatal(err)
	}
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}`)
	write(call("2", acme))
	c := read()
	if string(c["id"]) != "2" || !strings.Contains(string(c["error"]), `"turn_closed"`) {
		t.Fatalf("the first line after two notifications: id %s, error %s, result %s", c["id"], c["error"], c["result"])
	}
}

// Whatever an endpoint says to a notification (here, as some servers do,
// a JSON-RPC error with a null id) the bridge does not pass on.
func TestStdioBridgeDropsWhatANotificationIsAnswered(t *testing.T) {
	// The request is answered only after the notification was, so a
	// notification's answer, if passed on, is the first line.
	answered := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		if len(m.ID) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}`)
			close(answered)
			return
		}
		<-answered
		time.Sleep(50 * time.Millisecond) // the notification's answer reaches the bridge first
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{}}`)
	}))
	t.Cleanup(srv.Close)
	write, read := bridgeLines(t, mcpfront.StdioOptions{URL: srv.URL + mcpfront.Path, Token: "t"})
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if a := read(); string(a["id"]) != "3" || a["error"] != nil {
		t.Fatalf("the first line after a notification: id %s, error %s", a["id"], a["error"])
	}
}

// A 2026-07-28 client over stdio (no initialize; server/discover, then
// listings and calls with the _meta envelope) is served: the bridge sends
// the Mcp-Method and Mcp-Name headers 2026-07-28 requires on HTTP, which
// the endpoint checks against the body.
func TestStdioBridge20260728(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, tok := e.open(t, conformance.Ada)
	send := bridge(t, mcpfront.StdioOptions{URL: e.url, Token: tok.Token})
	d := send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":` + meta + `}}`)
	if d["error"] != nil || !strings.Contains(string(d["result"]), `"2026-07-28"`) {
		t.Fatalf("discover: %s %s", d["result"], d["error"])
	}
	l := send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":` + meta + `}}`)
	if l["error"] != nil || !strings.Contains(string(l["result"]), `"notion_search"`) {
		t.Fatalf("list: %s %s", l["result"], l["error"])
	}
	c := send(modernCall("notion_search", acme))
	if c["error"] != nil || strings.Contains(string(c["result"]), `"isError":true`) || !strings.Contains(string(c["result"]), `"resultType":"complete"`) {
		t.Fatalf("call: %s %s", c["result"], c["error"])
	}
	r := send(modernCall("notion_search", `{"workspace":"globex","query":"q"}`))
	if !strings.Contains(string(r["result"]), `"no_matching_grant"`) {
		t.Fatalf("refusal: %s %s", r["result"], r["error"])
	}
	u := send(modernCall("shell_exec", `{}`))
	if !strings.Contains(string(u["error"]), `-32602`) {
		t.Fatalf("unknown tool: %s %s", u["result"], u["error"])
	}
}

// With nothing listening at the endpoint, the stdio client gets an answer
// at once, not a hang: initialize a JSON-RPC error whose data says
// node_unavailable, a call a tool error saying node_unavailable and
// dispatched false (no connection was made).
func TestStdioBridgeNodeUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + mcpfront.Path
	ln.Close()
	send := bridge(t, mcpfront.StdioOptions{URL: url, Token: "t"})
	init := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	var rpcErr struct {
		Code int
		Data struct{ Code, Message string }
	}
	if err := json.Unmarshal(init["error"], &rpcErr); err != nil || rpcErr.Code != mcpfront.CodeRefused || rpcErr.Data.Code != "node_unavailable" || !strings.Contains(rpcErr.Data.Message, url) {
		t.Fatalf("initialize: %s %s", init["error"], init["result"])
	}
	c := send(modernCall("notion_search", acme))
	var res struct {
		IsError           bool
		ResultType        string
		StructuredContent mcpfront.Refusal
	}
	if err := json.Unmarshal(c["result"], &res); err != nil || !res.IsError || res.StructuredContent.Code != "node_unavailable" ||
		res.StructuredContent.Dispatched == nil || *res.StructuredContent.Dispatched || res.ResultType != "complete" {
		t.Fatalf("call: %s %s", c["result"], c["error"])
	}
}

// An endpoint that takes the request and never answers: the bridge
// answers deadline_exceeded at its request timeout (the call may have
// run: dispatched absent).
func TestStdioBridgeRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	send := bridge(t, mcpfront.StdioOptions{URL: srv.URL + mcpfront.Path, Token: "t", RequestTimeout: 100 * time.Millisecond})
	c := send(call("1", acme))
	var res struct {
		IsError           bool
		StructuredContent mcpfront.Refusal
	}
	if err := json.Unmarshal(c["result"], &res); err != nil || !res.IsError || res.StructuredContent.Code != "deadline_exceeded" || res.StructuredContent.Dispatched != nil {
		t.Fatalf("call: %s %s", c["result"], c["error"])
	}
	l := send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if !strings.Contains(string(l["error"]), `"deadline_exceeded"`) {
		t.Fatalf("list: %s %s", l["result"], l["error"])
	}
}
