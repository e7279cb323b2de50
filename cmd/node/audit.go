package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/auditstore"
)

// auditSubcommands are node audit's subcommands.
var auditSubcommands = []string{"tail", "export", "verify", "keys"}

const auditUsage = `usage: node audit SUBCOMMAND [flags]

  tail      follow the audit stream, one JSON event per line (Ctrl-C stops)
  export    every stored event as JSON lines, to stdout or --out FILE
  verify    check every chain link, catalogHash join, call completion and
            signed checkpoint; prints a JSON report, exits 4 on a violation
  keys      the checkpoint public keys: the local node's and the stream's

Run "node audit SUBCOMMAND -h" for its flags.`

func auditCmd(args []string) error {
	sub, args, err := group("audit", auditUsage, args, auditSubcommands...)
	if err != nil {
		return err
	}
	synopsis := map[string]string{
		"tail":   "[--tenant T] [--turn ID] [--type TYPE,...] [--from-start] [--durable NAME] [flags]",
		"export": "[--out FILE] [--tenant T] [--turn ID] [--type TYPE,...] [flags]",
		"verify": "[--file FILE] [--trust KEYS] [--anchor CHECKPOINT,...] [--open-ok=false] [--unattested-ok=false] [--tenant T] [--turn ID] [flags]",
		"keys":   "[--local] [--key FILE] [flags]",
	}[sub]
	fs := newFlags("audit "+sub, synopsis, map[string]string{
		"tail":   "Prints each audit event as one JSON line on stdout as it is stored, until interrupted.",
		"export": "Prints every stored event as JSON lines (to stdout, with the count on stderr; or to\n--out FILE, with a JSON summary on stdout).",
		"verify": "Verifies the trail (the stream, or an export with --file) and prints a JSON report.\nExit 4 when it finds a violation.",
		"keys":   "Prints the checkpoint public keys as JSON: the local node's (what to trust) and,\nunless --local, those the stream's checkpoints carry. What --local prints is a\n--trust file for verify (docs/audit.md, \"Keys\").",
	}[sub])
	var c conn
	c.flags(fs, true)
	var filter auditstore.TailFilter
	var types, turnSel string
	if sub != "keys" {
		fs.StringVar(&filter.Tenant, "tenant", "", "only this tenant")
		fs.StringVar(&turnSel, "turn", "", "only this turn: its id, or NODE/TURN")
	}
	if sub == "tail" || sub == "export" {
		fs.StringVar(&types, "type", "", "only these event types, comma separated (e.g. tool.invoked,tool.completed)")
	}
	// Every subcommand's options are values, each subcommand registering
	// the flags it takes: an option another subcommand owns reads as its
	// zero value here, never as a nil pointer.
	var fromStart, live, unattestedOK, localOnly bool
	var durable, out, file, trust, anchor, keyFile string
	switch sub {
	case "tail":
		fs.BoolVar(&fromStart, "from-start", false, "start from the first stored event instead of new ones")
		fs.StringVar(&durable, "durable", "", "consume through this durable consumer (resumes where it stopped)")
	case "export":
		fs.StringVar(&out, "out", "", "write to this file instead of stdout")
	case "verify":
		fs.StringVar(&file, "file", "", "read this JSON-lines export instead of the stream")
		fs.BoolVar(&live, "open-ok", true, "accept turns that are still open (no turn.closed yet)")
		fs.BoolVar(&unattestedOK, "unattested-ok", true, "accept events no checkpoint attests yet (the last checkpoints' tail of a running node, a node without checkpoints); false: each is a violation, for the trail of stopped nodes")
		fs.StringVar(&trust, "trust", "", "file of trusted checkpoint public keys (hex lines, PEM, or the JSON of node audit keys --local)")
		fs.StringVar(&anchor, "anchor", "", "checkpoint records known to be genuine, e.g. <data_dir>/audit/checkpoint.json (comma separated files)")
	case "keys":
		fs.StringVar(&keyFile, "key", "", "the node's key file (default: audit.key_file of --config, else <data_dir>/keys/audit-ed25519.key)")
		fs.BoolVar(&localOnly, "local", false, "only the local key file, without reading the stream")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("audit %s takes no arguments, got %q (node audit %s -h for usage)", sub, fs.Args(), sub)}
	}
	// --turn takes the turn id; a NODE/TURN handle (what turn commands
	// print) names the same turn.
	if _, id, ok := strings.Cut(turnSel, "/"); ok {
		turnSel = id
	}
	filter.TurnID = turnSel
	for _, t := range splitList(types) {
		filter.Types = append(filter.Types, audit.Type(t))
	}
	var vopts audit.VerifyOptions
	if sub == "verify" {
		var err error
		if vopts, err = verifyOptions(filter, trust, anchor); err != nil {
			return err
		}
		vopts.AllAttested = !unattestedOK
		if file != "" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			return verify(func(fn func([]byte) error) error { return readLines(f, fn) }, vopts, live, nil)
		}
	}
	if sub == "keys" && localOnly {
		return printKeys(&c, keyFile, nil)
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	var bus refusals
	nc.SetErrorHandler(bus.handle)
	// One tenant's records are read through a push consumer pinned to
	// the tenant's segments: all a reader bound to some tenants may do
	// (docs/security.md), and as good for every other reader.
	opts := auditstore.TailOptions{Prefix: c.prefix, Stream: c.stream, Filter: filter, Push: filter.Tenant != "" && durable == ""}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch sub {
	case "tail":
		opts.Durable, opts.FromStart = durable, fromStart
		w := bufio.NewWriter(stdout)
		err := bus.read(ctx, func(ctx context.Context) error {
			return auditstore.Tail(ctx, nc, opts, func(data []byte, _ *audit.Event) error {
				w.Write(data)
				w.WriteByte('\n')
				return w.Flush()
			})
		})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case "export":
		var dst io.Writer = stdout
		if out != "" {
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			dst = f
		}
		w := bufio.NewWriter(dst)
		n := 0
		// Records printed to a terminal are progress enough.
		var pr *progress
		if out != "" || !isTerminal(stdout) {
			pr = startProgress(stderr, "audit export", nil)
		} else {
			pr = startProgress(io.Discard, "", nil)
		}
		defer pr.stop()
		if err := bus.read(ctx, func(ctx context.Context) error {
			return auditstore.ReadAll(ctx, nc, opts, func(data []byte, _ *audit.Event) error {
				n++
				pr.add(1)
				w.Write(data)
				return w.WriteByte('\n')
			})
		}); err != nil {
			return err
		}
		pr.stop()
		if err := w.Flush(); err != nil {
			return err
		}
		if out != "" {
			return printJSON(map[string]any{"exported": n, "file": out})
		}
		fmt.Fprintf(stderr, "node: exported %d records\n", n)
		return nil
	case "verify":
		// The whole stream, checkpoints included; the verifier applies
		// --tenant and --turn itself (the stream's subject and header
		// filters would leave the checkpoints out). A reader the bus
		// refuses the whole stream reads the tenant's segments instead —
		// all a reader bound to some tenants may read — without the
		// checkpoints.
		whole := opts
		whole.Filter, whole.Push = auditstore.TailFilter{}, false
		segmentsOnly := false
		return verify(func(fn func([]byte) error) error {
			n := 0
			err := bus.read(ctx, func(ctx context.Context) error {
				return auditstore.ReadAll(ctx, nc, whole, func(data []byte, _ *audit.Event) error { n++; return fn(data) })
			})
			if !errors.As(err, new(busRefused)) || n > 0 || filter.Tenant == "" {
				return err
			}
			segmentsOnly = true
			return bus.read(ctx, func(ctx context.Context) error {
				return auditstore.ReadAll(ctx, nc, opts, func(data []byte, _ *audit.Event) error { return fn(data) })
			})
		}, vopts, live, &segmentsOnly)
	case "keys":
		return printKeys(&c, keyFile, func(fn func([]byte) error) error {
			pr := startProgress(stderr, "audit keys", nil)
			defer pr.stop()
			return bus.read(ctx, func(ctx context.Context) error {
				return auditstore.ReadAll(ctx, nc, opts, func(data []byte, _ *audit.Event) error { pr.add(1); return fn(data) })
			})
		})
	default:
		return fmt.Errorf("unknown audit subcommand %q", sub)
	}
}

func verifyOptions(filter auditstore.TailFilter, trust, anchors string) (audit.VerifyOptions, error) {
	opts := audit.VerifyOptions{Tenant: filter.Tenant, TurnID: filter.TurnID}
	if trust != "" {
		b, err := os.ReadFile(trust)
		if err != nil {
			return opts, fmt.Errorf("--trust: %w", err)
		}
		if opts.Trusted, err = audit.ParsePublicKeys(b); err != nil {
			return opts, fmt.Errorf("--trust %s: %w", trust, err)
		}
	}
	for _, path := range splitList(anchors) {
		b, err := os.ReadFile(path)
		if err != nil {
			return opts, fmt.Errorf("--anchor: %w", err)
		}
		opts.Anchors = append(opts.Anchors, b)
	}
	return opts, nil
}

// refusals ends a read when the bus refuses one of its requests: the bus
// reports a permissions violation asynchronously, and the request it
// refused would otherwise wait out its timeout (or, for a tail, forever).
type refusals struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // the read in progress
}

// busRefused is a read the bus did not permit.
type busRefused struct{ error }

func (r *refusals) handle(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel(err)
	}
}

// read runs fn with a context the bus's first refusal cancels, and
// returns that refusal as a busRefused error.
func (r *refusals) read(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	err := fn(ctx)
	r.mu.Lock()
	r.cancel = nil
	r.mu.Unlock()
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return busRefused{fmt.Errorf("the bus refused this read to the identity (a reader bound to some tenants reads only theirs, with --tenant): %w", cause)}
	}
	return err
}

// verify runs the verifier over records from read and prints its report;
// a violation exits 4. segmentsOnly, when set, says whether read got one
// tenant's segments only (no checkpoints).
func verify(read func(func([]byte) error) error, opts audit.VerifyOptions, openOK bool, segmentsOnly *bool) error {
	v, err := audit.NewVerifierWith(opts)
	if err != nil {
		return err
	}
	start := time.Now()
	pr := startProgress(stderr, "audit verify", nil)
	defer pr.stop()
	if err := read(func(b []byte) error { v.Add(b); pr.add(1); return nil }); err != nil {
		return err
	}
	pr.stop()
	rep := v.Finish(openOK)
	if rep.Violations == nil {
		rep.Violations = []audit.Violation{}
	}
	if rep.Heads == nil {
		rep.Heads = []audit.NodeHead{}
	}
	if rep.UnattestedNodes == nil {
		rep.UnattestedNodes = []audit.NodeUnattested{}
	}
	el := time.Since(start)
	rate := float64(rep.Events+rep.Checkpoints) / max(el.Seconds(), 1e-9)
	out := map[string]any{
		"ok": rep.OK(), "events": rep.Events, "turns": rep.Turns, "closed_turns": rep.Closed, "policy_chains": rep.PolicyChains,
		"checkpoints": rep.Checkpoints, "events_covered": rep.Covered, "trust": rep.Trust, "nodes": rep.Heads,
		"events_unattested": rep.Unattested, "unattested": rep.UnattestedNodes,
		"violations": rep.Violations, "events_per_second": int64(rate), "elapsed": el.String(),
	}
	switch {
	case segmentsOnly != nil && *segmentsOnly:
		out["warning"] = "read as a reader of tenant " + opts.Tenant + ": its segments only, without the nodes' checkpoints (which only a reader of every tenant may read): chains, the catalogue join and calls are checked; no event is attested, so deleting a whole turn or a turn's tail is not detectable here"
	case rep.Trust == audit.TrustUnattested:
		out["warning"] = fmt.Sprintf("%d event(s) are attested by no checkpoint (see unattested): events of the last checkpoint interval of a running node, of a node without checkpoints, or inserted; a trail of stopped nodes is all attested (verify it with --unattested-ok=false)", rep.Unattested)
	case rep.Trust == audit.TrustEmbedded && rep.Checkpoints > 0:
		out["warning"] = "checkpoint signatures were checked against the keys the checkpoints carry: this proves the trail consistent with itself, not that the nodes wrote it; pass --trust with the nodes' public keys (node audit keys --local on each node)"
	case rep.Checkpoints == 0 && rep.Events > 0:
		out["warning"] = "no checkpoints in the trail (yet): nodes publish one every 5s while events are written, and when they stop; until then deleting a whole turn or a turn's tail is not detectable (docs/audit.md)"
	}
	if err := printJSON(out); err != nil {
		return err
	}
	if !rep.OK() {
		return violated{fmt.Errorf("%d violation(s); first: %s", len(rep.Violations), rep.Violations[0])}
	}
	return nil
}

type violated struct{ error }

func (violated) ExitCode() int { return 4 }

// keyInfo is one public key `node audit keys` prints; --trust reads the
// same JSON.
type keyInfo struct {
	Node      string `json:"node"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	// Source is "local" (the key file: what to trust) or "stream" (seen
	// in checkpoints: what the stream claims).
	Source      string  `json:"source"`
	File        string  `json:"file,omitempty"`
	Checkpoints int     `json:"checkpoints,omitempty"`
	FirstSeq    *uint64 `json:"first_seq,omitempty"`
	LastSeq     *uint64 `json:"last_seq,omitempty"`
}

// printKeys prints the local node's public key (from its key file) and,
// when read is set, every key the stream's checkpoints carry.
func printKeys(c *conn, keyFile string, read func(func([]byte) error) error) error {
	var keys []keyInfo
	node := ""
	if keyFile == "" {
		cfg, err := c.cfg.load()
		if err != nil {
			return err
		}
		if cfg != nil {
			keyFile, node = cmp.Or(cfg.Audit.KeyFile, auditstore.DefaultKeyFile(cfg.Node.DataDir)), cfg.Node.ID
		}
	}
	if keyFile != "" {
		key, err := audit.ReadPrivateKey(keyFile)
		switch {
		case err == nil:
			pub := key.Public().(ed25519.PublicKey)
			keys = append(keys, keyInfo{Node: node, KeyID: audit.KeyID(pub), PublicKey: hex.EncodeToString(pub), Source: "local", File: keyFile})
		case !errors.Is(err, fs.ErrNotExist) || read == nil:
			return err
		}
	}
	if read != nil {
		seen := map[[2]string]int{}
		if err := read(func(b []byte) error {
			if !audit.IsCheckpoint(b) {
				return nil
			}
			p, err := audit.ParseCheckpoint(b)
			if err != nil {
				return nil // verify reports it
			}
			pub, err := p.PublicKeyBytes()
			if err != nil || p.VerifySignature(pub) != nil {
				return nil
			}
			k := [2]string{p.Node, p.KeyID}
			i, ok := seen[k]
			if !ok {
				i = len(keys)
				seen[k] = i
				keys = append(keys, keyInfo{Node: p.Node, KeyID: p.KeyID, PublicKey: p.PublicKey, Source: "stream", FirstSeq: &p.Seq})
			}
			keys[i].Checkpoints++
			keys[i].LastSeq = &p.Seq
			return nil
		}); err != nil {
			return err
		}
	}
	slices.SortStableFunc(keys, func(a, b keyInfo) int { return strings.Compare(a.Source, b.Source) })
	if keys == nil {
		keys = []keyInfo{}
	}
	return printJSON(map[string]any{
		"keys": keys,
		"note": `trust "local" keys, read on each node (node audit keys --local); "stream" keys are what checkpoints claim`,
	})
}

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
