package mcpfront_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// The front offers exactly the revisions it is tested at: server/discover
// lists them, an initialize asking for an older one is answered with
// 2025-11-25, a request at an older one is refused 400.
func TestFrontOffersExactlyTheTestedRevisions(t *testing.T) {
	want := []string{"2026-07-28", "2025-11-25", "2025-06-18"}
	if got := mcpfront.Versions(); !slices.Equal(got, want) {
		t.Fatalf("Versions() = %v", got)
	}
	e := newEnv(t, nil, nil)
	_, tok := e.open(t, conformance.Ada)
	status, _, body := request(t, "POST", e.url, tok.Token, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":`+meta+`}}`,
		map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"})
	var d struct {
		Result struct {
			SupportedVersions []string `json:"supportedVersions"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || status != 200 || !slices.Equal(d.Result.SupportedVersions, want) {
		t.Fatalf("discover: %d %s", status, body)
	}
	for _, v := range []string{"2025-03-26", "2024-11-05"} {
		status, _, body := request(t, "POST", e.url, tok.Token, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			map[string]string{"MCP-Protocol-Version": ""})
		var i struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(body), &i); err != nil || status != 200 || i.Result.ProtocolVersion != "2025-11-25" {
			t.Fatalf("initialize %s: %d %s", v, status, body)
		}
		if status, _, body := request(t, "POST", e.url, tok.Token, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"MCP-Protocol-Version": v}); status != 400 {
			t.Fatalf("tools/list at %s: %d %s", v, status, body)
		}
	}
}
