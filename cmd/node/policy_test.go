package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The README's policy example: get a key to a file, edit it, put it back;
// a second put of the same file is refused policy_conflict with the
// current revision; diff a file, import it exactly as reviewed; the
// changes are in the trail, which verifies.
func TestPolicyCommands(t *testing.T) {
	n, dir := startSample(t, false)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	cli := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runCLI(t, args...)
		if code != want {
			t.Fatalf("node %s: exit %d, want %d; stdout %s stderr %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}
	obj := func(s string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("not a JSON object: %s", s)
		}
		return m
	}

	got, _ := cli(0, "policy", "get", "grants.acme.bob")
	if !strings.Contains(got, "key: grants.acme.bob") || !strings.Contains(got, "id: bob-notes-search") || !strings.Contains(got, "by: cluster.yaml") {
		t.Fatalf("get printed %s", got)
	}
	edited := strings.Replace(got, "capability: notes.search", "capability: notes.get", 1)
	if err := os.WriteFile("bob.yaml", []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	put, _ := cli(0, "policy", "put", "bob.yaml")
	written := obj(put)
	if written["by"] != "admin" || written["revision"] == nil {
		t.Fatalf("put printed %s", put)
	}
	refused, _ := cli(3, "policy", "put", "bob.yaml")
	if r := obj(refused); r["refused"] != "policy_conflict" || r["current_revision"] != written["revision"] {
		t.Fatalf("a second put of the same file printed %s", refused)
	}
	if out, _ := cli(3, "policy", "get", "grants.acme.nobody"); obj(out)["refused"] != "policy_not_found" {
		t.Fatalf("get of a missing key printed %s", out)
	}
	if out, _ := cli(3, "policy", "put", "grants.acme.bob", "bob.yaml", "--revision", "0"); obj(out)["refused"] != "invalid_request" {
		t.Fatalf("a put of a file as get prints it, as a bare value: %s", out)
	}

	// The sample file still has bob's search grant: importing it changes
	// one key back.
	sample := filepath.Join(startDir, "..", "..", "cluster.yaml")
	diffOut, diffErr := cli(0, "policy", "diff", sample)
	diff := obj(diffOut)
	changes := diff["changes"].([]any)
	if len(changes) != 1 || changes[0].(map[string]any)["key"] != "grants.acme.bob" || !strings.Contains(diffErr, "~ grants.acme.bob") {
		t.Fatalf("diff printed %s / %s", diffOut, diffErr)
	}
	since := diff["revision"].(float64)
	imported, _ := cli(0, "policy", "import", sample, "--since", strconv.FormatFloat(since, 'f', -1, 64))
	if len(obj(imported)["changes"].([]any)) != 1 {
		t.Fatalf("import printed %s", imported)
	}
	if out, _ := cli(3, "policy", "import", sample, "--since", strconv.FormatFloat(since, 'f', -1, 64)); obj(out)["refused"] != "policy_conflict" {
		t.Fatalf("an import after the reviewed revision printed %s", out)
	}
	if out, _ := cli(0, "policy", "diff", sample); len(obj(out)["changes"].([]any)) != 0 {
		t.Fatalf("after the import the store still differs: %s", out)
	}
	exported, _ := cli(0, "policy", "export")
	if !strings.Contains(exported, "principals:") || !strings.Contains(exported, "bob-notes-search") {
		t.Fatalf("export printed %s", exported)
	}
	if err := os.WriteFile("export.yaml", []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _ := cli(0, "policy", "diff", "export.yaml"); len(obj(out)["changes"].([]any)) != 0 {
		t.Fatalf("an export read back differs from the store: %s", out)
	}
	list, _ := cli(0, "policy", "list")
	if len(obj(list)["entries"].([]any)) < 5 {
		t.Fatalf("list printed %s", list)
	}
	trail, _ := cli(0, "audit", "export")
	if strings.Count(trail, `"type":"policy.changed"`) < 2 || !strings.Contains(trail, `"by":"admin"`) {
		t.Fatalf("the trail lacks the changes")
	}
	if out, _ := cli(0, "audit", "verify"); obj(out)["ok"] != true {
		t.Fatalf("verify printed %s", out)
	}
	// Only an admin is answered: the runtime's request has no subject to go to.
	if _, errOut := cli(1, "policy", "list", "--as", "runtime", "--timeout", "500ms"); errOut == "" {
		t.Fatal("the runtime's list failed silently")
	}
	for _, args := range [][]string{{"policy"}, {"policy", "bogus"}, {"policy", "get"}, {"policy", "delete", "k"}, {"policy", "put", "k", "f"}, {"policy", "list", "x"}, {"policy", "import", "f", "--since", "x"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("node %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// startDir is the package directory the tests started in.
var startDir, _ = os.Getwd()
