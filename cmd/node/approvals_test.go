package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/reason"
)

// node approvals as an approver, from a second terminal: the pending
// request is listed and shown with its arguments, an unknown id is
// refused, the request is approved, and the runtime's same call runs.
func TestApprovalsCommands(t *testing.T) {
	n, dir := startSampleWith(t, func(cfg *config.Config, _ *node.Options) {
		cfg.Approvals = []config.ApprovalRule{{Tenant: "acme", Name: "notes-writes", Provider: "notes", Tool: "put"}}
		cfg.Identities = append(cfg.Identities, config.Identity{Name: "carol", Role: "approver", Tenants: []string{"acme"}})
	})
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	cli := func(want int, args ...string) (map[string]any, string) {
		t.Helper()
		code, out, errOut := runCLI(t, append(args, "--as", "carol")...)
		if code != want {
			t.Fatalf("node %s: exit %d, want %d; stdout %s stderr %s", strings.Join(args, " "), code, want, out, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("not a JSON object: %s", out)
		}
		return m, errOut
	}
	ctx := context.Background()
	k := n.Kernel()
	o, err := k.Open(ctx, authority.AccessContext{Tenant: "acme", Principal: "ada", EnabledNamespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	ada := authority.AccessContext{Tenant: "acme", Principal: "ada", EnabledNamespaces: []string{"notes"}, TurnID: o.TurnID, LeaseID: o.LeaseID}
	args := []byte(`{"space":"acme","title":"plan","body":"ship it"}`)
	_, err = k.Invoke(ctx, ada, "notes_put", args)
	req := actors.ApprovalOf(err)
	if !errors.Is(err, reason.ErrApprovalRequired) || req == nil {
		t.Fatalf("the call: %v", err)
	}
	list, notes := cli(0, "approvals", "list")
	if rs, _ := list["requests"].([]any); len(rs) != 1 || !strings.Contains(notes, req.ID) {
		t.Fatalf("list: %v / %s", list, notes)
	}
	shown, notes := cli(0, "approvals", "show", req.ID)
	if shown["status"] != "pending" || !strings.Contains(notes, string(args)) {
		t.Fatalf("show: %v / %s", shown, notes)
	}
	if refused, _ := cli(3, "approvals", "approve", "apr-none"); refused["refused"] != string(reason.ApprovalInvalid) {
		t.Fatalf("approve an unknown id: %v", refused)
	}
	if ok, _ := cli(0, "approvals", "approve", req.ID, "--why", "reviewed"); ok["status"] != "approved" || ok["decided_by"] != "carol" {
		t.Fatalf("approve: %v", ok)
	}
	if _, err := k.Invoke(ctx, ada, "notes_put", args); err != nil {
		t.Fatalf("the approved call: %v", err)
	}
}
