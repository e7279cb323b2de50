// Package mcpprovider puts one MCP server behind the kernel's provider
// port (providers.ContextToolProvider), as an MCP client built with the
// official SDK. It runs inside a node (cluster.yaml kind "mcp") or as its
// own process over NATS (cmd/mcp-provider, through the provider SDK), so
// a misbehaving server's failures can be kept out of the node.
//
// Discovery follows docs/discovery.md ("How MCP Tool Discovery Works"):
//
//   - Identity is server-scoped: (configured server id, tool name). The
//     server's self-reported serverInfo is never used; the namespace, and
//     so the model-facing alias, is the server id.
//   - Each tool is a normalized record (Tool) with a source revision: the
//     SHA-256 of the RFC 8785 form of the tool's JSON exactly as tools/list
//     sent it, taken from a tee under the SDK (the SDK's decoded Tool does
//     not round-trip the wire).
//   - Every schema is bounded before a tool is accepted (catalog.Normalize:
//     bytes, depth, a node-visit budget over every subschema, no remote
//     $ref, no $ref cycles, required names that exist, type object at the
//     top); a tool that fails is left out and reported, the rest served.
//   - Pagination is followed to the end (the SDK's Tools iterator) within
//     a bound on tools, pages and bytes; past it the listing fails whole.
//   - The cache is keyed by (server, credential profile, protocol
//     revision, cacheScope) — never a secret — with ttlMs/cacheScope
//     honoured on 2026-07-28 servers and a configured TTL for older ones.
//     The SDK's own list cache is defeated (the tee shows it ttlMs 0).
//   - notifications/tools/list_changed, a dropped stream or a reconnect is
//     a hint: the snapshot goes stale and an authoritative re-discovery
//     follows; a notification never edits the catalogue.
//   - A discovery state machine per (server, profile) — unknown, loading,
//     ready, stale, refreshing, auth_required, incompatible, failed — and a
//     failure class for every error (Status).
//   - Before a call, the turn's pinned contract is compared with the
//     current one: a difference or a removal is capability_changed and the
//     server is not called. A tool not annotated read-only is never run on
//     an expired snapshot: it is refreshed first. Annotations are advisory.
//   - Credentials are per profile, read from a file or an environment
//     variable named in the config, sent only to their own server, never
//     logged, put in errors, statuses or audit, nor inherited by another
//     server's child process.
//   - An OAuth profile (Credential.OAuth; internal/oauth) sends the access
//     token of its grant — the profile's, or the principal's — on each
//     request; the grant's identity is part of the cache key, so a
//     re-authorization or a change of scopes re-discovers; a grant that
//     cannot be used is auth_required and serves no tool (oauth.go).
package mcpprovider
