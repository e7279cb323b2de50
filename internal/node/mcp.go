package node

import (
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedos/sharedos/examples/mcpserver"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// DefaultMCPServers are the in-process MCP servers a config may name
// (providers[].mcp.transport: memory): the example scratchpad, so the
// sample cluster.yaml serves an MCP server's tools on a fresh clone with
// no child process, port or build step.
func DefaultMCPServers() map[string]*mcp.Server {
	return map[string]*mcp.Server{"scratchpad": mcpserver.New()}
}

// awaitEagerMCP waits until every eager MCP server's first discovery has
// ended (each bounded by its connect and list timeouts), so the node is
// ready only once a first turn finds their tools; a server that failed is
// retried in the background and its turns say so (degraded).
func (n *Node) awaitEagerMCP() {
	for _, mp := range n.mcpProviders() {
		<-mp.Warmed()
	}
}

// registerMCPMetrics adds the discovery gauges of the MCP providers the
// node runs (at each scrape: the policy's, as rebuilt) to its registry.
func (n *Node) registerMCPMetrics() {
	n.metrics.reg.MustRegister(mcpCollector{n.mcpProviders})
}

// MCPStatus is the discovery state of every MCP provider's profiles.
func (n *Node) MCPStatus() []mcpprovider.ProfileStatus {
	var out []mcpprovider.ProfileStatus
	for _, p := range n.mcpProviders() {
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
// 1 for each (server, profile)'s current state, 0 for the others, for
// the providers ps returns.
type mcpCollector struct {
	ps func() []*mcpprovider.Provider
}

var mcpStateDesc = prometheus.NewDesc("sharedos_mcp_discovery_state",
	"Discovery state of each MCP server and credential profile (1 = current).", []string{"server", "profile", "state"}, nil)

var mcpToolsDesc = prometheus.NewDesc("sharedos_mcp_tools",
	"Tools in the last snapshot of each MCP server and credential profile.", []string{"server", "profile"}, nil)

func (c mcpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- mcpStateDesc; ch <- mcpToolsDesc }

func (c mcpCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ps() {
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
