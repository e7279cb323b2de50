// Package conformance is the table that says SharedOS keeps ADR 0026's
// promises on every transport.
//
// A Row is one promise. It has a probe, which must pass, and an attack,
// which must be refused with the right reason code. Each row also names
// the mechanism it depends on, as a turn.Switches field: the suite runs the
// row again with that mechanism switched off and requires the row to fail
// then. A row that still passed without its mechanism would be describing
// intent, not giving evidence (the ADR's wording).
//
// A Column is a transport: the in-process kernel here; NATS, a remote
// provider, MCP and a cluster add theirs by implementing Driver.
// `make conformance` prints the table; any failing cell fails the run.
package conformance
