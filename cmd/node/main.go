// Command node runs a SharedOS node and drives it from a terminal.
//
//	node serve --config cluster.yaml           run a node (embedded NATS by default)
//	node turn open --tenant acme --principal ada --ns notes,text
//	node turn list | namespaces | call ALIAS 'JSON' | ns-set notes,text | close | saved | token
//	node mcp --token-file FILE                 serve a turn to a model sandbox over stdio
//	node audit tail [--tenant T] [--turn ID] [--type tool.invoked] [--from-start] [--durable NAME]
//	node audit export [--out FILE]
//	node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT] [--open-ok=false] [--unattested-ok=false]
//	node audit keys [--local] [--key FILE]
//	node policy get|put|delete|list|export|diff|import  (as an admin identity)
//	node contracts list|diff|accept|reject              (as an approver identity)
//	node approvals list|show|approve|deny               (as an approver identity)
//	node oauth login|logout|reseal                      (as an admin identity)
//	node status | identities
//	node console                               a login link to the operator console (docs/console.md)
//
// "node -h" lists every command with its own flags; "node COMMAND -h"
// prints one command's usage with every flag it takes.
//
// Output: data goes to stdout as JSON — one JSON object per command, or
// JSON lines for the streams (audit tail, audit export without --out);
// errors, warnings and notes go to stderr. Exit codes: 0 done, 1 failed,
// 2 usage error, 3 refused by the kernel (the refusal is on stdout), 4 the
// audit trail failed verification. -h or --help on any command prints its
// usage to stdout and exits 0 without contacting anything.
//
// Flags may come before or after the positional arguments (`--` ends the
// flags). Client commands find NATS from --nats, else the NATS_URL
// environment variable, else --config (default cluster.yaml; a --config
// that names a missing file is an error); the subject prefix and audit
// stream from --prefix/--stream, else the config, else the defaults.
// Relative paths in a config file are relative to the file's directory.
// `turn open` saves the turn's handle and lease in .sharedos/turns.json;
// the next commands act on the most recently opened saved turn unless
// --turn names another.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

const usage = `usage: node COMMAND [SUBCOMMAND] [flags] [arguments]

  node serve [--config cluster.yaml] [--node ID] [--log-level info] [--policy-source store]
  node turn open --tenant T --principal P [--credential C] [--ns a,b] [--attr k=v,k=v] [--attach NODE/TURN]
  node turn list | namespaces | call ALIAS [JSON] | invoke ALIAS [JSON] | ns-set a,b | close   [--turn NODE/TURN]
  node turn list | call ALIAS [JSON] | invoke ALIAS [JSON]   --for PROFILE [--budget N] [--encoding E]
  node turn search QUERY --for PROFILE [--k N] [--budget N] [--encoding E] [--turn NODE/TURN]
  node turn token [--ttl 10m] [--out FILE]   [--turn NODE/TURN]
  node turn saved
  node mcp [--token-file FILE] [--url URL]
  node audit tail [--tenant T] [--turn ID] [--type TYPE,...] [--from-start] [--durable NAME]
  node audit export [--out FILE] [--tenant T] [--turn ID] [--type TYPE,...]
  node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT,...] [--open-ok=false] [--unattested-ok=false] [--tenant T] [--turn ID]
  node audit keys [--local] [--key FILE]
  node policy get KEY [--json] | put FILE | put KEY FILE --revision N | delete KEY --revision N | list
  node policy export [--out FILE] [--json] | diff FILE | import FILE [--since REV]
  node contracts list [--tenant T] [--pending] | diff TENANT/PROVIDER/TOOL
  node contracts accept|reject TENANT/PROVIDER/TOOL --revision R [--why TEXT]
  node approvals list [--tenant T] [--all] | show ID | approve ID [--why TEXT] | deny ID [--why TEXT]
  node oauth login --provider ID --tenant T --profile P [--principal NAME] [--scope S,S]
  node oauth logout --provider ID --tenant T --profile P [--principal NAME] | reseal
  node status [--http ADDR]
  node identities [--creds-dir DIR]
  node console [--node ID] [--http ADDR] [--as NAME]   print a login link to the operator console

Every turn, audit, policy, contracts, approvals and oauth command also takes --config FILE (default cluster.yaml),
--nats URL, --prefix P, --creds FILE, --as NAME and --inbox-prefix P (audit:
--stream S; turn, policy, contracts, approvals and oauth: --timeout D); status and identities take
--config, status --timeout. policy get and export print YAML (--json: JSON).
Data is printed to stdout as JSON (JSON lines for audit tail and export);
errors and notes go to stderr. Exit codes: 0 done, 1 failed, 2 usage error,
3 refused (by the kernel or the policy service), 4 audit verification failed.
NATS is found from --nats, else $NATS_URL, else --config (default cluster.yaml).
Run "node COMMAND -h" (e.g. "node turn call -h") for a command's flags.`

// command is one of node's commands: its name, what runs it, and, for a
// group (turn, audit), the subcommands it takes.
type command struct {
	name        string
	run         func(args []string) error
	subcommands []string
}

// commands are node's commands, in the order usage lists them.
var commands = []command{
	{"serve", serve, nil},
	{"turn", turnCmd, turnSubcommands},
	{"mcp", mcpCmd, nil},
	{"audit", auditCmd, auditSubcommands},
	{"policy", policyCmd, policySubcommands},
	{"contracts", contractsCmd, contractsSubcommands},
	{"approvals", approvalsCmd, approvalsSubcommands},
	{"oauth", oauthCmd, oauthSubcommands},
	{"status", statusCmd, nil},
	{"identities", identitiesCmd, nil},
	{"console", consoleCmd, nil},
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// stdout and stderr are where commands print; tests capture them.
var (
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" { // node help turn == node turn -h
			return run([]string{args[1], "-h"})
		}
		fmt.Fprintln(stdout, usage)
		return 0
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i >= 0 {
		err = commands[i].run(args[1:])
	} else {
		var names []string
		for _, c := range commands {
			names = append(names, c.name)
		}
		err = usageError{fmt.Errorf("unknown command %q (%s; node -h for usage)", args[0], strings.Join(names, ", "))}
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	}
	fmt.Fprintln(stderr, "node:", err)
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

type exitCoder interface{ ExitCode() int }

// errHelp: usage was printed on request; exit 0.
var errHelp = errors.New("help shown")

// usageError is a command line that does not parse; exit 2.
type usageError struct{ error }

func (usageError) ExitCode() int   { return 2 }
func (u usageError) Unwrap() error { return u.error }
