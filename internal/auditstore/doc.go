// Package auditstore keeps the audit trail on JetStream: the JetStreamSink
// that group-commits records into one segment per tenant and commit, the
// audit stream's setup and the checks that an existing stream can serve,
// the Checkpointer that publishes a node's signed checkpoints (with the
// node's key and state files), and the readers (Tail, ReadAll) that give
// records back in stream order. The records, segments, checkpoints and
// subjects it stores are package audit's; this package only moves them.
package auditstore
