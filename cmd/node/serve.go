package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

func serve(args []string) error {
	fs := newFlags("serve", "[--config cluster.yaml] [--node ID] [--log-level info] [--policy-source store]",
		"Runs a node: NATS (embedded unless nats.urls is set), the audit stream, the kernel,\nmetrics and health. Logs are JSON on stderr; SIGINT/SIGTERM drain and stop it.")
	cfgPath := fs.String("config", "cluster.yaml", "configuration file (must exist)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	nodeID := fs.String("node", "", "which of cluster.nodes to run (required when the config describes a cluster)")
	source := fs.String("policy-source", "", "file or store: overrides policy.source for this run (store: start on a policy store that differs from the file, to review it with node policy diff)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("serve takes no arguments, got %q (node serve -h for usage)", fs.Args())}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv}))
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fmt.Errorf("--config %s: %w", *cfgPath, err)
	}
	if cfg, err = cfg.ForNode(*nodeID); err != nil {
		return usageError{err}
	}
	if *source != "" {
		if *source != config.PolicyFromFile && *source != config.PolicyFromStore {
			return usageError{fmt.Errorf("--policy-source %q must be file or store", *source)}
		}
		cfg.Policy.Source = *source
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg, node.Options{Logger: log})
	if err != nil {
		return err
	}
	<-ctx.Done()
	// A second signal ends the drain at once; later ones are ignored
	// (stopping is bounded by shutdown_timeout). Registered before the
	// first context lets go, so no signal meets the default action.
	dctx, stopDrain := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopDrain()
	stop()
	if d := time.Duration(cfg.Node.DrainTimeout); d > 0 {
		log.Info("signal received; draining: new turns go to other nodes, open ones are served until they close", "drain_timeout", d.String())
		open, err := n.Drain(dctx, d)
		switch {
		case err != nil && dctx.Err() == nil:
			log.Error("drain", "err", err)
		case open > 0:
			log.Info("drain over; closing the turns still open", "open_turns", open)
		default:
			log.Info("drained: no turn open")
		}
	}
	log.Info("stopping", "timeout", time.Duration(cfg.Node.ShutdownTimeout).String())
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Node.ShutdownTimeout))
	defer cancel()
	return n.Shutdown(sctx)
}
