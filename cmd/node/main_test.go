package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// runCLI runs the CLI in process and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	stdout, stderr = &out, &errOut
	defer func() { stdout, stderr = os.Stdout, os.Stderr }()
	code := run(args)
	return code, out.String(), errOut.String()
}

// startSample starts a node from the sample cluster.yaml on a free port,
// with its data under a temporary directory (returned), HTTP on a free
// loopback port when withHTTP; Cleanup stops it.
func startSample(t *testing.T, withHTTP bool) (*node.Node, string) {
	t.Helper()
	http := "off"
	if withHTTP {
		http = "127.0.0.1:0"
	}
	return startSampleWith(t, func(cfg *config.Config, _ *node.Options) { cfg.Node.HTTP = http })
}

// startSampleWith is startSample (HTTP off) with edit applied to the
// config and the node's options before the node starts.
func startSampleWith(t *testing.T, edit func(*config.Config, *node.Options)) (*node.Node, string) {
	t.Helper()
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	y := strings.NewReplacer("port: 4222", "port: 0", "data_dir: ./data", "data_dir: "+filepath.Join(dir, "data"), "http: 127.0.0.1:8321", "http: off").Replace(string(b))
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	opts := node.Options{Logger: slog.New(slog.DiscardHandler)}
	if edit != nil {
		edit(cfg, &opts)
	}
	n, err := node.Start(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	return n, dir
}

// TestReadmeCommands runs the README's turn commands, then audit verify and
// export, against a node started from the sample cluster.yaml.
func TestReadmeCommands(t *testing.T) {
	n, dir := startSample(t, false)
	t.Chdir(dir) // no cluster.yaml here: the defaults, and the node from NATS_URL
	t.Setenv("NATS_URL", n.ClientURL())

	cli := func(want int, args ...string) map[string]any {
		t.Helper()
		code, out, errOut := runCLI(t, args...)
		if code != want {
			t.Fatalf("node %s: exit %d, want %d; stdout %s stderr %s", strings.Join(args, " "), code, want, out, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("node %s printed no JSON object: %s", strings.Join(args, " "), out)
		}
		return m
	}

	opened := cli(0, "turn", "open", "--tenant", "acme", "--principal", "ada", "--ns", "notes,text,calendar")
	if !strings.HasPrefix(opened["turn"].(string), "node-1/node-1.") {
		t.Fatalf("open printed %v", opened)
	}
	listed := cli(0, "turn", "list")
	if len(listed["tools"].([]any)) != 8 || listed["turn"] != opened["turn"] {
		t.Fatalf("list printed %v", listed)
	}
	called := cli(0, "turn", "call", "notes_put", `{"space":"acme","title":"plan","body":"ship the kernel"}`)
	if called["catalog_hash"] != listed["catalog_hash"] {
		t.Fatalf("call answered against %v, listing %v", called["catalog_hash"], listed["catalog_hash"])
	}
	refused := cli(3, "turn", "call", "notes_put", `{"space":"globex","title":"x","body":"y"}`)
	if refused["refused"] != "no_matching_grant" || refused["call_id"] == nil || refused["catalog_hash"] == nil || refused["dispatched"] != false {
		t.Fatalf("ungranted call printed %v", refused)
	}
	between := cli(0, "turn", "call", "calendar_between", `{"from":"2026-11-30","to":"2026-12-24"}`)
	if between["text"] != "24 days (18 business days)" || between["tool"] != "calendar/between" {
		t.Fatalf("remote provider call printed %v", between)
	}
	// Flags after the positional arguments; invoke is call.
	if got := cli(0, "turn", "invoke", "notes_get", `{"space":"acme","title":"plan"}`, "--timeout", "20s", "--turn", opened["turn"].(string)); got["text"] != "ship the kernel" {
		t.Fatalf("invoke with trailing flags printed %v", got)
	}
	if ns := cli(0, "turn", "namespaces"); len(ns["namespaces"].([]any)) != 4 || ns["namespaces"].([]any)[0].(map[string]any)["name"] == nil {
		t.Fatalf("namespaces printed %v", ns)
	}
	cli(0, "turn", "ns-set", "text")
	if r := cli(3, "turn", "call", "notes_get", `{"space":"acme","title":"plan"}`); r["refused"] != "namespace_disabled" {
		t.Fatalf("disabled namespace printed %v", r)
	}

	// A second open keeps the first: it becomes the default, the first is
	// still reachable with --turn (NODE/TURN or the bare id), and closing
	// the second makes the first the default again.
	code, out, errOut := runCLI(t, "turn", "open", "--tenant", "acme", "--principal", "bob", "--ns", "notes")
	if code != 0 || !strings.Contains(errOut, "1 turn(s) saved before") {
		t.Fatalf("second open: exit %d, stdout %s stderr %s", code, out, errOut)
	}
	var second map[string]any
	_ = json.Unmarshal([]byte(out), &second)
	if saved := cli(0, "turn", "saved"); len(saved["turns"].([]any)) != 2 {
		t.Fatalf("saved printed %v", saved)
	}
	if r := cli(3, "turn", "call", "notes_put", `{"space":"acme","title":"x","body":"y"}`); r["refused"] != "not_discoverable" || r["turn"] != second["turn"] {
		t.Fatalf("bob's put printed %v", r) // bob may only read: the default is now bob's turn
	}
	firstID := strings.SplitN(opened["turn"].(string), "/", 2)[1]
	if r := cli(0, "turn", "call", "--turn", firstID, "text_stats", `{"text":"a b"}`); r["turn"] != opened["turn"] {
		t.Fatalf("--turn by id printed %v", r)
	}
	if c := cli(0, "turn", "close"); c["closed"] != second["turn"] || c["default"] != opened["turn"] {
		t.Fatalf("close printed %v", c)
	}
	if r := cli(0, "turn", "list"); r["turn"] != opened["turn"] {
		t.Fatalf("after closing the second, list acted on %v", r["turn"])
	}
	cli(0, "turn", "close")
	if _, err := os.Stat(statePath); !os.IsNotExist(err) {
		t.Fatal("close left the saved turn")
	}

	// A turn opened elsewhere is joined with --attach (a lease of its own);
	// --turn names only saved turns.
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	other, err := client.New(nc, nil).Open(context.Background(), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "turn", "list", "--turn", other.Handle.String()); code != 1 || !strings.Contains(errOut, "not saved") {
		t.Fatalf("--turn of an unsaved turn: exit %d, %s", code, errOut)
	}
	if a := cli(0, "turn", "open", "--attach", other.Handle.String(), "--tenant", "acme", "--principal", "ada"); a["attached"] != true || a["turn"] != other.Handle.String() {
		t.Fatalf("attach printed %v", a)
	}
	if r := cli(0, "turn", "call", "text_stats", `{"text":"a b"}`); r["turn"] != other.Handle.String() {
		t.Fatalf("call on the attached turn printed %v", r)
	}
	cli(0, "turn", "close")
	if _, err := other.ListTools(context.Background()); err != nil {
		t.Fatalf("closing the CLI's lease closed the other holder's turn: %v", err)
	}
	if err := other.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	report := cli(0, "audit", "verify", "--open-ok=false")
	if report["ok"] != true || report["closed_turns"].(float64) != 3 {
		t.Fatalf("verify printed %v", report)
	}
	export := filepath.Join(dir, "trail.jsonl")
	cli(0, "audit", "export", "--out", export)
	if r := cli(0, "audit", "verify", "--file", export, "--open-ok=false"); r["ok"] != true {
		t.Fatalf("verify of the export printed %v", r)
	}
	// --turn of audit takes the handle the turn commands print, too.
	if r := cli(0, "audit", "verify", "--turn", opened["turn"].(string), "--open-ok=false"); r["ok"] != true || r["turns"].(float64) != 1 {
		t.Fatalf("verify --turn NODE/TURN printed %v", r)
	}
	// A tampered export is caught, with exit code 4.
	raw, _ := os.ReadFile(export)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	lines = append(lines[:3], lines[4:]...)
	tampered := filepath.Join(dir, "tampered.jsonl")
	if err := os.WriteFile(tampered, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cli(4, "audit", "verify", "--file", tampered); r["ok"] != false {
		t.Fatalf("tampered export printed %v", r)
	}
}

// Every -h and --help prints usage to stdout and exits 0 without a
// server, a config or a saved turn (NATS_URL points nowhere).
func TestHelpNeedsNothing(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	cmds := [][]string{{}, {"serve"}, {"turn"}, {"audit"}}
	for _, sub := range []string{"open", "list", "namespaces", "call", "invoke", "ns-set", "close", "saved"} {
		cmds = append(cmds, []string{"turn", sub})
	}
	for _, sub := range []string{"tail", "export", "verify", "keys"} {
		cmds = append(cmds, []string{"audit", sub})
	}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help", "-help"} {
			args := append(slices.Clone(cmd), h)
			if len(cmd) == 2 { // also after other flags and arguments, and with a missing --config
				args = append(slices.Clone(cmd), "x", "--config", "missing.yaml", h)
			}
			code, out, errOut := runCLI(t, args...)
			if code != 0 || !strings.Contains(out, "usage: node") || errOut != "" {
				t.Errorf("node %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
			}
		}
	}
	if code, out, _ := runCLI(t, "help", "audit"); code != 0 || !strings.Contains(out, "usage: node audit") {
		t.Errorf("node help audit: exit %d, %q", code, out)
	}
	if _, err := os.Stat(".sharedos"); !os.IsNotExist(err) {
		t.Error("help wrote state")
	}
}

// Command lines that do not parse exit 2 with the reason on stderr.
func TestUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"bogus"}, {"turn"}, {"turn", "bogus"}, {"audit", "bogus"},
		{"turn", "list", "--bogus"}, {"turn", "call"}, {"turn", "call", "a", "{}", "extra"},
		{"turn", "call", "a", "{not json"}, {"turn", "ns-set"}, {"turn", "list", "extra"},
		{"turn", "open", "--tenant", "acme"}, {"turn", "open", "--tenant", "a", "--principal", "p", "--attach", "nohandle"}, {"turn", "list", "--timeout"}, {"turn", "list", "--timeout", "soon"},
		{"audit", "verify", "--type", "tool.invoked"}, {"serve", "extra"}, {"serve", "--log-level", "loud"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "node: ") {
			t.Errorf("node %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// A --config that names a missing file is an error, for every command
// that reads one; the default cluster.yaml may be missing.
func TestMissingConfigIsAnError(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, args := range [][]string{
		{"serve", "--config", "missing.yaml"},
		{"turn", "open", "--tenant", "a", "--principal", "p", "--config", "missing.yaml"},
		{"turn", "list", "--config", "missing.yaml"},
		{"audit", "export", "--config", "missing.yaml"},
		{"audit", "keys", "--local", "--config", "missing.yaml"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, "missing.yaml") {
			t.Errorf("node %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
	}
	// An invalid config is reported as such.
	if err := os.WriteFile("bad.yaml", []byte("node: {id: a.b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "audit", "export", "--config", "bad.yaml"); code != 1 || !strings.Contains(errOut, "node.id") {
		t.Errorf("invalid config: exit %d, stderr %q", code, errOut)
	}
}

// NATS is found from --nats, else NATS_URL, else the config. Nothing
// listens on the ports: the error names the URL tried and where it came from.
func TestNATSURLPrecedence(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("cluster.yaml", []byte("nats:\n  embedded: {port: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dial := func(args ...string) string {
		t.Helper()
		code, _, errOut := runCLI(t, append([]string{"audit", "export"}, args...)...)
		if code != 1 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		return errOut
	}
	t.Setenv("NATS_URL", "")
	if e := dial(); !strings.Contains(e, "nats://127.0.0.1:3 (from cluster.yaml") {
		t.Errorf("config: %s", e)
	}
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	if e := dial(); !strings.Contains(e, "nats://127.0.0.1:1 (from $NATS_URL") {
		t.Errorf("NATS_URL over the config: %s", e)
	}
	if e := dial("--nats", "nats://127.0.0.1:2"); !strings.Contains(e, "nats://127.0.0.1:2 (from --nats") {
		t.Errorf("--nats over NATS_URL: %s", e)
	}
}

func TestReorder(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("timeout", 0, "")
	fs.Bool("open-ok", true, "")
	fs.String("turn", "", "")
	for _, c := range []struct {
		in, flags, pos []string
		help           bool
	}{
		{[]string{"a", "{}", "--timeout", "2s"}, []string{"--timeout", "2s"}, []string{"a", "{}"}, false},
		{[]string{"--open-ok", "a", "--turn=x/y", "b"}, []string{"--open-ok", "--turn=x/y"}, []string{"a", "b"}, false},
		{[]string{"-turn", "-h", "a"}, []string{"-turn", "-h"}, []string{"a"}, false}, // -h is --turn's value
		{[]string{"a", "--", "--timeout", "-h"}, nil, []string{"a", "--timeout", "-h"}, false},
		{[]string{"a", "--help", "b"}, nil, []string{"a", "b"}, true},
		{[]string{"-", "--open-ok=false"}, []string{"--open-ok=false"}, []string{"-"}, false},
	} {
		flags, pos, help, err := reorder(fs, c.in)
		if err != nil || !slices.Equal(flags, c.flags) || !slices.Equal(pos, c.pos) || help != c.help {
			t.Errorf("reorder(%q) = %q, %q, %v, %v", c.in, flags, pos, help, err)
		}
	}
}

// A turn saved by the CLI before turns.json (.sharedos/turn.json) is kept.
func TestLegacySavedTurnIsTakenOver(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(".sharedos", 0o700); err != nil {
		t.Fatal(err)
	}
	legacy := `{"handle":{"node":"node-1","turn_id":"node-1.old"},"lease_id":"l1","access":{"Tenant":"acme","Principal":"ada"}}`
	if err := os.WriteFile(legacyStatePath, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "turn", "saved")
	if code != 0 || !strings.Contains(out, `"turn": "node-1/node-1.old"`) {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	if _, err := os.Stat(legacyStatePath); !os.IsNotExist(err) {
		t.Fatal("the old file is still there")
	}
	if code, out, _ := runCLI(t, "turn", "saved"); code != 0 || !strings.Contains(out, "node-1/node-1.old") {
		t.Fatalf("not kept: %s", out)
	}
}

// node identities prints the bus configuration nats-server takes, and
// creates the seeds it names.
func TestIdentitiesPrintsTheBusConfiguration(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI(t, "identities", "--config", "../../cluster.yaml", "--creds-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var conf struct {
		Accounts map[string]struct {
			Users   []struct{ Nkey string }
			Imports []struct {
				Service, Stream struct{ Account, Subject string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &conf); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	rt, ok := conf.Accounts["runtime"]
	// The turn subjects and the console's login subjects.
	if !ok || len(rt.Users) != 1 || len(rt.Imports) != 3 || rt.Imports[0].Service.Account != "SHAREDOS" {
		t.Fatalf("runtime account %+v", rt)
	}
	if n := len(conf.Accounts["SHAREDOS"].Users); n != 2 { // node, provider-calendar
		t.Fatalf("%d users in the node account, want 2", n)
	}
	// Each audit reader is an account of its own, importing from the
	// nodes' account only: services (its JetStream subjects) and streams
	// (its inbox, its tenants' live copies).
	for _, name := range []string{"auditor", "auditor-acme"} {
		a, ok := conf.Accounts[name]
		if !ok || len(a.Users) != 1 || len(a.Imports) == 0 {
			t.Fatalf("%s account %+v", name, a)
		}
		inbox := false
		for _, im := range a.Imports {
			if im.Service.Account+im.Stream.Account != "SHAREDOS" {
				t.Fatalf("%s imports %+v", name, im)
			}
			inbox = inbox || im.Stream.Subject == "_INBOX_"+name+".>"
		}
		if !inbox {
			t.Fatalf("%s does not import its inbox: %+v", name, a.Imports)
		}
	}
	for _, name := range []string{"node", "runtime", "auditor", "auditor-acme", "provider-calendar"} {
		st, err := os.Stat(filepath.Join(dir, name+".nk"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("seed of %s: %v %v", name, st, err)
		}
	}
}
