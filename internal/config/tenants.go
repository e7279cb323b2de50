package config

import (
	"fmt"

	"github.com/sharedos/sharedos/audit"
)

// tenantProblems checks every tenant the config names outside
// identities (whose tenants, principals and credentials
// identity.Identity.Validate checks) with audit.CheckTenant: principals,
// credential profiles and mcp providers' credentials. A tenant is one
// subject token, used as it is in every audit subject and permission.
func (c *Config) tenantProblems() []string {
	var out []string
	check := func(where, tenant string) {
		// An empty tenant is reported where it is required.
		if err := audit.CheckTenant(tenant); tenant != "" && err != nil {
			out = append(out, fmt.Sprintf("%s: %v", where, err))
		}
	}
	for i, p := range c.Principals {
		check(fmt.Sprintf("principals[%d]", i), p.Tenant)
	}
	for i, cp := range c.CredentialProfiles {
		check(fmt.Sprintf("credential_profiles[%d]", i), cp.Tenant)
	}
	for i, p := range c.Providers {
		if p.MCP == nil {
			continue
		}
		for j, cr := range p.MCP.Credentials {
			check(fmt.Sprintf("providers[%d] (%s): mcp: credentials[%d]", i, p.ID, j), cr.Tenant)
		}
	}
	return out
}
