package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
)

// A config file's relative paths are relative to its own directory, so the
// node and the CLI read the same paths from it whatever directory they run
// in; absolute paths and commands stay as written.
func TestRelativePathsAreRelativeToTheFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc", "sharedos")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(root, "abs.key")
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := config.Load(write("explicit.yaml", `
node: {data_dir: ./state, creds_dir: ../creds}
nats: {credentials: node.nk}
audit: {key_file: `+abs+`}
principals:
  - {tenant: acme, principal: ada}
credential_profiles:
  - {tenant: acme, profile: work, principals: [ada]}
providers:
  - id: fs
    kind: mcp
    mcp:
      transport: stdio
      command: ./bin/server
      args: [./data]
      dir: work
      credentials:
        - {tenant: acme, profile: work, file: secrets/work.token, env_var: TOKEN}
cluster:
  nodes:
    - {id: n1, port: 4301, cluster_port: 6301, data_dir: nodes/n1}
    - {id: n2, port: 4302, cluster_port: 6302}
`))
	if err != nil {
		t.Fatal(err)
	}
	in := func(p string) string { return filepath.Join(dir, p) }
	mcp := c.Providers[0].MCP
	for _, got := range []struct{ name, got, want string }{
		{"node.data_dir", c.Node.DataDir, in("state")},
		{"node.creds_dir", c.Node.CredsDir, filepath.Join(root, "etc", "creds")},
		{"nats.credentials", c.NATS.Credentials, in("node.nk")},
		{"audit.key_file (absolute)", c.Audit.KeyFile, abs},
		{"cluster.nodes[0].data_dir", c.Cluster.Nodes[0].DataDir, in("nodes/n1")},
		{"cluster.nodes[1].data_dir (default)", c.Cluster.Nodes[1].DataDir, in("state/n2")},
		{"providers[0].mcp.dir", mcp.Dir, in("work")},
		{"providers[0].mcp.credentials[0].file", mcp.Credentials[0].File, in("secrets/work.token")},
		{"providers[0].mcp.command (not a path of the file)", mcp.Command, "./bin/server"},
		{"providers[0].mcp.args (not paths of the file)", mcp.Args[0], "./data"},
	} {
		if got.got != got.want {
			t.Errorf("%s = %q, want %q", got.name, got.got, got.want)
		}
	}
	n1, err := c.ForNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	if n1.Node.DataDir != in("nodes/n1") {
		t.Errorf("ForNode: data_dir %q", n1.Node.DataDir)
	}

	// The defaults are under the file's directory too: ./data, ./data/creds.
	d, err := config.Load(write("defaults.yaml", "node: {id: node-1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.DataDir != in("data") || d.Node.CredsDir != in("data/creds") {
		t.Errorf("defaults: data_dir %q, creds_dir %q; want under %s", d.Node.DataDir, d.Node.CredsDir, dir)
	}

	// A file in the working directory keeps its paths as written: the
	// README's `node serve --config cluster.yaml` keeps its data in ./data.
	t.Chdir(dir)
	w, err := config.Load("defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w.Node.DataDir != "./data" {
		t.Errorf("a file in the working directory: data_dir %q, want ./data", w.Node.DataDir)
	}
}
