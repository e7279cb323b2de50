// Package config is the node's one configuration struct, decoded from
// cluster.yaml at the edge (cmd/node) and passed down explicitly.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/internal/ratelimit"
	"github.com/sharedos/sharedos/internal/tracing"
)

// Config is cluster.yaml.
type Config struct {
	Node       Node        `yaml:"node"`
	NATS       NATS        `yaml:"nats"`
	Kernel     Kernel      `yaml:"kernel"`
	Audit      Audit       `yaml:"audit"`
	Principals []Principal `yaml:"principals"`
	Providers  []Provider  `yaml:"providers"`
	// Identities are who may connect to the bus, and as what
	// (docs/security.md). Absent: a runtime "runtime" bound to every tenant
	// in principals and an audit reader "auditor" of every tenant. The node
	// identity "node" and one identity "provider-<id>" per nats provider
	// are always added unless listed.
	Identities []Identity `yaml:"identities"`
	// CredentialProfiles bind each credential profile of a tenant to the
	// principals that may act with it (docs/security.md). A turn naming a
	// profile not bound to its principal is refused credential_forbidden;
	// a provider credential is used only for the (tenant, profile) it is
	// configured for.
	CredentialProfiles []CredentialProfile `yaml:"credential_profiles"`
	// Cluster describes several nodes in one file; each node is started
	// with `node serve --node ID` (ForNode). Empty: a single node.
	Cluster Cluster `yaml:"cluster"`
	// MCP bounds what the MCP front holds (docs/mcp.md, "Bounds").
	MCP MCP `yaml:"mcp"`
	// Policy is the store principals, credential_profiles, providers and
	// identities live in once the node has started (policy.go).
	Policy Policy `yaml:"policy"`
	// Approvals name the calls that need a human's approval before they
	// run, per tenant (docs/approvals.md). Absent: none do.
	Approvals []ApprovalRule `yaml:"approvals"`
	// Tracing exports OpenTelemetry traces over OTLP (docs/observability.md).
	// Absent: off.
	Tracing tracing.Config `yaml:"tracing"`
}

// ApprovalRule is one approval rule (approval.RuleSpec): calls of tenant
// to tools matching every field set need an approver's approval.
type ApprovalRule struct {
	Tenant string `yaml:"tenant"`
	Name   string `yaml:"name"`
	// Capability is a capability pattern ("calendar.events.*").
	Capability string `yaml:"capability"`
	Provider   string `yaml:"provider"`
	Tool       string `yaml:"tool"`
	// Annotations each must equal the tool's; only with provider, whose
	// annotations the operator thereby trusts.
	Annotations map[string]any `yaml:"annotations"`
	// Expiry is how long a request waits and an approval stays usable
	// (default 15m).
	Expiry Duration `yaml:"expiry"`
	// SeparateDuties: an approver whose identity names the call's
	// principal (identities[].principals) cannot decide it.
	SeparateDuties bool `yaml:"separate_duties"`
}

// Spec is r as the approval package compiles it.
func (r ApprovalRule) Spec() approval.RuleSpec {
	return approval.RuleSpec{Tenant: r.Tenant, Name: r.Name, Capability: r.Capability, Provider: r.Provider, Tool: r.Tool,
		Annotations: r.Annotations, Expiry: time.Duration(r.Expiry), SeparateDuties: r.SeparateDuties}
}

// ApprovalSpecs are the approval rules as the approval package compiles them.
func ApprovalSpecs(rules []ApprovalRule) []approval.RuleSpec {
	out := make([]approval.RuleSpec, len(rules))
	for i, r := range rules {
		out[i] = r.Spec()
	}
	return out
}

// MCP bounds the MCP front's turn table: the turns it holds execution
// tokens for and their tokens, in all, per tenant and per principal, and
// tokens per turn; a mint beyond a bound is refused overloaded. Zero: the
// front's defaults (mcpfront.Bounds.WithDefaults: 65536 turns and 262144
// tokens in all, a quarter of each per tenant, 1024 turns and 8192 tokens
// per principal, 1024 tokens per turn). A tenant's share must be below
// the total.
type MCP struct {
	MaxTurns              int `yaml:"max_turns"`
	MaxTurnsPerTenant     int `yaml:"max_turns_per_tenant"`
	MaxTurnsPerPrincipal  int `yaml:"max_turns_per_principal"`
	MaxTokens             int `yaml:"max_tokens"`
	MaxTokensPerTenant    int `yaml:"max_tokens_per_tenant"`
	MaxTokensPerPrincipal int `yaml:"max_tokens_per_principal"`
	MaxTokensPerTurn      int `yaml:"max_tokens_per_turn"`
}

// Bounds are m as the front takes them.
func (m MCP) Bounds() mcpfront.Bounds {
	return mcpfront.Bounds{
		Turns: m.MaxTurns, TurnsPerTenant: m.MaxTurnsPerTenant, TurnsPerPrincipal: m.MaxTurnsPerPrincipal,
		Tokens: m.MaxTokens, TokensPerTenant: m.MaxTokensPerTenant, TokensPerPrincipal: m.MaxTokensPerPrincipal, TokensPerTurn: m.MaxTokensPerTurn,
	}
}

// Cluster is a cluster of nodes on NATS: each node's embedded nats-server
// joins the others by routes, and JetStream replicates the audit stream
// (audit.replicas). NATS is the distributed engine: membership, leader
// election and replication are its (docs/operations.md).
type Cluster struct {
	// Name is the NATS cluster's name. Default "sharedos".
	Name string `yaml:"name"`
	// Nodes are the cluster's nodes.
	Nodes []ClusterNode `yaml:"nodes"`
}

// ClusterNode is one node of a cluster: what differs from node to node.
type ClusterNode struct {
	ID      string `yaml:"id"`
	DataDir string `yaml:"data_dir"` // default <node.data_dir>/<id>
	HTTP    string `yaml:"http"`     // the node's HTTP address; default "off"
	// MCPURL is the node's public MCP URL (node.mcp_url); default
	// node.mcp_url.
	MCPURL string `yaml:"mcp_url"`
	// Host, Port and ClusterPort are the node's embedded server's client
	// and route listeners.
	Host        string `yaml:"host"`
	Port        int    `yaml:"port"`
	ClusterPort int    `yaml:"cluster_port"`
}

// Identity is one party on the bus (see internal/identity).
type Identity struct {
	Name string `yaml:"name"`
	// Role: runtime, audit, provider, node, admin or approver.
	Role string `yaml:"role"`
	// Tenants a runtime acts for or an audit reader reads; "*" for all.
	Tenants []string `yaml:"tenants"`
	// Principals ("tenant/principal") narrow a runtime to these principals.
	Principals []string `yaml:"principals"`
	// Provider is a provider identity's provider id.
	Provider string `yaml:"provider"`
	// OpenRate and CallRate limit a runtime identity's opens and calls on
	// a node, across all principals it acts for (beyond: rate_limited).
	OpenRate Rate `yaml:"open_rate"`
	CallRate Rate `yaml:"call_rate"`
	// Credentials ("tenant/profile") narrow a runtime to these credential
	// profiles; empty: any its principals are bound to.
	Credentials []string `yaml:"credentials"`
	// SharesTurnsWith names the runtime identities that may attach to the
	// turns this runtime opens; empty: none but itself.
	SharesTurnsWith []string `yaml:"shares_turns_with"`
}

// CredentialProfile binds a tenant's credential profile to principals.
type CredentialProfile struct {
	Tenant  string `yaml:"tenant"`
	Profile string `yaml:"profile"`
	// Principals may act with the profile; empty: every principal of the
	// tenant.
	Principals []string `yaml:"principals"`
}

// Node is this node's identity and local endpoints.
type Node struct {
	// ID names the node; turn ids it mints start with it. Default "node-1".
	ID string `yaml:"id"`
	// DataDir holds JetStream's store and the node's keys. Default "./data".
	DataDir string `yaml:"data_dir"`
	// HTTP is the address of /metrics, /healthz and /readyz, and of the
	// MCP front's endpoint (/mcp). Default "127.0.0.1:8321"; "off"
	// disables it.
	HTTP string `yaml:"http"`
	// MCPURL is the public URL of the MCP front's endpoint, as sandboxes
	// reach it ("https://mcp.example.com/mcp"): every execution token's
	// audience and the URL `node turn token` gives. Set it when clients
	// reach the node through a load balancer, a reverse proxy or a public
	// hostname. An absolute http or https URL whose path ends with /mcp
	// (a proxy that adds a prefix strips it: the node serves /mcp); no
	// query, fragment or credentials. Default: derived from node.http
	// (loopback when it listens on every interface). In a cluster it is
	// every node's unless cluster.nodes[].mcp_url sets the node's own.
	MCPURL string `yaml:"mcp_url"`
	// DrainTimeout is how long SIGTERM lets the node's open turns finish
	// before it stops: opens go to the other nodes at once, this node's
	// turns keep being served until they close or this passes (then they
	// are closed, reason shutdown). Default DefaultDrainTimeout (20s) when
	// absent from the file; 0: no wait.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// ShutdownTimeout bounds stopping after the drain: calls in flight,
	// closing the remaining turns, flushing the audit. Default 15s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// CredsDir holds the bus identities' seeds (docs/security.md).
	// Default <data_dir>/creds; in a cluster every node must use the same
	// one (the same identities on every server).
	CredsDir string `yaml:"creds_dir"`
	// The HTTP listener's bounds (docs/operations.md, "The HTTP
	// listener"); zero: the node's defaults. HTTPReadHeaderTimeout bounds
	// reading a request's header (default 5s), HTTPReadTimeout its whole
	// request, body included (30s), HTTPWriteTimeout writing its answer
	// (30s; /mcp moves both to the MCP request's own timeout once its
	// body is read), HTTPIdleTimeout a keep-alive connection's wait for
	// its next request (60s). HTTPMaxHeaderBytes bounds a request's
	// header (64 KiB). HTTPMaxConnections bounds the connections open at
	// once (4096; at most half the process's descriptor limit): the rest
	// wait in the listen backlog until one closes.
	HTTPReadHeaderTimeout Duration `yaml:"http_read_header_timeout"`
	HTTPReadTimeout       Duration `yaml:"http_read_timeout"`
	HTTPWriteTimeout      Duration `yaml:"http_write_timeout"`
	HTTPIdleTimeout       Duration `yaml:"http_idle_timeout"`
	HTTPMaxHeaderBytes    int      `yaml:"http_max_header_bytes"`
	HTTPMaxConnections    int      `yaml:"http_max_connections"`
}

// NATS is how the node reaches NATS.
type NATS struct {
	// URLs of an external NATS cluster; empty starts an embedded server.
	URLs []string `yaml:"urls"`
	// Prefix of every subject. Default "sharedos".
	Prefix string `yaml:"prefix"`
	// Embedded configures the embedded server (used when URLs is empty).
	Embedded Embedded `yaml:"embedded"`
	// Credentials is the node's credentials file for an external cluster:
	// a user nkey seed (.nk) or a decentralized-auth .creds file (JWT and
	// seed). Required when a URL is not on loopback. The embedded server
	// generates every identity's seed into <data_dir>/creds instead.
	Credentials string `yaml:"credentials"`
	// Account is the nodes' NATS account, default "SHAREDOS": runtimes'
	// accounts import the turn subjects from it.
	Account string `yaml:"account"`
	// MaxMessageBytes is the largest NATS message: the embedded server's
	// max_payload, the bound on a request frame, and what a reply must fit
	// in. Default 1 MiB; between MinMessageBytes and MaxMessageBytes. With
	// an external cluster the node refuses to start when the servers'
	// max_payload is smaller.
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// Bounds of nats.max_message_bytes. NATS refuses a max_payload above its
// max_pending (64 MiB); below 64 KiB a reply has too little room beside its
// envelope.
const (
	MinMessageBytes = 64 << 10
	MaxMessageBytes = 64 << 20
)

// Embedded is the embedded nats-server.
type Embedded struct {
	Host string `yaml:"host"` // default 127.0.0.1
	Port int    `yaml:"port"` // default 4222; 0 picks a free port
	// ClusterName, ClusterHost, ClusterPort and Routes join the embedded
	// server to others (set by ForNode from cluster:). Empty: standalone.
	ClusterName string   `yaml:"-"`
	ClusterHost string   `yaml:"-"`
	ClusterPort int      `yaml:"-"`
	Routes      []string `yaml:"-"`
}

// Kernel are the turn kernel's limits.
type Kernel struct {
	StepCeiling        int `yaml:"step_ceiling"`
	MaxInFlightPerTurn int `yaml:"max_in_flight_per_turn"`
	MaxTurns           int `yaml:"max_turns"`
	// MaxTurnsPerPrincipal bounds one principal's open turns on a node
	// (turns of one operation included). Default 1024.
	MaxTurnsPerPrincipal int `yaml:"max_turns_per_principal"`
	// MaxLeasesPerTurn bounds the leases (attached callers) of one turn.
	// Default 64.
	MaxLeasesPerTurn int      `yaml:"max_leases_per_turn"`
	IdleTimeout      Duration `yaml:"idle_timeout"`
	ResolveTimeout   Duration `yaml:"resolve_timeout"`
	CallTimeout      Duration `yaml:"call_timeout"`
	// OpenRate and CallRate limit each principal's opens (and attaches)
	// and calls on a node; beyond them requests are refused rate_limited
	// with retry_after_ms. Absent or zero: no limit.
	OpenRate Rate `yaml:"open_rate"`
	CallRate Rate `yaml:"call_rate"`
}

// Rate is a token bucket: PerSecond on average, Burst at once.
type Rate struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// Limit is r as the limiter takes it.
func (r Rate) Limit() ratelimit.Limit { return ratelimit.Limit{Rate: r.PerSecond, Burst: r.Burst} }

// Audit is the audit stream's policy.
type Audit struct {
	// Durability: "acked" (default) — a call runs only once its
	// tool.invoked is stored by the stream; "async" — events are
	// published without waiting.
	Durability string `yaml:"durability"`
	// AwaitCompletion makes a call's answer wait for its tool.completed
	// to be stored, one more stored commit per call. Default false: the
	// answer waits for its tool.invoked and every earlier record of the
	// turn, and its tool.completed is stored before anything later of
	// the turn is answered or run (docs/audit.md).
	AwaitCompletion bool `yaml:"await_completion"`
	// FailOpen lets calls proceed when the stream cannot take events
	// (default false: they are refused).
	FailOpen bool `yaml:"fail_open"`
	// Stream is the JetStream stream name. Default "SHAREDOS_AUDIT".
	Stream string `yaml:"stream"`
	// MaxAge bounds retention. Default 720h (30 days). MaxAge, MaxBytes,
	// Replicas and DuplicateWindow shape the stream when the node creates
	// it; an existing stream is only checked, never changed
	// (docs/audit.md, "Who owns the stream").
	MaxAge Duration `yaml:"max_age"`
	// MaxBytes bounds the stream's size, the oldest records going first.
	// Default 0: unlimited (max_age alone bounds it).
	MaxBytes int64 `yaml:"max_bytes"`
	// Replicas is the stream's replica count, 1 to 5 (odd: a majority
	// survives); the node refuses an existing stream with fewer. Default
	// 1; a cluster of three nodes sets 3.
	Replicas int `yaml:"replicas"`
	// DuplicateWindow is the stream's deduplication window: a segment or
	// checkpoint published again within it is stored once. The node
	// refuses an existing stream with a shorter one. Default 2m; at least
	// 1s and at most max_age.
	DuplicateWindow Duration `yaml:"duplicate_window"`
	// Sync is how the embedded server makes the stream durable on disk:
	// "always" (default) fsyncs every write, so an acknowledged event
	// survives a machine crash; a duration such as "100ms" fsyncs that
	// often, so a machine crash loses at most that much, for far higher
	// throughput (docs/performance.md has the measured figures). A process
	// crash loses nothing either way. An external cluster's own setting
	// applies there.
	Sync string `yaml:"sync"`
	// CheckpointInterval is how often the node publishes a signed
	// checkpoint of what it wrote (when something changed). Default 5s.
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
	// KeyFile is the node's Ed25519 signing key (PKCS #8 PEM, mode 0600).
	// Default <data_dir>/keys/audit-ed25519.key, created if missing.
	KeyFile string `yaml:"key_file"`
	// SegmentMaxBytes bounds one audit segment (one stream message
	// holding a group of records, docs/audit.md): at least 4 KiB and at
	// most nats.max_message_bytes less 1 KiB. 0 (the default) means
	// SegmentBytes: 512 KiB, or nats.max_message_bytes less 4 KiB when
	// that is smaller.
	SegmentMaxBytes int `yaml:"segment_max_bytes"`
	// SegmentMaxWait is how long the audit writer may wait for more
	// records before a commit. Default 0: it commits as soon as the
	// previous commit is acknowledged (groups grow with the load). At
	// most 1s; docs/performance.md has the measured trade-off.
	SegmentMaxWait Duration `yaml:"segment_max_wait"`
	// CommitsInFlight is how many audit commits the writer may have
	// published and not yet acknowledged at once, 1 to 64. Records are
	// resolved in the order published whatever the depth. Default
	// auditstore.DefaultMaxInFlight; docs/performance.md has the measured
	// trade-off.
	CommitsInFlight int `yaml:"commits_in_flight"`
	// MaxPending bounds the records waiting for the audit writer; beyond
	// it a record waits briefly for room, then is refused overloaded.
	// Default 16384.
	MaxPending int `yaml:"max_pending"`
	// AckTimeout is how long the audit writer waits for the stream to
	// acknowledge one segment before it publishes it again (same segment
	// id: stored once). A segment in flight when the stream's leader is
	// lost is never acknowledged, so this is the stall a leader change
	// costs the calls behind it. Default 1s; between 100ms and
	// retry_window.
	AckTimeout Duration `yaml:"ack_timeout"`
	// RetryWindow is how long the writer keeps publishing a segment the
	// stream has not acknowledged before its records' calls are refused
	// audit_unavailable. Default 10s (half kernel.call_timeout when that
	// is shorter); below kernel.call_timeout, since a call in acked mode
	// waits through it.
	RetryWindow Duration `yaml:"retry_window"`
}

// Principal is a principal and its grants.
type Principal struct {
	Tenant    string                `yaml:"tenant"`
	Principal string                `yaml:"principal"`
	Grants    []authority.GrantSpec `yaml:"grants"`
}

// Provider is a configured provider.
type Provider struct {
	ID string `yaml:"id"`
	// Kind: "static" (tools below, run in process by named handlers),
	// "nats" (a provider reached over NATS) or "mcp" (an MCP server, below).
	Kind     string `yaml:"kind"`
	Required bool   `yaml:"required"`
	Tools    []Tool `yaml:"tools"`
	// Host, for a nats provider, names a provider this node also serves
	// itself, in process but over NATS like any other instance (e.g.
	// "calendar", the example provider). Empty: it runs elsewhere.
	Host string `yaml:"host"`
	// TTL of a hosted provider's advertised revisions. Default
	// DefaultHostedTTL.
	TTL Duration `yaml:"ttl"`
	// MCP, for kind "mcp", is the MCP server this provider puts behind
	// the kernel, as an MCP client inside the node (docs/discovery.md).
	MCP *mcpprovider.Config `yaml:"mcp"`
	// Drift is what a turn does with one of this provider's tools whose
	// contract is not the revision last accepted for the turn's tenant
	// (docs/approvals.md): "adopt" (the default: holds it, and the
	// baseline advances, recorded) or "hold" (leaves it out, pending
	// review, until an approver accepts the new revision).
	Drift string `yaml:"drift,omitempty"`
	// FirstUse, under drift: hold, is what a turn does with a tool that
	// has no accepted revision yet: "trust" (the default: adopted) or
	// "hold" (waits for review like a changed one).
	FirstUse string `yaml:"first_use,omitempty"`
	// RefuseHiddenText leaves out of every turn a tool whose model-facing
	// text (title, description, schemas, annotations) carries invisible
	// or bidirectional-control characters.
	RefuseHiddenText bool `yaml:"refuse_hidden_text,omitempty"`
}

// Tool is a static tool.
type Tool struct {
	Name         string         `yaml:"name"`
	Namespace    string         `yaml:"namespace"`
	Description  string         `yaml:"description"`
	Capability   string         `yaml:"capability"`
	Requirement  string         `yaml:"requirement"`
	Handler      string         `yaml:"handler"`
	InputSchema  map[string]any `yaml:"input_schema"`
	OutputSchema map[string]any `yaml:"output_schema"`
	Annotations  map[string]any `yaml:"annotations"`
}

// Duration is a time.Duration written as "10m" in YAML: the one type,
// shared with providers[].mcp (which this package embeds and cannot
// import it back).
type Duration = mcpprovider.Duration

// DefaultHostedTTL is a hosted provider's ttl when the file does not set
// it: how long the node's own instance honours a revision it advertised.
const DefaultHostedTTL = 5 * time.Minute

// DefaultDrainTimeout is node.drain_timeout when the file does not set it.
const DefaultDrainTimeout = 20 * time.Second

// Load reads and validates a config file. Its relative paths are taken
// relative to the file's directory (ResolvePaths), so the file means the
// same whatever directory a node or the CLI is started in.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, err
	}
	c.ResolvePaths(filepath.Dir(path))
	return c, nil
}

// ResolvePaths joins dir to every relative path of c: node.data_dir and
// node.creds_dir (given or defaulted), cluster.nodes[].data_dir,
// nats.credentials, audit.key_file, and providers[].mcp's dir and
// credentials[].file. Commands and their arguments (providers[].mcp's
// command and args) are not paths of the file and are left as written: a
// child runs in mcp.dir, else in the node's working directory. Absolute
// paths, and every path when dir is "" or ".", are left unchanged.
func (c *Config) ResolvePaths(dir string) {
	if dir == "" || dir == "." {
		return
	}
	at := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	at(&c.Node.DataDir)
	at(&c.Node.CredsDir)
	at(&c.NATS.Credentials)
	at(&c.Audit.KeyFile)
	for i := range c.Cluster.Nodes {
		at(&c.Cluster.Nodes[i].DataDir)
	}
	for i := range c.Providers {
		if m := c.Providers[i].MCP; m != nil {
			at(&m.Dir)
			for j := range m.Credentials {
				at(&m.Credentials[j].File)
			}
		}
	}
}

// Parse decodes YAML strictly (unknown fields are errors), applies
// defaults and validates.
func Parse(b []byte) (*Config, error) {
	var c Config
	// Defaults whose zero means something else ("no wait") are set
	// before decoding, so only an absent field takes them.
	c.Node.DrainTimeout = Duration(DefaultDrainTimeout)
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) defaults() {
	if c.Node.ID == "" {
		c.Node.ID = "node-1"
	}
	if c.Node.DataDir == "" {
		c.Node.DataDir = "./data"
	}
	if c.Node.HTTP == "" {
		c.Node.HTTP = "127.0.0.1:8321"
	}
	if c.Node.ShutdownTimeout == 0 {
		c.Node.ShutdownTimeout = Duration(15 * time.Second)
	}
	if c.NATS.Prefix == "" {
		c.NATS.Prefix = "sharedos"
	}
	if c.NATS.Embedded.Host == "" {
		c.NATS.Embedded.Host = "127.0.0.1"
	}
	if c.NATS.MaxMessageBytes == 0 {
		c.NATS.MaxMessageBytes = 1 << 20
	}
	if c.NATS.Account == "" {
		c.NATS.Account = identity.NodeAccount
	}
	if c.Node.CredsDir == "" {
		c.Node.CredsDir = identity.DefaultDir(c.Node.DataDir)
	}
	if len(c.Cluster.Nodes) > 0 && c.Cluster.Name == "" {
		c.Cluster.Name = "sharedos"
	}
	for i := range c.Cluster.Nodes {
		n := &c.Cluster.Nodes[i]
		if n.DataDir == "" {
			n.DataDir = filepath.Join(c.Node.DataDir, n.ID)
		}
		if n.HTTP == "" {
			n.HTTP = "off"
		}
		if n.Host == "" {
			n.Host = "127.0.0.1"
		}
	}
	if c.Kernel.ResolveTimeout == 0 {
		c.Kernel.ResolveTimeout = Duration(actors.DefaultResolveTimeout)
	}
	if c.Kernel.CallTimeout == 0 {
		c.Kernel.CallTimeout = Duration(actors.DefaultCallTimeout)
	}
	if c.Audit.Durability == "" {
		c.Audit.Durability = auditstore.DurabilityAcked
	}
	if c.Audit.Stream == "" {
		c.Audit.Stream = auditstore.DefaultStream
	}
	for i := range c.Providers {
		if p := &c.Providers[i]; p.Host != "" && p.TTL == 0 {
			p.TTL = Duration(DefaultHostedTTL)
		}
	}
	if c.Audit.Sync == "" {
		c.Audit.Sync = "always"
	}
	if c.Audit.MaxAge == 0 {
		c.Audit.MaxAge = Duration(30 * 24 * time.Hour)
	}
	if c.Audit.CommitsInFlight == 0 {
		c.Audit.CommitsInFlight = auditstore.DefaultMaxInFlight
	}
	if c.Audit.MaxPending == 0 {
		c.Audit.MaxPending = auditstore.DefaultMaxPending
	}
	if c.Audit.RetryWindow == 0 {
		c.Audit.RetryWindow = min(Duration(auditstore.DefaultRetryWindow), c.Kernel.CallTimeout/2)
	}
	if c.Audit.AckTimeout == 0 {
		c.Audit.AckTimeout = min(Duration(auditstore.DefaultAckTimeout), c.Audit.RetryWindow)
	}
	if c.Audit.Replicas == 0 {
		c.Audit.Replicas = 1
	}
	if c.Audit.DuplicateWindow == 0 {
		c.Audit.DuplicateWindow = Duration(auditstore.DuplicateWindow)
	}
	c.Policy.defaults(c.Audit)
}

var (
	idPattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// problems collects what Validate finds: one call per problem, naming
// where it is.
type problems = func(format string, args ...any)

// Validate reports everything wrong with c, each problem naming where
// (all of them, joined: errors.Join). Each section checks itself; the
// checks that relate sections (credentials named by identities and
// providers, the audit bounds that follow nats and kernel) say so.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	c.validateNode(add)
	c.validateNATS(add)
	if err := c.Tracing.Validate(); err != nil {
		add("%v", err)
	}
	c.Audit.validate(add, c.NATS, c.Kernel)
	for _, p := range c.tenantProblems() {
		add("%s", p)
	}
	c.validateIdentities(add)
	c.validateCluster(add)
	c.Kernel.validate(add)
	if err := c.MCP.Bounds().Validate(); err != nil {
		add("mcp: %v", err)
	}
	c.Policy.validate(add)
	if _, err := approval.NewRules(ApprovalSpecs(c.Approvals)); err != nil {
		add("approvals: %v", err)
	}
	principals := c.validatePrincipals(add)
	profiles := c.validateCredentialProfiles(add, principals)
	c.validateIdentityCredentials(add, profiles)
	c.validateProviders(add, profiles)
	return errors.Join(errs...)
}

// validateNode checks node (and nats.prefix, the node's subject prefix).
func (c *Config) validateNode(add problems) {
	if !idPattern.MatchString(c.Node.ID) {
		add("node.id %q must match %s (no dots: it is a subject token)", c.Node.ID, idPattern)
	}
	if !prefixPattern.MatchString(c.NATS.Prefix) {
		add("nats.prefix %q is not a valid subject prefix", c.NATS.Prefix)
	}
	if c.Node.MCPURL != "" {
		if err := checkMCPURL(c.Node.MCPURL); err != nil {
			add("node.mcp_url: %v", err)
		}
		if c.Node.HTTP == "off" && len(c.Cluster.Nodes) == 0 {
			add("node.mcp_url is set but node.http is off: the MCP front is served on the HTTP listener")
		}
	}
	if c.Node.DrainTimeout < 0 {
		add("node.drain_timeout must not be negative (0: no wait)")
	}
	if n := c.Node; n.HTTPReadHeaderTimeout < 0 || n.HTTPReadTimeout < 0 || n.HTTPWriteTimeout < 0 || n.HTTPIdleTimeout < 0 || n.HTTPMaxHeaderBytes < 0 || n.HTTPMaxConnections < 0 {
		add("node.http_* timeouts and bounds must not be negative")
	}
}

// validateNATS checks nats: the bus this node joins.
func (c *Config) validateNATS(add problems) {
	if len(c.NATS.URLs) > 0 && c.NATS.Credentials == "" {
		for _, u := range c.NATS.URLs {
			if !loopbackURL(u) {
				add("nats.urls: %s is not on this machine and nats.credentials is empty: a node connects to a shared bus only as an authenticated identity (docs/security.md)", u)
				break
			}
		}
	}
	if m := c.NATS.MaxMessageBytes; m < MinMessageBytes || m > MaxMessageBytes {
		add("nats.max_message_bytes %d must be between %d (64 KiB) and %d (64 MiB, the most NATS allows)", m, MinMessageBytes, MaxMessageBytes)
	}
}

// validate checks audit; segment_max_bytes follows nats.max_message_bytes
// and retry_window must be below kernel.call_timeout.
func (a Audit) validate(add problems, nats NATS, kernel Kernel) {
	switch a.Durability {
	case "acked", "async":
	default:
		add("audit.durability %q must be acked or async", a.Durability)
	}
	if a.CheckpointInterval < 0 {
		add("audit.checkpoint_interval must not be negative")
	}
	if m := a.SegmentMaxBytes; m != 0 && (m < auditstore.MinSegmentBytes || m > nats.MaxMessageBytes-1<<10) {
		add("audit.segment_max_bytes %d must be between %d and nats.max_message_bytes less 1024 (%d)", m, auditstore.MinSegmentBytes, nats.MaxMessageBytes-1<<10)
	}
	if w := a.SegmentMaxWait; w < 0 || w > Duration(time.Second) {
		add("audit.segment_max_wait %s must be between 0 and 1s", time.Duration(w))
	}
	if n := a.CommitsInFlight; n < 1 || n > auditstore.MaxMaxInFlight {
		add("audit.commits_in_flight %d must be between 1 and %d", n, auditstore.MaxMaxInFlight)
	}
	if a.MaxPending < 0 {
		add("audit.max_pending must not be negative")
	}
	if ack, r := a.AckTimeout, a.RetryWindow; ack < Duration(100*time.Millisecond) || ack > r {
		add("audit.ack_timeout %s must be at least 100ms and at most audit.retry_window (%s)", time.Duration(ack), time.Duration(r))
	}
	if r := a.RetryWindow; r >= kernel.CallTimeout {
		add("audit.retry_window %s must be below kernel.call_timeout (%s): a call in acked mode waits through it", time.Duration(r), time.Duration(kernel.CallTimeout))
	}
	if r := a.Replicas; r < 1 || r > 5 {
		add("audit.replicas %d must be between 1 and 5 (JetStream's most; odd, so that a majority survives)", r)
	}
	if a.MaxBytes < 0 {
		add("audit.max_bytes must not be negative (0: unlimited)")
	}
	if w := a.DuplicateWindow; w < Duration(time.Second) || a.MaxAge > 0 && w > a.MaxAge {
		add("audit.duplicate_window %s must be at least 1s and at most audit.max_age", time.Duration(w))
	}
	if _, err := a.SyncInterval(); err != nil {
		add("%v", err)
	}
}

// validateCluster checks cluster: the embedded servers routed together.
func (c *Config) validateCluster(add problems) {
	if len(c.Cluster.Nodes) > 0 {
		if len(c.NATS.URLs) > 0 {
			add("cluster.nodes describes embedded servers joined by routes; nats.urls an external cluster: use one")
		}
		if !prefixPattern.MatchString(c.Cluster.Name) || strings.Contains(c.Cluster.Name, ".") {
			add("cluster.name %q must be one token of [A-Za-z0-9_-]", c.Cluster.Name)
		}
		seen := map[string]bool{}
		ports := map[string]string{}
		for i, n := range c.Cluster.Nodes {
			if !idPattern.MatchString(n.ID) {
				add("cluster.nodes[%d]: id %q must match %s", i, n.ID, idPattern)
			}
			if seen[n.ID] {
				add("cluster.nodes[%d]: id %s listed twice", i, n.ID)
			}
			seen[n.ID] = true
			if n.MCPURL != "" {
				if err := checkMCPURL(n.MCPURL); err != nil {
					add("cluster.nodes[%d] (%s): mcp_url: %v", i, n.ID, err)
				}
				if n.HTTP == "off" {
					add("cluster.nodes[%d] (%s): mcp_url is set but http is off: the MCP front is served on the HTTP listener", i, n.ID)
				}
			}
			if n.Port <= 0 || n.Port > 65535 || n.ClusterPort <= 0 || n.ClusterPort > 65535 {
				add("cluster.nodes[%d] (%s): port and cluster_port are required (1-65535)", i, n.ID)
			}
			for _, hp := range []string{net.JoinHostPort(n.Host, strconv.Itoa(n.Port)), net.JoinHostPort(n.Host, strconv.Itoa(n.ClusterPort)), n.HTTP} {
				if hp == "off" {
					continue
				}
				if other, taken := ports[hp]; taken {
					add("cluster.nodes[%d] (%s): %s is also %s's", i, n.ID, hp, other)
				}
				ports[hp] = n.ID
			}
		}
	}
}

// validate checks kernel.
func (k Kernel) validate(add problems) {
	if k.ResolveTimeout < 0 || k.CallTimeout < 0 || k.IdleTimeout < 0 {
		add("kernel timeouts must not be negative")
	}
	if k.StepCeiling < 0 || k.MaxInFlightPerTurn < 0 || k.MaxTurns < 0 || k.MaxTurnsPerPrincipal < 0 || k.MaxLeasesPerTurn < 0 {
		add("kernel limits must not be negative")
	}
	for _, r := range []struct {
		name string
		r    Rate
	}{{"open_rate", k.OpenRate}, {"call_rate", k.CallRate}} {
		if r.r.PerSecond < 0 || r.r.Burst < 0 || (r.r.PerSecond > 0) != (r.r.Burst > 0) {
			add("kernel.%s: per_second and burst are both positive (a limit) or both 0 (none)", r.name)
		}
	}
}

// validatePrincipals checks principals and returns the (tenant,
// principal) pairs configured.
func (c *Config) validatePrincipals(add problems) (principals map[[2]string]bool) {
	seen := map[[2]string]bool{}
	for i, p := range c.Principals {
		if p.Tenant == "" || p.Principal == "" {
			add("principals[%d]: tenant and principal are required", i)
		}
		if seen[[2]string{p.Tenant, p.Principal}] {
			add("principals[%d]: %s/%s listed twice", i, p.Tenant, p.Principal)
		}
		seen[[2]string{p.Tenant, p.Principal}] = true
		for _, g := range p.Grants {
			if _, err := g.Compile(); err != nil {
				add("principals[%d]: %v", i, err)
			}
		}
	}
	return seen
}

// validateCredentialProfiles checks credential_profiles against the
// principals and returns the (tenant, profile) pairs configured.
func (c *Config) validateCredentialProfiles(add problems, seen map[[2]string]bool) (profiles map[[2]string]bool) {
	bound := map[[2]string]bool{}
	for i, cp := range c.CredentialProfiles {
		if cp.Tenant == "" || !authority.ProfilePattern.MatchString(cp.Profile) {
			add("credential_profiles[%d]: a tenant and a profile matching %s are required", i, authority.ProfilePattern)
		}
		if bound[[2]string{cp.Tenant, cp.Profile}] {
			add("credential_profiles[%d]: %s/%s listed twice", i, cp.Tenant, cp.Profile)
		}
		bound[[2]string{cp.Tenant, cp.Profile}] = true
		for _, pr := range cp.Principals {
			if !seen[[2]string{cp.Tenant, pr}] {
				add("credential_profiles[%d] (%s/%s): principal %q is not among principals", i, cp.Tenant, cp.Profile, pr)
			}
		}
	}
	return bound
}

// validateIdentities checks identities (their credentials are checked
// against credential_profiles by validateIdentityCredentials).
func (c *Config) validateIdentities(add problems) {
	if _, err := c.IdentitySet(); err != nil {
		add("identities: %v", err)
	}
	for i, id := range c.Identities {
		for _, r := range []Rate{id.OpenRate, id.CallRate} {
			if r.PerSecond < 0 || r.Burst < 0 || (r.PerSecond > 0) != (r.Burst > 0) {
				add("identities[%d] (%s): a rate's per_second and burst are both positive (a limit) or both 0 (none)", i, id.Name)
			}
		}
		if id.Role != string(identity.Runtime) && (id.OpenRate != Rate{} || id.CallRate != Rate{}) {
			add("identities[%d] (%s): rates limit runtime identities only", i, id.Name)
		}
	}
}

// validateIdentityCredentials checks that the credentials identities name
// are among credential_profiles (bound).
func (c *Config) validateIdentityCredentials(add problems, bound map[[2]string]bool) {
	for i, id := range c.Identities {
		for _, cr := range id.Credentials {
			if t, pr, ok := strings.Cut(cr, "/"); ok && !bound[[2]string{t, pr}] {
				add("identities[%d] (%s): credential %q is not among credential_profiles", i, id.Name, cr)
			}
		}
	}
}

// validateProviders checks providers; an mcp provider's credentials must
// be among credential_profiles (bound).
func (c *Config) validateProviders(add problems, bound map[[2]string]bool) {
	ids := map[string]bool{}
	for i, p := range c.Providers {
		if !idPattern.MatchString(p.ID) {
			add("providers[%d]: id %q must match %s", i, p.ID, idPattern)
		}
		if ids[p.ID] {
			add("providers[%d]: id %q listed twice", i, p.ID)
		}
		ids[p.ID] = true
		switch p.Kind {
		case "static":
			if len(p.Tools) == 0 {
				add("providers[%d] (%s): a static provider needs tools", i, p.ID)
			}
		case "nats":
			if len(p.Tools) > 0 {
				add("providers[%d] (%s): a nats provider's tools come from the provider, not the config", i, p.ID)
			}
			if p.TTL < 0 {
				add("providers[%d] (%s): ttl must not be negative", i, p.ID)
			}
		case "mcp":
			if p.MCP == nil {
				add("providers[%d] (%s): an mcp provider needs mcp: (transport, url or command, ...)", i, p.ID)
			} else if err := p.MCP.Validate(p.ID); err != nil {
				add("providers[%d] (%s): mcp: %v", i, p.ID, err)
			} else {
				for j, cr := range p.MCP.Credentials {
					if !bound[[2]string{cr.Tenant, cr.Profile}] {
						add("providers[%d] (%s): mcp: credentials[%d]: %s/%s is not among credential_profiles: no turn could use it", i, p.ID, j, cr.Tenant, cr.Profile)
					}
				}
			}
			if len(p.Tools) > 0 {
				add("providers[%d] (%s): an mcp provider's tools come from its server, not the config", i, p.ID)
			}
		default:
			add("providers[%d] (%s): kind %q must be static, nats or mcp", i, p.ID, p.Kind)
		}
		if p.MCP != nil && p.Kind != "mcp" {
			add("providers[%d] (%s): mcp is only for mcp providers", i, p.ID)
		}
		if p.Host != "" && p.Kind != "nats" {
			add("providers[%d] (%s): host is only for nats providers", i, p.ID)
		}
		if p.Drift != "" && p.Drift != "adopt" && p.Drift != "hold" {
			add("providers[%d] (%s): drift %q must be adopt or hold", i, p.ID, p.Drift)
		}
		if p.FirstUse != "" && p.FirstUse != "trust" && p.FirstUse != "hold" {
			add("providers[%d] (%s): first_use %q must be trust or hold", i, p.ID, p.FirstUse)
		}
		if p.FirstUse == "hold" && p.Drift != "hold" {
			add("providers[%d] (%s): first_use: hold needs drift: hold (an adopting provider reviews nothing)", i, p.ID)
		}
	}
}

// checkMCPURL checks a public URL of the MCP front (node.mcp_url).
func checkMCPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%q must be an absolute http or https URL (\"https://mcp.example.com/mcp\")", raw)
	case u.Hostname() == "":
		return fmt.Errorf("%q names no host", raw)
	case u.User != nil:
		return fmt.Errorf("%s://%s…: a URL with credentials cannot be a token's audience", u.Scheme, u.Hostname())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%q must have no query or fragment", raw)
	case !strings.HasSuffix(u.Path, mcpfront.Path):
		return fmt.Errorf("%q: the path %q must end with %s, where the node serves the endpoint (a proxy that adds a prefix strips it)", raw, u.Path, mcpfront.Path)
	}
	return nil
}

// loopbackURL reports whether a NATS URL names a loopback host.
func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	h := u.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// EffectiveIdentities are the configured identities with the implicit
// ones added: the node ("node"), a provider identity "provider-<id>" for
// each nats provider no listed identity serves, and — when none is
// listed — a runtime "runtime" and an audit reader "auditor" bound to the
// tenants of principals, and a policy admin "admin".
func (c *Config) EffectiveIdentities() []identity.Identity {
	var out []identity.Identity
	hasRole := map[identity.Role]bool{}
	served := map[string]bool{}
	names := map[string]bool{}
	for _, id := range c.Identities {
		out = append(out, identity.Identity{Name: id.Name, Role: identity.Role(id.Role), Tenants: id.Tenants, Principals: id.Principals, Provider: id.Provider,
			Credentials: id.Credentials, SharesTurnsWith: id.SharesTurnsWith})
		hasRole[identity.Role(id.Role)] = true
		names[id.Name] = true
		if id.Role == string(identity.Provider) {
			served[id.Provider] = true
		}
	}
	add := func(id identity.Identity) {
		if !names[id.Name] {
			out = append(out, id)
			names[id.Name] = true
		}
	}
	if !hasRole[identity.Node] {
		add(identity.Identity{Name: DefaultNodeIdentity, Role: identity.Node})
	}
	for _, p := range c.Providers {
		if p.Kind == "nats" && !served[p.ID] {
			add(identity.Identity{Name: "provider-" + p.ID, Role: identity.Provider, Provider: p.ID})
		}
	}
	if len(c.Identities) == 0 {
		var tenants []string
		for _, p := range c.Principals {
			if !slices.Contains(tenants, p.Tenant) {
				tenants = append(tenants, p.Tenant)
			}
		}
		if len(tenants) > 0 {
			add(identity.Identity{Name: DefaultRuntimeIdentity, Role: identity.Runtime, Tenants: tenants})
			// The operator's reader: the whole stream, checkpoints included
			// (node audit tail/export/verify).
			add(identity.Identity{Name: DefaultAuditIdentity, Role: identity.Audit, Tenants: []string{identity.AllTenants}})
			// The operator's policy admin (node policy).
			add(identity.Identity{Name: DefaultAdminIdentity, Role: identity.Admin})
		}
	}
	return out
}

// The names of the identities a config has without listing them.
const (
	DefaultNodeIdentity    = "node"
	DefaultRuntimeIdentity = "runtime"
	DefaultAuditIdentity   = "auditor"
	DefaultAdminIdentity   = "admin"
)

// Bus is what the bus's identity configuration needs to know of this
// config (identity.ServerConfig).
func (c *Config) Bus() identity.Bus {
	return identity.Bus{Prefix: c.NATS.Prefix, Account: c.NATS.Account, Stream: c.Audit.Stream,
		ResponseTTL: time.Duration(c.Kernel.CallTimeout) + time.Minute}
}

// ForNode returns the config of the cluster node id: node.id, data_dir
// and http, and the embedded server's listeners and routes, from its
// cluster.nodes entry; everything else is shared. Without cluster.nodes it
// returns c itself when id is "" or node.id.
func (c *Config) ForNode(id string) (*Config, error) {
	if len(c.Cluster.Nodes) == 0 {
		if id != "" && id != c.Node.ID {
			return nil, fmt.Errorf("config: --node %s: the config describes one node, %s (no cluster.nodes)", id, c.Node.ID)
		}
		return c, nil
	}
	if id == "" {
		return nil, fmt.Errorf("config: the config describes a cluster: name the node to run (--node %s, …)", c.Cluster.Nodes[0].ID)
	}
	i := slices.IndexFunc(c.Cluster.Nodes, func(n ClusterNode) bool { return n.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("config: no node %q in cluster.nodes", id)
	}
	n := c.Cluster.Nodes[i]
	out := *c
	out.Node.ID, out.Node.DataDir, out.Node.HTTP = n.ID, n.DataDir, n.HTTP
	if n.MCPURL != "" {
		out.Node.MCPURL = n.MCPURL
	}
	out.NATS.Embedded.Host, out.NATS.Embedded.Port = n.Host, n.Port
	out.NATS.Embedded.ClusterName, out.NATS.Embedded.ClusterHost, out.NATS.Embedded.ClusterPort = c.Cluster.Name, n.Host, n.ClusterPort
	if out.Audit.KeyFile == "" {
		// One key for the cluster: it signs every node's execution grants
		// and checkpoints, so a provider any node hosts trusts a call any
		// node decided (docs/operations.md).
		out.Audit.KeyFile = auditstore.DefaultKeyFile(c.Node.DataDir)
	}
	out.NATS.Embedded.Routes = nil
	for _, o := range c.Cluster.Nodes {
		if o.ID != n.ID {
			out.NATS.Embedded.Routes = append(out.NATS.Embedded.Routes, fmt.Sprintf("nats-route://%s", net.JoinHostPort(o.Host, strconv.Itoa(o.ClusterPort))))
		}
	}
	return &out, nil
}

// IdentitySet validates and indexes EffectiveIdentities.
func (c *Config) IdentitySet() (*identity.Set, error) {
	return identity.NewSet(c.EffectiveIdentities())
}

// IdentityRates are the runtime identities' rate limits, by name.
func (c *Config) IdentityRates() (open, call map[string]ratelimit.Limit) {
	open, call = map[string]ratelimit.Limit{}, map[string]ratelimit.Limit{}
	for _, id := range c.Identities {
		if id.OpenRate != (Rate{}) {
			open[id.Name] = id.OpenRate.Limit()
		}
		if id.CallRate != (Rate{}) {
			call[id.Name] = id.CallRate.Limit()
		}
	}
	return open, call
}

// SegmentBytes is the audit segment bound in effect: audit.segment_max_bytes,
// or when 0 the default that follows nats.max_message_bytes.
func (c *Config) SegmentBytes() int {
	if c.Audit.SegmentMaxBytes != 0 {
		return c.Audit.SegmentMaxBytes
	}
	return min(auditstore.DefaultMaxSegmentBytes, c.NATS.MaxMessageBytes-4<<10)
}

// SyncInterval is audit.sync as a duration; 0 means "always".
func (a Audit) SyncInterval() (time.Duration, error) {
	if a.Sync == "always" {
		return 0, nil
	}
	d, err := time.ParseDuration(a.Sync)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("audit.sync %q must be \"always\" or a positive duration", a.Sync)
	}
	return d, nil
}

// CredentialPolicy builds the credential-profile bindings.
func (c *Config) CredentialPolicy() (*authority.StaticCredentials, error) {
	bs := make([]authority.CredentialBinding, len(c.CredentialProfiles))
	for i, cp := range c.CredentialProfiles {
		bs[i] = authority.CredentialBinding{Tenant: cp.Tenant, Profile: cp.Profile, Principals: cp.Principals}
	}
	return authority.NewStaticCredentials(bs)
}

// AuthoritySource builds the static grant source.
func (c *Config) AuthoritySource() (*authority.StaticSource, error) {
	m := map[[2]string][]authority.GrantSpec{}
	for _, p := range c.Principals {
		m[[2]string{p.Tenant, p.Principal}] = p.Grants
	}
	return authority.NewStaticSource(m)
}

// StaticProviders builds the static providers, binding each tool to its
// named handler from handlers (see providers.Builtins).
func (c *Config) StaticProviders(handlers map[string]providers.Handler) ([]*providers.Static, error) {
	var out []*providers.Static
	for _, p := range c.Providers {
		if p.Kind != "static" {
			continue
		}
		var tools []providers.StaticTool
		for _, t := range p.Tools {
			h, ok := handlers[t.Handler]
			if !ok {
				return nil, fmt.Errorf("config: provider %s tool %s: unknown handler %q", p.ID, t.Name, t.Handler)
			}
			def, err := t.definition()
			if err != nil {
				return nil, fmt.Errorf("config: provider %s tool %s: %w", p.ID, t.Name, err)
			}
			tools = append(tools, providers.StaticTool{Definition: def, Handler: h})
		}
		s, err := providers.NewStatic(p.ID, tools)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Required lists the providers configured as required.
func (c *Config) Required() []string {
	var out []string
	for _, p := range c.Providers {
		if p.Required {
			out = append(out, p.ID)
		}
	}
	return out
}

func (t Tool) definition() (catalog.Definition, error) {
	raw := func(m map[string]any) (json.RawMessage, error) {
		if m == nil {
			return nil, nil
		}
		return json.Marshal(m)
	}
	in, err := raw(t.InputSchema)
	if err != nil {
		return catalog.Definition{}, err
	}
	out, err := raw(t.OutputSchema)
	if err != nil {
		return catalog.Definition{}, err
	}
	ann, err := raw(t.Annotations)
	if err != nil {
		return catalog.Definition{}, err
	}
	return catalog.Definition{
		Name: t.Name, Namespace: t.Namespace, Description: t.Description, Capability: t.Capability,
		Requirement: t.Requirement, InputSchema: in, OutputSchema: out, Annotations: ann,
	}, nil
}
