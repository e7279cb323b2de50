// Package messages is the wire protocol between agent runtimes and nodes:
// msgpack messages, one request/reply pair per operation, the operation
// named by the subject.
//
// It is a closed set. Every message carries V, the protocol version
// (currently 1); a node refuses versions it does not speak with
// invalid_request. Errors travel as a typed reply field carrying a stable
// reason code (package reason) and a human message.
//
// Frames are untrusted: Decode bounds a frame's size, then Guard walks it
// once refusing lengths that exceed the bytes that remain and nesting
// beyond a limit (msgpack v5.4.1 would otherwise allocate whatever a
// 5-byte header claims), and only then decodes, into concrete structs.
//
// Subjects, under a configurable prefix (default "sharedos"):
//
//	<prefix>.turn.open                     open a turn (queue group: any node)
//	<prefix>.turn.<node>.<op>              attach, list, namespaces,
//	                                       update_namespaces, invoke, close
//	                                       on the node that owns the turn
//	<prefix>.op.<op>                       list, namespaces, invoke as a turn
//	                                       of one operation (queue group)
//
// docs/protocol.md describes every field.
package messages
