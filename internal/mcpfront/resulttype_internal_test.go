package mcpfront

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/sharedos/sharedos/reason"
)

// The front's own refusal of a forwarded tools/call (the owning node
// gone, busy or silent) is a CallToolResult like the turn's: with
// resultType on 2026-07-28, without it before.
func TestForwardRefusalCarriesResultType(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{}}}`)
	for v, want := range map[string]bool{modernRevision: true, "2025-11-25": false, "2025-06-18": false} {
		a := errorAnswer(body, v, http.StatusServiceUnavailable, &notDispatched, reason.NodeUnavailable, "gone")
		got := a.buf.Bytes()
		if a.status != http.StatusOK || !bytes.Contains(got, []byte(`"isError":true`)) {
			t.Fatalf("%s: %d %s", v, a.status, got)
		}
		if has := bytes.Contains(got, []byte(`"resultType":"complete"`)); has != want {
			t.Errorf("%s: resultType present %v, want %v: %s", v, has, want, got)
		}
	}
}
