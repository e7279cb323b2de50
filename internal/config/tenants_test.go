package config_test

import (
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
)

// tenantConfig is a config naming tenant t in every place a tenant is
// configured, except the one named by where, which names bad.
func tenantConfig(t, where, bad string) string {
	at := func(place string) string {
		if place == where {
			return bad
		}
		return t
	}
	return strings.NewReplacer(
		"PRINCIPAL", at("principals"), "PROFILE", at("credential_profiles"), "MCP", at("mcp credentials"),
		"IDTENANT", at("identities tenants"), "IDPRINCIPAL", at("identities principals"), "IDCREDENTIAL", at("identities credentials"),
	).Replace(`
principals:
  - {tenant: "PRINCIPAL", principal: ada}
  - {tenant: "` + t + `", principal: bob}
credential_profiles:
  - {tenant: "PROFILE", profile: gh}
  - {tenant: "` + t + `", profile: gh2}
identities:
  - {name: rt, role: runtime, tenants: ["IDTENANT", "` + t + `"], principals: ["IDPRINCIPAL/ada"], credentials: ["IDCREDENTIAL/gh"]}
  - {name: rt-all, role: runtime, tenants: ["*"], principals: ["IDPRINCIPAL/ada"], credentials: ["IDCREDENTIAL/gh"]}
  - {name: reader, role: audit, tenants: ["IDTENANT"]}
providers:
  - id: github
    kind: mcp
    mcp:
      transport: http
      url: https://mcp.example.com/mcp
      credentials:
        - {tenant: "MCP", profile: gh, env: GITHUB_TOKEN}
`)
}

// A tenant is one subject token wherever it is configured: a tenant with
// a dot, a wildcard or a space — one that would take other tenants'
// subjects into its own — is refused in every place; seg, checkpoint and
// live, names of audit subject kinds, are ordinary tenants.
func TestTenantsAreOneSubjectToken(t *testing.T) {
	for _, ok := range []string{"acme", "seg", "checkpoint", "live"} {
		if _, err := config.Parse([]byte(tenantConfig(ok, "", ""))); err != nil {
			t.Errorf("tenant %s: %v", ok, err)
		}
	}
	for _, where := range []string{"principals", "credential_profiles", "mcp credentials", "identities tenants", "identities principals", "identities credentials"} {
		for _, bad := range []string{"seg.>", "acme.seg", "*", "a b", "~612e62"} {
			if bad == "*" && where == "identities tenants" {
				continue // every tenant, for an identity
			}
			_, err := config.Parse([]byte(tenantConfig("acme", where, bad)))
			if err == nil || !strings.Contains(err.Error(), "invalid tenant") {
				t.Errorf("a tenant %q in %s: %v, want it refused as an invalid tenant", bad, where, err)
			}
		}
	}
}
