package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/fsutil"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

const turnUsage = `usage: node turn SUBCOMMAND [flags] [arguments]

  open --tenant T --principal P [--credential C] [--ns a,b] [--attr k=v,k=v] [--attach NODE/TURN]
                      open a turn (or join an open one) and save it
                      (.sharedos/turns.json) as the default
  list [--for PROFILE [--budget N] [--encoding E]]
                      the tools the turn lists now, with its catalog_hash; with
                      --for, as a model API takes them (docs/model-facing.md)
  search QUERY --for PROFILE [--k N] [--budget N] [--encoding E]
                      the turn's visible tools that rank best for QUERY
  namespaces          the turn's namespaces: enabled or not, and how many tools each holds
  call ALIAS [JSON] [--for PROFILE]
                      call a tool (alias: invoke); JSON arguments default to {};
                      with --for, ALIAS is a name a listing for PROFILE showed
  ns-set a,b          replace the enabled namespaces
  close               release the turn's lease and forget it
  token [--ttl 10m] [--out FILE]
                      mint an execution token: a model sandbox reaches the
                      turn's tools over MCP with it (node mcp --token-file FILE)
  saved               the turns saved here; the last one is the default

Every subcommand takes --config FILE, --nats URL, --prefix P, --creds FILE,
--as NAME, --inbox-prefix P and --timeout D (saved contacts nothing: it only
checks --config).
Every subcommand but open and saved acts on the most recently opened saved
turn, or on --turn NODE/TURN (or just the turn id) naming another saved one.
Several turns can be open at once: each open adds one; close removes it.
Data is printed to stdout as one JSON object; errors and notes go to stderr.
A refusal prints {"refused": CODE, "message": ...} (with "call_id",
"catalog_hash" and "dispatched" for a decided call) and exits 3.
Run "node turn SUBCOMMAND -h" for its flags.`

// savedTurn is a turn opened from this directory: what its next commands need.
type savedTurn struct {
	Handle  client.Handle `json:"handle"`
	LeaseID string        `json:"lease_id"`
	Access  client.Access `json:"access"`
	Opened  time.Time     `json:"opened,omitzero"`
}

// turnStore is .sharedos/turns.json: the saved turns, oldest first; the
// last one is the default.
type turnStore struct {
	Turns []savedTurn `json:"turns"`
}

var (
	statePath       = filepath.Join(".sharedos", "turns.json")
	legacyStatePath = filepath.Join(".sharedos", "turn.json") // one saved turn, before turns.json
)

// turnSubcommands are node turn's subcommands ("invoke" is "call").
var turnSubcommands = []string{"open", "list", "search", "namespaces", "call", "invoke", "ns-set", "close", "token", "saved"}

func turnCmd(args []string) error {
	sub, args, err := group("turn", turnUsage, args, turnSubcommands...)
	if err != nil {
		return err
	}
	if sub == "invoke" {
		sub = "call"
	}
	synopsis := map[string]string{
		"open":       "--tenant T --principal P [--credential C] [--ns a,b] [--attr k=v,k=v] [--attach NODE/TURN] [flags]",
		"list":       "[--for PROFILE [--budget N] [--encoding E]] [--turn NODE/TURN] [flags]",
		"search":     "QUERY --for PROFILE [--k N] [--budget N] [--encoding E] [--turn NODE/TURN] [flags]",
		"namespaces": "[--turn NODE/TURN] [flags]",
		"call":       "ALIAS [JSON] [--for PROFILE] [--turn NODE/TURN] [flags]",
		"ns-set":     "a,b,... [--turn NODE/TURN] [flags]",
		"close":      "[--turn NODE/TURN] [flags]",
		"saved":      "[flags]",
		"token":      "[--ttl 10m] [--out FILE] [--turn NODE/TURN] [flags]",
	}[sub]
	about := map[string]string{
		"open":       "Opens a turn and saves its handle and lease in " + statePath + "; it becomes the\nturn the other commands act on. Turns opened before stay saved (node turn saved).\nWith --attach, joins a turn already open (opened by another process, under the\nsame tenant, principal, credential and attributes) with a lease of its own.",
		"list":       "Prints the tools the turn lists now and its catalog_hash. With --for, the listing\nas a model API takes it (openai, openai-strict, anthropic, anthropic-strict, gemini,\ngemini-jsonschema, mcp): the exact bytes to send, the names to call, the\nprojection_hash, the tokens, and every tool left out and why (also on stderr).",
		"search":     "Prints the turn's visible tools that rank best for QUERY, as a model API takes them\n(--for PROFILE): a search that never leaves the turn's held catalogue.",
		"namespaces": "Prints the turn's namespaces: enabled or not, and how many held tools each has.",
		"call":       "Calls the tool the turn lists as ALIAS with JSON arguments (default {}); with\n--for PROFILE, ALIAS is a name a listing for that profile showed.\nExit 3 when the kernel refuses the call.",
		"ns-set":     "Replaces the turn's enabled namespaces.",
		"close":      "Releases the turn's lease (the turn closes when its last lease goes) and forgets it.",
		"saved":      "Prints the turns saved in " + statePath + "; the last one is the default.",
		"token":      "Mints an execution token for the turn: a model sandbox reaches the turn's tools\nover MCP with it (at the printed url, or through node mcp --token-file FILE).\nWith --out, the token is written to FILE (mode 0600) and not printed.",
	}[sub]
	fs := newFlags("turn "+sub, synopsis, about)
	var c conn
	var timeout *time.Duration
	var turnSel string
	// Every subcommand takes the common flags, saved included: a script
	// passes the same flags to each.
	c.flags(fs, false)
	timeout = fs.Duration("timeout", 30*time.Second, "request timeout")
	if sub != "open" && sub != "saved" {
		fs.StringVar(&turnSel, "turn", "", "the saved turn to act on: NODE/TURN or the turn id (default: the last opened)")
	}
	var tenant, principal, credential, ns, attrs, attach string
	if sub == "open" {
		fs.StringVar(&tenant, "tenant", "", "tenant (required)")
		fs.StringVar(&principal, "principal", "", "principal (required)")
		fs.StringVar(&credential, "credential", "", "credential profile id")
		fs.StringVar(&ns, "ns", "", "enabled namespaces, comma separated")
		fs.StringVar(&attrs, "attr", "", "attributes k=v,k=v")
		fs.StringVar(&attach, "attach", "", "join this open turn (NODE/TURN) instead of opening a new one")
	}
	var forProfile, encoding string
	var budget, k int
	switch sub {
	case "list", "search", "call":
		fs.StringVar(&forProfile, "for", "", "model profile: openai, openai-strict, anthropic, anthropic-strict, gemini, gemini-jsonschema, mcp")
	}
	switch sub {
	case "list", "search":
		fs.IntVar(&budget, "budget", 0, "with --for: at most this many tokens (tools past it are left out, never cut)")
		fs.StringVar(&encoding, "encoding", "", "with --for: the OpenAI encoding tokens are counted in (o200k_base, cl100k_base)")
	}
	if sub == "search" {
		fs.IntVar(&k, "k", 0, "at most this many tools (0: every tool that matches)")
	}
	ttl, tokenOut := turnTokenFlags(fs, sub)
	if err := parse(fs, args); err != nil {
		return err
	}
	want := map[string][2]int{"call": {1, 2}, "ns-set": {1, 1}, "search": {1, 1}}[sub]
	if n := fs.NArg(); n < want[0] || n > want[1] {
		switch sub {
		case "call":
			return usageError{errors.New("turn call needs ALIAS and optional JSON arguments (node turn call -h for usage)")}
		case "ns-set":
			return usageError{errors.New("turn ns-set needs one argument: a,b,c (node turn ns-set -h for usage)")}
		case "search":
			return usageError{errors.New("turn search needs one argument, the query (node turn search -h for usage)")}
		default:
			return usageError{fmt.Errorf("turn %s takes no arguments, got %q (node turn %s -h for usage)", sub, fs.Args(), sub)}
		}
	}

	if err := c.resolve(); err != nil { // a bad --config is reported first
		return err
	}
	store, err := loadStore()
	if err != nil {
		return err
	}
	if sub == "saved" {
		type entry struct {
			Turn      string    `json:"turn"`
			Tenant    string    `json:"tenant"`
			Principal string    `json:"principal"`
			Opened    time.Time `json:"opened,omitzero"`
			Default   bool      `json:"default"`
		}
		out := []entry{}
		for i, st := range store.Turns {
			out = append(out, entry{st.Handle.String(), st.Access.Tenant, st.Access.Principal, st.Opened, i == len(store.Turns)-1})
		}
		return printJSON(map[string]any{"turns": out, "file": statePath})
	}
	var body []byte
	if sub == "call" {
		body = []byte("{}")
		if fs.NArg() == 2 {
			body = []byte(fs.Arg(1))
			if !json.Valid(body) {
				return usageError{errors.New("turn call: the arguments are not valid JSON")}
			}
		}
	}
	var access client.Access
	var attachTo client.Handle
	if sub == "open" {
		if tenant == "" || principal == "" {
			return usageError{errors.New("turn open needs --tenant and --principal (node turn open -h for usage)")}
		}
		access = client.Access{Tenant: tenant, Principal: principal, Credential: credential, Namespaces: splitList(ns)}
		if attach != "" {
			if attachTo, err = client.ParseHandle(attach); err != nil {
				return usageError{fmt.Errorf("turn open: --attach %q is not NODE/TURN (e.g. node-1/node-1.abc)", attach)}
			}
		}
		for _, kv := range splitList(attrs) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usageError{fmt.Errorf("turn open: --attr %q is not k=v", kv)}
			}
			if access.Attributes == nil {
				access.Attributes = map[string]string{}
			}
			access.Attributes[k] = v
		}
	}
	idx := -1
	if sub != "open" {
		if idx, err = store.find(turnSel); err != nil {
			return err
		}
	}

	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	// Take any reply the server can carry (the node bounds its replies by
	// the same max payload).
	lim := messages.DefaultLimits()
	lim.MaxBytes = max(8<<20, int(nc.MaxPayload()))
	cl := client.New(nc, &client.Options{Prefix: c.prefix, Limits: lim})
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if sub == "open" {
		var t *client.Turn
		if attach != "" {
			t, err = cl.Attach(ctx, attachTo, access)
		} else {
			t, err = cl.Open(ctx, access)
		}
		if err != nil {
			return refusal(err, "")
		}
		store.Turns = append(store.Turns, savedTurn{Handle: t.Handle, LeaseID: t.LeaseID, Access: t.Access(), Opened: time.Now().UTC()})
		if err := store.save(); err != nil {
			return err
		}
		if others := len(store.Turns) - 1; others > 0 {
			fmt.Fprintf(stderr, "node: %s is now the default turn; %d turn(s) saved before stay saved, and open unless closed or idled out (node turn saved lists them; node turn close --turn NODE/TURN closes one)\n",
				t.Handle, others)
		}
		return printJSON(map[string]any{"turn": t.Handle.String(), "node": t.Handle.Node, "turn_id": t.Handle.TurnID,
			"lease_id": t.LeaseID, "attached": t.Attached, "saved_to": statePath, "saved_turns": len(store.Turns)})
	}

	st := store.Turns[idx]
	h := st.Handle.String()
	t := cl.Resume(st.Handle, st.LeaseID, st.Access)
	// gone forgets a saved turn the node no longer has.
	gone := func(err error) error {
		if errors.Is(err, reason.ErrTurnClosed) || errors.Is(err, reason.ErrTurnNotFound) {
			store.Turns = append(store.Turns[:idx], store.Turns[idx+1:]...)
			if serr := store.save(); serr == nil {
				fmt.Fprintf(stderr, "node: %s is no longer open on its node; removed it from %s\n", h, statePath)
			}
		}
		return refusal(err, h)
	}
	if (sub == "search" || budget != 0 || encoding != "") && forProfile == "" {
		return usageError{fmt.Errorf("turn %s: --budget, --encoding and search need --for PROFILE", sub)}
	}
	switch sub {
	case "search":
		if _, err := printModelListing(ctx, t, h, client.ModelQuery{Profile: forProfile, Budget: budget, Encoding: encoding, Query: fs.Arg(0), K: k}); err != nil {
			return gone(err)
		}
		return nil
	case "list":
		if forProfile != "" {
			if _, err := printModelListing(ctx, t, h, client.ModelQuery{Profile: forProfile, Budget: budget, Encoding: encoding}); err != nil {
				return gone(err)
			}
			return nil
		}
		rep, err := t.ListTools(ctx)
		if err != nil {
			return gone(err)
		}
		type tool struct {
			Alias       string          `json:"alias"`
			Identity    string          `json:"identity"`
			Revision    string          `json:"revision"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		type degraded struct {
			Provider string `json:"provider"`
			Status   string `json:"status"`
			Code     string `json:"code,omitempty"`
			Message  string `json:"message,omitempty"`
		}
		out := struct {
			Turn        string `json:"turn"`
			CatalogHash string `json:"catalog_hash"`
			Tools       []tool `json:"tools"`
			// Degraded: the providers this turn's resolution did not get
			// whole (failed, or partial with the tools they refused and why).
			Degraded []degraded `json:"degraded,omitempty"`
		}{Turn: h, CatalogHash: rep.CatalogHash, Tools: []tool{}}
		for _, tl := range rep.Tools {
			out.Tools = append(out.Tools, tool{tl.Alias, tl.Provider + "/" + tl.Name, tl.Revision[:min(12, len(tl.Revision))], tl.Description, tl.InputSchema})
		}
		for _, d := range rep.Degraded {
			out.Degraded = append(out.Degraded, degraded{d.Provider, d.Status, d.Code, d.Message})
			fmt.Fprintf(stderr, "degraded: provider %s %s %s: %s\n", d.Provider, d.Status, d.Code, d.Message)
		}
		return printJSON(out)
	case "namespaces":
		nss, err := t.ListNamespaces(ctx)
		if err != nil {
			return gone(err)
		}
		type namespace struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
			Tools   int    `json:"tools"`
		}
		out := []namespace{}
		for _, n := range nss {
			out = append(out, namespace{n.Name, n.Enabled, n.Tools})
		}
		return printJSON(map[string]any{"turn": h, "namespaces": out})
	case "ns-set":
		enabled := splitList(fs.Arg(0))
		if err := t.UpdateNamespaces(ctx, enabled); err != nil {
			return gone(err)
		}
		store.Turns[idx].Access.Namespaces = enabled
		if err := store.save(); err != nil {
			return err
		}
		if enabled == nil {
			enabled = []string{}
		}
		return printJSON(map[string]any{"turn": h, "enabled": enabled})
	case "call":
		var rep *messages.InvokeReply
		if forProfile != "" {
			rep, err = t.InvokeAs(ctx, forProfile, fs.Arg(0), body)
		} else {
			rep, err = t.Invoke(ctx, fs.Arg(0), body)
		}
		if err != nil {
			return gone(err)
		}
		out := map[string]any{"turn": h, "call_id": rep.CallID, "catalog_hash": rep.CatalogHash, "tool": rep.Provider + "/" + rep.Name,
			"text": rep.Text, "is_error": rep.IsError, "duration_us": rep.DurationUs}
		if len(rep.Structured) > 0 {
			out["structured"] = json.RawMessage(rep.Structured)
		}
		return printJSON(out)
	case "token":
		return turnToken(ctx, t, h, *ttl, *tokenOut, gone)
	case "close":
		if err := t.Close(ctx); err != nil && !errors.Is(err, reason.ErrTurnClosed) && !errors.Is(err, reason.ErrTurnNotFound) {
			return refusal(err, h)
		}
		store.Turns = append(store.Turns[:idx], store.Turns[idx+1:]...)
		if err := store.save(); err != nil {
			return err
		}
		out := map[string]any{"turn": h, "closed": h, "saved_turns": len(store.Turns)}
		if n := len(store.Turns); n > 0 {
			out["default"] = store.Turns[n-1].Handle.String()
		}
		return printJSON(out)
	}
	return fmt.Errorf("turn %s: not handled", sub) // unreachable: group checked sub
}

// refused is a refusal printed as JSON with exit code 3, so scripts can
// tell "the kernel said no" (3) from "the command failed" (1).
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }
func (r refused) Unwrap() error { return r.err }
func (r refused) ExitCode() int { return 3 }

func refusal(err error, turn string) error {
	var re *reason.Error
	if errors.As(err, &re) {
		out := map[string]any{"refused": re.Code, "message": re.Message}
		if turn != "" {
			out["turn"] = turn
		}
		// A decided call's refusal names it, as the audit stream does.
		var ce *client.CallError
		if errors.As(err, &ce) {
			if ce.Reply.CallID != "" {
				out["call_id"], out["catalog_hash"] = ce.Reply.CallID, ce.Reply.CatalogHash
			}
			if ce.Reply.Dispatched != nil {
				out["dispatched"] = *ce.Reply.Dispatched
			}
		}
		_ = printJSON(out)
		return refused{err}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// find returns the index of the saved turn sel names (NODE/TURN or the
// turn id), or of the default (last) one when sel is empty.
func (s *turnStore) find(sel string) (int, error) {
	if sel != "" && strings.Contains(sel, "/") {
		if _, err := client.ParseHandle(sel); err != nil {
			return 0, usageError{fmt.Errorf("--turn %q is not NODE/TURN (e.g. node-1/node-1.abc), nor a turn id", sel)}
		}
	}
	if len(s.Turns) == 0 {
		if sel != "" {
			return 0, fmt.Errorf("turn %s is not saved in %s (no turn is): a turn's commands need the lease `node turn open` saved", sel, statePath)
		}
		return 0, errors.New("no saved turn: run `node turn open` first")
	}
	if sel == "" {
		return len(s.Turns) - 1, nil
	}
	var names []string
	for i := len(s.Turns) - 1; i >= 0; i-- {
		h := s.Turns[i].Handle
		if h.String() == sel || h.TurnID == sel {
			return i, nil
		}
		names = append(names, h.String())
	}
	return 0, fmt.Errorf("turn %s is not saved in %s (saved: %s): a turn's commands need the lease `node turn open` saved",
		sel, statePath, strings.Join(names, ", "))
}

func (s *turnStore) save() error {
	if len(s.Turns) == 0 {
		if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.Replace(statePath, b)
}

// loadStore reads the saved turns; a turn saved by an older CLI in
// .sharedos/turn.json is taken over.
func loadStore() (*turnStore, error) {
	s := &turnStore{}
	b, err := os.ReadFile(statePath)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, s); err != nil {
			return nil, fmt.Errorf("%s: %w", statePath, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if b, err := os.ReadFile(legacyStatePath); err == nil {
		var st savedTurn
		if json.Unmarshal(b, &st) == nil && st.Handle.TurnID != "" {
			s.Turns = append([]savedTurn{st}, s.Turns...)
			if err := s.save(); err != nil {
				return nil, err
			}
		}
		_ = os.Remove(legacyStatePath)
	}
	return s, nil
}
