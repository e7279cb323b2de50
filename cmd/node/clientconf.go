package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/config"
)

// conn holds the flags every client command shares.
type conn struct {
	cfgPath, url, prefix, stream string
}

func (c *conn) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.cfgPath, "config", "cluster.yaml", "configuration file to find NATS and the prefix in")
	fs.StringVar(&c.url, "nats", "", "NATS URL (default: from the config)")
	fs.StringVar(&c.prefix, "prefix", "", "subject prefix (default: from the config)")
	fs.StringVar(&c.stream, "stream", "", "audit stream (default: from the config)")
}

// dial connects to the node's NATS.
func (c *conn) dial() (*nats.Conn, error) {
	if c.url == "" || c.prefix == "" || c.stream == "" {
		cfg, err := config.Load(c.cfgPath)
		switch {
		case err == nil:
			if c.url == "" {
				if len(cfg.NATS.URLs) > 0 {
					c.url = cfg.NATS.URLs[0]
				} else {
					c.url = fmt.Sprintf("nats://%s:%d", cfg.NATS.Embedded.Host, cfg.NATS.Embedded.Port)
				}
			}
			if c.prefix == "" {
				c.prefix = cfg.NATS.Prefix
			}
			if c.stream == "" {
				c.stream = cfg.Audit.Stream
			}
		case errors.Is(err, os.ErrNotExist):
		default:
			return nil, err
		}
	}
	if c.url == "" {
		c.url = nats.DefaultURL
	}
	if c.prefix == "" {
		c.prefix = "sharedos"
	}
	if c.stream == "" {
		c.stream = "SHAREDOS_AUDIT"
	}
	nc, err := nats.Connect(c.url, nats.Name("sharedos-cli"))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s (is `node serve` running?): %w", c.url, err)
	}
	return nc, nil
}
