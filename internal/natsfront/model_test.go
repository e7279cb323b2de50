package natsfront_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Over NATS, a listing with a profile answers the exact bytes to send
// the model API and the names to call back; a name it showed calls its
// tool, a search returns only what matches, and the trail records the
// profile and projection_hash the reply carried.
func TestModelListingOverNATS(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	c := client.New(n.nc, nil)
	turn, err := c.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := turn.ListFor(ctx(t), client.ModelQuery{Profile: "openai-strict"})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Model
	var tools []map[string]any
	if err := json.Unmarshal(m.Listing, &tools); err != nil || len(tools) != len(m.Tools) || len(m.Tools) == 0 {
		t.Fatalf("listing %s: %v (%d tools named)", m.Listing, err, len(m.Tools))
	}
	name := ""
	for _, tl := range m.Tools {
		if tl.Tool == "search" {
			name = tl.Name
		}
	}
	res, err := turn.InvokeAs(ctx(t), "openai-strict", name, []byte(`{"workspace":"acme","query":"roadmap"}`))
	if err != nil || res.Name != "search" {
		t.Fatalf("invoke %q as openai-strict: %+v, %v", name, res, err)
	}
	if _, err := turn.InvokeAs(ctx(t), "gemini", name, []byte(`{"workspace":"acme","query":"roadmap"}`)); !errors.Is(err, reason.ErrUnknownTool) {
		t.Fatalf("a name gemini was never shown: %v, want unknown_tool", err)
	}
	found, err := turn.ListFor(ctx(t), client.ModelQuery{Profile: "mcp", Query: "save note", K: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(found.Model.Tools) != 1 || found.Model.Tools[0].Tool != "put" {
		t.Fatalf("search for 'save note': %+v", found.Model.Tools)
	}
	hashes := map[string]string{}
	for _, ev := range n.f.Sink.Events(turn.Handle.TurnID) {
		if ev.Type == audit.CatalogListed && ev.Projection != nil {
			hashes[ev.Projection.Profile] = ev.Projection.Hash
		}
	}
	if hashes["openai-strict"] != m.Hash || hashes["mcp"] != found.Model.Hash {
		t.Fatalf("recorded projections %v, replies %s / %s", hashes, m.Hash, found.Model.Hash)
	}
	for name, q := range map[string]client.ModelQuery{
		"unknown profile": {Profile: "cobol"},
		"negative k":      {Profile: "mcp", Query: "x", K: -1},
	} {
		if _, err := turn.ListFor(ctx(t), q); !errors.Is(err, reason.ErrInvalidRequest) {
			t.Errorf("%s: %v, want invalid_request", name, err)
		}
	}
	var lr messages.ListReply
	req := &messages.ListRequest{V: messages.Version, Access: turn.Access(), Query: "notes"}
	data, _ := messages.Encode(req)
	msg, err := n.nc.Request(messages.TurnSubject("sharedos", turn.Handle.Node, messages.OpList), data, 5e9)
	if err != nil {
		t.Fatal(err)
	}
	if err := messages.Decode(msg.Data, &lr, messages.DefaultLimits()); err != nil || lr.Error == nil || lr.Error.Code != string(reason.InvalidRequest) {
		t.Fatalf("a query without a profile: %+v, %v", lr.Error, err)
	}
}
