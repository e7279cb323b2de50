package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
)

// mcp: maps onto the front's bounds; a tenant's share as large as the
// total is refused (one tenant could then refuse every other).
func TestMCPBounds(t *testing.T) {
	base, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(append(base, []byte("\nmcp:\n  max_turns: 400\n  max_tokens_per_principal: 50\n")...))
	if err != nil {
		t.Fatal(err)
	}
	b := c.MCP.Bounds().WithDefaults()
	if b.Turns != 400 || b.TurnsPerTenant != 100 || b.TurnsPerPrincipal != 100 || b.TokensPerPrincipal != 50 || b.TokensPerTurn != 50 {
		t.Fatalf("bounds %+v", b)
	}
	_, err = config.Parse(append(base, []byte("\nmcp:\n  max_turns: 400\n  max_turns_per_tenant: 400\n")...))
	if err == nil || !strings.Contains(err.Error(), "mcp:") {
		t.Fatalf("a tenant's share of the whole front: %v", err)
	}
}
