package messages_test

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sharedos/sharedos/messages"
)

// The token messages round-trip, and a frame with a field of the wrong
// type is refused, not half-decoded.
func TestTokenMessagesRoundTrip(t *testing.T) {
	req := &messages.TokenRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t", Lease: "l"}, TTLMs: 60000, TimeoutMs: 5000}
	b, err := messages.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got messages.TokenRequest
	if err := messages.Decode(b, &got, messages.DefaultLimits()); err != nil || got.TTLMs != 60000 || got.Access.Lease != "l" {
		t.Fatalf("%+v %v", got, err)
	}
	rep := &messages.TokenReply{V: messages.Version, Token: "sos1.x.y", URL: "http://127.0.0.1:8080/mcp", TokenID: "id", CatalogHash: "h", ExpiresMs: 1}
	b, _ = messages.Encode(rep)
	var back messages.TokenReply
	if err := messages.Decode(b, &back, messages.DefaultLimits()); err != nil || back != *rep {
		t.Fatalf("%+v %v", back, err)
	}
	bad, _ := msgpack.Marshal(map[string]any{"v": 1, "access": map[string]any{"tenant": "acme", "principal": "ada"}, "ttl_ms": "soon"})
	if err := messages.Decode(bad, &got, messages.DefaultLimits()); err == nil {
		t.Fatal("ttl_ms as a string was accepted")
	}
	if !bytes.Contains(b, []byte("catalog_hash")) {
		t.Fatal("reply keys are not the documented ones")
	}
}
