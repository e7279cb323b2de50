// Command node runs a SharedOS node and drives it from a terminal.
//
//	node serve --config cluster.yaml           run a node (embedded NATS by default)
//	node turn open --tenant acme --principal ada --ns notes,text
//	node turn list | namespaces | call ALIAS 'JSON' | ns-set notes,text | close
//	node audit tail [--tenant T] [--turn ID] [--type tool.invoked] [--from-start] [--durable NAME]
//	node audit export [--out FILE]
//	node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT] [--open-ok=false]
//	node audit keys [--local] [--key FILE]
//
// Client commands find NATS and the subject prefix from --config (default
// cluster.yaml) unless --nats/--prefix are given. `turn open` saves the
// turn's handle and lease in .sharedos/turn.json so the next commands act
// on it; --turn node/turn selects another.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  node serve [--config cluster.yaml] [--log-level info]
  node turn open --tenant T --principal P [--credential C] [--ns a,b] [--attr k=v]
  node turn list | namespaces | call ALIAS [JSON] | ns-set a,b | close
  node audit tail [--tenant T] [--turn ID] [--type TYPE] [--from-start] [--durable NAME]
  node audit export [--out FILE]
  node audit verify [--file FILE] [--trust KEYS] [--anchor CHECKPOINT] [--open-ok=false]
  node audit keys [--local] [--key FILE]
Run "node COMMAND -h" for a command's flags.`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:])
	case "turn":
		err = turnCmd(args[1:])
	case "audit":
		err = auditCmd(args[1:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "node: unknown command %q\n%s\n", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		if ec, ok := err.(exitCoder); ok {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

type exitCoder interface{ ExitCode() int }

// stdout is where commands print; tests capture it.
var stdout io.Writer = os.Stdout
