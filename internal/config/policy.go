package config

import "time"

// Policy is where the node keeps its policy — principals' grants,
// credential-profile bindings, providers and identities: a JetStream
// key-value bucket, replicated like the audit stream, that cluster.yaml's
// policy sections seed on the first start (docs/operations.md, "Changing
// policy").
type Policy struct {
	// Bucket names the key-value bucket. Default "SHAREDOS_POLICY".
	Bucket string `yaml:"bucket"`
	// Replicas is the bucket's replica count when the node creates it;
	// the node refuses an existing bucket with fewer. Default
	// audit.replicas.
	Replicas int `yaml:"replicas"`
	// MaxStaleness bounds how long a node goes on deciding without
	// confirming that its view of the bucket is current: beyond it, a
	// listing or call is refused policy_stale (so a node cut off from the
	// bucket's leader stops honouring a grant revoked meanwhile within
	// this bound). Default 30s: above the time the bucket's replicas take
	// to elect a new leader when theirs is lost (JetStream's election
	// timeout is 4–9 s, plus catching up and a probe interval), so a
	// leader change never makes the majority side refuse; between 100ms
	// and 10m.
	MaxStaleness Duration `yaml:"max_staleness"`
	// Source says what rules once the bucket holds policy. "file"
	// (default): this file's policy sections must equal the bucket's, or
	// the node refuses to start (reconcile with `node policy diff`, then
	// `node policy import` or `node policy export`). "store": the bucket
	// rules and this file's policy sections only seed an empty bucket.
	Source string `yaml:"source"`
}

// The policy sources.
const (
	PolicyFromFile  = "file"
	PolicyFromStore = "store"
)

func (p *Policy) defaults(a Audit) {
	if p.Bucket == "" {
		p.Bucket = "SHAREDOS_POLICY"
	}
	if p.Replicas == 0 {
		p.Replicas = a.Replicas
	}
	if p.MaxStaleness == 0 {
		p.MaxStaleness = Duration(30 * time.Second)
	}
	if p.Source == "" {
		p.Source = PolicyFromFile
	}
}

func (p Policy) validate(add func(format string, args ...any)) {
	if !prefixPattern.MatchString(p.Bucket) || len(p.Bucket) > 64 {
		add("policy.bucket %q must be one token of [A-Za-z0-9_-], at most 64 bytes", p.Bucket)
	}
	for _, c := range p.Bucket {
		if c == '.' {
			add("policy.bucket %q must be one token of [A-Za-z0-9_-], at most 64 bytes", p.Bucket)
			break
		}
	}
	if p.Replicas < 1 || p.Replicas > 5 {
		add("policy.replicas %d must be between 1 and 5", p.Replicas)
	}
	if m := time.Duration(p.MaxStaleness); m < 100*time.Millisecond || m > 10*time.Minute {
		add("policy.max_staleness %s must be between 100ms and 10m", m)
	}
	if p.Source != PolicyFromFile && p.Source != PolicyFromStore {
		add("policy.source %q must be file or store", p.Source)
	}
}
