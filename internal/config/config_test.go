package config_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/providers"
)

func TestSampleClusterYAMLLoadsAndBuilds(t *testing.T) {
	c, err := config.Load("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.ID != "node-1" || c.Audit.Durability != "acked" || time.Duration(c.Kernel.IdleTimeout) != 10*time.Minute {
		t.Fatalf("decoded %+v", c)
	}
	if _, err := c.AuthoritySource(); err != nil {
		t.Fatal(err)
	}
	static, err := c.StaticProviders(providers.Builtins())
	if err != nil {
		t.Fatal(err)
	}
	if len(static) != 2 {
		t.Fatalf("%d static providers", len(static))
	}
}

func TestParseRefusesMistakes(t *testing.T) {
	base, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][2]string{
		"unknown field":   {"  step_ceiling: 64", "  step_ceiling: 64\n  stepceiling: 3"},
		"bad durability":  {"durability: acked", "durability: eventually"},
		"dotted node id":  {"id: node-1", "id: node.1"},
		"bad grant":       {`capability: "notes.*"`, `capability: "notes.**.x"`},
		"unknown handler": {"handler: notes.put", "handler: notes.nope"},
		"bad duration":    {"idle_timeout: 10m", "idle_timeout: ten minutes"},
		"duplicate id":    {"id: textkit", "id: notes"},
	}
	for name, edit := range cases {
		y := strings.Replace(string(base), edit[0], edit[1], 1)
		if y == string(base) {
			t.Fatalf("%s: edit did not apply", name)
		}
		c, err := config.Parse([]byte(y))
		if err == nil {
			_, err = c.StaticProviders(providers.Builtins())
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
