package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/approvals"
)

var approvalsSubcommands = approvals.Ops()

const approvalsUsage = `usage: node approvals SUBCOMMAND [flags] [arguments]

  list [--tenant T] [--all]
                      the approval requests waiting for a decision in the tenants
                      the approver decides for (--all: decided and expired ones too)
  show ID             one request: exactly the call it is for (turn, tool and
                      revision, catalogue, principal) and its argument bytes
  approve ID [--why TEXT]
                      approve it: the call runs once, in its turn, with exactly
                      those arguments (recorded as approval.decided)
  deny ID [--why TEXT]
                      deny it: the call is refused approval_denied with the reason

A call an approval rule names is refused approval_required with a request id
(docs/approvals.md). The identity is an approver of the request's tenant
(--as NAME; docs/security.md); where the rule separates duties, an approver
whose identity names the call's principal cannot decide it. Every subcommand
takes --config FILE, --nats URL, --prefix P, --creds FILE, --as NAME,
--inbox-prefix P and --timeout D. A refusal prints {"refused": CODE,
"message": ...} and exits 3.`

func approvalsCmd(args []string) error {
	sub, args, err := group("approvals", approvalsUsage, args, approvalsSubcommands...)
	if err != nil {
		return err
	}
	synopsis := map[string]string{
		approvals.OpList: "[--tenant T] [--all] [flags]", approvals.OpShow: "ID [flags]",
		approvals.OpApprove: "ID [--why TEXT] [flags]", approvals.OpDeny: "ID [--why TEXT] [flags]",
	}[sub]
	fs := newFlags("approvals "+sub, synopsis, "")
	var c conn
	c.flags(fs, false)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the node's answer")
	var tenant, why string
	var all bool
	switch sub {
	case approvals.OpList:
		fs.StringVar(&tenant, "tenant", "", "only this tenant's requests (default: every tenant the approver decides for)")
		fs.BoolVar(&all, "all", false, "decided, used and expired requests too")
	case approvals.OpApprove, approvals.OpDeny:
		fs.StringVar(&why, "why", "", "the reason, recorded with the decision (and shown to the caller on a denial)")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	want := 1
	if sub == approvals.OpList {
		want = 0
	}
	if fs.NArg() != want {
		return usageError{fmt.Errorf("approvals %s: %d arguments (node approvals %s -h for usage)", sub, fs.NArg(), sub)}
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cl := approvals.NewClient(nc, c.prefix, *timeout)
	var st approval.State
	switch sub {
	case approvals.OpList:
		sts, err := cl.List(ctx, tenant, all)
		if err != nil {
			return policyRefusal(err)
		}
		for _, s := range sts {
			fmt.Fprintf(stderr, "%s %s %s/%s calls %s/%s in turn %s, until %s\n", s.ID, s.Status, s.Tenant, s.Principal, s.Provider, s.Tool, s.Turn, s.ExpiresAt.Format(time.RFC3339))
		}
		return printJSON(map[string]any{"requests": orEmpty(sts)})
	case approvals.OpShow:
		st, err = cl.Show(ctx, fs.Arg(0))
	case approvals.OpApprove:
		st, err = cl.Approve(ctx, fs.Arg(0), why)
	case approvals.OpDeny:
		st, err = cl.Deny(ctx, fs.Arg(0), why)
	}
	if err != nil {
		return policyRefusal(err)
	}
	if sub == approvals.OpShow {
		fmt.Fprintf(stderr, "%s %s: %s/%s calls %s/%s (revision %s) in turn %s with arguments:\n%s\n", st.ID, st.Status, st.Tenant, st.Principal, st.Provider, st.Tool, st.Revision, st.Turn, st.Arguments)
	}
	return printJSON(st)
}
