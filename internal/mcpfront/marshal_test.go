package mcpfront

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// marshalCallResult writes what sdkMarshal writes, byte for byte, for the
// results the front builds and for strings that need escaping; what it
// does not write itself it leaves to sdkMarshal.
func TestMarshalCallResultIsTheSDKs(t *testing.T) {
	texts := []string{"", "plain", `{"echo":"x"}`, "<b>&amp;</b>", "tab\tnl\n\x01", "\b\f\r\x1f\x7f", "a<b>c&d\"e\\f", "é ü 漢字", "\u2028\u2029", "bad \xff utf-8", `back\slash "quote"`}
	raws := []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(`{ "a" : [1, 2], "h":"<&>" , "u":"\u2028" }`), json.RawMessage(`"str"`), json.RawMessage(`[]`)}
	metas := []func() mcp.Meta{
		func() mcp.Meta { return nil },
		func() mcp.Meta { return mcp.Meta{MetaCatalogHash: "sha256:ab", MetaCallID: "node-1.c1"} },
		func() mcp.Meta { return mcp.Meta{MetaCatalogHash: "h<&>", MetaCallID: ""} },
		func() mcp.Meta {
			return mcp.Meta{MetaCatalogHash: "h", MetaCallID: "c", mcp.MetaKeyServerInfo: implementation}
		},
		func() mcp.Meta { return mcp.Meta{MetaCallID: "c"} },
		func() mcp.Meta { return mcp.Meta{"other": 1} },
		func() mcp.Meta { return mcp.Meta{MetaCallID: 7} },
	}
	n := 0
	for _, text := range texts {
		for _, raw := range raws {
			for _, meta := range metas {
				for _, isErr := range []bool{false, true} {
					res := &mcp.CallToolResult{Meta: meta(), IsError: isErr, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
					if raw != nil {
						res.StructuredContent = raw
					}
					check(t, res)
					n++
				}
			}
		}
	}
	// What it leaves to the SDK.
	check(t, refusal(errTooLarge))
	check(t, &mcp.CallToolResult{Content: []mcp.Content{}})
	check(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}})
	check(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: []byte("x"), MIMEType: "image/png"}}})
	check(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a", Meta: mcp.Meta{"k": "v"}}}})
	check(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}}, StructuredContent: map[string]any{"k": 1}})
	check(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}}, RequestState: "s"})
	if n < 100 {
		t.Fatalf("%d cases", n)
	}
}

// check compares both writings of res as it is and of res marked
// complete (a 2026-07-28 answer), which must end in its resultType.
func check(t *testing.T, res *mcp.CallToolResult) {
	t.Helper()
	for _, complete := range []bool{false, true} {
		if complete {
			markComplete(res)
		}
		want, werr := sdkMarshal(res)
		got, gerr := marshalCallResult(res, complete)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s (%v)", res, got, gerr, want, werr)
		}
		if has := bytes.Contains(want, []byte(`"resultType":"complete"`)); has != complete {
			t.Fatalf("complete %v: %s", complete, want)
		}
	}
}

func BenchmarkMarshalCallResult(b *testing.B) {
	res := &mcp.CallToolResult{Meta: mcp.Meta{MetaCatalogHash: "sha256:0123456789abcdef0123456789abcdef", MetaCallID: "node-1.t1.c1"},
		Content: []mcp.Content{&mcp.TextContent{Text: `{"echo":"` + string(bytes.Repeat([]byte("x"), 64)) + `"}`}}}
	for _, c := range []struct {
		name string
		f    func(*mcp.CallToolResult) ([]byte, error)
	}{{"sdk", func(r *mcp.CallToolResult) ([]byte, error) { return sdkMarshal(r) }}, {"direct", func(r *mcp.CallToolResult) ([]byte, error) { return marshalCallResult(r, false) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.f(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// appendJSONString writes every string as encoding/json does.
func TestAppendJSONString(t *testing.T) {
	for c := range 256 {
		s := "a" + string(rune(c)) + "b" + string([]byte{byte(c)})
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\x00\u2028", "\xff", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	})
}
