// Package authority holds who is asking and what they may do.
//
// An AccessContext describes one operation: the tenant, the principal, the
// credential profile (a stable id, never a secret), the turn, the instant of
// the operation and the tool namespaces enabled for it.
//
// Grants say what a principal may do: a capability pattern over a dotted
// tree ("notion.search", "notion.*"), a resource pattern over a path tree
// ("notion/workspace/acme/**") and a validity window. A turn resolves its
// principal's grants once (ADR 0010) and every decision evaluates them at
// the operation's instant (ADR 0016), so a grant that lapses mid-turn
// refuses mid-turn. Pinning which grants exist is not pinning whether they
// are valid.
//
// Pattern syntax, for both trees: a literal segment matches itself, "*"
// matches exactly one segment, and "**", allowed only as the last segment,
// matches one or more remaining segments. Capabilities separate segments
// with ".", resources with "/".
package authority
