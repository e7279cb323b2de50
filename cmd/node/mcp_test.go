package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The README's MCP commands: `node turn token --out FILE` for the open
// turn, then `node mcp --token-file FILE` serves it to an MCP client on
// stdio (here the official SDK's client on pipes).
func TestTurnTokenAndMCPOverStdio(t *testing.T) {
	n, dir := startSample(t, true)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	if code, out, errOut := runCLI(t, "turn", "open", "--tenant", "acme", "--principal", "ada", "--ns", "notes"); code != 0 {
		t.Fatalf("open: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "turn", "token", "--out", "token")
	if code != 0 {
		t.Fatalf("token: %d %s %s", code, out, errOut)
	}
	var minted map[string]any
	if err := json.Unmarshal([]byte(out), &minted); err != nil || minted["url"] != n.MCPURL() || minted["token"] != nil {
		t.Fatalf("token printed %s (the token itself must go to the file only)", out)
	}
	if st, err := os.Stat("token"); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stdin, stdout = inR, outW
	defer func() { stdin, stdout = os.Stdin, os.Stdout }()
	done := make(chan error, 1)
	go func() {
		done <- mcpCmd([]string{"--token-file", "token"})
		outW.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "sandbox", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.ListTools(ctx, nil)
	if err != nil || len(l.Tools) == 0 || l.Meta["io.sharedos/catalogHash"] != minted["catalog_hash"] {
		t.Fatalf("list: %+v %v", l, err)
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "acme", "title": "plan", "body": "ship"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	_ = s.Close()
	if err := <-done; err != nil {
		t.Fatalf("node mcp: %v", err)
	}
}
