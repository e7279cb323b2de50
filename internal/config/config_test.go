package config_test

import (
	"fmt"
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
	if c.Node.ID != "node-1" || c.Audit.Durability != "acked" || time.Duration(c.Kernel.IdleTimeout) != 10*time.Minute ||
		c.Kernel.MaxTurnsPerPrincipal != 1024 || c.Kernel.MaxLeasesPerTurn != 64 || c.Kernel.CallRate != (config.Rate{PerSecond: 5000, Burst: 10000}) {
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
		"message too big": {"max_message_bytes: 1048576", "max_message_bytes: 67108865"},
		"message small":   {"max_message_bytes: 1048576", "max_message_bytes: 65535"},
		"negative call":   {"call_timeout: 30s", "call_timeout: -1s"},
		"negative leases": {"max_leases_per_turn: 64", "max_leases_per_turn: -1"},
		"negative turns":  {"max_turns_per_principal: 1024", "max_turns_per_principal: -2"},
		"rate w/o burst":  {"call_rate: {per_second: 5000, burst: 10000}", "call_rate: {per_second: 5000}"},
		"negative rate":   {"open_rate: {per_second: 500, burst: 1000}", "open_rate: {per_second: -1, burst: 1000}"},
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

func TestMaxMessageBytesBounds(t *testing.T) {
	for n, ok := range map[int]bool{config.MinMessageBytes: true, 1 << 20: true, config.MaxMessageBytes: true, config.MaxMessageBytes + 1: false, 1 << 30: false} {
		_, err := config.Parse([]byte(fmt.Sprintf("nats: {max_message_bytes: %d}\n", n)))
		if (err == nil) != ok {
			t.Errorf("max_message_bytes %d: %v", n, err)
		}
		if err != nil && !strings.Contains(err.Error(), "64 MiB") {
			t.Errorf("max_message_bytes %d: the error does not say the bound: %v", n, err)
		}
	}
	// The timeouts the metrics' buckets are derived from have their defaults.
	c, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Kernel.CallTimeout) != 30*time.Second || time.Duration(c.Kernel.ResolveTimeout) != 5*time.Second {
		t.Fatalf("default timeouts %v %v", c.Kernel.CallTimeout, c.Kernel.ResolveTimeout)
	}
}
