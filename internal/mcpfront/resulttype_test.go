package mcpfront_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// A call's result, a success or a refusal, carries resultType "complete"
// on 2026-07-28 (its schema requires it on CallToolResult) and not on the
// revisions before it (which do not define it), on both the fast path and
// the SDK's.
func TestCallResultsCarryResultTypeOn20260728(t *testing.T) {
	e := newEnv(t, nil, nil)
	sdk := httptest.NewServer(mcpfront.SDKHandler(e.front))
	t.Cleanup(sdk.Close)
	who, tok := e.open(t, conformance.Ada)
	refused := `{"workspace":"globex","query":"q"}`
	var cs []fcase
	for _, v := range []string{"2025-11-25", "2025-06-18"} {
		cs = append(cs,
			fcase{name: v + " call", version: v, body: call("1", acme)},
			fcase{name: v + " refused", version: v, body: call("2", refused)})
	}
	m := "2026-07-28"
	cs = append(cs,
		fcase{name: m + " call", version: m, header: modernHeaders("tools/call", "notion_search"), body: modernCall("notion_search", acme)},
		fcase{name: m + " refused", version: m, header: modernHeaders("tools/call", "notion_search"), body: modernCall("notion_search", refused)})
	for _, c := range cs {
		for path, url := range map[string]string{"fast": e.url, "sdk": sdk.URL + mcpfront.Path} {
			a := send(t, url, tok.Token, who.TurnID, c)
			if a.status != 200 || !strings.Contains(a.raw, `"result":{`) {
				t.Fatalf("%s %s: %d %s", path, c.name, a.status, a.raw)
			}
			if has, want := strings.Contains(a.raw, `"resultType":"complete"`), c.version == m; has != want {
				t.Errorf("%s %s: resultType present %v, want %v: %s", path, c.name, has, want, a.raw)
			}
		}
	}
}
