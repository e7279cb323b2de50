package scenarios

import "github.com/sharedos/sharedos/bench/harness"

// Names of the scenarios and floors.
const (
	InProcess         = "inprocess"
	InProcessAcked    = "inprocess-acked"
	NATS              = "nats"
	NATSAcked         = "nats-acked"
	NATSAckedSync     = "nats-acked-sync"
	NATSProvider      = "nats-provider"
	NATSProviderAcked = "nats-provider-acked"

	FloorRaw                   = "floor-nats"
	FloorComposite             = "floor-composite"
	FloorCompositeAcked        = "floor-composite-acked"
	FloorCompositeAckedSync    = "floor-composite-acked-sync"
	FloorCompositeProvider     = "floor-composite-provider"
	FloorCompositeProviderAckd = "floor-composite-provider-acked"
	FloorJetStreamAcked        = "floor-jetstream-acked"
)

// All returns every scenario, each floor just before the scenarios
// compared to it, so the two are measured minutes apart at most. A new
// transport is one more entry here (and its floor, if it has one).
func (e *Env) All() []harness.Scenario {
	return []harness.Scenario{
		e.FloorNATS(FloorRaw),
		e.SharedOS(InProcess, "kernel API in process, static tool, audit published async", "", "inprocess", ToolStatic, AuditAsync),
		e.FloorJetStream(FloorJetStreamAcked),
		e.SharedOS(InProcessAcked, "kernel API in process, static tool, audit acked before effect and reply", FloorJetStreamAcked, "inprocess", ToolStatic, AuditAcked),
		e.FloorComposite(FloorComposite, false, false),
		e.SharedOS(NATS, "Go client → node over NATS, static tool, audit published async", FloorComposite, "nats", ToolStatic, AuditAsync),
		e.FloorComposite(FloorCompositeAcked, false, true),
		e.SharedOS(NATSAcked, "Go client → node over NATS, static tool, audit acked", FloorCompositeAcked, "nats", ToolStatic, AuditAcked),
		e.FloorCompositeSync(FloorCompositeAckedSync),
		e.SharedOSSync(NATSAckedSync, "Go client → node over NATS, static tool, audit acked, the stream fsyncs every write (audit.sync: always)", FloorCompositeAckedSync, "nats", ToolStatic, AuditAcked),
		e.FloorComposite(FloorCompositeProvider, true, false),
		e.SharedOS(NATSProvider, "Go client → node → provider over NATS, audit published async", FloorCompositeProvider, "nats", ToolProvider, AuditAsync),
		e.FloorComposite(FloorCompositeProviderAckd, true, true),
		e.SharedOS(NATSProviderAcked, "Go client → node → provider over NATS, audit acked", FloorCompositeProviderAckd, "nats", ToolProvider, AuditAcked),
		e.Traced(NATSTraced, "as nats, with tracing on at the client and the node, every trace sampled, spans to an in-process OTLP/HTTP receiver", FloorComposite, ToolStatic), // bench/scenarios/traced.go
		e.Traced(NATSProviderTraced, "as nats-provider, with tracing on at the client, the node and the provider", FloorCompositeProvider, ToolProvider),
		e.FloorMCP(FloorMCPDirect), e.MCPProviderScenario(MCPProvider, FloorMCPDirect), // bench/scenarios/mcp.go
		e.FloorMCPFrontHTTP(FloorMCPFront), e.MCPFrontScenario(MCPFront, FloorMCPFront), // bench/scenarios/mcpfront.go
		e.ModelListingScenario(ModelListing500), // bench/scenarios/listing.go
	}
}
