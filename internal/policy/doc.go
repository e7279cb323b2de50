// Package policy keeps a cluster's policy — every principal's grants,
// every credential-profile binding, every provider and every bus identity
// — as live, replicated data: one JetStream key-value bucket, one key per
// item, each value validated exactly as cluster.yaml's sections are.
//
// Keys are "grants.<tenant>.<principal>", "credentials.<tenant>.<profile>",
// "providers.<id>" and "identities.<name>" (a name that is not one token
// of [A-Za-z0-9_-] is written "=" and its base64url form). A value is the
// item as cluster.yaml writes it (config.Principal, CredentialProfile,
// Provider, Identity), stored as canonical JSON in an envelope naming who
// wrote it and when. One bucket gives one revision order over the whole
// policy, so "this node has applied revision R" is one number.
//
// Every write names the revision it expects (0: the key holds nothing), so
// two administrators cannot silently overwrite each other: the second is
// refused with a *ConflictError carrying the current revision. A write
// that would leave the policy invalid as a whole is refused before it is
// stored, and every stored change is handed to Options.Record (the
// policy.changed audit event).
//
// A View watches the bucket and keeps an authority.Live equal to it: new
// turns resolve the grants as they are now, and turns already open judge
// the grants they hold against it at every decision. The view confirms
// itself current by asking the bucket's leader for its last revision; a
// view that cannot, for longer than its staleness bound, makes decisions
// refuse policy_stale.
package policy
