package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// On a terminal, the progress line is rewritten on each tick with the
// count so far, and cleared by stop; stop waits for the line being
// written, so nothing interleaves with what follows.
func TestProgressOnATerminal(t *testing.T) {
	var w bytes.Buffer
	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(x io.Writer) bool { return x == &w }
	tick := make(chan time.Time)
	p := startProgress(&w, "audit verify", tick)
	p.add(3)
	p.add(4)
	tick <- time.Now()
	p.stop()
	p.stop()
	out := w.String()
	if !strings.HasPrefix(out, "\r\x1b[Knode: audit verify: 7 records, ") || !strings.HasSuffix(out, "\r\x1b[K") || strings.Count(out, "\r") != 2 {
		t.Fatalf("progress on a terminal wrote %q", out)
	}
}

// A pipe is no terminal: nothing is written, whatever the ticks.
func TestNoProgressIntoAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if isTerminal(w) {
		t.Fatal("a pipe reads as a terminal")
	}
	tick := make(chan time.Time)
	p := startProgress(w, "audit export", tick)
	p.add(5)
	select {
	case tick <- time.Now():
		t.Fatal("a progress line off a terminal is ticking")
	default:
	}
	p.stop()
	w.Close()
	if b, _ := io.ReadAll(r); len(b) != 0 {
		t.Fatalf("progress into a pipe wrote %q", b)
	}
}

// audit verify shows its progress on stderr only when stderr is a
// terminal; its report on stdout is the same either way.
func TestVerifyProgressOnlyOnATerminal(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("empty.jsonl", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, piped, errOut := runCLI(t, "audit", "verify", "--file", "empty.jsonl")
	if code != 0 || errOut != "" {
		t.Fatalf("verify, stderr not a terminal: exit %d, stderr %q", code, errOut)
	}
	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(w io.Writer) bool { return w == stderr }
	code, onTerm, errOut := runCLI(t, "audit", "verify", "--file", "empty.jsonl")
	if code != 0 || !strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Fatalf("verify, stderr a terminal: exit %d, stderr %q: want the progress line cleared at the end", code, errOut)
	}
	strip := func(s string) string { // elapsed and rate differ between runs
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, `"elapsed"`) && !strings.Contains(l, `"events_per_second"`) {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if strip(piped) != strip(onTerm) {
		t.Fatalf("the report differs with a terminal:\n%s\nvs\n%s", piped, onTerm)
	}
}
