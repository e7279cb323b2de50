package actors

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/toolport"
	"github.com/sharedos/sharedos/turn"
)

// Opened is the answer to Open: the turn and the caller's lease on it.
type Opened struct {
	TurnID  string
	LeaseID string
	// Attached is true when the turn was already open and this lease joined it.
	Attached bool
}

// ToolList is a listing: the tools shown and the turn's catalogHash.
type ToolList struct {
	CatalogHash string
	Tools       []ListedTool
	// NextCursor, when set, continues the listing (ListPage.After); the
	// page was cut to fit the node's reply bound.
	NextCursor string
	// Degraded names the providers whose catalogue this turn's resolution
	// did not get whole, and how they failed: an empty listing and a
	// failed discovery are not the same state.
	Degraded []ProviderStatus
}

// ModelListing is the turn's visible catalogue as one model profile shows
// it (docs/model-facing.md): the exact bytes to send (Projection.Listing,
// hashed as Projection.Hash), each tool's model-facing name and identity,
// and what was left out and why.
type ModelListing struct {
	CatalogHash string
	Projection  projection.Projection
	// Degraded is as in ToolList.
	Degraded []ProviderStatus
}

// ProviderStatus is how one provider answered the turn's resolution.
type ProviderStatus struct {
	Provider string
	// Status is "failed" (no tools from it) or "partial" (some refused).
	Status string
	// Reason is the failure class (provider_timeout, provider_unavailable,
	// provider_error); empty for "partial".
	Reason string
	// Error says what failed; for "partial", the refused tools and why.
	Error string
}

// ListPage asks for one page of a listing.
type ListPage struct {
	// After is the previous page's NextCursor ("" for the first page).
	After string
	// MaxTools, when positive, cuts the page after that many tools (a
	// front's page size); the reply bound cuts it too.
	MaxTools int
}

// Dispatch says whether a refused or failed call was sent to its provider.
type Dispatch int

const (
	// DispatchUnknown: the kernel cannot tell (the caller's deadline
	// passed before the turn answered).
	DispatchUnknown Dispatch = iota
	// NotDispatched: the call never reached its provider; it did not run.
	NotDispatched
	// Dispatched: the call was sent to its provider; it may have run.
	Dispatched
)

// CallError is a call that did not complete with a result: the reason,
// and what the turn recorded of it. errors.Is matches its reason code.
type CallError struct {
	Err *reason.Error
	// CallID and CatalogHash are set whenever the turn recorded the call
	// (tool.invoked): every decided call, allowed or denied.
	CallID      string
	CatalogHash string
	Dispatch    Dispatch
	// Approval, on approval_required and approval_denied, is the request
	// to approve (stored, announced to approvers) and its state: its id
	// and expiry, and exactly the call it is for.
	Approval *approval.State
}

func (e *CallError) Error() string { return e.Err.Error() }

// ApprovalOf is the approval request a refusal carries
// (approval_required, approval_denied), or nil.
func ApprovalOf(err error) *approval.State {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Approval
	}
	return nil
}

// Unwrap returns the reason, so errors.Is and reason.Of see its code.
func (e *CallError) Unwrap() error { return e.Err }

// ListedTool is one tool as shown to a model.
type ListedTool struct {
	Alias        string
	Identity     catalog.Identity
	Namespace    string
	Revision     string
	Description  string
	Title        string          // "" when none
	Icons        json.RawMessage // a JSON array, or nil
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Annotations  json.RawMessage
}

// NamespaceInfo describes one namespace of the held catalogue.
type NamespaceInfo = turn.NamespaceInfo

// CallResult is a completed call.
type CallResult struct {
	CallID      string
	CatalogHash string
	Alias       string
	Identity    catalog.Identity
	Result      toolport.Result
	Duration    time.Duration
}

// Messages to a turn actor. Each carries the caller's access context; the
// kernel stamps Now with the admission instant, which only
// Switches.StampAtAdmission decides by: the turn stamps each operation
// when it decides it. deadline is the caller's (zero: none).
type (
	listTools struct {
		access   authority.AccessContext
		deadline time.Time
		page     ListPage
	}
	// projectTools asks for a model-facing listing or search
	// (turn.ProjectionRequest), answered *ModelListing.
	projectTools struct {
		access authority.AccessContext
		req    turn.ProjectionRequest
	}
	listNamespaces   struct{ access authority.AccessContext }
	updateNamespaces struct {
		access     authority.AccessContext
		namespaces []string
	}
	invokeTool struct {
		access   authority.AccessContext
		deadline time.Time
		inv      turn.Invocation
		// requestID, if set, makes the call keyed (see keyed.go): a
		// retry with the same id gets this call's answer.
		requestID string
		// span is the caller's span: it parents the execution's spans
		// (the provider hop), nothing else.
		span trace.SpanContext
		// fetched says inv.Approval is what the store held for the
		// approval the turn must read first (turn.Machine.ApprovalFor),
		// or that there is none to read.
		fetched bool
	}
	// approvalFetched brings an invoke back to its turn with the
	// approval it names read from the store.
	approvalFetched struct {
		sender *actor.PID
		msg    *invokeTool
		// err: the store could not be read (not: the approval is unknown).
		err error
	}
	// requestStored says whether an approval request was stored.
	requestStored struct {
		id  string
		err error
	}
	// closeTurn ends the turn; sent by the directory when the turn idles
	// out or the kernel shuts down.
	closeTurn struct{ why string }
	// attachLease takes another lease on the open turn (forwarded by the
	// directory, answered *Opened by the turn).
	attachLease struct{ access authority.AccessContext }
	// resolved carries a resolution back to the turn's mailbox.
	resolved struct{ res turn.Resolution }
	// completed carries an execution's end back to the turn's mailbox.
	completed struct {
		comp   turn.Completion
		result providers.Result
		// unrecorded: the call's tool.invoked was not stored, so the call
		// never ran and the turn's chain has a hole; its answer
		// (audit_unavailable) goes out at once, not after a second wait
		// for a completion record that cannot be kept either.
		unrecorded bool
	}
)

// Messages to the directory.
type (
	openTurn struct {
		access authority.AccessContext
		// attach joins an open turn only; otherwise a new turn is opened
		// under the id the kernel minted.
		attach bool
	}
	// oneOperation asks the directory to run op in a new turn of one
	// operation, counted and closed like any other turn.
	oneOperation struct {
		access authority.AccessContext
		op     any
	}
	// releaseLease releases a lease; the directory forwards it to the
	// turn, which owns its leases and closes when the last is released.
	releaseLease struct {
		access  authority.AccessContext
		leaseID string
	}
	// sweepIdle makes the directory close the turns that went idle.
	sweepIdle     struct{}
	turnFinished  struct{ turnID string }
	closeAll      struct{}
	turnsSnapshot struct{}
	// closedTurn asks whether a turn id was recently closed.
	closedTurn struct{ turnID string }
)
