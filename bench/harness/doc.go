// Package harness is a small load-testing library: closed-loop load over
// turns of calls, latency recording in log-linear histograms, per-run
// process metrics, and a report (a table for people, JSON for tracking).
//
// A Scenario sets up a Target; the runner opens turns on it from
// Concurrency workers, each making CallsPerTurn calls one after the other,
// by count or for a duration, after a warm-up that is not recorded.
// Around the measured part it reads the process's CPU time, heap
// allocation counters and resident high-water mark, and a target's
// provider counters when it has them (catalogue calls per turn, time spent
// resolving). Floors are scenarios too: a result names its floor and the
// report prints it as a ratio to the floor measured in the same run, since
// absolute times on a shared machine drift and ratios hold.
//
// Nothing here knows SharedOS; package scenarios wires SharedOS to it and
// the bench command is its command line.
package harness
