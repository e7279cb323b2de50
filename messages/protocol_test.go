package messages_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// The wire form is a contract: these literal bytes must keep decoding to
// these values, and encoding must keep producing them.
func TestInvokeRequestLiteralBytes(t *testing.T) {
	req := &messages.InvokeRequest{V: 1, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t"}, Tool: "notes_get", Args: []byte(`{}`), TimeoutMs: 500}
	const want = "85a17601a6616363657373" + "83a674656e616e74a461636d65a97072696e636970616ca3616461a47475726ea46e312e74" +
		"a4746f6f6ca96e6f7465735f676574a461726773c4027b7daa74696d656f75745f6d73ce000001f4" // uint32 fields encode at fixed width
	got, err := messages.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != want {
		t.Fatalf("encoding changed:\n got %x\nwant %s", got, want)
	}
	raw, _ := hex.DecodeString(want)
	var back messages.InvokeRequest
	if err := messages.Decode(raw, &back, messages.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if back.Tool != "notes_get" || back.Access.TurnID != "n1.t" || !bytes.Equal(back.Args, []byte(`{}`)) || back.TimeoutMs != 500 {
		t.Fatalf("decoded %+v", back)
	}
}

func TestDecodeRefusesAndNeverPanics(t *testing.T) {
	var req messages.TurnRequest
	for name, frame := range map[string][]byte{
		"version 2":      mustEncode(t, &messages.TurnRequest{V: 2}),
		"version 0":      mustEncode(t, &messages.TurnRequest{}),
		"string for map": {0x81, 0xa6, 'a', 'c', 'c', 'e', 's', 's', 0xa1, 'x'},
		"length bomb":    {0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		if err := messages.Decode(frame, &req, messages.DefaultLimits()); !errors.Is(err, messages.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustEncode(t *testing.T, m messages.Message) []byte {
	t.Helper()
	b, err := messages.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestErrorsRoundTripTheirCode(t *testing.T) {
	e := messages.ErrorOf(reason.New(reason.NoMatchingGrant, "outside"))
	if e.Code != "no_matching_grant" || e.Message != "outside" || !errors.Is(e.Err(), reason.ErrNoMatchingGrant) {
		t.Fatalf("%+v", e)
	}
	if messages.ErrorOf(nil) != nil || (*messages.Error)(nil).Err() != nil {
		t.Fatal("nil must stay nil")
	}
	if messages.ErrorOf(errors.New("plain")).Code != "internal" {
		t.Fatal("foreign errors are internal")
	}
}

func TestAccessRoundTripsEveryField(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	a := authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "p", TurnID: "n1.t", Now: now,
		EnabledNamespaces: []string{"notes"}, Attributes: map[string]string{"plan": "pro"}, LeaseID: "lease-1"}
	back := messages.AccessOf(a).Context(now)
	if !reflect.DeepEqual(back, a) {
		t.Fatalf("round trip changed the context:\n got %+v\nwant %+v", back, a)
	}
	// Every field of AccessContext is carried: a new field must be added
	// to the wire form (or this count) deliberately.
	// Caller and Transport are the node's to set (the bus's identity,
	// the front a request came through), never the sender's.
	if n := reflect.TypeOf(a).NumField(); n != 10 {
		t.Fatalf("AccessContext has %d fields; the wire Access carries 7, the node stamps Now and sets Caller and Transport", n)
	}
}

// A rate_limited refusal carries when to retry, across the wire.
func TestRetryAfterTravels(t *testing.T) {
	err := &reason.Error{Code: reason.RateLimited, Message: "slow down", RetryAfter: 1500 * time.Millisecond}
	rep := &messages.InvokeReply{V: 1, Error: messages.ErrorOf(err)}
	b, encErr := messages.Encode(rep)
	if encErr != nil {
		t.Fatal(encErr)
	}
	var back messages.InvokeReply
	if err := messages.Decode(b, &back, messages.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	var re *reason.Error
	if got := back.Error.Err(); !errors.As(got, &re) || re.Code != reason.RateLimited || re.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("decoded %+v, want rate_limited retry after 1.5s", back.Error)
	}
	if e := messages.ErrorOf(reason.New(reason.Overloaded, "x")); e.RetryAfterMs != 0 {
		t.Fatalf("an error without a wait carries retry_after_ms %d", e.RetryAfterMs)
	}
}
