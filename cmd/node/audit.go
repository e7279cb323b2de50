package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sharedos/sharedos/internal/audit"
)

func auditCmd(args []string) error {
	if len(args) == 0 {
		return errors.New("audit needs a subcommand: tail, export, verify")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("audit "+sub, flag.ContinueOnError)
	var c conn
	c.flags(fs)
	var filter audit.TailFilter
	var types string
	fs.StringVar(&filter.Tenant, "tenant", "", "only this tenant")
	fs.StringVar(&filter.TurnID, "turn", "", "only this turn id")
	fs.StringVar(&types, "type", "", "only these event types, comma separated (e.g. tool.invoked,tool.completed)")
	fromStart := fs.Bool("from-start", false, "tail: start from the first stored event instead of new ones")
	out := fs.String("out", "", "export: write to this file instead of stdout")
	file := fs.String("file", "", "verify: read this JSON-lines export instead of the stream")
	live := fs.Bool("open-ok", true, "verify: accept turns that are still open (no turn.closed yet)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, t := range splitList(types) {
		filter.Types = append(filter.Types, audit.Type(t))
	}
	if sub == "verify" && *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		return verify(func(fn func([]byte) error) error { return readLines(f, fn) }, *live)
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := audit.TailOptions{Prefix: c.prefix, Stream: c.stream, Filter: filter, FromStart: *fromStart}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch sub {
	case "tail":
		w := bufio.NewWriter(stdout)
		err := audit.Tail(ctx, nc, opts, func(data []byte, _ *audit.Event) error {
			w.Write(data)
			w.WriteByte('\n')
			return w.Flush()
		})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case "export":
		var dst io.Writer = stdout
		if *out != "" {
			f, err := os.Create(*out)
			if err != nil {
				return err
			}
			defer f.Close()
			dst = f
		}
		w := bufio.NewWriter(dst)
		n := 0
		if err := audit.ReadAll(ctx, nc, opts, func(data []byte, _ *audit.Event) error {
			n++
			w.Write(data)
			return w.WriteByte('\n')
		}); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if *out != "" {
			return printJSON(map[string]any{"exported": n, "file": *out})
		}
		fmt.Fprintf(os.Stderr, "exported %d events\n", n)
		return nil
	case "verify":
		return verify(func(fn func([]byte) error) error {
			return audit.ReadAll(ctx, nc, opts, func(data []byte, _ *audit.Event) error { return fn(data) })
		}, *live)
	default:
		return fmt.Errorf("unknown audit subcommand %q", sub)
	}
}

// verify runs the verifier over records from read and prints its report;
// a violation exits 4.
func verify(read func(func([]byte) error) error, openOK bool) error {
	v := audit.NewVerifier()
	start := time.Now()
	if err := read(func(b []byte) error { v.Add(b); return nil }); err != nil {
		return err
	}
	rep := v.Finish(openOK)
	if rep.Violations == nil {
		rep.Violations = []audit.Violation{}
	}
	el := time.Since(start)
	rate := float64(rep.Events) / max(el.Seconds(), 1e-9)
	if err := printJSON(map[string]any{
		"ok": rep.OK(), "events": rep.Events, "turns": rep.Turns, "closed_turns": rep.Closed,
		"violations": rep.Violations, "events_per_second": int64(rate), "elapsed": el.String(),
	}); err != nil {
		return err
	}
	if !rep.OK() {
		return violated{fmt.Errorf("%d violation(s); first: %s", len(rep.Violations), rep.Violations[0])}
	}
	return nil
}

type violated struct{ error }

func (violated) ExitCode() int { return 4 }

func readLines(r io.Reader, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(append([]byte(nil), sc.Bytes()...)); err != nil {
			return err
		}
	}
	return sc.Err()
}
