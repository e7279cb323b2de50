// Command mcp-provider serves one MCP server's tools to SharedOS nodes
// over NATS, as its own process, so the server's failures stay out of the
// node:
//
//	go run ./cmd/mcp-provider --id scratchpad -- go run ./cmd/mcp-example-server    # stdio
//	go run ./cmd/mcp-provider --id scratchpad --url http://127.0.0.1:8400/mcp        # streamable HTTP
//	go run ./cmd/mcp-provider --id github --config github.yaml                       # credentials, limits, ttl
//
// --config is a YAML file with the fields of providers[].mcp in
// cluster.yaml (docs/discovery.md). A node whose cluster.yaml lists
// `{id: scratchpad, kind: nats}` reaches it.
//
// It runs only calls a trusted node signed (docs/security.md), and
// connects as its bus identity provider-<id>; internal/providerproc says
// where the keys and credentials come from, as for cmd/calendar-provider.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/goccy/go-yaml"

	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providerproc"
	"github.com/sharedos/sharedos/provider"
)

func main() {
	f := providerproc.Register(flag.CommandLine, "", "provider id: the MCP server's configured id (names its tools' namespace)")
	config := flag.String("config", "", "YAML file with the server's settings (the fields of providers[].mcp)")
	mcpURL := flag.String("url", "", "the MCP server's streamable HTTP URL (instead of --config or a command)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := serverConfig(*config, *mcpURL, flag.Args())
	if err != nil {
		log.Error("configuration", "err", err)
		os.Exit(2)
	}
	p, err := mcpprovider.New(f.ID, cfg, &mcpprovider.Options{Logger: log}) // validates cfg
	if err != nil {
		log.Error("configuration", "err", err)
		os.Exit(2)
	}
	log.Info("mcp server", "id", f.ID, "transport", cfg.Transport)
	code := providerproc.Run(f, p.SDK(), provider.Options{}, log)
	p.Close()
	os.Exit(code)
}

// serverConfig reads the server's settings: a file, a URL, or a command.
func serverConfig(file, url string, command []string) (mcpprovider.Config, error) {
	var c mcpprovider.Config
	switch n := btoi(file != "") + btoi(url != "") + btoi(len(command) > 0); {
	case n != 1:
		return c, fmt.Errorf("give exactly one of --config FILE, --url URL, or a command after --")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return c, err
		}
		if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
			return c, fmt.Errorf("%s: %w", file, err)
		}
	case url != "":
		c.Transport, c.URL = "http", url
	default:
		c.Transport, c.Command, c.Args = "stdio", command[0], command[1:]
	}
	return c, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
