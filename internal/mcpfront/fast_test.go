package mcpfront_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// fcase is one request sent down both paths.
type fcase struct {
	name    string
	method  string            // HTTP method; POST if empty
	version string            // MCP-Protocol-Version; none if "-"
	header  map[string]string // more headers ("" value: removed)
	body    string
	fast    bool // the fast path answers it
}

const meta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}`

func call(id, args string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"notion_search","arguments":` + args + `}}`
}

func modernCall(name, args string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":` + meta + `,"name":"` + name + `","arguments":` + args + `}}`
}

func modernHeaders(method, name string) map[string]string {
	h := map[string]string{"Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

const acme = `{"workspace":"acme","query":"roadmap"}`

// fastCases: valid calls and listings at each revision, refusals, an
// unknown alias, bad arguments, bad headers, wrong versions, batches, an
// oversized body, and what the fast path leaves to the SDK.
func fastCases() []fcase {
	var cs []fcase
	for _, v := range []string{"2025-11-25", "2025-06-18"} {
		cs = append(cs,
			fcase{name: v + " list", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, fast: true},
			fcase{name: v + " list without params", version: v, body: `{"jsonrpc":"2.0","id":"l-1","method":"tools/list"}`, fast: true},
			fcase{name: v + " list with a cursor", version: v, body: `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"notes_put"}}`, fast: true},
			fcase{name: v + " list with a bad cursor", version: v, body: `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"no-such-tool"}}`, fast: true},
			fcase{name: v + " call", version: v, body: call("3", acme), fast: true},
			fcase{name: v + " call refused", version: v, body: call(`"c:3"`, `{"workspace":"globex","query":"roadmap"}`), fast: true},
			fcase{name: v + " unknown alias", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"shell_exec","arguments":{}}}`, fast: true},
			fcase{name: v + " empty name", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"","arguments":{}}}`, fast: true},
			fcase{name: v + " bad arguments", version: v, body: call("5", `{"workspace":5}`), fast: true},
			fcase{name: v + " arguments null", version: v, body: call("5", `null`), fast: true},
			fcase{name: v + " arguments absent", version: v, body: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"notion_search"}}`, fast: true},
			fcase{name: v + " arguments spaced", version: v, body: " \n" + call("6", `{ "workspace" : "acme" , "query":"a\"b<>&" }`) + "\n ", fast: true},
			fcase{name: v + " arguments an array", version: v, body: call("6", `[1]`)},
			fcase{name: v + " name a number", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}`},
			fcase{name: v + " no name", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":{}}}`},
			fcase{name: v + " params null", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":null}`},
			fcase{name: v + " no params", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call"}`},
			fcase{name: v + " unknown params field", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"notion_search","arguments":{},"task":{}}}`},
			fcase{name: v + " a _meta", version: v, body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{"progressToken":1},"name":"notion_search","arguments":` + acme + `}}`},
			fcase{name: v + " a 2026 _meta", version: v, body: modernCall("notion_search", acme)},
		)
	}
	v := "2025-11-25"
	cs = append(cs,
		fcase{name: "id 0", version: v, body: call("0", acme), fast: true},
		fcase{name: "id 1.5", version: v, body: call("1.5", acme)},
		fcase{name: "id 1e2", version: v, body: call("1e2", acme)},
		fcase{name: "id negative", version: v, body: call("-1", acme)},
		fcase{name: "id with a space", version: v, body: call(`"a b"`, acme)},
		fcase{name: "id with an escape", version: v, body: call(`"a\u0041"`, acme)},
		fcase{name: "id null", version: v, body: call("null", acme)},
		fcase{name: "no id", version: v, body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"notion_search","arguments":{}}}`},
		fcase{name: "no Accept", version: v, header: map[string]string{"Accept": ""}, body: call("1", acme)},
		fcase{name: "Accept json only", version: v, header: map[string]string{"Accept": "application/json"}, body: call("1", acme)},
		fcase{name: "Accept */*", version: v, header: map[string]string{"Accept": "*/*"}, body: call("1", acme), fast: true},
		fcase{name: "Accept with parameters", version: v, header: map[string]string{"Accept": "Application/JSON;q=0.9, text/*"}, body: call("1", acme), fast: true},
		fcase{name: "Content-Type text", version: v, header: map[string]string{"Content-Type": "text/plain"}, body: call("1", acme)},
		fcase{name: "Content-Type with charset", version: v, header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, body: call("1", acme), fast: true},
		fcase{name: "no Content-Type", version: v, header: map[string]string{"Content-Type": ""}, body: call("1", acme)},
		fcase{name: "no protocol version", version: "-", body: call("1", acme)},
		fcase{name: "2025-03-26", version: "2025-03-26", body: call("1", acme)},
		fcase{name: "unknown old version", version: "2024-01-01", body: call("1", acme)},
		fcase{name: "unknown new version", version: "2027-01-01", body: call("1", acme)},
		fcase{name: "Last-Event-ID", version: v, header: map[string]string{"Last-Event-ID": "x_1"}, body: call("1", acme)},
		fcase{name: "rebinding Host", version: v, header: map[string]string{"Host": "evil.example"}, body: call("1", acme)},
		fcase{name: "foreign Origin", version: v, header: map[string]string{"Origin": "https://evil.example"}, body: call("1", acme)},
		fcase{name: "GET", method: http.MethodGet, version: v},
		fcase{name: "DELETE", method: http.MethodDelete, version: v},
		fcase{name: "batch", version: v, body: "[" + call("1", acme) + "]"},
		fcase{name: "batch 2025-03-26", version: "2025-03-26", body: "[" + call("1", acme) + "," + call("2", acme) + "]"},
		fcase{name: "empty batch", version: v, body: "[]"},
		fcase{name: "empty body", version: v, body: ""},
		fcase{name: "malformed", version: v, body: `{"jsonrpc":"2.0","id":1,`},
		fcase{name: "trailing data", version: v, body: call("1", acme) + " x"},
		fcase{name: "two messages", version: v, body: call("1", acme) + call("2", acme)},
		fcase{name: "jsonrpc 1.0", version: v, body: strings.Replace(call("1", acme), `"2.0"`, `"1.0"`, 1)},
		fcase{name: "key case", version: v, body: strings.Replace(call("1", acme), `"method"`, `"Method"`, 1)},
		fcase{name: "duplicate key", version: v, body: strings.Replace(call("1", acme), `"method":"tools/call"`, `"method":"tools/list","method":"tools/call"`, 1)},
		fcase{name: "extra key", version: v, body: strings.Replace(call("1", acme), `"id":1`, `"id":1,"x":1`, 1)},
		fcase{name: "escaped method", version: v, body: strings.Replace(call("1", acme), `"tools/call"`, `"tools\/call"`, 1)},
		fcase{name: "oversized", version: v, body: call("1", `{"workspace":"acme","query":"`+strings.Repeat("x", 20<<10)+`"}`)},
		fcase{name: "deep arguments", version: v, body: call("1", `{"workspace":"acme","query":"q","x":`+strings.Repeat("[", 1001)+strings.Repeat("]", 1001)+`}`)},
		fcase{name: "invalid UTF-8", version: v, body: call("1", "{\"workspace\":\"acme\",\"query\":\"\xff\"}")},
		fcase{name: "escaped key", version: v, body: strings.Replace(call("1", acme), `"method"`, `"meth\u006fd"`, 1)},
		fcase{name: "spaced message", version: v, body: "{ \"jsonrpc\" : \"2.0\" ,\n\t\"id\" : 3 , \"method\" : \"tools/call\" , \"params\" : { \"name\" : \"notion_search\" , \"arguments\" : {\"workspace\":\"acme\",\"query\":\"}{][\\\"\"} } }\r\n", fast: true},
		fcase{name: "name with an escape", version: v, body: strings.Replace(call("1", acme), `"notion_search"`, `"notion\u005fsearch"`, 1), fast: true},
		fcase{name: "empty params", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`},
		fcase{name: "params an array", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}`},
		fcase{name: "initialize", version: "-", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
		fcase{name: "initialized", version: v, body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		fcase{name: "ping", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
		fcase{name: "prompts/list", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"prompts/list"}`},
		fcase{name: "unknown method", version: v, body: `{"jsonrpc":"2.0","id":1,"method":"tools/nope","params":{}}`},
	)
	m := "2026-07-28"
	cs = append(cs,
		fcase{name: m + " list", version: m, header: modernHeaders("tools/list", ""), body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + meta + `}}`, fast: true},
		fcase{name: m + " list with a bad cursor", version: m, header: modernHeaders("tools/list", ""), body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + meta + `,"cursor":"nope"}}`, fast: true},
		fcase{name: m + " list without params", version: m, header: modernHeaders("tools/list", ""), body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		fcase{name: m + " call", version: m, header: modernHeaders("tools/call", "notion_search"), body: modernCall("notion_search", acme), fast: true},
		fcase{name: m + " call refused", version: m, header: modernHeaders("tools/call", "notion_search"), body: modernCall("notion_search", `{"workspace":"globex","query":"q"}`), fast: true},
		fcase{name: m + " unknown alias", version: m, header: modernHeaders("tools/call", "shell_exec"), body: modernCall("shell_exec", `{}`), fast: true},
		fcase{name: m + " bad arguments", version: m, header: modernHeaders("tools/call", "notion_search"), body: modernCall("notion_search", `{"workspace":[]}`), fast: true},
		fcase{name: m + " logLevel", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `clientCapabilities":{}`, `clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"`, 1), fast: true},
		fcase{name: m + " no Mcp-Method", version: m, header: modernHeaders("", "notion_search"), body: modernCall("notion_search", acme)},
		fcase{name: m + " Mcp-Method mismatch", version: m, header: modernHeaders("tools/list", "notion_search"), body: modernCall("notion_search", acme)},
		fcase{name: m + " no Mcp-Name", version: m, header: modernHeaders("tools/call", ""), body: modernCall("notion_search", acme)},
		fcase{name: m + " Mcp-Name mismatch", version: m, header: modernHeaders("tools/call", "notes_put"), body: modernCall("notion_search", acme)},
		fcase{name: m + " no _meta", version: m, header: modernHeaders("tools/call", "notion_search"), body: call("1", acme)},
		fcase{name: m + " _meta version mismatch", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `"2026-07-28"`, `"2025-11-25"`, 1)},
		fcase{name: m + " no clientCapabilities", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `"io.modelcontextprotocol/clientCapabilities":{},`, ``, 1)},
		fcase{name: m + " bad clientCapabilities", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `clientCapabilities":{}`, `clientCapabilities":{"sampling":5}`, 1)},
		fcase{name: m + " bad clientInfo", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `{"name":"t","version":"1"}`, `"t"`, 1)},
		fcase{name: m + " progressToken", version: m, header: modernHeaders("tools/call", "notion_search"), body: strings.Replace(modernCall("notion_search", acme), `clientCapabilities":{}`, `clientCapabilities":{},"progressToken":1`, 1)},
		fcase{name: m + " discover", version: m, header: modernHeaders("server/discover", ""), body: `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":` + meta + `}}`},
		fcase{name: m + " batch", version: m, header: modernHeaders("tools/call", "notion_search"), body: "[" + modernCall("notion_search", acme) + "]"},
	)
	return cs
}

var callIDs = regexp.MustCompile(`"(io\.sharedos/callId|callId)":"[^"]*"`)

// normalize makes one path's answer comparable with the other's: the
// turn id and call ids (each path runs its own turn) are masked.
func normalize(body []byte, turn string) string {
	s := strings.ReplaceAll(string(body), turn, "TURN")
	s = callIDs.ReplaceAllString(s, `"$1":"CALL"`)
	var batch []json.RawMessage
	if json.Unmarshal([]byte(s), &batch) == nil {
		// The SDK answers a batch's calls in the order they finish.
		var out []string
		for _, m := range batch {
			out = append(out, normalize(m, turn))
		}
		slices.Sort(out)
		return "[" + strings.Join(out, ",") + "]"
	}
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		b, _ := json.Marshal(v) // key order and spacing aside
		return string(b)
	}
	return s
}

type answer struct {
	status int
	header http.Header
	body   string // normalized
	raw    string // as sent, ids masked
}

func send(t *testing.T, url, token, turn string, c fcase) answer {
	t.Helper()
	method := c.method
	if method == "" {
		method = http.MethodPost
	}
	hdr := map[string]string{"MCP-Protocol-Version": c.version}
	if c.version == "-" {
		hdr["MCP-Protocol-Version"] = ""
	}
	maps.Copy(hdr, c.header)
	status, h, b := request(t, method, url, token, c.body, hdr)
	for k, vs := range h {
		for i, v := range vs {
			h[k][i] = strings.ReplaceAll(v, turn, "TURN")
		}
	}
	raw := callIDs.ReplaceAllString(strings.ReplaceAll(b, turn, "TURN"), `"$1":"CALL"`)
	return answer{status: status, header: h, body: normalize([]byte(b), turn), raw: raw}
}

// The fast path answers exactly as the SDK path does: same status, same
// headers (Date aside; Content-Length present alike), same JSON-RPC body
// (call and turn ids masked; byte for byte, batches aside, whose answers
// the SDK orders as its calls finish), request by request, on two turns of the
// same principal driven through the same sequence; and it answers just
// the requests it is meant to, leaving the rest to the SDK.
func TestFastPathAnswersAsTheSDK(t *testing.T) {
	equivalent(t, 1000, fastCases())
}

// The step ceiling and a closed turn, alike on both paths.
func TestFastPathStepCeilingAndClosedTurn(t *testing.T) {
	var cs []fcase
	for i := range 4 {
		cs = append(cs, fcase{name: fmt.Sprintf("call %d", i), version: "2025-11-25", body: call("9", acme), fast: true})
	}
	equivalent(t, 2, cs)
}

func equivalent(t *testing.T, ceiling int, cases []fcase) {
	_ = equivalentWith(t, ceiling, cases, true)
}

// equivalentAnyPath compares the paths without asking which answered.
func equivalentAnyPath(t *testing.T, cases []fcase) int64 {
	return equivalentWith(t, 100000, cases, false)
}

// equivalentWith sends each case down both paths and compares the
// answers; it returns how many the fast path answered.
func equivalentWith(t *testing.T, ceiling int, cases []fcase, checkFast bool) int64 {
	e := newEnv(t, func(o *actors.Options) { o.StepCeiling = ceiling }, func(o *mcpfront.Options) { o.MaxRequestBodyBytes = 16 << 10 })
	sdk := httptest.NewServer(mcpfront.SDKHandler(e.front))
	t.Cleanup(sdk.Close)
	fastWho, fastTok := e.open(t, conformance.Ada)
	sdkWho, sdkTok := e.open(t, conformance.Ada)
	for _, c := range cases {
		before := mcpfront.FastServed(e.front)
		fa := send(t, e.url, fastTok.Token, fastWho.TurnID, c)
		if served := mcpfront.FastServed(e.front) - before; checkFast && served != map[bool]int64{true: 1, false: 0}[c.fast] {
			t.Errorf("%s: the fast path answered %d (want fast=%v)", c.name, served, c.fast)
		}
		sa := send(t, sdk.URL+mcpfront.Path, sdkTok.Token, sdkWho.TurnID, c)
		compareAnswers(t, c.name, fa, sa)
	}
	// And once the turns are closed (refused before either path).
	for _, who := range []authority.AccessContext{fastWho, sdkWho} {
		if err := e.k.Close(testCtx(t), who, who.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	served := mcpfront.FastServed(e.front)
	c := fcase{name: "closed", version: "2025-11-25", body: call("9", acme)}
	compareAnswers(t, c.name, send(t, e.url, fastTok.Token, fastWho.TurnID, c), send(t, sdk.URL+mcpfront.Path, sdkTok.Token, sdkWho.TurnID, c))
	return served
}

func compareAnswers(t *testing.T, name string, fa, sa answer) {
	t.Helper()
	if fa.status != sa.status || fa.body != sa.body {
		t.Errorf("%s:\nfast %d %s\nsdk  %d %s", name, fa.status, fa.body, sa.status, sa.body)
	} else if fa.raw != sa.raw && !strings.HasPrefix(sa.raw, "[") {
		t.Errorf("%s: the same JSON in other bytes:\nfast %s\nsdk  %s", name, fa.raw, sa.raw)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range fa.header {
			yield(k)
		}
		for k := range sa.header {
			if _, ok := fa.header[k]; !ok {
				yield(k)
			}
		}
	})
	for _, k := range keys {
		switch k {
		case "Date":
		case "Content-Length":
			if (fa.header.Get(k) == "") != (sa.header.Get(k) == "") {
				t.Errorf("%s: Content-Length %q vs %q", name, fa.header.Get(k), sa.header.Get(k))
			}
		default:
			if !slices.Equal(fa.header[k], sa.header[k]) {
				t.Errorf("%s: header %s: fast %q, sdk %q", name, k, fa.header[k], sa.header[k])
			}
		}
	}
}

// The official SDK's client takes the fast path for its listings and
// calls at every revision the front serves.
func TestOfficialClientTakesTheFastPath(t *testing.T) {
	for _, v := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			_, tok := e.open(t, conformance.Ada)
			s := e.connect(t, tok.Token, v)
			ctx := testCtx(t)
			before := mcpfront.FastServed(e.front)
			if _, err := s.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err != nil || res.IsError {
				t.Fatalf("call: %+v %v", res, err)
			}
			if got := mcpfront.FastServed(e.front) - before; got != 2 {
				t.Fatalf("the fast path answered %d of a listing and a call", got)
			}
		})
	}
}

// Mutated requests (headers from a menu, bodies with bytes deleted,
// doubled, swapped or changed in case) are answered alike by both paths.
func TestFastPathAnswersMutationsAsTheSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	// often is usually the first (the request as a client sends it).
	often := func(xs ...string) string {
		if rng.IntN(4) > 0 {
			return xs[0]
		}
		return pick(xs...)
	}
	type tmpl struct{ body, method, name string }
	bodies := []tmpl{
		{call("1", acme), "tools/call", "notion_search"},
		{call(`"x-1"`, `{"workspace":"globex","query":"q"}`), "tools/call", "notion_search"},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`, "tools/list", ""},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"notes_put"}}`, "tools/list", ""},
		{modernCall("notion_search", acme), "tools/call", "notion_search"},
		{modernCall("shell_exec", `{}`), "tools/call", "shell_exec"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + meta + `}}`, "tools/list", ""},
	}
	var cs []fcase
	for i := range 300 {
		tm := bodies[rng.IntN(len(bodies))]
		b := []byte(tm.body)
		for range rng.IntN(3) {
			j := rng.IntN(len(b))
			switch rng.IntN(5) {
			case 0:
				b = append(b[:j:j], b[j+1:]...)
			case 1:
				b = append(b[:j+1:j+1], b[j:]...)
			case 2:
				k := rng.IntN(len(b))
				b[j], b[k] = b[k], b[j]
			case 3:
				b = append(b[:j:j], append([]byte(" \n"), b[j:]...)...)
			case 4:
				if c := b[j]; c >= 'a' && c <= 'z' {
					b[j] = c - 32
				}
			}
		}
		modern := strings.Contains(tm.body, "_meta")
		h := map[string]string{}
		version := often("2025-11-25", "2025-06-18", "2025-03-26", "-", "2026-07-28")
		if modern {
			version = often("2026-07-28", "2025-11-25", "-")
			if m := often(tm.method, "", "tools/list", "x"); m != "" {
				h["Mcp-Method"] = m
			}
			if n := often(tm.name, "", "notes_put"); n != "" {
				h["Mcp-Name"] = n
			}
		}
		h["Accept"] = often("application/json, text/event-stream", "*/*", "application/json", "text/event-stream;q=1, application/*")
		h["Content-Type"] = often("application/json", "application/json;charset=utf-8", "text/json", "")
		cs = append(cs, fcase{name: fmt.Sprintf("mutation %d: %q %s %v", i, b, version, h), version: version, header: h, body: string(b)})
	}
	if served := equivalentAnyPath(t, cs); served < 30 {
		t.Fatalf("the fast path answered only %d of %d mutations: the test does not exercise it", served, len(cs))
	} else {
		t.Logf("the fast path answered %d of %d", served, len(cs))
	}
}
