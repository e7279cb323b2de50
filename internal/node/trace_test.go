package node_test

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/tracing"
	"github.com/sharedos/sharedos/internal/tracing/otlprecv"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/provider"
)

// metaLog is an MCP server over HTTP on loopback whose one tool, "note",
// records the _meta each call carried.
type metaLog struct {
	mu    sync.Mutex
	metas []map[string]any
}

func (m *metaLog) last() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.metas) == 0 {
		return nil
	}
	return m.metas[len(m.metas)-1]
}

func startMetaLog(t *testing.T) (*metaLog, string) {
	t.Helper()
	ml := &metaLog{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "tracelog", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "note", Description: "notes a text", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest, args in) (*mcp.CallToolResult, any, error) {
			ml.mu.Lock()
			ml.metas = append(ml.metas, map[string]any(req.Params.Meta))
			ml.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noted " + args.Text}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return ml, hs.URL + "/mcp"
}

// traceRig is a node whose provider "tr" is an MCP server reached through
// the provider SDK in a process of its own (here: its own connection),
// like cmd/mcp-provider: runtime → node → provider → MCP server.
type traceRig struct {
	n        *node.Node
	recv     *otlprecv.Receiver
	mcpLog   *metaLog
	runtime  *tracing.Tracing // the runtime's own pipeline (nil: untraced)
	provider *tracing.Tracing // the provider process's
	c        *client.Client
	nc       *nats.Conn
}

func startTraceRig(t *testing.T, nodeTracing, runtimeTracing bool, capture ...bool) *traceRig {
	t.Helper()
	recv, err := otlprecv.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Close() })
	r := &traceRig{recv: recv}
	var url string
	r.mcpLog, url = startMetaLog(t)
	pipe := func(service string) *tracing.Tracing {
		tr, err := tracing.New(tracing.Config{Enabled: true, Endpoint: recv.Endpoint(), Insecure: true, ServiceName: service}, service)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
		return tr
	}

	dir := t.TempDir()
	cfg := sampleConfig(t, dir)
	cfg.Principals = append(cfg.Principals, config.Principal{Tenant: "acme", Principal: "tracy",
		Grants: []authority.GrantSpec{{ID: "tr", Capability: "mcp.tr.*", Resource: "mcp/tr/**"}}})
	cfg.Providers = append(cfg.Providers, config.Provider{ID: "tr", Kind: "nats"})
	if nodeTracing {
		cfg.Tracing = tracing.Config{Enabled: true, Endpoint: recv.Endpoint(), Insecure: true, CaptureContent: len(capture) > 0 && capture[0]}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r.n = start(t, cfg)
	t.Cleanup(func() { _ = r.n.Shutdown(context.Background()) })

	key, err := auditstore.LoadOrCreateKey(auditstore.DefaultKeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if nodeTracing { // else the provider traces nothing either: it only passes trace context on
		r.provider = pipe("provider")
	}
	mp, err := mcpprovider.New("tr", mcpprovider.Config{Transport: "http", URL: url}, &mcpprovider.Options{Tracer: r.provider.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Close() })
	h, err := provider.Serve(connectAs(t, r.n, "provider-tr"), "tr", mp.SDK(), &provider.Options{
		TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, TracerProvider: r.provider.Provider()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })

	if runtimeTracing {
		r.runtime = pipe("runtime")
	}
	r.nc = connectAs(t, r.n, "runtime")
	r.c = client.New(r.nc, &client.Options{TracerProvider: r.runtime.Provider()})
	return r
}

// call runs one turn under ctx: open, list, call the MCP tool, close; it
// returns the tool's alias.
func (r *traceRig) call(t *testing.T, ctx context.Context) string {
	t.Helper()
	turn, err := r.c.Open(ctx, client.Access{Tenant: "acme", Principal: "tracy", Namespaces: []string{"tr"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alias := ""
	for _, tl := range l.Tools {
		if tl.Name == "note" {
			alias = tl.Alias
		}
	}
	if alias == "" {
		t.Fatalf("the MCP tool is not listed: %+v", l)
	}
	res, err := turn.Invoke(ctx, alias, []byte(`{"text":"secret-argument"}`))
	if err != nil || !strings.Contains(res.Text, "noted") {
		t.Fatalf("call: %+v %v", res, err)
	}
	if err := turn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return alias
}

// flush ends every pipeline: the node's spans are exported at its
// shutdown, the runtime's and provider's at theirs.
func (r *traceRig) flush(t *testing.T) {
	t.Helper()
	if err := r.n.Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*tracing.Tracing{r.runtime, r.provider} {
		if err := tr.ForceFlush(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// spanNamed finds the one span of service named name and kind.
func spanNamed(t *testing.T, spans []otlprecv.Span, service, name, kind string) otlprecv.Span {
	t.Helper()
	var found []otlprecv.Span
	for _, s := range spans {
		if s.Service == service && s.Name == name && s.Kind == kind {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Service+":"+s.Name+"/"+s.Kind)
		}
		t.Fatalf("%d spans %s %q (%s); received %v", len(found), service, name, kind, names)
	}
	return found[0]
}

// One call's trace, end to end through a real OTLP/HTTP receiver: the
// runtime's span parents the client's, which parents the node's request
// span, its execute_tool span, the provider hop on both sides and the
// MCP tools/call — and the MCP server received that span's traceparent in
// _meta. Names and attributes are the conventions'; no argument content.
func TestTraceEndToEnd(t *testing.T) {
	r := startTraceRig(t, true, true)
	root, step := r.runtime.Provider().Tracer("agent").Start(ctx(t), "agent step")
	alias := r.call(t, root)
	step.End()
	r.flush(t)

	spans := r.recv.Spans()
	traceID := step.SpanContext().TraceID().String()
	cl := spanNamed(t, spans, "runtime", "sharedos.invoke", "client")
	srv := spanNamed(t, spans, "sharedos-node", "sharedos.invoke", "server")
	exec := spanNamed(t, spans, "sharedos-node", "execute_tool "+alias, "internal")
	hop := spanNamed(t, spans, "sharedos-node", "sharedos.provider.invoke tr", "client")
	psrv := spanNamed(t, spans, "provider", "sharedos.provider.invoke tr", "server")
	mcall := spanNamed(t, spans, "provider", "tools/call note", "client")
	chain := []struct {
		name string
		s    otlprecv.Span
	}{{"client", cl}, {"node", srv}, {"execute_tool", exec}, {"provider hop", hop}, {"provider", psrv}, {"tools/call", mcall}}
	parent := step.SpanContext().SpanID().String()
	for _, c := range chain {
		if c.s.TraceID != traceID {
			t.Errorf("%s span in trace %s, want the runtime's %s", c.name, c.s.TraceID, traceID)
		}
		if c.s.ParentID != parent {
			t.Errorf("%s span's parent is %s, want %s", c.name, c.s.ParentID, parent)
		}
		parent = c.s.SpanID
	}
	want := map[string]map[string]string{
		"node":         {"sharedos.operation": "invoke", "sharedos.transport": "nats", "messaging.system": "nats"},
		"execute_tool": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": alias, "sharedos.decision": "allow"},
		"provider hop": {"gen_ai.tool.name": "note", "sharedos.provider": "tr"},
		"tools/call":   {"mcp.method.name": "tools/call", "gen_ai.tool.name": "note", "gen_ai.operation.name": "execute_tool"},
	}
	for _, c := range chain {
		for k, v := range want[c.name] {
			if got := c.s.Attrs[k]; got != v {
				t.Errorf("%s span: %s = %q, want %q", c.name, k, got, v)
			}
		}
		for k, v := range c.s.Attrs {
			if strings.Contains(v, "secret-argument") || k == "gen_ai.tool.call.arguments" || k == "gen_ai.tool.call.result" {
				t.Errorf("%s span records content (%s) without the opt-in", c.name, k)
			}
		}
	}
	for _, k := range []string{"gen_ai.tool.call.id", "sharedos.catalog_hash"} {
		if exec.Attrs[k] == "" {
			t.Errorf("execute_tool span has no %s", k)
		}
	}
	if exec.Attrs["gen_ai.tool.call.id"] != hop.Attrs["gen_ai.tool.call.id"] || hop.Attrs["gen_ai.tool.call.id"] != psrv.Attrs["gen_ai.tool.call.id"] {
		t.Errorf("call ids differ: execute_tool %q, hop %q, provider %q", exec.Attrs["gen_ai.tool.call.id"], hop.Attrs["gen_ai.tool.call.id"], psrv.Attrs["gen_ai.tool.call.id"])
	}
	if srv.Attrs["sharedos.turn.id"] == "" || mcall.Attrs["mcp.protocol.version"] == "" {
		t.Errorf("node span turn id %q, tools/call protocol version %q", srv.Attrs["sharedos.turn.id"], mcall.Attrs["mcp.protocol.version"])
	}
	tp, _ := r.mcpLog.last()["traceparent"].(string)
	if wantTP := "00-" + traceID + "-" + mcall.SpanID + "-01"; tp != wantTP {
		t.Errorf("the MCP server received traceparent %q in _meta, want %q", tp, wantTP)
	}
	// Each audit commit is a span of its own, counting its records.
	commits := 0
	for _, s := range spans {
		if s.Service == "sharedos-node" && s.Name == "sharedos.audit.commit" && s.Kind == "producer" {
			if s.Attrs["sharedos.audit.records"] == "" || s.Attrs["sharedos.audit.records"] == "0" || s.Attrs["messaging.system"] != "nats" {
				t.Errorf("audit commit span attributes %v", s.Attrs)
			}
			commits++
		}
	}
	if commits == 0 {
		t.Error("no audit commit span")
	}
	// The turn's other operations are spans of the same trace too.
	for _, op := range []string{"sharedos.open", "sharedos.list", "sharedos.close"} {
		if s := spanNamed(t, spans, "sharedos-node", op, "server"); s.TraceID != traceID {
			t.Errorf("%s in trace %s, want %s", op, s.TraceID, traceID)
		}
	}
}

// A caller's traceparent only parents: a malformed or oversized one is
// ignored — the request is answered as usual and the node's span starts
// a trace of its own — never an error; a well-formed one is a parent.
func TestTraceparentFromCallerIsBounded(t *testing.T) {
	r := startTraceRig(t, true, false)
	access := messages.Access{Tenant: "acme", Principal: "tracy", Namespaces: []string{"tr"}}
	valid := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	cases := []struct {
		name, traceparent, tracestate string
		parented                      bool
	}{
		{"garbage", "zz-not-a-trace-context", "", false},
		{"oversized", valid + "-" + strings.Repeat("a", 200), "", false},
		{"invalid ids", "00-00000000000000000000000000000000-0000000000000000-01", "", false},
		{"valid, tracestate oversized", valid, "k=" + strings.Repeat("v", 600), true},
	}
	for _, c := range cases {
		data, err := messages.Encode(&messages.OpenRequest{V: messages.Version, Access: access, TimeoutMs: 5000})
		if err != nil {
			t.Fatal(err)
		}
		m := &nats.Msg{Subject: messages.OpenSubject("sharedos"), Data: data, Header: nats.Header{"traceparent": {c.traceparent}}}
		if c.tracestate != "" {
			m.Header["tracestate"] = []string{c.tracestate}
		}
		rep, err := r.nc.RequestMsgWithContext(ctx(t), m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var open messages.OpenReply
		if err := messages.Decode(rep.Data, &open, messages.DefaultLimits()); err != nil || open.Error != nil || open.TurnID == "" {
			t.Fatalf("%s: the open was not answered as usual: %+v %v", c.name, open.Error, err)
		}
	}
	r.flush(t)
	var opens []otlprecv.Span
	for _, s := range r.recv.Spans() {
		if s.Name == "sharedos.open" {
			opens = append(opens, s)
		}
	}
	if len(opens) != len(cases) {
		t.Fatalf("%d open spans, want %d", len(opens), len(cases))
	}
	parented := 0
	for _, s := range opens {
		if s.ParentID != "" {
			parented++
			if s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.ParentID != "b7ad6b7169203331" {
				t.Errorf("a parented open span is in %s under %s", s.TraceID, s.ParentID)
			}
		}
	}
	if parented != 1 {
		t.Errorf("%d open spans parented by the caller, want 1 (the valid traceparent only)", parented)
	}
}

// Tracing off at the node: a runtime that traces still gets its own
// spans, but the node adds none, sends no trace context to the provider,
// and the MCP server's _meta carries no traceparent.
func TestTracingOffAddsNothing(t *testing.T) {
	r := startTraceRig(t, false, true)
	root, step := r.runtime.Provider().Tracer("agent").Start(ctx(t), "agent step")
	r.call(t, root)
	step.End()
	r.flush(t)
	// Wait for the runtime's spans, which were sent (the client traces).
	deadline := time.After(10 * time.Second)
	for r.recv.Count() == 0 {
		select {
		case <-r.recv.Changed():
		case <-deadline:
			t.Fatal("the runtime's spans never arrived")
		}
	}
	for _, s := range r.recv.Spans() {
		if s.Service != "runtime" {
			t.Errorf("span %q from %s with the node's tracing off", s.Name, s.Service)
		}
	}
	meta := r.mcpLog.last()
	if _, ok := meta["traceparent"]; ok {
		t.Errorf("the MCP server received a traceparent with the node's tracing off: %v", meta)
	}
	if !trace.SpanContextFromContext(root).IsValid() {
		t.Fatal("the runtime's span context is not valid")
	}
}

// A model sandbox's tools/call through the node's MCP front continues the
// trace its params._meta names: the front's "tools/call {alias}" server
// span is a child of the sandbox's span, and the call goes on to the
// provider and the MCP server behind it in the same trace — on the SDK's
// path (a _meta traceparent) and on the fast path (an HTTP traceparent).
func TestTraceThroughMCPFront(t *testing.T) {
	r := startTraceRig(t, true, false)
	turn, err := r.c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "tracy", Namespaces: []string{"tr"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn.ListTools(ctx(t))
	if err != nil || len(l.Tools) != 1 {
		t.Fatalf("list: %+v %v", l, err)
	}
	alias := l.Tools[0].Alias
	viaMeta, viaHeader := "4bf92f3577b34da6a3ce929d0e0e4736", "5bf92f3577b34da6a3ce929d0e0e4737"
	s, err := mcp.NewClient(&mcp.Implementation{Name: "sandbox", Version: "1"}, nil).Connect(ctx(t),
		&mcp.StreamableClientTransport{Endpoint: tok.URL, HTTPClient: &http.Client{Transport: traceRT{bearer: tok.Token, traceparent: "00-" + viaHeader + "-00f067aa0ba902b8-01"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	res, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: alias, Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + viaMeta + "-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatalf("call with _meta: %+v %v", res, err)
	}
	if res, err = s.CallTool(ctx(t), &mcp.CallToolParams{Name: alias, Arguments: map[string]any{"text": "y"}}); err != nil || res.IsError {
		t.Fatalf("call with the HTTP header only: %+v %v", res, err)
	}
	r.flush(t)
	spans := r.recv.Spans()
	for _, c := range []struct{ trace, parent string }{{viaMeta, "00f067aa0ba902b7"}, {viaHeader, "00f067aa0ba902b8"}} {
		var front, mcall *otlprecv.Span
		for i, sp := range spans {
			switch {
			case sp.TraceID != c.trace:
			case sp.Service == "sharedos-node" && sp.Name == "tools/call "+alias && sp.Kind == "server":
				front = &spans[i]
			case sp.Service == "provider" && sp.Name == "tools/call note":
				mcall = &spans[i]
			}
		}
		if front == nil || mcall == nil {
			t.Fatalf("trace %s: front span %v, provider tools/call span %v", c.trace, front, mcall)
		}
		if front.ParentID != c.parent {
			t.Errorf("trace %s: the front's span's parent is %s, want the sandbox's %s", c.trace, front.ParentID, c.parent)
		}
		for k, v := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": alias,
			"sharedos.transport": "mcp", "sharedos.decision": "allow"} {
			if front.Attrs[k] != v {
				t.Errorf("trace %s: front span %s = %q, want %q", c.trace, k, front.Attrs[k], v)
			}
		}
		if front.Attrs["gen_ai.tool.call.id"] == "" || front.Attrs["mcp.protocol.version"] == "" {
			t.Errorf("trace %s: front span without call id or protocol version: %v", c.trace, front.Attrs)
		}
	}
}

// traceRT sends a bearer token and a traceparent header on every request.
type traceRT struct{ bearer, traceparent string }

func (b traceRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.bearer)
	r.Header.Set("Traceparent", b.traceparent)
	return http.DefaultTransport.RoundTrip(r)
}

// capture_content is the operator's opt-in: with it the execute_tool span
// carries the call's arguments and result (gen_ai.tool.call.arguments,
// .result); no other span does.
func TestTraceCaptureContentOptIn(t *testing.T) {
	r := startTraceRig(t, true, true, true)
	root, step := r.runtime.Provider().Tracer("agent").Start(ctx(t), "agent step")
	alias := r.call(t, root)
	step.End()
	r.flush(t)
	spans := r.recv.Spans()
	exec := spanNamed(t, spans, "sharedos-node", "execute_tool "+alias, "internal")
	if got := exec.Attrs["gen_ai.tool.call.arguments"]; got != `{"text":"secret-argument"}` {
		t.Errorf("arguments captured as %q", got)
	}
	if got := exec.Attrs["gen_ai.tool.call.result"]; !strings.Contains(got, "noted secret-argument") {
		t.Errorf("result captured as %q", got)
	}
	for _, s := range spans {
		if s.SpanID == exec.SpanID {
			continue
		}
		for k, v := range s.Attrs {
			if strings.Contains(v, "secret-argument") {
				t.Errorf("span %s records content in %s", s.Name, k)
			}
		}
	}
}
