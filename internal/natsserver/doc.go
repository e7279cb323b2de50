// Package natsserver runs a real NATS server (github.com/nats-io/nats-server/v2)
// inside the SharedOS process.
//
// # Why the node embeds NATS
//
// SharedOS nodes talk to each other over NATS. On a single machine there is
// no reason to make an operator install, configure and supervise a separate
// nats-server: the node starts one in-process with [Start] and connects to it
// like any other client. The same code path is the test server for every
// integration test in the tree (see the natstest subpackage): tests run
// against the genuine server, not a mock, so subject routing, request/reply,
// JetStream acknowledgements and storage behave exactly as in production.
//
// # Loopback only, unless asked
//
// An embedded server has no authentication configured. [Options.Validate]
// therefore refuses any Host that is not a loopback address (127.0.0.0/8,
// ::1 or "localhost"); "0.0.0.0", "::", other interface addresses and other
// host names are rejected with [ErrNonLoopbackHost] unless
// [Options.AllowNonLoopback] is set. Host names other than "localhost" are
// not resolved: a name is only trusted to be loopback if it is "localhost".
//
// # Ports
//
// In nats-server's own options Port 0 means the default port 4222 and -1
// (server.RANDOM_PORT) means "pick a free port". This package uses the Go
// convention instead: Port 0 (the zero value) means a random free port, and
// it is translated to server.RANDOM_PORT internally; -1 is accepted as a
// synonym. The bound port is read back from the listener after start;
// [Server.ClientURL] returns it.
//
// # Signals and logging
//
// The node owns signal handling, so the embedded server always runs with
// NoSigs. Server log lines are dropped unless [Options.Logger] is set, in
// which case they are routed to slog: Noticef→Info, Warnf→Warn,
// Errorf→Error, Fatalf→Error (with fatal=true; it never exits the process),
// Debugf→Debug, Tracef→[LevelTrace]. Debug and trace output are only enabled
// in the server when the slog handler is enabled for those levels. A Fatalf
// during startup (port in use, JetStream cannot open its store, ...) makes
// [Start] fail immediately with [ErrStartFailed] instead of waiting out the
// ready timeout.
//
// # The JetStream sync trap
//
// For a single-replica file-storage stream in the default persist mode,
// nats-server writes each message to its block file (hands it to the
// operating system) before acknowledging the publish, but by default it only
// fsyncs those files every 2 minutes (nats-server's defaultSyncInterval, the
// "sync_interval" option). A clean shutdown or a crash of the process loses
// nothing, since the kernel's page cache survives; a kernel panic, power loss
// or VM kill can lose up to two minutes of acknowledged messages. [Options.SyncAlways] switches the server to fsync
// on every write, which is what streams that must survive a machine crash
// need, at a considerable throughput cost.
//
// The setting is server-wide: nats-server's SyncAlways/SyncInterval apply to
// every file-backed stream on the server; there is no per-stream fsync
// option. jetstream.StreamConfig in nats.go v1.55 has a per-stream
// PersistMode, but it only goes the other way: AsyncPersistMode opts a
// stream into asynchronous flushing (acks may be sent before the write is
// flushed, and it also disables SyncAlways for that stream), while
// DefaultPersistMode keeps the server-wide behaviour. If some streams need
// crash durability, run the server with SyncAlways.
//
// JetStream keeps its data under <StoreDir>/jetstream. StoreDir is required
// when JetStream is enabled; nats-server would otherwise silently fall back
// to a directory under os.TempDir().
package natsserver
