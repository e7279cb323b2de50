package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "cluster.yaml", "configuration file")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg, node.Options{Logger: log})
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("signal received; draining", "timeout", time.Duration(cfg.Node.ShutdownTimeout).String())
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Node.ShutdownTimeout))
	defer cancel()
	return n.Shutdown(sctx)
}
