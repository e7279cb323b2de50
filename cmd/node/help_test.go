package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// commonFlags are the flags every client command of a group takes; a
// command's own flags are the others.
var commonFlags = map[string][]string{
	"turn":      {"config", "nats", "prefix", "creds", "as", "inbox-prefix", "timeout"},
	"audit":     {"config", "nats", "prefix", "stream", "creds", "as", "inbox-prefix"},
	"policy":    {"config", "nats", "prefix", "creds", "as", "inbox-prefix", "timeout"},
	"contracts": {"config", "nats", "prefix", "creds", "as", "inbox-prefix", "timeout"},
	"approvals": {"config", "nats", "prefix", "creds", "as", "inbox-prefix", "timeout"},
	"oauth":     {"config", "nats", "prefix", "creds", "as", "inbox-prefix", "timeout"},
}

var flagName = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// Every command and subcommand that exists is in node -h, with each of its
// own flags, and in its group's -h; its own -h prints its usage line with
// each of its own flags and lists every flag it takes; every flag node -h
// shows exists; and every subcommand of a group takes the group's common
// flags.
func TestHelpCoversEverySubcommand(t *testing.T) {
	t.Chdir(t.TempDir())
	help := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, append(args, "-h")...)
		if code != 0 || errOut != "" {
			t.Fatalf("node %s -h: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	top := help()
	// mainLines are node -h's lines for command name (with sub, when
	// given, among the words after it).
	mainLines := func(name, sub string) []string {
		var out []string
		for _, l := range strings.Split(top, "\n") {
			rest, ok := strings.CutPrefix(l, "  node "+name)
			if !ok || (rest != "" && rest[0] != ' ') {
				continue
			}
			if sub == "" || slices.Contains(strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '|' }), sub) {
				out = append(out, l)
			}
		}
		return out
	}
	// flagsOf lists the flags a command's -h prints.
	flagsOf := func(out string) []string {
		var fs []string
		for _, l := range strings.Split(out, "\n") {
			if m := flagName.FindStringSubmatch(l); m != nil && strings.HasPrefix(l, "  --") {
				fs = append(fs, m[1])
			}
		}
		return fs
	}
	type leaf struct {
		group, name string
		flags       []string
	}
	var leaves []leaf
	checkLeaf := func(group, name string) {
		path := []string{group}
		if name != "" {
			path = append(path, name)
		}
		out := help(path...)
		shown := strings.Join(path, " ")
		if name == "invoke" {
			shown = group + " call"
		}
		first, _, _ := strings.Cut(out, "\n")
		if !strings.HasPrefix(first, "usage: node "+shown) {
			t.Errorf("node %s -h begins %q", strings.Join(path, " "), first)
		}
		lines := mainLines(group, name)
		if len(lines) == 0 {
			t.Errorf("node -h does not show node %s", strings.Join(path, " "))
		}
		fs := flagsOf(out)
		for _, f := range commonFlags[group] {
			if !slices.Contains(fs, f) {
				t.Errorf("node %s does not take the common flag --%s", strings.Join(path, " "), f)
			}
		}
		for _, f := range fs {
			if slices.Contains(commonFlags[group], f) || (group == "status" || group == "identities") && f == "config" || group == "status" && f == "timeout" {
				continue
			}
			if !strings.Contains(first, "--"+f) {
				t.Errorf("node %s: its usage line %q omits its flag --%s", strings.Join(path, " "), first, f)
			}
			if !slices.ContainsFunc(lines, func(l string) bool {
				return strings.Contains(l, "--"+f+" ") || strings.Contains(l, "--"+f+"=") || strings.HasSuffix(l, "--"+f) || strings.Contains(l, "--"+f+"]")
			}) {
				t.Errorf("node -h omits --%s of node %s (%q)", f, strings.Join(path, " "), lines)
			}
		}
		leaves = append(leaves, leaf{group, name, fs})
	}
	for _, c := range commands {
		if c.subcommands == nil {
			checkLeaf(c.name, "")
			continue
		}
		gh := help(c.name)
		for _, sub := range c.subcommands {
			listed := slices.ContainsFunc(strings.Split(gh, "\n"), func(l string) bool {
				return strings.HasPrefix(l, "  "+sub+" ") || l == "  "+sub || strings.Contains(l, "(alias: "+sub+")")
			})
			if !listed {
				t.Errorf("node %s -h does not list %s", c.name, sub)
			}
			checkLeaf(c.name, sub)
		}
	}
	// Every flag node -h shows is a flag of a command its line shows.
	for _, l := range strings.Split(top, "\n") {
		rest, ok := strings.CutPrefix(l, "  node ")
		if !ok {
			continue
		}
		group, _, _ := strings.Cut(rest, " ")
		for _, m := range flagName.FindAllStringSubmatch(rest, -1) {
			ok := slices.ContainsFunc(leaves, func(lf leaf) bool {
				return lf.group == group && slices.Contains(lf.flags, m[1]) && slices.Contains(mainLines(group, lf.name), l)
			})
			if !ok {
				t.Errorf("node -h shows --%s on %q, which no command there takes", m[1], l)
			}
		}
	}
	if !strings.Contains(top, "--unattested-ok=false") {
		t.Error("node -h does not show audit verify --unattested-ok=false")
	}
}

// node turn saved takes the common flags like every turn subcommand,
// and reports a --config naming a missing file as every command does.
func TestTurnSavedTakesTheCommonFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("cluster.yaml", []byte("node: {id: node-1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "turn", "saved", "--config", "cluster.yaml", "--nats", "nats://127.0.0.1:1", "--as", "runtime", "--timeout", "1s")
	if code != 0 || !strings.Contains(out, `"turns": []`) {
		t.Errorf("turn saved with the common flags: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "turn", "saved", "--config", "missing.yaml"); code != 1 || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("turn saved --config missing.yaml: exit %d, stderr %q", code, errOut)
	}
}
