package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// node turn list --for prints what a runtime would send the model API,
// the names to call back, and what was left out; node turn call --for
// calls a name it showed; node turn search ranks the turn's tools.
func TestTurnListForAProfile(t *testing.T) {
	n, dir := startSample(t, false)
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	if code, out, errOut := runCLI(t, "turn", "open", "--tenant", "acme", "--principal", "ada", "--ns", "notes,text"); code != 0 {
		t.Fatalf("open: %d %s %s", code, out, errOut)
	}
	// The sample's string lengths (minLength, maxLength) are outside
	// OpenAI's strict subset: every tool is left out, each with its
	// reasons, and said on stderr — never sent weakened.
	code, out, errOut := runCLI(t, "turn", "list", "--for", "openai-strict")
	var strict modelListing
	if err := json.Unmarshal([]byte(out), &strict); code != 0 || err != nil || len(strict.Tools) != 0 || len(strict.LeftOut) == 0 ||
		strict.LeftOut[0].Why != "unrepresentable" || len(strict.LeftOut[0].Reasons) == 0 || !strings.Contains(errOut, "left out of the openai-strict listing") {
		t.Fatalf("list --for openai-strict: %d %s %s (%v)", code, out, errOut, err)
	}
	// Gemini's OpenAPI subset has no additionalProperties: the sample's
	// closed objects are refused there, and a reason at the schema's root
	// names the root rather than an empty path.
	if code, out, errOut := runCLI(t, "turn", "list", "--for", "gemini"); code != 0 || !strings.Contains(errOut, "additionalProperties at the root unsupported") {
		t.Fatalf("list --for gemini: %d %s %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "turn", "list", "--for", "openai")
	if code != 0 {
		t.Fatalf("list --for: %d %s %s", code, out, errOut)
	}
	var l modelListing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("list --for printed %s: %v", out, err)
	}
	var sent []map[string]any
	if err := json.Unmarshal(l.Listing, &sent); err != nil || len(sent) != len(l.Tools) || len(sent) == 0 || len(l.ProjectionHash) != 64 {
		t.Fatalf("listing %s, tools %+v (%v)", l.Listing, l.Tools, err)
	}
	if l.Profile != "openai" || sent[0]["type"] != "function" {
		t.Fatalf("not the openai shape: %s", l.Listing)
	}
	code, out, errOut = runCLI(t, "turn", "list", "--for", "anthropic", "--budget", "1")
	var tight modelListing
	if err := json.Unmarshal([]byte(out), &tight); code != 0 || err != nil || len(tight.Tools) != 0 || len(tight.LeftOut) != len(l.Tools) ||
		tight.LeftOut[0].Why != "over_budget" || !strings.Contains(errOut, "left out of the anthropic listing") {
		t.Fatalf("a one-token budget: %d %s %s", code, out, errOut)
	}
	name := ""
	for _, tl := range l.Tools {
		if tl.Identity == "textkit/stats" {
			name = tl.Name
		}
	}
	if name == "" {
		t.Fatalf("text stats not in the listing: %+v", l.Tools)
	}
	if code, out, errOut := runCLI(t, "turn", "call", "--for", "openai", name, `{"text":"a b a"}`); code != 0 || !strings.Contains(out, `"tool": "textkit/stats"`) {
		t.Fatalf("call --for %s: %d %s %s", name, code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "turn", "call", "--for", "gemini", name, `{"text":"a"}`); code != 3 || !strings.Contains(out, "unknown_tool") {
		t.Fatalf("call a name gemini was never shown: %d %s %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "turn", "search", "--for", "anthropic", "--k", "1", "digest")
	if code != 0 {
		t.Fatalf("search: %d %s %s", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Tools) != 1 || l.Tools[0].Identity != "textkit/sha256" {
		t.Fatalf("search for digest: %s (%v)", out, err)
	}
	if code, _, _ := runCLI(t, "turn", "search", "digest"); code == 0 {
		t.Fatal("a search without --for was accepted")
	}
}
