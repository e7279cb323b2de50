package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/contracts"
)

var contractsSubcommands = contracts.Ops()

const contractsUsage = `usage: node contracts SUBCOMMAND [flags] [arguments]

  list [--tenant T] [--pending]
                      the contract baselines of the tenants the approver reviews:
                      each tool's accepted revision, the revision held for review
                      (pending) and how it changed (classes)
  diff TENANT/PROVIDER/TOOL
                      the structural diff of the pending revision against the
                      accepted one (stderr: one line each; stdout: JSON), with
                      invisible and bidirectional-control characters shown as ⟦U+XXXX⟧
  accept TENANT/PROVIDER/TOOL --revision R [--why TEXT]
                      make the pending revision R the baseline: turns resolved from
                      then on hold it (recorded as contract.reviewed)
  reject TENANT/PROVIDER/TOOL --revision R [--why TEXT]
                      refuse R: the baseline stays, the tool stays out of turns while
                      its provider offers R (recorded as contract.reviewed)

A tool of a provider with drift: hold whose contract changed is left out of
every turn (pending_review in the listing's degraded report) until an
approver accepts it (docs/approvals.md). The identity is an approver of the
tenant (--as NAME; docs/security.md). Every subcommand takes --config FILE,
--nats URL, --prefix P, --creds FILE, --as NAME, --inbox-prefix P and
--timeout D. A refusal prints {"refused": CODE, "message": ...} and exits 3.`

func contractsCmd(args []string) error {
	sub, args, err := group("contracts", contractsUsage, args, contractsSubcommands...)
	if err != nil {
		return err
	}
	synopsis := map[string]string{
		contracts.OpList: "[--tenant T] [--pending] [flags]", contracts.OpDiff: "TENANT/PROVIDER/TOOL [flags]",
		contracts.OpAccept: "TENANT/PROVIDER/TOOL --revision R [--why TEXT] [flags]", contracts.OpReject: "TENANT/PROVIDER/TOOL --revision R [--why TEXT] [flags]",
	}[sub]
	fs := newFlags("contracts "+sub, synopsis, "")
	var c conn
	c.flags(fs, false)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the node's answer")
	var tenant, revision, why string
	var pending bool
	switch sub {
	case contracts.OpList:
		fs.StringVar(&tenant, "tenant", "", "only this tenant's baselines (default: every tenant the approver reviews)")
		fs.BoolVar(&pending, "pending", false, "only the baselines with a revision held for review")
	case contracts.OpAccept, contracts.OpReject:
		fs.StringVar(&revision, "revision", "", "the pending revision (as list or diff prints it); a revision superseded meanwhile is refused")
		fs.StringVar(&why, "why", "", "the reason, recorded with the review")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	want := 1
	if sub == contracts.OpList {
		want = 0
	}
	if fs.NArg() != want {
		return usageError{fmt.Errorf("contracts %s: %d arguments (node contracts %s -h for usage)", sub, fs.NArg(), sub)}
	}
	var k contract.Key
	if want == 1 {
		parts := strings.Split(fs.Arg(0), "/")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return usageError{fmt.Errorf("contracts %s: %q is not TENANT/PROVIDER/TOOL", sub, fs.Arg(0))}
		}
		k = contract.Key{Tenant: parts[0], Provider: parts[1], Tool: parts[2]}
	}
	if (sub == contracts.OpAccept || sub == contracts.OpReject) && revision == "" {
		return usageError{fmt.Errorf("contracts %s needs --revision (the pending revision, as list or diff prints it)", sub)}
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cl := contracts.NewClient(nc, c.prefix, *timeout)
	switch sub {
	case contracts.OpList:
		bs, err := cl.List(ctx, tenant, pending)
		if err != nil {
			return policyRefusal(err)
		}
		for _, b := range bs {
			if b.Pending != "" {
				fmt.Fprintf(stderr, "pending %s/%s/%s %s (%s)\n", b.Tenant, b.Provider, b.Tool, b.Pending, classes(b.Classes))
			}
		}
		return printJSON(map[string]any{"baselines": orEmpty(bs)})
	case contracts.OpDiff:
		b, err := cl.Diff(ctx, k)
		if err != nil {
			return policyRefusal(err)
		}
		if b.Pending == "" {
			fmt.Fprintf(stderr, "%s: nothing pending review (accepted %s)\n", fs.Arg(0), b.Accepted)
		}
		for _, line := range b.Diff {
			fmt.Fprintln(stderr, line)
		}
		return printJSON(b)
	}
	var rv contract.Reviewed
	if sub == contracts.OpAccept {
		rv, err = cl.Accept(ctx, k, revision, why)
	} else {
		rv, err = cl.Reject(ctx, k, revision, why)
	}
	if err != nil {
		return policyRefusal(err)
	}
	return printJSON(rv)
}

func classes(cs []contract.Class) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ",")
}
