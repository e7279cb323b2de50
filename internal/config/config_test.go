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
		"unknown field":              {"  step_ceiling: 64", "  step_ceiling: 64\n  stepceiling: 3"},
		"bad durability":             {"durability: acked", "durability: eventually"},
		"dotted node id":             {"id: node-1", "id: node.1"},
		"bad grant":                  {`capability: "notes.*"`, `capability: "notes.**.x"`},
		"unknown handler":            {"handler: notes.put", "handler: notes.nope"},
		"bad duration":               {"idle_timeout: 10m", "idle_timeout: ten minutes"},
		"duplicate id":               {"id: textkit", "id: notes"},
		"message too big":            {"max_message_bytes: 1048576", "max_message_bytes: 67108865"},
		"message small":              {"max_message_bytes: 1048576", "max_message_bytes: 65535"},
		"negative call":              {"call_timeout: 30s", "call_timeout: -1s"},
		"negative leases":            {"max_leases_per_turn: 64", "max_leases_per_turn: -1"},
		"negative turns":             {"max_turns_per_principal: 1024", "max_turns_per_principal: -2"},
		"rate w/o burst":             {"call_rate: {per_second: 5000, burst: 10000}", "call_rate: {per_second: 5000}"},
		"negative rate":              {"open_rate: {per_second: 500, burst: 1000}", "open_rate: {per_second: -1, burst: 1000}"},
		"segment big":                {"segment_max_wait: 0s", "segment_max_wait: 0s\n  segment_max_bytes: 1048000"},
		"segment small":              {"segment_max_wait: 0s", "segment_max_wait: 0s\n  segment_max_bytes: 4095"},
		"long wait":                  {"segment_max_wait: 0s", "segment_max_wait: 2s"},
		"negative wait":              {"segment_max_wait: 0s", "segment_max_wait: -1ms"},
		"negative queue":             {"max_pending: 16384", "max_pending: -1"},
		"negative drain":             {"drain_timeout: 20s", "drain_timeout: -1s"},
		"ack timeout tiny":           {"max_pending: 16384", "max_pending: 16384\n  ack_timeout: 10ms"},
		"ack past retries":           {"max_pending: 16384", "max_pending: 16384\n  ack_timeout: 5s\n  retry_window: 2s"},
		"retries past call":          {"max_pending: 16384", "max_pending: 16384\n  retry_window: 30s"},
		"identity twice":             {"name: auditor-acme", "name: auditor"},
		"unknown role":               {"role: audit\n    tenants: [acme]", "role: root\n    tenants: [acme]"},
		"admin of every tenant":      {"role: audit\n    tenants: [acme]", "role: admin\n    tenants: ['*']"},
		"runtime no tenants":         {"    tenants: [acme]           # and nothing else (tenant_forbidden)", "    tenants: []"},
		"rate on a reader":           {"role: audit\n    tenants: [acme]", "role: audit\n    tenants: [acme]\n    call_rate: {per_second: 1, burst: 1}"},
		"remote bus, no credentials": {"urls: []", "urls: [nats://nats.example.com:4222]"},
		"profile of nobody":          {"\nprincipals:\n", "\ncredential_profiles: [{tenant: acme, profile: gh, principals: [zed]}]\nprincipals:\n"},
		"profile twice":              {"\nprincipals:\n", "\ncredential_profiles: [{tenant: acme, profile: gh}, {tenant: acme, profile: gh}]\nprincipals:\n"},
		"profile without tenant":     {"\nprincipals:\n", "\ncredential_profiles: [{profile: gh}]\nprincipals:\n"},
		"profile with a slash":       {"\nprincipals:\n", "\ncredential_profiles: [{tenant: acme, profile: a/b}]\nprincipals:\n"},
		"runtime narrowed to none":   {"tenants: [acme]           # and nothing else", "credentials: [acme/gh]\n    tenants: [acme]           # and nothing else"},
		"credential of a reader":     {"role: audit\n    tenants: [acme]", "role: audit\n    tenants: [acme]\n    credentials: [acme/gh]"},
		"shares with a reader":       {"tenants: [acme]           # and nothing else", "shares_turns_with: [auditor]\n    tenants: [acme]           # and nothing else"},
		"shares with nobody":         {"tenants: [acme]           # and nothing else", "shares_turns_with: [ghost]\n    tenants: [acme]           # and nothing else"},
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

// The audit segment bound follows the largest message the bus takes.
func TestSegmentMaxBytesDefault(t *testing.T) {
	for _, tc := range []struct{ msg, seg int }{{0, 512 << 10}, {config.MinMessageBytes, config.MinMessageBytes - 4<<10}, {8 << 20, 512 << 10}} {
		c, err := config.Parse([]byte(fmt.Sprintf("nats: {max_message_bytes: %d}\n", tc.msg)))
		if err != nil {
			t.Fatal(err)
		}
		if c.SegmentBytes() != tc.seg || c.Audit.MaxPending != 16384 || c.Audit.SegmentMaxWait != 0 {
			t.Errorf("max_message_bytes %d: segment bytes %d, max_pending %d, segment_max_wait %v", tc.msg, c.SegmentBytes(), c.Audit.MaxPending, c.Audit.SegmentMaxWait)
		}
		// Changed after parsing, the default follows.
		c.NATS.MaxMessageBytes = 128 << 10
		if err := c.Validate(); err != nil || c.SegmentBytes() != 124<<10 {
			t.Errorf("max_message_bytes changed to 128 KiB: segment bytes %d, %v", c.SegmentBytes(), err)
		}
	}
	c, err := config.Parse([]byte("audit: {segment_max_bytes: 65536}\n"))
	if err != nil || c.SegmentBytes() != 65536 {
		t.Errorf("segment_max_bytes 65536: %v, %v", c, err)
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

// Without identities listed, the node still has its own, a provider
// identity per nats provider, a runtime bound to the configured tenants
// and an all-tenant auditor; a loopback external bus needs no credentials.
func TestEffectiveIdentities(t *testing.T) {
	c, err := config.Parse([]byte(`
nats: {urls: ["nats://127.0.0.1:4222"]}
principals:
  - {tenant: acme, principal: ada}
  - {tenant: globex, principal: gina}
providers:
  - {id: calendar, kind: nats}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, id := range c.EffectiveIdentities() {
		got[id.Name] = string(id.Role) + " " + strings.Join(id.Tenants, ",") + id.Provider
	}
	want := map[string]string{"node": "node ", "provider-calendar": "provider calendar", "runtime": "runtime acme,globex", "auditor": "audit *", "admin": "admin "}
	if len(got) != len(want) {
		t.Fatalf("identities %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

// node.drain_timeout: absent is the default, 0s is no wait.
func TestDrainTimeoutAbsentOrZero(t *testing.T) {
	base, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for yaml, want := range map[string]time.Duration{
		"drain_timeout: 20s": config.DefaultDrainTimeout, // as in the sample
		"drain_timeout: 0s":  0,
		"drain_timeout: 3s":  3 * time.Second,
		"":                   config.DefaultDrainTimeout,
	} {
		text := strings.Replace(string(base), "drain_timeout: 20s", yaml, 1)
		cfg, err := config.Parse([]byte(text))
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if got := time.Duration(cfg.Node.DrainTimeout); got != want {
			t.Errorf("%q: drain timeout %v, want %v", yaml, got, want)
		}
	}
}
