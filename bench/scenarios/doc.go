// Package scenarios wires SharedOS to the load harness: the scenarios a
// run measures and the floors they are compared to, all on one embedded
// NATS server (with JetStream) per run.
//
// Scenarios (each with audit published asynchronously — durability off —
// and acked before effect and reply):
//
//   - inprocess: the kernel API, no network; the static tool.
//   - nats: the Go client over TCP → the node's front (msgpack) → kernel →
//     the static tool in the node.
//   - nats-provider: as nats, but the tool is served by a provider (the
//     provider SDK on its own TCP connection) reached over NATS.
//   - nats-traced, nats-provider-traced: as nats and nats-provider, with
//     tracing on at every hop (every trace sampled, spans batched over
//     OTLP/HTTP to an in-process receiver that decodes them: traced.go).
//
// Floors, measured in the same run on the same server:
//
//   - floor-nats: raw request/reply.
//   - floor-composite[-provider][-acked]: the bare composite — client →
//     node → (provider hop →) reply, with the audit records' stand-ins
//     published on core NATS, or to JetStream awaiting each ack — and no
//     kernel logic or encoding.
//   - floor-jetstream-acked: the acked record stand-ins alone, in process.
//
// Every turn opens, makes its calls (the first one resolves the
// catalogue) and closes; the provider is wrapped to count catalogue calls
// and the time they take. IdleTurns measures memory per idle open turn.
package scenarios
