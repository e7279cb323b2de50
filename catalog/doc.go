// Package catalog is the held tool catalogue of a turn.
//
// Providers return Definitions: what a tool is called on its provider, what
// it does, what arguments it takes, what capability it requires and how the
// resource it touches is derived from its arguments. Normalize turns a
// Definition into a Tool: the contract in canonical form (RFC 8785 JSON,
// so key order and whitespace never matter), its input schema compiled,
// its requirement template parsed, and a Revision — the SHA-256 of the
// canonical contract — that names exactly the contract the model was shown.
//
// A Registry is the immutable set of Tools a turn holds, with model-facing
// aliases (unique, provider-safe names) and their reverse mapping to the
// server-scoped identity (provider, name). Its Hash is the turn's
// catalogHash. Nothing in a Registry changes after Build; the turn decides
// every list and call against it while authority stays live.
//
// Untrusted content — a provider's schemas, a model's arguments — is bounded
// (bytes, nesting depth, property counts) before it is decoded, and schemas
// may only reference themselves: a $ref to anything outside the document
// is refused rather than fetched.
package catalog
