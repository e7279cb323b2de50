// Package turn is the decision logic of one turn, as a plain state machine
// with no I/O: inputs in (an operation and its instant, a resolved
// catalogue, a completion), decisions and audit records out. The actor
// shell in package actors owns one Machine per turn, feeds it one message
// at a time, and carries out what it returns — resolving catalogues,
// executing tools, emitting records, answering callers.
//
// The semantics are ADR 0026's:
//   - the registry is resolved once, on first need, and held for the turn;
//   - what is held is the unfiltered registry; discovery (a grant valid
//     now covers the capability) and namespace enablement are evaluated
//     per operation, at the operation's instant;
//   - a call is decided against the held definition — known tool,
//     namespace enabled, discoverable now, arguments valid against the
//     held schema, requirement resolved from them, a grant valid now
//     covering capability and resource, step ceiling — in that order,
//     and the first failure is the reason;
//   - every listing and call is recorded with the turn's catalogHash.
package turn
