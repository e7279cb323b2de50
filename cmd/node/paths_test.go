package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// A config's relative data_dir is the config's directory's: a node started
// from the file keeps its data there, and the CLI run from any other
// directory with --config finds the seeds the node wrote. When connecting
// fails, the error names the identity and the seed file used.
func TestConfigPathsFromAnotherDirectory(t *testing.T) {
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	if err := os.Mkdir(etc, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("port: 4222", "port: 0", "http: 127.0.0.1:8321", "http: off").Replace(string(b))
	if !strings.Contains(y, "data_dir: ./data") {
		t.Fatal("the sample config no longer has a relative data_dir")
	}
	cfgPath := filepath.Join(etc, "cluster.yaml")
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(root, "work")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(elsewhere)
	cfg, err := config.Load(cfgPath) // as node serve --config does
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	seed := filepath.Join(etc, "data", "creds", "runtime.nk")
	if _, err := os.Stat(seed); err != nil {
		t.Fatalf("the node wrote no seed under the config's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "data")); err == nil {
		t.Fatal("the node wrote its data under the working directory")
	}

	url := n.ClientURL()
	if code, out, errOut := runCLI(t, "turn", "open", "--config", cfgPath, "--nats", url, "--tenant", "acme", "--principal", "ada"); code != 0 {
		t.Fatalf("turn open from another directory: exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "turn", "close", "--config", cfgPath, "--nats", url); code != 0 {
		t.Fatalf("turn close: exit %d: %s %s", code, out, errOut)
	}

	// An identity with no seed: connecting without credentials is
	// refused, and the error says whose seed was looked for, and where.
	code, _, errOut := runCLI(t, "turn", "open", "--config", cfgPath, "--nats", url, "--as", "nobody", "--tenant", "acme", "--principal", "ada")
	want := "identity nobody has no seed at " + filepath.Join(etc, "data", "creds", "nobody.nk")
	if code != 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("no seed: exit %d, stderr %q; want it to say %q", code, errOut, want)
	}
	// A seed the server does not know: the error names the identity and
	// the file.
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := kp.Seed()
	foreign := filepath.Join(root, "stranger.nk")
	if err := os.WriteFile(foreign, s, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "audit", "export", "--config", cfgPath, "--nats", url, "--creds", foreign)
	want = "as identity stranger with the seed " + foreign + " (--creds)"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("unknown seed: exit %d, stderr %q; want it to say %q", code, errOut, want)
	}
	// An audit reader receives only under its own inbox prefix: the
	// default one is refused, its own (what --as gives) serves.
	code, _, errOut = runCLI(t, "audit", "export", "--config", cfgPath, "--nats", url, "--inbox-prefix", "_INBOX")
	if code != 1 || !strings.Contains(errOut, `Subscription to "_INBOX.`) {
		t.Errorf("auditor with the default inbox prefix: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "audit", "export", "--config", cfgPath, "--nats", url, "--inbox-prefix", "_INBOX_auditor"); code != 0 {
		t.Errorf("auditor with its own inbox prefix: exit %d, stderr %q", code, errOut)
	}
	// Without --config, from a directory holding no data: the default
	// place is named.
	code, _, errOut = runCLI(t, "audit", "export", "--nats", url)
	want = "identity auditor has no seed at " + filepath.Join("data", "creds", "auditor.nk") + " (no config read"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("no config: exit %d, stderr %q; want it to say %q", code, errOut, want)
	}
}
