package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

var policySubcommands = policy.Ops()

const policyUsage = `usage: node policy SUBCOMMAND [flags] [arguments]

  get KEY             one key's value, revision and author (YAML; --json)
  put FILE            write a key from a file as get prints it (its key,
                      revision and value): refused policy_conflict, with the
                      current revision, if the key changed since
  put KEY FILE --revision N
                      write KEY from a YAML or JSON value file, if KEY is
                      still at revision N (0: it must not exist)
  delete KEY --revision N
                      remove KEY if it is still at revision N
  list                every key with its revision, author and content hash
  export [--out FILE] the whole policy as cluster.yaml's policy sections (YAML; --json)
  diff FILE           what importing FILE (cluster.yaml or an export) would change,
                      and the bucket revision it was computed at
  import FILE [--since REV]
                      make the policy FILE's policy sections; with --since (the
                      revision diff printed) only if nothing changed after it

Keys: grants.<tenant>.<principal>, credentials.<tenant>.<profile>,
providers.<id>, identities.<name>. The identity is an admin (--as admin by
default; docs/security.md). Every subcommand takes --config FILE, --nats URL,
--prefix P, --creds FILE, --as NAME, --inbox-prefix P and --timeout D.
Results are JSON on stdout (get and export: YAML unless --json). A refusal
prints {"refused": CODE, "message": ..., "current_revision": N} and exits 3.
Run "node policy SUBCOMMAND -h" for its flags.`

// keyFile is what `policy get` prints and `policy put FILE` reads.
type keyFile struct {
	Key      string    `yaml:"key" json:"key"`
	Revision uint64    `yaml:"revision" json:"revision"`
	By       string    `yaml:"by,omitempty" json:"by,omitempty"`
	At       time.Time `yaml:"at,omitempty" json:"at,omitzero"`
	Value    any       `yaml:"value" json:"value"`
}

func policyCmd(args []string) error {
	sub, args, err := group("policy", policyUsage, args, policySubcommands...)
	if err != nil {
		return err
	}
	synopsis := map[string]string{
		policy.OpGet: "KEY [--json] [flags]", policy.OpPut: "FILE | KEY FILE --revision N [flags]", policy.OpDelete: "KEY --revision N [flags]",
		policy.OpList: "[flags]", policy.OpExport: "[--out FILE] [--json] [flags]", policy.OpDiff: "FILE [flags]", policy.OpImport: "FILE [--since REV] [flags]",
	}[sub]
	fs := newFlags("policy "+sub, synopsis, "")
	var c conn
	c.flags(fs, false)
	c.as = config.DefaultAdminIdentity
	fs.Lookup("as").DefValue = config.DefaultAdminIdentity
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the node's answer")
	var asJSON bool
	var revision, since string
	var out string
	switch sub {
	case policy.OpGet, policy.OpExport:
		fs.BoolVar(&asJSON, "json", false, "print JSON instead of YAML")
	}
	switch sub {
	case policy.OpPut, policy.OpDelete:
		fs.StringVar(&revision, "revision", "", "the revision the key must still be at (0: it must not exist)")
	case policy.OpImport:
		fs.StringVar(&since, "since", "", "refuse if the policy changed after this revision (the one diff printed)")
	case policy.OpExport:
		fs.StringVar(&out, "out", "", "write the document to this file instead of stdout")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	want := map[string][]int{policy.OpGet: {1}, policy.OpPut: {1, 2}, policy.OpDelete: {1}, policy.OpList: {0}, policy.OpExport: {0}, policy.OpDiff: {1}, policy.OpImport: {1}}[sub]
	if n := fs.NArg(); n != want[0] && (len(want) == 1 || n != want[1]) {
		return usageError{fmt.Errorf("policy %s: %d arguments (node policy %s -h for usage)", sub, n, sub)}
	}
	req := policy.Request{JSON: asJSON}
	uint := func(name, s string, required bool) (uint64, error) {
		if s == "" {
			if required {
				return 0, usageError{fmt.Errorf("policy %s needs --%s (the key's revision, as get or list prints it; 0 for a new key)", sub, name)}
			}
			return 0, nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, usageError{fmt.Errorf("--%s %q is not a revision", name, s)}
		}
		return v, nil
	}
	switch sub {
	case policy.OpGet:
		req.Key = fs.Arg(0)
	case policy.OpDelete:
		req.Key = fs.Arg(0)
		if req.Revision, err = uint("revision", revision, true); err != nil {
			return err
		}
	case policy.OpPut:
		if fs.NArg() == 1 {
			if req, err = readKeyFile(fs.Arg(0)); err != nil {
				return err
			}
			if revision != "" {
				return usageError{errors.New("policy put FILE takes its revision from the file; --revision is for put KEY FILE")}
			}
			break
		}
		req.Key = fs.Arg(0)
		if req.Revision, err = uint("revision", revision, true); err != nil {
			return err
		}
		b, err := readBounded(fs.Arg(1), policy.MaxValueBytes)
		if err != nil {
			return err
		}
		req.Value = string(b)
	case policy.OpDiff, policy.OpImport:
		if req.Since, err = uint("since", since, false); err != nil {
			return err
		}
		if _, err := readBounded(fs.Arg(0), policy.MaxDocumentBytes); err != nil {
			return err
		}
		// A cluster.yaml or an export, read as the node reads its file
		// (validated, relative paths taken from the file's directory):
		// only its policy sections are sent.
		fc, err := config.Load(fs.Arg(0))
		if err != nil {
			return err
		}
		text, err := policy.FromConfig(fc).Marshal(true)
		if err != nil {
			return err
		}
		req.Document = string(text)
	}
	nc, err := c.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep, err := policy.NewClient(nc, c.prefix, *timeout).Do(ctx, sub, req)
	if err != nil {
		return policyRefusal(err)
	}
	switch sub {
	case policy.OpGet:
		kf := keyFile{Key: rep.Entry.Key, Revision: rep.Entry.Revision, By: rep.Entry.By, At: rep.Entry.At}
		k, err := policy.ParseKey(rep.Entry.Key)
		if err != nil {
			return err
		}
		if kf.Value, err = policy.ItemOf(k, rep.Entry.Value); err != nil {
			return err
		}
		if asJSON {
			kf.Value = json.RawMessage(rep.Entry.Value)
		}
		return printDoc(kf, asJSON)
	case policy.OpExport:
		if out != "" {
			if err := os.WriteFile(out, []byte(rep.Document), 0o600); err != nil {
				return err
			}
			return printJSON(map[string]any{"out": out, "revision": rep.Revision})
		}
		_, err := fmt.Fprint(stdout, rep.Document)
		if !asJSON {
			fmt.Fprintf(stderr, "# at revision %d\n", rep.Revision)
		}
		return err
	case policy.OpDiff:
		for _, ch := range rep.Changes {
			fmt.Fprintf(stderr, "%s %s (revision %d)\n", map[policy.Op]string{policy.Add: "+", policy.Change: "~", policy.Remove: "-"}[ch.Op], ch.Key, ch.Revision)
		}
		fmt.Fprintf(stderr, "%d changes at revision %d: import with --since %d to apply exactly these\n", len(rep.Changes), rep.Revision, rep.Revision)
		return printJSON(map[string]any{"revision": rep.Revision, "changes": orEmpty(rep.Changes)})
	case policy.OpImport:
		return printJSON(map[string]any{"changes": orEmpty(rep.Changes)})
	case policy.OpDelete:
		return printJSON(map[string]any{"key": req.Key, "deleted_at": rep.Revision})
	case policy.OpList:
		return printJSON(map[string]any{"revision": rep.Revision, "entries": orEmpty(rep.Entries)})
	}
	return printJSON(rep.Entry)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// readKeyFile reads a file as `policy get` prints it.
func readKeyFile(path string) (policy.Request, error) {
	b, err := readBounded(path, policy.MaxValueBytes+4096)
	if err != nil {
		return policy.Request{}, err
	}
	var kf keyFile
	if err := yaml.UnmarshalWithOptions(b, &kf, yaml.Strict()); err != nil {
		return policy.Request{}, fmt.Errorf("%s: not a file as `node policy get` prints it (key, revision, value): %w", path, err)
	}
	if kf.Key == "" || kf.Value == nil {
		return policy.Request{}, fmt.Errorf("%s: needs key and value (as `node policy get` prints them)", path)
	}
	v, err := json.Marshal(kf.Value)
	if err != nil {
		return policy.Request{}, fmt.Errorf("%s: value: %w", path, err)
	}
	return policy.Request{Key: kf.Key, Revision: kf.Revision, Value: string(v)}, nil
}

func readBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > int64(limit) {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err == nil && len(b) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return b, err
}

func printDoc(v any, asJSON bool) error {
	if asJSON {
		return printJSON(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

// policyRefusal prints a refusal as JSON and exits 3; other errors fail.
func policyRefusal(err error) error {
	var re *reason.Error
	if !errors.As(err, &re) {
		return err
	}
	out := map[string]any{"refused": re.Code, "message": re.Message}
	var conflict *policy.ConflictReply
	if errors.As(err, &conflict) {
		out["current_revision"] = conflict.Current
	}
	_ = printJSON(out)
	return refused{err}
}
