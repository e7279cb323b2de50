// Package mcpfront serves a node's open turns to model sandboxes as MCP
// servers (Streamable HTTP at /mcp on the node's HTTP listener, and stdio
// through `node mcp`), behind execution tokens.
//
// A turn's lease holder mints an execution token (Front.Mint; over the
// turn protocol, op "token"). The token is signed with the node's Ed25519
// key and names the turn, the node, the catalogue the turn holds
// (catalogHash, resolved at mint time), the turn's tenant, principal,
// credential profile and attributes, the endpoint URL (audience), an
// expiry and a token id. The front admits a request only with a token
// that verifies (401 otherwise: malformed, tampered, expired, another
// endpoint) and whose turn is open here, under the same authority, still
// holding the catalogue the token binds (403 otherwise). A stale sandbox
// therefore cannot reconnect to a turn whose catalogue it was never shown.
// The token never leaves the front: providers see signed execution grants
// (docs/security.md), never the token.
//
// Each turn has one mcp.Server (chosen per request from the verified
// token: a map lookup), served stateless so that the 2026-07-28 revision
// and the older ones (2025-11-25, 2025-06-18) all work. Its tools are not
// registered on it: tools/list and tools/call are answered by the turn,
// through the same Kernel API every transport uses, so a listing is the
// held catalogue filtered by live authority and enabled namespaces at its
// instant, and every call gets the turn actor's checks, reason codes,
// step ceiling and audit events (with "transport": "mcp"). A refused
// call is an MCP tool error (isError) whose structuredContent is a
// Refusal {code, message}; a name the turn never had is JSON-RPC -32602.
// The server declares tools only, with listChanged false: the turn pins
// its catalogue (ADR 0026).
//
// The endpoint's URL (Options.URL; a node's node.mcp_url when set) is
// every token's audience: the listener's address, or a public URL in front
// of the node (a load balancer, a proxy) whose path ends with Path. Any
// node serves any turn: a request whose token names another node is
// forwarded to it over NATS (forward.go). What fails on the servers' side
// there (the node gone, busy or silent, an answer the bus cannot carry)
// is still answered with a JSON-RPC response a client reads — a call's
// tool error, a listing's JSON-RPC error, each carrying the reason code —
// not with a 5xx, whose body MCP clients do not read.
//
// tools/call and tools/list usually skip the SDK's per-request session:
// a request that passes exactly the checks the SDK's stateless handler
// would make is answered by the same handlers directly, in the bytes the
// SDK would write (fast.go; Options.DisableFastPath turns it off); every
// other request goes to the SDK.
package mcpfront
