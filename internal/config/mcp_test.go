package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/config"
)

func TestMCPProviders(t *testing.T) {
	c, err := config.Parse([]byte(`
principals:
  - {tenant: acme, principal: ada}
credential_profiles:
  - {tenant: acme, profile: acme-github-work, principals: [ada]}
providers:
  - id: scratchpad
    kind: mcp
    mcp: {transport: memory, server: scratchpad}
  - id: github
    kind: mcp
    mcp:
      transport: http
      url: https://mcp.example.com/mcp
      headers: {X-Team: platform}
      credentials:
        - {tenant: acme, profile: acme-github-work, env: GITHUB_WORK_TOKEN}
      ttl: 2m
      limits: {max_tools: 500}
  - id: fs
    kind: mcp
    mcp: {transport: stdio, command: npx, args: [-y, "@modelcontextprotocol/server-filesystem", /tmp], env: {LOG: quiet}}
`))
	if err != nil {
		t.Fatal(err)
	}
	gh := c.Providers[1].MCP
	if gh.URL != "https://mcp.example.com/mcp" || time.Duration(gh.TTL) != 2*time.Minute || gh.Limits.MaxTools != 500 || gh.Credentials[0].Env != "GITHUB_WORK_TOKEN" {
		t.Fatalf("%+v", gh)
	}
	for _, bad := range []struct{ yaml, want string }{
		{`{id: x, kind: mcp}`, "needs mcp"},
		{`{id: x, kind: mcp, mcp: {transport: ftp}}`, "transport"},
		{`{id: x, kind: mcp, mcp: {transport: http, url: "https://u:p@h/mcp"}}`, "credentials"},
		{`{id: x, kind: mcp, mcp: {transport: http, url: "https://h/mcp", headers: {Authorization: "Bearer s3cret"}}}`, "carries a credential"},
		{`{id: x, kind: mcp, mcp: {transport: stdio, command: srv, credentials: [{tenant: t, profile: p, env: E}]}}`, "env_var"},
		{`{id: x, kind: mcp, mcp: {transport: http, url: "https://h/mcp", credentials: [{profile: p, env: E}]}}`, "tenant is required"},
		{`{id: x, kind: mcp, mcp: {transport: http, url: "https://h/mcp", credentials: [{tenant: t, profile: p, env: E}]}}`, "not among credential_profiles"},
		{`{id: x, kind: static, mcp: {transport: memory, server: s}, tools: [{name: a}]}`, "only for mcp"},
	} {
		_, err := config.Parse([]byte("providers:\n  - " + bad.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error repeats the secret: %v", err)
		}
	}
}
