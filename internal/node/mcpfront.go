package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/reason"
)

// The MCP front (issue #11, internal/mcpfront): the node's open turns
// served to model sandboxes over MCP at /mcp on the HTTP listener, behind
// execution tokens signed with the node's key and minted over the turn
// protocol (op token).

// watchTurns puts the MCP front's watch in front of the kernel's sink, so
// a turn's tokens are refused from the moment it closes.
func (n *Node) watchTurns(next audit.Sink) audit.Sink {
	n.mcpWatch = mcpfront.NewWatch(next)
	return n.mcpWatch
}

// serveMCP mounts the MCP front on the HTTP listener's mux. Its URL (every
// token's audience) is node.mcp_url when set (the public URL clients
// reach, through a load balancer or proxy), else the listener's address,
// loopback when it listens on every interface. It also serves, on the bus, the requests other
// nodes' fronts forward to this node's turns (mcpfront.ForwardSubject):
// any node's /mcp serves any turn of the cluster.
func (n *Node) serveMCP(mux *http.ServeMux, addr net.Addr) error {
	endpoint := n.cfg.Node.MCPURL
	if endpoint == "" {
		host, port, err := net.SplitHostPort(addr.String())
		if err != nil {
			return fmt.Errorf("node: mcp front: %w", err)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		endpoint = "http://" + net.JoinHostPort(host, port) + mcpfront.Path
	}
	f, err := mcpfront.New(mcpfront.Options{
		Kernel: n.kernel, Key: n.key, URL: endpoint, Logger: n.log, Tracer: n.tracing.Tracer(),
		Bus: n.nc, BusPrefix: n.cfg.NATS.Prefix, Bounds: n.cfg.MCP.Bounds(),
	})
	if err != nil {
		return fmt.Errorf("node: mcp front: %w", err)
	}
	if err := f.ServeBus(); err != nil {
		return fmt.Errorf("node: mcp front: %w", err)
	}
	f.Mount(mux)
	if n.mcpWatch != nil {
		n.mcpWatch.Attach(f)
	}
	n.mcpFront.Store(f)
	return nil
}

// MCPURL is the MCP front's endpoint, or "" when HTTP is off.
func (n *Node) MCPURL() string {
	f := n.mcpFront.Load()
	if f == nil {
		return ""
	}
	return f.URL()
}

// tokenMinter is the NATS front's way to the MCP front (op token); the MCP
// front starts with the HTTP listener, after the NATS front.
type tokenMinter struct{ n *Node }

func (m tokenMinter) Mint(ctx context.Context, access authority.AccessContext, ttl time.Duration) (mcpfront.Token, error) {
	f := m.n.mcpFront.Load()
	if f == nil {
		return mcpfront.Token{}, reason.New(reason.NodeUnavailable, "node %s serves no MCP front (node.http is off, or starting)", m.n.cfg.Node.ID)
	}
	return f.Mint(ctx, access, ttl)
}
