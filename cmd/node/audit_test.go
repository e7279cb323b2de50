package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// startSampleWithGlobex is startSample with a runtime identity for
// tenant globex too, so the trail holds another tenant's records.
func startSampleWithGlobex(t *testing.T) (*node.Node, string) {
	t.Helper()
	return startSampleWith(t, func(cfg *config.Config, _ *node.Options) {
		cfg.Identities = append(cfg.Identities, config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}})
	})
}

// An audit reader bound to tenant acme (the sample's auditor-acme)
// verifies and exports acme's trail with --tenant acme — its segments,
// read through the push consumer its permissions allow — and sees acme's
// events only; --tenant globex is refused by the bus, as an error.
func TestTenantBoundReaderVerifiesAndExports(t *testing.T) {
	n, dir := startSampleWithGlobex(t)
	t.Chdir(dir) // the seeds are under ./data/creds
	t.Setenv("NATS_URL", n.ClientURL())
	ctx := context.Background()

	rt, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	tr, err := client.New(rt, nil).Open(ctx, client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Invoke(ctx, "text_stats", []byte(`{"text":"a b"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	gx, err := n.Connect("globex-rt")
	if err != nil {
		t.Fatal(err)
	}
	defer gx.Close()
	if _, err := client.New(gx, nil).ListTools(ctx, client.Access{Tenant: "globex", Principal: "gina"}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, "audit", "verify", "--tenant", "acme", "--as", "auditor-acme", "--open-ok=false")
	if code != 0 {
		t.Fatalf("verify --tenant acme as auditor-acme: exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	var rep struct {
		OK          bool    `json:"ok"`
		Events      int     `json:"events"`
		Turns       int     `json:"turns"`
		Closed      int     `json:"closed_turns"`
		Checkpoints int     `json:"checkpoints"`
		Unattested  uint64  `json:"events_unattested"`
		Warning     string  `json:"warning"`
		Violations  []any   `json:"violations"`
		Nodes       []any   `json:"nodes"`
		Rate        float64 `json:"events_per_second"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("verify printed %s: %v", out, err)
	}
	// acme's one turn: opened, resolved, invoked, completed, detached,
	// closed — at least five events, none of globex's one-operation turn.
	if !rep.OK || rep.Turns != 1 || rep.Closed != 1 || rep.Events < 5 || rep.Checkpoints != 0 ||
		rep.Unattested != uint64(rep.Events) || !strings.Contains(rep.Warning, "segments only") {
		t.Fatalf("verify --tenant acme as auditor-acme printed %s", out)
	}

	code, out, errOut = runCLI(t, "audit", "export", "--tenant", "acme", "--as", "auditor-acme")
	if code != 0 {
		t.Fatalf("export --tenant acme as auditor-acme: exit %d, stderr %s", code, errOut)
	}
	var lines int
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct{ Tenant, TurnID string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Tenant != "acme" {
			t.Fatalf("export --tenant acme printed %q (%v)", sc.Text(), err)
		}
		lines++
	}
	if lines != rep.Events || !strings.Contains(errOut, fmt.Sprintf("exported %d records", lines)) {
		t.Fatalf("export printed %d records (stderr %q), verify counted %d", lines, errOut, rep.Events)
	}

	// Another tenant: refused by the bus, reported as an error (exit 1).
	for _, sub := range []string{"verify", "export"} {
		code, out, errOut := runCLI(t, "audit", sub, "--tenant", "globex", "--as", "auditor-acme")
		if code != 1 || out != "" || !strings.Contains(errOut, "the bus refused this read") || !strings.Contains(errOut, "permissions violation") {
			t.Errorf("%s --tenant globex as auditor-acme: exit %d, stdout %q, stderr %q", sub, code, out, errOut)
		}
	}

	// The reader of every tenant verifies acme's part of the whole
	// stream, checkpoints included (none may be stored yet: judged the same).
	code, out, errOut = runCLI(t, "audit", "verify", "--tenant", "acme", "--open-ok=false")
	if code != 0 {
		t.Fatalf("verify --tenant acme as auditor: exit %d, %s %s", code, out, errOut)
	}
	var all map[string]any
	if err := json.Unmarshal([]byte(out), &all); err != nil || all["ok"] != true || all["turns"].(float64) != 1 || strings.Contains(fmt.Sprint(all["warning"]), "segments only") {
		t.Fatalf("verify --tenant acme as auditor printed %s", out)
	}
}

// Every audit subcommand runs with every flag it takes, alone, with
// --tenant, and all together, against a node, as an identity the bus
// refuses every audit read (runtime): each run gets past its options to
// the bus — where a flag another subcommand owns once read as a nil
// pointer — and ends with exit 0 or 1, never a panic or a usage error.
func TestAuditFlagCombinations(t *testing.T) {
	n, dir := startSample(t, false)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	empty := filepath.Join(dir, "empty.jsonl")
	keys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{
		"tenant": "acme", "turn": "node-1/node-1.x", "type": "tool.invoked", "durable": "billing",
		"out": filepath.Join(dir, "out.jsonl"), "file": empty, "trust": keys, "anchor": empty,
		"key": filepath.Join(dir, "missing.key"), "config": filepath.Join(dir, "missing.yaml"),
		"nats": n.ClientURL(), "prefix": "sharedos", "stream": "SHAREDOS_AUDIT",
		"creds": filepath.Join(dir, "missing.nk"), "as": "runtime", "inbox-prefix": "_INBOX_runtime",
	}
	for _, sub := range []string{"export", "verify", "keys", "tail"} {
		flags := auditFlags(t, sub)
		if len(flags) < 8 {
			t.Fatalf("audit %s -h lists %v", sub, flags)
		}
		run := func(args ...string) { runAudit(t, sub, append([]string{"--as=runtime"}, args...)...) }
		var all []string
		for _, f := range flags {
			arg := "--" + f.name
			if !f.bool {
				v, ok := values[f.name]
				if !ok {
					t.Fatalf("audit %s: no test value for --%s", sub, f.name)
				}
				arg += "=" + v
			}
			if f.name != "config" && f.name != "creds" { // those end every run before the bus
				all = append(all, arg)
			}
			run(arg)
			if f.bool {
				run(arg + "=false")
			}
			if sub != "keys" && f.name != "tenant" { // keys takes no --tenant
				run("--tenant=acme", arg)
			}
		}
		run(all...)
	}
}

type auditFlag struct {
	name string
	bool bool
}

// auditFlags lists the flags `node audit SUB -h` prints.
func auditFlags(t *testing.T, sub string) []auditFlag {
	t.Helper()
	code, out, _ := runCLI(t, "audit", sub, "-h")
	if code != 0 {
		t.Fatalf("audit %s -h: exit %d", sub, code)
	}
	var flags []auditFlag
	for _, line := range strings.Split(out, "\n") {
		name, ok := strings.CutPrefix(line, "  --")
		if !ok {
			continue
		}
		name, arg, hasArg := strings.Cut(name, " ")
		flags = append(flags, auditFlag{name: name, bool: !hasArg || arg == ""})
	}
	return flags
}

func runAudit(t *testing.T, sub string, args ...string) {
	t.Helper()
	cmd := append([]string{"audit", sub}, args...)
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("node %s panicked: %v", strings.Join(cmd, " "), p)
		}
	}()
	code, out, errOut := runCLI(t, cmd...)
	if code != 0 && code != 1 {
		t.Errorf("node %s: exit %d, stdout %q, stderr %q", strings.Join(cmd, " "), code, out, errOut)
	}
}
