package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sharedos/sharedos/internal/config"
)

// statusCmd prints the node's status: readiness and the discovery state
// of each MCP server per credential profile (GET /status on node.http).
func statusCmd(args []string) error {
	fs := newFlags("status", "[--http ADDR] [--config cluster.yaml]",
		"Prints the node's status as JSON: whether it is ready, and for each MCP server and credential\n"+
			"profile its discovery state (unknown, loading, ready, stale, refreshing, auth_required,\n"+
			"incompatible, failed), failure class, tools, when last checked and which tools were refused.")
	addr := fs.String("http", "", "the node's HTTP address (default: node.http of --config)")
	cfgPath := fs.String("config", "cluster.yaml", "the node's configuration, for node.http")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the node")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *addr == "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return fmt.Errorf("status: --http not given and %w", err)
		}
		if cfg.Node.HTTP == "off" {
			return usageError{fmt.Errorf("status: node.http is off in %s; the status is served there", *cfgPath)}
		}
		*addr = cfg.Node.HTTP
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+"/status", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status: the node answered %s", resp.Status)
	}
	_, err = io.Copy(stdout, io.LimitReader(resp.Body, 16<<20))
	return err
}
