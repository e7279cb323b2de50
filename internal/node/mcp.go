package node

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedos/sharedos/examples/mcpserver"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// DefaultMCPServers are the in-process MCP servers a config may name
// (providers[].mcp.transport: memory): the example scratchpad, so the
// sample cluster.yaml serves an MCP server's tools on a fresh clone with
// no child process, port or build step.
func DefaultMCPServers() map[string]*mcp.Server {
	return map[string]*mcp.Server{"scratchpad": mcpserver.New()}
}

// startMCP builds the configured MCP providers (kind mcp). A lazy
// server is not dialled until a turn asks; an eager one discovers at once
// (awaitEagerMCP). A server that is down fails only its own catalogue,
// classified, and the node serves the rest.
func (n *Node) startMCP(cfg *config.Config, servers map[string]*mcp.Server) error {
	om, err := n.startOAuth(cfg)
	if err != nil {
		return err
	}
	for _, p := range cfg.Providers {
		if p.Kind != "mcp" {
			continue
		}
		mp, err := mcpprovider.New(p.ID, *p.MCP, &mcpprovider.Options{Logger: n.log, OAuth: om, Tracer: n.tracing.Tracer(), Memory: func(name string) (*mcp.Server, bool) {
			s, ok := servers[name]
			return s, ok
		}})
		if err != nil {
			return fmt.Errorf("node: provider %s: %w", p.ID, err)
		}
		n.mcp = append(n.mcp, mp)
	}
	return nil
}

// awaitEagerMCP waits until every eager MCP server's first discovery has
// ended (each bounded by its connect and list timeouts), so the node is
// ready only once a first turn finds their tools; a server that failed is
// retried in the background and its turns say so (degraded).
func (n *Node) awaitEagerMCP() {
	for _, mp := range n.mcp {
		<-mp.Warmed()
	}
}

// registerMCPMetrics adds the discovery gauges to the node's registry.
func (n *Node) registerMCPMetrics() {
	if len(n.mcp) > 0 {
		n.metrics.reg.MustRegister(mcpCollector{n.mcp})
	}
}

// MCPStatus is the discovery state of every MCP provider's profiles.
func (n *Node) MCPStatus() []mcpprovider.ProfileStatus {
	var out []mcpprovider.ProfileStatus
	for _, p := range n.mcp {
		out = append(out, p.Status()...)
	}
	return out
}

// Status is what `node status` shows.
type Status struct {
	Node  string                      `json:"node"`
	Ready bool                        `json:"ready"`
	MCP   []mcpprovider.ProfileStatus `json:"mcp"`
}

func (n *Node) serveStatus(w http.ResponseWriter, _ *http.Request) {
	st := Status{Node: n.cfg.Node.ID, Ready: n.Ready() == nil, MCP: n.MCPStatus()}
	if st.MCP == nil {
		st.MCP = []mcpprovider.ProfileStatus{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// mcpCollector exports sharedos_mcp_discovery_state{server,profile,state}:
// 1 for each (server, profile)'s current state, 0 for the others.
type mcpCollector struct{ ps []*mcpprovider.Provider }

var mcpStateDesc = prometheus.NewDesc("sharedos_mcp_discovery_state",
	"Discovery state of each MCP server and credential profile (1 = current).", []string{"server", "profile", "state"}, nil)

var mcpToolsDesc = prometheus.NewDesc("sharedos_mcp_tools",
	"Tools in the last snapshot of each MCP server and credential profile.", []string{"server", "profile"}, nil)

func (c mcpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- mcpStateDesc; ch <- mcpToolsDesc }

func (c mcpCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ps {
		for _, st := range p.Status() {
			for _, s := range mcpprovider.States {
				v := 0.0
				if s == st.State {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(mcpStateDesc, prometheus.GaugeValue, v, st.Server, st.Profile, string(s))
			}
			ch <- prometheus.MustNewConstMetric(mcpToolsDesc, prometheus.GaugeValue, float64(st.Tools), st.Server, st.Profile)
		}
	}
}
