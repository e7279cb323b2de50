package mcpfront_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// bridgeEnv, set in a child process's environment, makes this test binary
// the stdio bridge (`node mcp`) for that endpoint URL and token, so the
// TypeScript client's stdio transport can launch it.
const bridgeEnv = "MCPFRONT_TEST_STDIO_BRIDGE"

// serveBridgeIfAsked serves the bridge and exits when this process was
// launched as one; otherwise it returns.
func serveBridgeIfAsked() {
	v := os.Getenv(bridgeEnv)
	if v == "" {
		return
	}
	url, tok, _ := strings.Cut(v, " ")
	if err := mcpfront.ServeStdio(context.Background(), os.Stdin, os.Stdout, mcpfront.StdioOptions{URL: url, Token: tok}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// tsClientDir is where npm installed @modelcontextprotocol/client
// (make mcp-clients: .cache/mcp-tsclient); the test is skipped without it
// or without node.
func tsClientDir(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the TypeScript client is not run (make mcp-clients runs it)")
	}
	dir = os.Getenv("MCP_TSCLIENT_DIR")
	if dir == "" {
		dir, _ = filepath.Abs(filepath.Join("..", "..", ".cache", "mcp-tsclient"))
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "client", "package.json")); err != nil {
		t.Skipf("@modelcontextprotocol/client not installed in %s: make mcp-clients installs and runs it", dir)
	}
	return node, dir
}

// tsStep is one step's outcome as testdata/tsclient.mjs prints it.
type tsStep struct {
	OK    json.RawMessage `json:"ok"`
	Error string          `json:"error"`
}

func (s tsStep) String() string {
	if s.Error != "" {
		return "error: " + s.Error
	}
	return string(s.OK)
}

// runTSClient runs the TypeScript client with cfg and returns its steps.
func runTSClient(t *testing.T, cfg map[string]any) map[string]tsStep {
	t.Helper()
	node, dir := tsClientDir(t)
	b, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(testCtx(t), node, filepath.Join("testdata", "tsclient.mjs"), dir, string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tsclient: %v: %s", err, out)
	}
	var steps map[string]tsStep
	if err := json.Unmarshal(out, &steps); err != nil {
		t.Fatalf("tsclient output %s: %v", out, err)
	}
	return steps
}

// checkTSSteps: connected at version, listed the turn's tools, the
// allowed call's result, the refusal's tool error with its reason code,
// and the unknown tool a protocol error — each result accepted by the
// client's own schema validation.
func checkTSSteps(t *testing.T, version string, steps map[string]tsStep) {
	t.Helper()
	for _, k := range []string{"connect", "list", "call", "refused"} {
		if steps[k].Error != "" || steps[k].OK == nil {
			t.Fatalf("%s: %s: %+v", version, k, steps)
		}
	}
	if !strings.Contains(string(steps["connect"].OK), `"`+version+`"`) && version >= "2026-07-28" {
		t.Errorf("%s: connected %s", version, steps["connect"].OK)
	}
	if !strings.Contains(string(steps["list"].OK), `"notion_search"`) {
		t.Errorf("%s: list %s", version, steps["list"].OK)
	}
	var call struct{ IsError bool }
	if json.Unmarshal(steps["call"].OK, &call) != nil || call.IsError {
		t.Errorf("%s: call %s", version, steps["call"].OK)
	}
	var refused struct {
		IsError           bool
		StructuredContent mcpfront.Refusal
	}
	if json.Unmarshal(steps["refused"].OK, &refused) != nil || !refused.IsError || refused.StructuredContent.Code != "no_matching_grant" {
		t.Errorf("%s: refused %s", version, steps["refused"].OK)
	}
	if u := steps["unknown"]; u.Error == "" || !strings.Contains(u.Error, "never_shown") {
		t.Errorf("%s: unknown tool %+v", version, u)
	}
}

func tsCfg() map[string]any {
	return map[string]any{"tool": "notion_search", "okArgs": callArgs("acme"), "refusedArgs": callArgs("globex")}
}

// The official TypeScript client at every revision the front offers, over
// HTTP: list, call, refusal, unknown tool (its schemas reject a 2026-07-28
// call result without resultType).
func TestTypeScriptClientOverHTTP(t *testing.T) {
	for _, v := range mcpfront.Versions() {
		t.Run(v, func(t *testing.T) {
			tsClientDir(t)
			e := newEnv(t, nil, nil)
			_, tok := e.open(t, conformance.Ada)
			cfg := tsCfg()
			cfg["url"], cfg["token"], cfg["version"] = e.url, tok.Token, v
			checkTSSteps(t, v, runTSClient(t, cfg))
		})
	}
}

// The official TypeScript client over stdio through the bridge (this test
// binary as `node mcp`), at every revision the front offers.
func TestTypeScriptClientOverStdio(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range mcpfront.Versions() {
		t.Run(v, func(t *testing.T) {
			tsClientDir(t)
			e := newEnv(t, nil, nil)
			_, tok := e.open(t, conformance.Ada)
			cfg := tsCfg()
			cfg["version"] = v
			cfg["stdio"] = map[string]any{"command": self, "args": []string{}, "env": map[string]string{bridgeEnv: e.url + " " + tok.Token}}
			checkTSSteps(t, v, runTSClient(t, cfg))
		})
	}
}
