// Package audit is the turn's record: typed events, their hash chain, the
// sink port they are handed to, and the verifier that judges a trail. It
// does no I/O of its own beyond reading key files and imports no NATS
// package, so the turn's state machine, the identity rules and anyone
// verifying an exported trail import it alone. The trail's store on
// JetStream (the writer, stream setup, checkpoints' publication, readers)
// is internal/auditstore.
//
// Each turn writes one chain. Every event carries the turn's sequence
// number (from 0) and prev_hash, the hex SHA-256 of the previous event's
// exact encoded bytes (empty for seq 0). An event is encoded once, as
// compact JSON, and those bytes are what is published, stored, exported
// and hashed — so a verifier needs no canonicalization: it hashes what it
// reads. Deleting, reordering, inserting or modifying an event breaks the
// link after it; truncating the tail is caught by the node's signed
// checkpoints and by turn.closed.
//
// The claim ADR 0026 makes checkable: tool.catalog.resolved records the
// catalogue a turn holds (every tool's identity, alias and revision) under
// its catalogHash; every tool.catalog.listed and every tool.invoked of the
// turn carries the same catalogHash, and every tool.invoked names a tool
// identity and revision present in that resolved catalogue.
//
// Event ids are the turn's random incarnation and the sequence number, so
// a retried publish carries the same id and is stored once.
package audit
