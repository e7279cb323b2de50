package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// node oauth login reaches the node as the admin; a profile that is not
// an OAuth one (or a provider that is not there) is a refusal, exit 3.
func TestOAuthLoginRefusesWhatNeedsNoLogin(t *testing.T) {
	n, dir := startSample(t, true)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	code, out, errOut := runCLI(t, "oauth", "login", "--provider", "scratchpad", "--tenant", "acme", "--profile", "x")
	var m map[string]any
	if code != 3 || json.Unmarshal([]byte(out), &m) != nil || m["refused"] != "invalid_request" || !strings.Contains(out, "no oauth credential profile") {
		t.Fatalf("exit %d; stdout %s stderr %s", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "oauth", "login", "--provider", "scratchpad"); code != 2 {
		t.Fatalf("without --tenant and --profile: exit %d, want 2 (usage)", code)
	}
}

// node oauth reseal reaches the node as the admin; a node none of whose
// providers uses OAuth has nothing to reseal: a refusal, exit 3.
func TestOAuthResealReachesTheNodeAsAdmin(t *testing.T) {
	n, dir := startSample(t, true)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	code, out, errOut := runCLI(t, "oauth", "reseal")
	var m map[string]any
	if code != 3 || json.Unmarshal([]byte(out), &m) != nil || m["refused"] != "invalid_request" || !strings.Contains(out, "uses OAuth") {
		t.Fatalf("exit %d; stdout %s stderr %s", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "oauth", "reseal", "extra"); code != 2 {
		t.Fatalf("with an argument: exit %d, want 2 (usage)", code)
	}
}

// node oauth logout reaches the node as the admin; a profile that is not
// an OAuth one is a refusal, exit 3.
func TestOAuthLogoutRefusesWhatIsNotOAuth(t *testing.T) {
	n, dir := startSample(t, true)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	code, out, errOut := runCLI(t, "oauth", "logout", "--provider", "scratchpad", "--tenant", "acme", "--profile", "x", "--principal", "ada")
	var m map[string]any
	if code != 3 || json.Unmarshal([]byte(out), &m) != nil || m["refused"] != "invalid_request" || !strings.Contains(out, "no oauth credential profile") {
		t.Fatalf("exit %d; stdout %s stderr %s", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "oauth", "logout", "--provider", "scratchpad"); code != 2 {
		t.Fatalf("without --tenant and --profile: exit %d, want 2 (usage)", code)
	}
}
