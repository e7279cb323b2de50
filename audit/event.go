package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Type names an event type. Types are part of the subject hierarchy and of
// the wire contract: only ever added.
type Type string

// The event types.
const (
	TurnOpened        Type = "turn.opened"
	CatalogResolved   Type = "tool.catalog.resolved"
	CatalogListed     Type = "tool.catalog.listed"
	ToolInvoked       Type = "tool.invoked"
	ToolCompleted     Type = "tool.completed"
	NamespacesUpdated Type = "namespaces.updated"
	TurnAttached      Type = "turn.attached"
	TurnDetached      Type = "turn.detached"
	TurnClosed        Type = "turn.closed"
	// PolicyChanged records one change to the policy store (a key of the
	// policy bucket written or removed). It is chained like every event:
	// each node records the changes it writes in a policy chain of its
	// own (PolicyTenant; docs/audit.md, "Policy changes").
	PolicyChanged Type = "policy.changed"
	// ContractReviewed records an approver's review of a tool's contract
	// baseline (accepted or rejected), in the reviewing node's policy
	// chain like policy.changed: baselines are policy data.
	ContractReviewed Type = "contract.reviewed"
	// ApprovalRequested records, in the turn's chain, the approval
	// request a call refused approval_required asks an approver to
	// decide (the call's tool.invoked names it).
	ApprovalRequested Type = "approval.requested"
	// ApprovalDecided records an approver's decision on a request, in the
	// deciding node's policy chain like contract.reviewed: an approval is
	// in force only once this is stored.
	ApprovalDecided Type = "approval.decided"
	// PolicyRefused records an admin's policy operation refused for its
	// scope (policy_forbidden: a key outside a tenant admin's tenants),
	// in the refusing node's policy chain like policy.changed.
	PolicyRefused Type = "policy.refused"
)

// PolicyTenant is the tenant of every node's policy chain: policy is the
// cluster's, not one tenant's, so its changes are stored on a subject of
// their own, read by whoever reads every tenant. No configured tenant may
// take this name.
const PolicyTenant = "_policy"

// Types lists every event type.
func Types() []Type {
	return []Type{TurnOpened, CatalogResolved, CatalogListed, ToolInvoked, ToolCompleted, NamespacesUpdated, TurnAttached, TurnDetached, TurnClosed, PolicyChanged, ContractReviewed, ApprovalRequested, ApprovalDecided, PolicyRefused}
}

// Event is one audit record. Fields after CatalogHash are set only by the
// event types that say so.
type Event struct {
	ID                string    `json:"id"`
	Type              Type      `json:"type"`
	Time              time.Time `json:"time"`
	Node              string    `json:"node,omitempty"`
	Tenant            string    `json:"tenant"`
	Principal         string    `json:"principal"`
	CredentialProfile string    `json:"credential_profile,omitempty"`
	TurnID            string    `json:"turn_id"`
	// OneOperation marks a turn of one operation (no open turn was named).
	OneOperation bool `json:"one_operation,omitempty"`
	// Transport names the front an operation came through ("mcp"), on
	// tool.catalog.listed, tool.invoked and tool.completed; empty for
	// in-process and NATS callers.
	Transport string `json:"transport,omitempty"`
	// Caller is the bus identity that opened the turn or took the lease,
	// on turn.opened and turn.attached, as the bus established it
	// (docs/security.md); empty when the front does not authenticate.
	Caller   string `json:"caller,omitempty"`
	Seq      uint64 `json:"seq"`
	PrevHash string `json:"prev_hash"`
	// CatalogHash: on tool.catalog.resolved (when it succeeded),
	// tool.catalog.listed, tool.invoked, tool.completed and turn.closed
	// (when the turn held a catalogue).
	CatalogHash string `json:"catalog_hash,omitempty"`

	// Namespaces: the enabled namespaces, on turn.opened,
	// tool.catalog.listed, tool.invoked and namespaces.updated.
	Namespaces []string `json:"namespaces,omitempty"`
	// Catalog: on tool.catalog.resolved.
	Catalog *Catalog `json:"catalog,omitempty"`
	// Listed: aliases shown, on tool.catalog.listed.
	Listed []string `json:"listed,omitempty"`
	// Projection: on a tool.catalog.listed that showed the listing
	// translated for a model API (a profile), or a search's result.
	// Listed then names the turn's aliases of the tools sent, in the order
	// sent; Projection says how they were shown and what was left out.
	Projection *Projection `json:"projection,omitempty"`
	// Call: on tool.invoked and tool.completed.
	Call *Call `json:"call,omitempty"`
	// Close: on turn.closed.
	Close *Close `json:"close,omitempty"`
	// Lease: on turn.attached and turn.detached.
	Lease *Lease `json:"lease,omitempty"`
	// Policy: on policy.changed.
	Policy *PolicyChange `json:"policy,omitempty"`
	// PolicyRefusal: on policy.refused.
	PolicyRefusal *PolicyRefusal `json:"policy_refusal,omitempty"`
	// Contract: on contract.reviewed.
	Contract *ContractReview `json:"contract,omitempty"`
	// Approval: on approval.requested and approval.decided.
	Approval *Approval `json:"approval,omitempty"`
}

// Approval is an approval request (approval.requested) or an approver's
// decision on one (approval.decided): the one call it is for, and on a
// decision who decided what, and why.
type Approval struct {
	ID   string `json:"id"`
	Rule string `json:"rule"`
	// Tenant, Principal, Turn and CallID are the call's; Provider, Name
	// and Revision its tool's; ArgsHash the SHA-256 of its argument
	// bytes (never the arguments).
	Tenant    string    `json:"tenant"`
	Principal string    `json:"principal"`
	Turn      string    `json:"turn"`
	CallID    string    `json:"call"`
	Provider  string    `json:"provider"`
	Name      string    `json:"name"`
	Revision  string    `json:"revision"`
	ArgsHash  string    `json:"args_sha256"`
	ExpiresAt time.Time `json:"expires_at"`
	// Decision ("approved" or "denied"), By (the approver's bus identity)
	// and Reason: on approval.decided.
	Decision string `json:"decision,omitempty"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ContractReview is an approver's decision on one tool's contract
// baseline, on contract.reviewed.
type ContractReview struct {
	// Tenant, Provider and Tool name the baseline.
	Tenant   string `json:"tenant"`
	Provider string `json:"provider"`
	Tool     string `json:"tool"`
	// Decision is "accepted" (Revision is the baseline now) or "rejected"
	// (the baseline stays Previous, and the tool stays out of turns while
	// its provider offers Revision).
	Decision string `json:"decision"`
	Revision string `json:"revision"`
	// Previous is the accepted revision before the review ("" for none).
	Previous string `json:"previous,omitempty"`
	// Classes classify the change from Previous to Revision.
	Classes []string `json:"classes,omitempty"`
	// By is the approver's bus identity; Why their reason.
	By  string `json:"by"`
	Why string `json:"why,omitempty"`
}

// ContractDrift is one tool of a resolution whose contract is not its
// accepted baseline, on tool.catalog.resolved: what was done with it
// ("adopted", held "pending_review", "rejected", "hidden_text",
// "baseline_unavailable") and how it changed.
type ContractDrift struct {
	Tool     string   `json:"tool"`
	Revision string   `json:"revision"`
	Decision string   `json:"decision"`
	Classes  []string `json:"classes,omitempty"`
	Accepted string   `json:"accepted,omitempty"`
}

// PolicyChange is one change to the policy store, on policy.changed.
type PolicyChange struct {
	// Key is the policy key ("grants.acme.ada"); Op is "add", "change"
	// or "remove".
	Key string `json:"key"`
	Op  string `json:"op"`
	// PrevRevision and PrevHash are the key's revision and content hash
	// (hex SHA-256 of its canonical value) before the change, 0 and ""
	// when it held nothing; Revision and Hash after it ("" once removed).
	PrevRevision uint64 `json:"prev_revision"`
	Revision     uint64 `json:"revision"`
	PrevHash     string `json:"prev_sha256,omitempty"`
	Hash         string `json:"sha256,omitempty"`
	// By is who made the change: the admin's bus identity, or
	// "cluster.yaml" for the seed of an empty store.
	By string `json:"by"`
}

// PolicyRefusal is an admin's policy operation refused for its scope:
// the operation (get, put, delete, list, export, diff, import), the key
// it was refused on (for diff and import the first key outside the
// scope), who asked (the admin's bus identity), the stable code
// (policy_forbidden) and the tenants the admin is bound to.
type PolicyRefusal struct {
	Op      string   `json:"op"`
	Key     string   `json:"key"`
	By      string   `json:"by"`
	Code    string   `json:"code"`
	Tenants []string `json:"tenants"`
}

// Projection is what a model-facing listing sent: the profile, the
// SHA-256 of the exact bytes (projection_hash), the model-facing names
// (parallel to Event.Listed), the token count, and every visible tool
// left out with why (unrepresentable, over_limit, over_budget). A search
// also carries its query's SHA-256 — never the query — and k.
type Projection struct {
	Profile     string    `json:"profile"`
	Hash        string    `json:"sha256"`
	Names       []string  `json:"names,omitempty"`
	Tokens      int       `json:"tokens"`
	TokenMethod string    `json:"token_method"`
	LeftOut     []LeftOut `json:"left_out,omitempty"`
	QueryHash   string    `json:"query_sha256,omitempty"`
	K           int       `json:"k,omitempty"`
}

// LeftOut is a visible tool a projection did not send, by its turn alias.
type LeftOut struct {
	Alias string `json:"alias"`
	Why   string `json:"why"`
}

// Lease describes a lease taken (turn.attached) or released
// (turn.detached). The lease id is a capability, so only its hash is
// recorded: enough to pair an attach with its release.
type Lease struct {
	IDHash string `json:"id_sha256"`
	// Holders is how many leases the turn holds after the event.
	Holders int `json:"holders"`
}

// Catalog is the resolved, held catalogue.
type Catalog struct {
	Tools     []Tool           `json:"tools"`
	Providers []ProviderStatus `json:"providers"`
}

// Tool is one held tool: server-scoped identity, model-facing alias, revision.
type Tool struct {
	Alias     string `json:"alias"`
	Provider  string `json:"provider"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Revision  string `json:"revision"`
}

// ProviderStatus is how one provider's catalogue resolution went.
type ProviderStatus struct {
	Provider string `json:"provider"`
	// Status is "ok", "partial" (some definitions refused) or "failed".
	Status string `json:"status"`
	// Reason is the failure class when failed (a reason code).
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	Tools  int    `json:"tools"`
	// Refused lists definitions refused by the discovery limits, and
	// tools the contract gate left out.
	Refused []string `json:"refused,omitempty"`
	// DurationMicros is how long the provider took to answer.
	DurationMicros int64 `json:"duration_us"`
	// PendingReview names the tools left out of the turn because their
	// contract changed and waits for an approver (drift: hold).
	PendingReview []string `json:"pending_review,omitempty"`
	// Drift lists every tool whose contract was not its accepted baseline.
	Drift []ContractDrift `json:"drift,omitempty"`
}

// Call describes a tool call, on tool.invoked and tool.completed.
type Call struct {
	ID        string `json:"id"`
	Alias     string `json:"alias"`
	Provider  string `json:"provider,omitempty"`
	Name      string `json:"name,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Step      int    `json:"step,omitempty"`
	Decision  string `json:"decision,omitempty"` // tool.invoked: "allow" or "deny"
	Reason    string `json:"reason,omitempty"`   // deny or failure reason code
	Resource  string `json:"resource,omitempty"`
	Grant     string `json:"grant,omitempty"`
	ArgsHash  string `json:"args_sha256,omitempty"` // tool.invoked: hash of the argument bytes, not the arguments
	Outcome   string `json:"outcome,omitempty"`     // tool.completed: "ok", "tool_error" or "failed"
	Duration  int64  `json:"duration_us,omitempty"` // tool.completed
	ResultLen int    `json:"result_bytes,omitempty"`
	// Approval is the approval request a call refused approval_required
	// made, or the approval an allowed call runs on (tool.invoked).
	Approval string `json:"approval,omitempty"`
}

// Why a turn closed: turn.closed's close.reason. Part of the wire
// contract (docs/schemas/turn.closed.schema.json lists exactly these):
// only ever added.
const (
	// CloseReleased: its last lease was released.
	CloseReleased = "released"
	// CloseIdle: no operation for the kernel's idle timeout.
	CloseIdle = "idle"
	// CloseShutdown: the node stopped (or its drain ended) with the turn
	// open.
	CloseShutdown = "shutdown"
	// CloseOneOperation: a turn of one operation, after its operation.
	CloseOneOperation = "one_operation"
	// CloseAuditUnavailable: the stream did not store one of the turn's
	// records, so the turn failed closed.
	CloseAuditUnavailable = "audit_unavailable"
	// CloseTenantForbidden and CloseCredentialForbidden: the turn records
	// a request refused because its caller may not act for the tenant it
	// named, or with the credential profile it named.
	CloseTenantForbidden     = "tenant_forbidden"
	CloseCredentialForbidden = "credential_forbidden"
)

// CloseReasons lists every close reason.
func CloseReasons() []string {
	return []string{CloseReleased, CloseIdle, CloseShutdown, CloseOneOperation, CloseAuditUnavailable, CloseTenantForbidden, CloseCredentialForbidden}
}

// Close describes the end of a turn.
type Close struct {
	Reason string `json:"reason"` // one of CloseReasons
	Steps  int    `json:"steps"`
	Events uint64 `json:"events"` // events in the chain, this one included
}

// Record is an encoded event: the bytes that are published and hashed.
type Record struct {
	Event *Event
	Data  []byte
	// Hash is hex SHA-256 of Data: the next event's PrevHash.
	Hash string
}

// Encode encodes ev (compact JSON, the same bytes json.Marshal gives) and
// returns its Record. It fails only for a time outside years 0-9999.
func Encode(ev *Event) (*Record, error) {
	if y := ev.Time.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("audit: event time %s is outside years 0-9999", ev.Time)
	}
	data := appendEvent(make([]byte, 0, 1024), ev)
	return &Record{Event: ev, Data: data, Hash: HashData(data)}, nil
}

// HashData is the chain hash of an encoded event.
func HashData(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
