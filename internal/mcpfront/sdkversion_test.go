package mcpfront_test

import (
	"os"
	"strings"
	"testing"
)

// fastPathSDK is the go-sdk version whose stateless handler (streamable.go)
// the fast path mirrors check by check (fast.go). fast_test.go holds the
// two paths equal request by request, but only for the requests it sends:
// a new SDK version may add a check, a header or a field those requests do
// not exercise. Changing the version in go.mod fails this test until
// someone has read the new streamable.go against fast.go and moved the
// version here. (A replace directive would need the same re-check.)
const fastPathSDK = "v1.8.0"

func TestFastPathMirrorsTheSDKInGoMod(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "github.com/modelcontextprotocol/go-sdk" {
			if f[1] != fastPathSDK {
				t.Fatalf("go.mod has go-sdk %s; the fast path mirrors %s: re-check fast.go against the new SDK's streamable.go, then update fastPathSDK", f[1], fastPathSDK)
			}
			return
		}
	}
	t.Fatal("go.mod does not require github.com/modelcontextprotocol/go-sdk")
}
