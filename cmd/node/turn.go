package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
)

// savedTurn is .sharedos/turn.json: the turn the next commands act on.
type savedTurn struct {
	Handle  client.Handle `json:"handle"`
	LeaseID string        `json:"lease_id"`
	Access  client.Access `json:"access"`
}

const statePath = ".sharedos/turn.json"

func turnCmd(args []string) error {
	if len(args) == 0 {
		return errors.New("turn needs a subcommand: open, list, namespaces, call, ns-set, close")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("turn "+sub, flag.ContinueOnError)
	var c conn
	c.flags(fs)
	turnFlag := fs.String("turn", "", "turn handle node/turn (default: the saved turn)")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	var tenant, principal, credential, ns, attrs string
	if sub == "open" {
		fs.StringVar(&tenant, "tenant", "", "tenant (required)")
		fs.StringVar(&principal, "principal", "", "principal (required)")
		fs.StringVar(&credential, "credential", "", "credential profile id")
		fs.StringVar(&ns, "ns", "", "enabled namespaces, comma separated")
		fs.StringVar(&attrs, "attr", "", "attributes k=v,k=v")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl := client.New(nc, &client.Options{Prefix: c.prefix})
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if sub == "open" {
		if tenant == "" || principal == "" {
			return errors.New("turn open needs --tenant and --principal")
		}
		access := client.Access{Tenant: tenant, Principal: principal, Credential: credential, Namespaces: splitList(ns)}
		if attrs != "" {
			access.Attributes = map[string]string{}
			for _, kv := range splitList(attrs) {
				k, v, _ := strings.Cut(kv, "=")
				access.Attributes[k] = v
			}
		}
		t, err := cl.Open(ctx, access)
		if err != nil {
			return err
		}
		st := savedTurn{Handle: t.Handle, LeaseID: t.LeaseID, Access: t.Access()}
		if err := save(st); err != nil {
			return err
		}
		return printJSON(map[string]any{"turn": t.Handle.String(), "node": t.Handle.Node, "turn_id": t.Handle.TurnID, "lease_id": t.LeaseID, "saved_to": statePath})
	}

	st, err := load()
	if err != nil {
		return err
	}
	if *turnFlag != "" {
		h, err := client.ParseHandle(*turnFlag)
		if err != nil {
			return err
		}
		st.Handle = h
	}
	t := cl.Resume(st.Handle, st.LeaseID, st.Access)
	switch sub {
	case "list":
		rep, err := t.ListTools(ctx)
		if err != nil {
			return refusal(err)
		}
		type tool struct {
			Alias       string          `json:"alias"`
			Identity    string          `json:"identity"`
			Revision    string          `json:"revision"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		out := struct {
			CatalogHash string `json:"catalog_hash"`
			Tools       []tool `json:"tools"`
		}{CatalogHash: rep.CatalogHash, Tools: []tool{}}
		for _, tl := range rep.Tools {
			out.Tools = append(out.Tools, tool{tl.Alias, tl.Provider + "/" + tl.Name, tl.Revision[:12], tl.Description, tl.InputSchema})
		}
		return printJSON(out)
	case "namespaces":
		ns, err := t.ListNamespaces(ctx)
		if err != nil {
			return refusal(err)
		}
		return printJSON(ns)
	case "ns-set":
		if fs.NArg() != 1 {
			return errors.New("turn ns-set needs one argument: a,b,c")
		}
		if err := t.UpdateNamespaces(ctx, splitList(fs.Arg(0))); err != nil {
			return refusal(err)
		}
		return printJSON(map[string]any{"namespaces": splitList(fs.Arg(0))})
	case "call":
		if fs.NArg() < 1 || fs.NArg() > 2 {
			return errors.New("turn call needs ALIAS and optional JSON arguments")
		}
		args := []byte("{}")
		if fs.NArg() == 2 {
			args = []byte(fs.Arg(1))
			if !json.Valid(args) {
				return errors.New("arguments are not valid JSON")
			}
		}
		rep, err := t.Invoke(ctx, fs.Arg(0), args)
		if err != nil {
			return refusal(err)
		}
		out := map[string]any{"call_id": rep.CallID, "catalog_hash": rep.CatalogHash, "tool": rep.Provider + "/" + rep.Name,
			"text": rep.Text, "is_error": rep.IsError, "duration_us": rep.DurationUs}
		if len(rep.Structured) > 0 {
			out["structured"] = json.RawMessage(rep.Structured)
		}
		return printJSON(out)
	case "close":
		if err := t.Close(ctx); err != nil {
			return refusal(err)
		}
		_ = os.Remove(statePath)
		return printJSON(map[string]any{"closed": st.Handle.String()})
	default:
		return fmt.Errorf("unknown turn subcommand %q", sub)
	}
}

// refused is a refusal printed as JSON with exit code 3, so scripts can
// tell "the kernel said no" (3) from "the command failed" (1).
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }
func (r refused) ExitCode() int { return 3 }

func refusal(err error) error {
	var re *reason.Error
	if errors.As(err, &re) {
		_ = printJSON(map[string]any{"refused": re.Code, "message": re.Message})
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

func save(st savedTurn) error {
	if err := os.MkdirAll(filepath.Dir(statePath), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath, b, 0o600)
}

func load() (savedTurn, error) {
	var st savedTurn
	b, err := os.ReadFile(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return st, errors.New("no saved turn: run `node turn open` first, or pass --turn node/turn")
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}
