package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/console"
	"github.com/sharedos/sharedos/reason"
)

// consoleCmd asks a node for a login link to its operator console for the
// identity it connects as, and prints it.
func consoleCmd(args []string) error {
	fs := newFlags("console", "[--node ID] [--http ADDR] [--as NAME] [flags]",
		"Prints a short-lived, single-use link that signs a browser in to the node's operator console\n"+
			"(docs/console.md) as the identity this command connects to NATS as (--as, default admin; or\n"+
			"--creds). The node learns who asked from the bus, not from this command. The link works\n"+
			"once, on that node's HTTP listener, within two minutes.")
	var c conn
	c.flags(fs, false)
	c.as = config.DefaultAdminIdentity
	fs.Lookup("as").DefValue = config.DefaultAdminIdentity
	nodeID := fs.String("node", "", "the node whose console to open (default: node.id of --config)")
	httpAddr := fs.String("http", "", "host:port the browser reaches the node's HTTP listener at (default: the address it is bound to)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the node's answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *nodeID == "" {
		cfg, err := c.cfg.load()
		if err != nil {
			return err
		}
		if cfg == nil {
			return usageError{errors.New("console: --node not given and no config to read node.id from")}
		}
		*nodeID = cfg.Node.ID
	}
	nc, err := c.dial()
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer nc.Close()
	msg, err := nc.Request(console.LoginSubject(c.prefix, *nodeID), nil, *timeout)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("console: node %s did not answer on %s (is it running with node.http on, and is --node right?): %w",
			*nodeID, console.LoginSubject(c.prefix, *nodeID), err)
	}
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	var rep console.LoginReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("console: the node's answer does not decode: %w", err)
	}
	if rep.Error != nil {
		return refusal(reason.New(rep.Error.Code, "%s", rep.Error.Message), "")
	}
	addr := *httpAddr
	if addr == "" {
		addr = browsable(rep.Addr)
	}
	out := map[string]any{"url": "http://" + addr + rep.Path, "identity": rep.Identity, "expires": rep.Expires.UTC().Format(time.RFC3339)}
	return json.NewEncoder(stdout).Encode(out)
}

// browsable is addr with an unspecified host (0.0.0.0, ::) replaced by
// loopback, which a browser on the node's machine reaches.
func browsable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
