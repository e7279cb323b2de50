// Package approvals keeps a cluster's approval requests in a JetStream
// key-value bucket (every node reads and consumes them; one key per
// request, "<tenant>.<id>", each write at the revision it read) and
// serves approvers: list, show, approve and deny on
// "<prefix>.approvals.<op>", answered by any node, to approver identities
// of the request's tenant alone (the bus names the caller's account).
//
// Client is the Go API an approver's program (the CLI `node approvals`,
// the console) calls.
package approvals
