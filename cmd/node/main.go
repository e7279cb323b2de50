// Command node runs a SharedOS node and drives it from a terminal.
//
//	node serve --config cluster.yaml           run a node (embedded NATS by default)
//	node turn open --tenant acme --principal ada --ns notes,text
//	node turn list | namespaces | call ALIAS 'JSON' | ns-set notes,text | close | saved
//	node audit tail [--tenant T] [--turn ID] [--type tool.invoked] [--from-start] [--durable NAME]
//	node audit export [--out FILE]
//	node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT] [--open-ok=false]
//	node audit keys [--local] [--key FILE]
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
// `turn open` saves the turn's handle and lease in .sharedos/turns.json;
// the next commands act on the most recently opened saved turn unless
// --turn names another.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

const usage = `usage: node COMMAND [SUBCOMMAND] [flags] [arguments]

  node serve [--config cluster.yaml] [--log-level info]
  node turn open --tenant T --principal P [--credential C] [--ns a,b] [--attr k=v,k=v] [--attach NODE/TURN]
  node turn list | namespaces | call ALIAS [JSON] | ns-set a,b | close | saved   [--turn NODE/TURN]
  node turn token [--ttl 10m] [--out FILE]   [--turn NODE/TURN]
  node mcp [--token-file FILE] [--url URL]
  node audit tail [--tenant T] [--turn ID] [--type TYPE] [--from-start] [--durable NAME]
  node audit export [--out FILE]
  node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT] [--open-ok=false]
  node audit keys [--local] [--key FILE]
  node status [--http ADDR] [--config cluster.yaml]
  node identities [--config cluster.yaml] [--creds-dir DIR]

Data is printed to stdout as JSON (JSON lines for audit tail and export);
errors and notes go to stderr. Exit codes: 0 done, 1 failed, 2 usage error,
3 refused by the kernel, 4 audit verification failed.
NATS is found from --nats, else $NATS_URL, else --config (default cluster.yaml).
Run "node COMMAND -h" (e.g. "node turn call -h") for a command's flags.`

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
	case "serve":
		err = serve(args[1:])
	case "turn":
		err = turnCmd(args[1:])
	case "mcp":
		err = mcpCmd(args[1:])
	case "audit":
		err = auditCmd(args[1:])
	case "status":
		err = statusCmd(args[1:])
	case "identities":
		err = identitiesCmd(args[1:])
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" { // node help turn == node turn -h
			return run([]string{args[1], "-h"})
		}
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		err = usageError{fmt.Errorf("unknown command %q (serve, turn, mcp, audit, status, identities; node -h for usage)", args[0])}
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
