package config_test

import (
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
)

// node.mcp_url, the MCP front's public URL: an absolute http(s) URL whose
// path ends with /mcp; refused with a message that names the field and
// what is wrong.
func TestMCPURL(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       string // "" accepted; else a substring of the error
	}{
		{"absent", "node: {}", ""},
		{"https", "node: {mcp_url: https://mcp.example.com/mcp}", ""},
		{"http with port", "node: {mcp_url: \"http://10.0.0.7:8080/mcp\"}", ""},
		{"ipv6", "node: {mcp_url: \"http://[2001:db8::1]:80/mcp\"}", ""},
		{"prefix stripped by a proxy", "node: {mcp_url: https://lb.example.com/team-a/mcp}", ""},
		{"relative", "node: {mcp_url: /mcp}", "node.mcp_url: \"/mcp\" must be an absolute http or https URL"},
		{"no scheme", "node: {mcp_url: mcp.example.com/mcp}", "must be an absolute http or https URL"},
		{"other scheme", "node: {mcp_url: \"ws://mcp.example.com/mcp\"}", "must be an absolute http or https URL"},
		{"no host", "node: {mcp_url: \"http://:8080/mcp\"}", "names no host"},
		{"no path", "node: {mcp_url: https://mcp.example.com}", "must end with /mcp"},
		{"other path", "node: {mcp_url: https://mcp.example.com/api}", "must end with /mcp"},
		{"trailing slash", "node: {mcp_url: https://mcp.example.com/mcp/}", "must end with /mcp"},
		{"suffix not a segment", "node: {mcp_url: https://mcp.example.com/xmcp}", "must end with /mcp"},
		{"query", "node: {mcp_url: \"https://mcp.example.com/mcp?x=1\"}", "no query or fragment"},
		{"fragment", "node: {mcp_url: \"https://mcp.example.com/mcp#f\"}", "no query or fragment"},
		{"credentials", "node: {mcp_url: \"https://u:s3cret@mcp.example.com/mcp\"}", "with credentials"},
		{"http off", "node: {http: \"off\", mcp_url: https://mcp.example.com/mcp}", "node.http is off"},
		{"cluster node", clusterYAML("mcp_url: https://n1.example.com/mcp"), ""},
		{"cluster node bad", clusterYAML("mcp_url: https://n1.example.com/"), "cluster.nodes[0] (n1): mcp_url: \"https://n1.example.com/\": the path \"/\" must end with /mcp"},
		{"cluster node http off", strings.Replace(clusterYAML("mcp_url: https://n1.example.com/mcp"), `"127.0.0.1:8401"`, `"off"`, 1), "cluster.nodes[0] (n1): mcp_url is set but http is off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml + "\n"))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error repeats the secret: %v", err)
			}
		})
	}
}

func clusterYAML(n1 string) string {
	return "cluster:\n  nodes:\n    - {id: n1, port: 4301, cluster_port: 6301, http: \"127.0.0.1:8401\", " + n1 + "}\n" +
		"    - {id: n2, port: 4302, cluster_port: 6302, http: \"127.0.0.1:8402\"}"
}

// In a cluster, node.mcp_url is every node's public URL (one load
// balancer in front of all) unless a node sets its own.
func TestMCPURLForNode(t *testing.T) {
	c, err := config.Parse([]byte("node: {mcp_url: https://lb.example.com/mcp}\n" + clusterYAML("mcp_url: https://n1.example.com/mcp") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"n1": "https://n1.example.com/mcp", "n2": "https://lb.example.com/mcp"} {
		nc, err := c.ForNode(id)
		if err != nil || nc.Node.MCPURL != want {
			t.Fatalf("%s: mcp_url %q (%v), want %q", id, nc.Node.MCPURL, err, want)
		}
	}
}
