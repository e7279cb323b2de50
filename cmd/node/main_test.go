package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// TestReadmeCommands runs the README's turn commands, then audit verify and
// export, against a node started from the sample cluster.yaml.
func TestReadmeCommands(t *testing.T) {
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
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	t.Chdir(dir)
	nats := "--nats=" + n.ClientURL()

	cli := func(want int, args ...string) map[string]any {
		t.Helper()
		var out bytes.Buffer
		stdout = &out
		defer func() { stdout = os.Stdout }()
		args = append(args[:2:2], append([]string{nats, "--config=none.yaml"}, args[2:]...)...)
		if code := run(args); code != want {
			t.Fatalf("node %s: exit %d, want %d; output %s", strings.Join(args, " "), code, want, out.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			var arr []any
			if json.Unmarshal(out.Bytes(), &arr) == nil {
				return map[string]any{"items": arr}
			}
			t.Fatalf("node %s printed non-JSON: %s", strings.Join(args, " "), out.String())
		}
		return m
	}

	opened := cli(0, "turn", "open", "--tenant", "acme", "--principal", "ada", "--ns", "notes,text,calendar")
	if !strings.HasPrefix(opened["turn"].(string), "node-1/node-1.") {
		t.Fatalf("open printed %v", opened)
	}
	listed := cli(0, "turn", "list")
	if len(listed["tools"].([]any)) != 8 {
		t.Fatalf("list printed %v", listed)
	}
	called := cli(0, "turn", "call", "notes_put", `{"space":"acme","title":"plan","body":"ship the kernel"}`)
	if called["catalog_hash"] != listed["catalog_hash"] {
		t.Fatalf("call answered against %v, listing %v", called["catalog_hash"], listed["catalog_hash"])
	}
	refused := cli(3, "turn", "call", "notes_put", `{"space":"globex","title":"x","body":"y"}`)
	if refused["refused"] != "no_matching_grant" {
		t.Fatalf("ungranted call printed %v", refused)
	}
	between := cli(0, "turn", "call", "calendar_between", `{"from":"2026-11-30","to":"2026-12-24"}`)
	if between["text"] != "24 days (18 business days)" || between["tool"] != "calendar/between" {
		t.Fatalf("remote provider call printed %v", between)
	}
	cli(0, "turn", "ns-set", "text")
	if r := cli(3, "turn", "call", "notes_get", `{"space":"acme","title":"plan"}`); r["refused"] != "namespace_disabled" {
		t.Fatalf("disabled namespace printed %v", r)
	}
	cli(0, "turn", "close")
	if _, err := os.Stat(statePath); !os.IsNotExist(err) {
		t.Fatal("close left the saved turn")
	}

	report := cli(0, "audit", "verify", "--open-ok=false")
	if report["ok"] != true || report["closed_turns"].(float64) != 1 {
		t.Fatalf("verify printed %v", report)
	}
	export := filepath.Join(dir, "trail.jsonl")
	cli(0, "audit", "export", "--out", export)
	if r := cli(0, "audit", "verify", "--file", export, "--open-ok=false"); r["ok"] != true {
		t.Fatalf("verify of the export printed %v", r)
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
