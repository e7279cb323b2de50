package messages

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/sharedos/sharedos/approval"
)

// An invoke naming an approval keeps it through the fast path; a reply
// carrying an approval request round-trips through msgpack, the exact
// argument bytes included, and converts back to the state it came from.
func TestApprovalOnTheWire(t *testing.T) {
	req := &InvokeRequest{V: Version, Access: Access{Tenant: "acme", Principal: "ada", TurnID: "n.t"}, Tool: "notes_put", Args: []byte(`{"a": 1}`), Approval: "apr-x-c1"}
	b, err := Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got InvokeRequest
	if err := Decode(b, &got, DefaultLimits()); err != nil || !reflect.DeepEqual(&got, req) {
		t.Fatalf("request: %v\n got %+v\nwant %+v", err, got, req)
	}
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	args := []byte(`{"a": 1, "b": "<&>"}`)
	st := &approval.State{Request: approval.Request{ID: "apr-x-c1", Tenant: "acme", Principal: "ada", Turn: "n.t", CallID: "c1",
		Provider: "notes", Tool: "put", Alias: "notes_put", Revision: "r", CatalogHash: "h", Arguments: args, ArgsHash: approval.ArgsHash(args),
		Rule: "notes", RequestedAt: now, ExpiresAt: now.Add(time.Minute)}, Status: approval.Pending}
	rep := &InvokeReply{V: Version, Error: &Error{Code: "approval_required", Message: "m"}, CallID: "c1", Approval: ApprovalOf(st)}
	if b, err = Encode(rep); err != nil {
		t.Fatal(err)
	}
	var back InvokeReply
	if err := Decode(b, &back, DefaultLimits()); err != nil || !reflect.DeepEqual(&back, rep) {
		t.Fatalf("reply: %v\n got %+v\nwant %+v", err, back, rep)
	}
	if s := back.Approval.State(); !bytes.Equal(s.Arguments, args) || !reflect.DeepEqual(s, st) {
		t.Fatalf("state: %+v\nwant %+v", s, st)
	}
}
