package mcpprovider

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/sharedos/sharedos/authority"
)

// Config is one MCP server: how to reach it, with which credentials, how
// long its answers are trusted, and the limits its tools must meet. It is
// providers[].mcp in cluster.yaml and the flags of cmd/mcp-provider.
type Config struct {
	// Transport is "http" (streamable HTTP at URL), "stdio" (Command
	// started as a child process per credential profile) or "memory" (an
	// in-process server the host knows by the name in Server).
	Transport string `yaml:"transport"`
	URL       string `yaml:"url"`
	// Headers are sent on every HTTP request. Not secret: a credential
	// goes in Credentials, never here.
	Headers map[string]string `yaml:"headers"`

	// Server names an MCP server the host runs in its own process,
	// reached over an in-memory transport (transport "memory"): a real
	// MCP session, without a child process or a port.
	Server string `yaml:"server"`

	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	Dir     string            `yaml:"dir"`

	// Credentials are the credential profiles this server may be used
	// with, each a tenant's own. A turn's (tenant, credential profile)
	// picks one; a turn naming no profile, or one not listed for its
	// tenant, gets no tools (auth_required) and never another profile's
	// or another tenant's. With no credentials at all the server is
	// anonymous and every turn shares one session and cache.
	Credentials []Credential `yaml:"credentials"`

	// TTL is how long a tools/list answer is fresh when the server does
	// not say (protocol revisions before 2026-07-28). Default 60s. On
	// 2026-07-28 servers the answer's ttlMs rules, and a missing one is 0.
	TTL Duration `yaml:"ttl"`
	// ConnectTimeout bounds connecting and initializing. Default 10s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// CallTimeout bounds one tools/call (within the caller's deadline).
	// Default 30s.
	CallTimeout Duration `yaml:"call_timeout"`
	// ListTimeout bounds one discovery (every page). Default 30s.
	ListTimeout Duration `yaml:"list_timeout"`
	// ProtocolVersion asks for a protocol revision (default: the SDK's
	// latest; the server may negotiate down).
	ProtocolVersion string `yaml:"protocol_version"`

	// Discovery is when the server's tools are discovered: "lazy"
	// (default) when a turn first asks for them, or "eager": at start, for
	// every configured credential profile (the one anonymous session when
	// there are none), and again before each snapshot's TTL runs out (at
	// three quarters of it; a TTL of 0 is re-taken every ttl), so turns
	// find a started server and a fresh snapshot and never wait on a cold
	// start. A private (per-principal) answer cannot be shared: for those
	// eager keeps the session started.
	Discovery string `yaml:"discovery"`

	// Capability is the prefix of the capability each tool requires:
	// <capability>.<tool name>. Default "mcp.<server id>".
	Capability string `yaml:"capability"`
	// Requirement is the resource template each tool's calls are
	// authorized on; "{tool}" stands for the tool name. Default
	// "mcp/<server id>/{tool}".
	Requirement string `yaml:"requirement"`

	Limits Limits `yaml:"limits"`

	// MaxPrincipals bounds the principals of per-principal OAuth profiles
	// whose session and snapshots are held in memory (default 1,024);
	// PrincipalIdle is how long one unused is kept (default 30m). Past
	// either, the least recently used not in use is let go: its session
	// closed, its next turn connects and discovers again.
	MaxPrincipals int      `yaml:"max_principals"`
	PrincipalIdle Duration `yaml:"principal_idle"`
}

// Credential is one credential profile: where its secret is read from
// and how it is presented. The secret is read when a session for the
// profile is opened; it is never logged, audited, cached on or sent to
// another server.
type Credential struct {
	// Tenant and Profile are whose credential this is: the stable,
	// non-secret (AccessContext.Tenant, AccessContext.CredentialProfile).
	// The same profile name in two tenants is two credentials; a secret is
	// never picked by the profile name alone.
	Tenant  string `yaml:"tenant"`
	Profile string `yaml:"profile"`
	// File or Env names where the secret is: a file (trailing whitespace
	// trimmed) or an environment variable of this process.
	File string `yaml:"file"`
	Env  string `yaml:"env"`
	// Header (http): the header that carries it, default Authorization;
	// Prefix is put before it, default "Bearer " for Authorization.
	Header string `yaml:"header"`
	Prefix string `yaml:"prefix"`
	// EnvVar (stdio): the child's environment variable that carries it.
	EnvVar string `yaml:"env_var"`
	// OAuth, instead of File or Env: the profile authorizes with OAuth 2.1
	// (http servers only) and its tokens live in the node's OAuth store.
	OAuth *OAuth `yaml:"oauth"`
}

// OAuth is how an OAuth credential profile authorizes (internal/oauth).
// The server's authorization server is discovered from the server
// (protected-resource metadata), unless Issuer pins it.
type OAuth struct {
	// Flow is "client_credentials" (a service: one grant for the profile)
	// or "authorization_code" (a person, with PKCE: each principal
	// authorizes their own account with `node oauth login`, unless Shared).
	Flow     string `yaml:"flow"`
	ClientID string `yaml:"client_id"`
	// ClientSecretFile or ClientSecretEnv name where the client secret is
	// (neither: a public client, PKCE only — authorization_code).
	ClientSecretFile string `yaml:"client_secret_file"`
	ClientSecretEnv  string `yaml:"client_secret_env"`
	// Scopes asked for (default: what the server's challenge or metadata names).
	Scopes []string `yaml:"scopes"`
	// Issuer pins the authorization server: no other gets the secret.
	Issuer string `yaml:"issuer"`
	// Shared (authorization_code): one person's grant serves every
	// principal of the profile. Default: one grant per principal.
	Shared bool `yaml:"shared"`
}

// perPrincipal: each principal holds their own grant.
func (o *OAuth) perPrincipal() bool { return o.Flow == "authorization_code" && !o.Shared }

// clientSecret reads the client secret ("" for a public client). Its
// errors never contain it.
func (o *OAuth) clientSecret() (string, error) {
	if o.ClientSecretFile == "" && o.ClientSecretEnv == "" {
		return "", nil
	}
	return (&Credential{Profile: "oauth client", File: o.ClientSecretFile, Env: o.ClientSecretEnv}).secret()
}

// Limits bound what one server may send. Zero fields take the defaults.
type Limits struct {
	// MaxTools bounds the tools of one listing (all pages). Default 10,000.
	MaxTools int `yaml:"max_tools"`
	// MaxPages bounds the pages of one listing. Default 1,000.
	MaxPages int `yaml:"max_pages"`
	// MaxResponseBytes bounds one answer on the wire. Default 16 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// MaxToolBytes bounds one tool's JSON in a listing. Default 128 KiB.
	MaxToolBytes int `yaml:"max_tool_bytes"`
	// MaxCatalogBytes bounds the tools' JSON of one listing. Default 32 MiB.
	MaxCatalogBytes int `yaml:"max_catalog_bytes"`
	// MaxSchemaBytes, MaxSchemaDepth and MaxSchemaNodes bound each schema
	// (catalog.Limits; the node-visit budget counts every subschema, each
	// $ref as what it points at). Defaults 64 KiB, 32, 2,048.
	MaxSchemaBytes int `yaml:"max_schema_bytes"`
	MaxSchemaDepth int `yaml:"max_schema_depth"`
	MaxSchemaNodes int `yaml:"max_schema_nodes"`
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxTools, 10000)
	def(&l.MaxPages, 1000)
	def(&l.MaxResponseBytes, 16<<20)
	def(&l.MaxToolBytes, 128<<10)
	def(&l.MaxCatalogBytes, 32<<20)
	return l
}

// Duration is a time.Duration written as "10m" in YAML.
type Duration time.Duration

// MarshalYAML writes the duration as UnmarshalYAML reads it ("5m0s"), so
// a configuration written back (a policy store's value) reads the same.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// IDPattern is what a server id must match (it names NATS subjects and
// prefixes the model-facing aliases).
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

var profilePattern = authority.ProfilePattern

// Validate reports everything wrong with c for server id.
func (c *Config) Validate(id string) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !IDPattern.MatchString(id) {
		add("server id %q must match %s", id, IDPattern)
	}
	switch c.Transport {
	case "http":
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("url %q must be an http(s) URL", c.URL)
		} else if u.User != nil {
			add("url must not carry credentials; use credentials[]")
		}
		if c.Command != "" || len(c.Args) > 0 {
			add("command and args are for stdio servers")
		}
		for k := range c.Headers {
			if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Cookie") {
				add("header %s carries a credential; use credentials[]", k)
			}
		}
	case "memory":
		if c.Server == "" {
			add("a memory server names the in-process server it runs (server)")
		}
		if c.URL != "" || c.Command != "" {
			add("url and command are not for memory servers")
		}
	case "stdio":
		if c.Command == "" {
			add("a stdio server needs a command")
		}
		if c.URL != "" || len(c.Headers) > 0 {
			add("url and headers are for http servers")
		}
	default:
		add("transport %q must be http, stdio or memory", c.Transport)
	}
	seen := map[string]bool{}
	for i, cr := range c.Credentials {
		if cr.Tenant == "" {
			add("credentials[%d] (%s): tenant is required: a credential is one tenant's", i, cr.Profile)
		}
		if !profilePattern.MatchString(cr.Profile) {
			add("credentials[%d]: profile %q must match %s", i, cr.Profile, profilePattern)
		}
		if seen[cr.key()] {
			add("credentials[%d]: %s listed twice", i, cr.key())
		}
		seen[cr.key()] = true
		if o := cr.OAuth; o != nil {
			switch {
			case c.Transport != "http":
				add("credentials[%d] (%s): oauth is for http servers", i, cr.Profile)
			case cr.File != "" || cr.Env != "" || cr.Header != "" || cr.Prefix != "":
				add("credentials[%d] (%s): an oauth credential has no file, env, header or prefix: its token is the bearer", i, cr.Profile)
			case o.Flow != "client_credentials" && o.Flow != "authorization_code":
				add("credentials[%d] (%s): oauth.flow %q must be client_credentials or authorization_code", i, cr.Profile, o.Flow)
			case o.ClientID == "":
				add("credentials[%d] (%s): oauth.client_id is required", i, cr.Profile)
			case o.ClientSecretFile != "" && o.ClientSecretEnv != "":
				add("credentials[%d] (%s): at most one of oauth.client_secret_file and client_secret_env", i, cr.Profile)
			case o.Flow == "client_credentials" && o.ClientSecretFile == "" && o.ClientSecretEnv == "":
				add("credentials[%d] (%s): client_credentials needs a client secret", i, cr.Profile)
			case o.Flow == "client_credentials" && o.Shared:
				add("credentials[%d] (%s): a client_credentials grant is always the profile's: shared is for authorization_code", i, cr.Profile)
			}
			if o.Issuer != "" {
				if u, err := url.Parse(o.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
					add("credentials[%d] (%s): oauth.issuer %q must be an http(s) URL", i, cr.Profile, o.Issuer)
				}
			}
			continue
		}
		if (cr.File == "") == (cr.Env == "") {
			add("credentials[%d] (%s): exactly one of file and env", i, cr.Profile)
		}
		if c.Transport == "stdio" && cr.EnvVar == "" {
			add("credentials[%d] (%s): a stdio server takes its credential in env_var", i, cr.Profile)
		}
	}
	switch c.Discovery {
	case "", DiscoveryLazy, DiscoveryEager:
	default:
		add("discovery %q must be lazy or eager", c.Discovery)
	}
	if c.TTL < 0 || c.ConnectTimeout < 0 || c.CallTimeout < 0 || c.ListTimeout < 0 {
		add("ttl and timeouts must not be negative")
	}
	if c.Requirement != "" && !strings.Contains(c.Requirement, "{tool}") {
		add("requirement %q must contain {tool}: one server's tools are told apart by it", c.Requirement)
	}
	return errors.Join(errs...)
}

// Discovery modes (Config.Discovery).
const (
	DiscoveryLazy  = "lazy"
	DiscoveryEager = "eager"
)

func (c Config) withDefaults(id string) Config {
	if c.Discovery == "" {
		c.Discovery = DiscoveryLazy
	}
	if c.TTL == 0 {
		c.TTL = Duration(60 * time.Second)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = Duration(10 * time.Second)
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = Duration(30 * time.Second)
	}
	if c.ListTimeout == 0 {
		c.ListTimeout = Duration(30 * time.Second)
	}
	if c.Capability == "" {
		c.Capability = "mcp." + id
	}
	if c.Requirement == "" {
		c.Requirement = "mcp/" + id + "/{tool}"
	}
	c.Limits = c.Limits.withDefaults()
	if c.MaxPrincipals <= 0 {
		c.MaxPrincipals = 1024
	}
	if c.PrincipalIdle <= 0 {
		c.PrincipalIdle = Duration(30 * time.Minute)
	}
	return c
}

// key is how a credential is told apart: "tenant/profile" (a profile
// name has no "/", so the last one splits it).
func (cr *Credential) key() string { return cr.Tenant + "/" + cr.Profile }

// profileFor picks the configured credential for a turn's tenant and
// profile: ("", nil, true) for an anonymous server (one shared profile),
// the credential configured for exactly that tenant and profile, and
// ok=false for anything else — no profile named, or one not configured
// for the tenant (whatever other tenants have of that name).
// eagerAccesses are the access contexts eager discovery asks with: one
// per credential profile (its tenant and profile, no principal), or one
// anonymous one.
func (c *Config) eagerAccesses() []authority.AccessContext {
	if len(c.Credentials) == 0 {
		return []authority.AccessContext{{}}
	}
	out := make([]authority.AccessContext, 0, len(c.Credentials))
	for _, cr := range c.Credentials {
		if cr.OAuth != nil && cr.OAuth.perPrincipal() {
			continue // no principal to discover as: each one's turns discover
		}
		out = append(out, authority.AccessContext{Tenant: cr.Tenant, CredentialProfile: cr.Profile})
	}
	return out
}

func (c *Config) profileFor(tenant, name string) (key string, cred *Credential, ok bool) {
	if len(c.Credentials) == 0 {
		return "", nil, true
	}
	key = tenant + "/" + name
	if name == "" {
		return key, nil, false
	}
	for i := range c.Credentials {
		if cr := &c.Credentials[i]; cr.Tenant == tenant && cr.Profile == name {
			return key, cr, true
		}
	}
	return key, nil, false
}

// secret reads the credential's secret. Its errors never contain it.
func (cr *Credential) secret() (string, error) {
	if cr.File != "" {
		b, err := os.ReadFile(cr.File)
		if err != nil {
			return "", fmt.Errorf("credential %s: reading its file: %w", cr.Profile, errors.Unwrap(err))
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", fmt.Errorf("credential %s: its file is empty", cr.Profile)
		}
		return s, nil
	}
	s, ok := os.LookupEnv(cr.Env)
	if !ok || s == "" {
		return "", fmt.Errorf("credential %s: environment variable %s is unset", cr.Profile, cr.Env)
	}
	return s, nil
}

// headers are the HTTP headers of a session for cred (nil: anonymous).
func (c *Config) headers(cred *Credential) (http.Header, error) {
	h := http.Header{}
	for k, v := range c.Headers {
		h.Set(k, v)
	}
	if cred == nil || cred.OAuth != nil {
		return h, nil // an OAuth token is put on each request (teeRoundTripper.bearer)
	}
	s, err := cred.secret()
	if err != nil {
		return nil, err
	}
	name, prefix := cred.Header, cred.Prefix
	if name == "" {
		name = "Authorization"
		if prefix == "" {
			prefix = "Bearer "
		}
	}
	h.Set(name, prefix+s)
	return h, nil
}
