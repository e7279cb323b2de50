// Package reason defines the stable reason codes SharedOS attaches to every
// refusal and failure, on every transport.
//
// A code is part of the wire contract: it is what agent runtimes, audit
// subscribers and dashboards branch on, so codes are only ever added, never
// renamed. Go callers match them with errors.Is against the sentinel errors
// below; the human message may change freely.
//
//	if errors.Is(err, reason.ErrNoMatchingGrant) { ... }
package reason

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable refusal or failure reason.
type Code string

// The reason codes. The comment on each says when it is given.
const (
	// UnknownTool: the name is not in the turn's held catalogue.
	UnknownTool Code = "unknown_tool"
	// NamespaceDisabled: the tool's namespace is not enabled for this operation.
	NamespaceDisabled Code = "namespace_disabled"
	// NotDiscoverable: no grant valid now covers the tool's capability.
	NotDiscoverable Code = "not_discoverable"
	// InvalidArguments: the arguments fail the held input schema, or the
	// tool's resource requirement cannot be resolved from them.
	InvalidArguments Code = "invalid_arguments"
	// NoMatchingGrant: the tool is discoverable but no grant valid now
	// covers both its capability and the resource the call resolves to.
	NoMatchingGrant Code = "no_matching_grant"
	// StepCeilingExceeded: the turn has used its allowed number of calls.
	StepCeilingExceeded Code = "step_ceiling_exceeded"
	// TurnClosed: the turn was closed (or idled out); it takes no more operations.
	TurnClosed Code = "turn_closed"
	// TurnNotFound: no open turn has this id for this authority.
	TurnNotFound Code = "turn_not_found"
	// ProviderUnavailable: the provider could not be reached.
	ProviderUnavailable Code = "provider_unavailable"
	// ProviderTimeout: the provider did not answer within the deadline.
	ProviderTimeout Code = "provider_timeout"
	// ProviderError: the provider answered with a failure or a malformed reply.
	ProviderError Code = "provider_error"
	// CapabilityChanged: the tool's contract changed since the turn pinned it;
	// the provider refused to run a contract the model was not shown.
	CapabilityChanged Code = "capability_changed"
	// Overloaded: the node is shedding load (mailbox or in-flight limits).
	Overloaded Code = "overloaded"
	// InvalidRequest: the request itself is malformed (bad turn id, bad
	// frame, oversized payload) and was not decided at all.
	InvalidRequest Code = "invalid_request"
	// NodeUnavailable: no node answered (none is serving the subject).
	NodeUnavailable Code = "node_unavailable"
	// AuditUnavailable: the audit stream did not store the call's
	// tool.invoked, so the call was refused (fail closed) before it ran.
	AuditUnavailable Code = "audit_unavailable"
	// DeadlineExceeded: the caller's deadline passed before the operation
	// was answered. For a call, the reply says whether the tool had been
	// dispatched (it may have run); the execution's own deadline was never
	// later than the caller's.
	DeadlineExceeded Code = "deadline_exceeded"
	// ResultTooLarge: the tool ran, but its result is larger than the node
	// may return (bounded by the transport's maximum message); the result
	// was dropped and recorded as such.
	ResultTooLarge Code = "result_too_large"
	// RateLimited: the principal is over its rate of opens or calls on
	// this node; retry after Error.RetryAfter.
	RateLimited Code = "rate_limited"
	// TenantForbidden: the caller's bus identity is not bound to the
	// tenant (or principal) the request acts for (docs/security.md).
	TenantForbidden Code = "tenant_forbidden"
	// ApprovalRequired: an approval rule names this call and no approval
	// is in force for it; the call did not run. The refusal carries the
	// approval request (its id, expiry and exactly what is to be
	// approved); once an approver approves it, the same call in the same
	// turn runs once (docs/approvals.md).
	ApprovalRequired Code = "approval_required"
	// ApprovalDenied: the call's approval request was denied; the refusal
	// carries who denied it and why. The call did not run.
	ApprovalDenied Code = "approval_denied"
	// ApprovalInvalid: the approval the call presented is not for this
	// call — unknown, for another turn, tool, revision, catalogue or
	// argument bytes, expired, or already used. The call did not run.
	ApprovalInvalid Code = "approval_invalid"
	// ApprovalForbidden: an approvals request (node approvals) from a bus
	// identity that is not an approver of the request's tenant, or that
	// separation of duties excludes; nothing was decided.
	ApprovalForbidden Code = "approval_forbidden"
	// CredentialForbidden: the credential profile the request names is
	// not bound to its tenant and principal in the node's policy, or the
	// caller's bus identity is narrowed to other profiles
	// (docs/security.md).
	CredentialForbidden Code = "credential_forbidden"
	// PolicyStale: the node has not been able to confirm its view of the
	// policy store for longer than policy.max_staleness (it may be cut off
	// from the store's leader), so it cannot tell whether a grant the turn
	// holds was revoked; the operation was not decided.
	PolicyStale Code = "policy_stale"
	// PolicyForbidden: a policy request (node policy) from a bus identity
	// that is not an admin; nothing was read or changed.
	PolicyForbidden Code = "policy_forbidden"
	// PolicyConflict: a policy write named a revision its key is no
	// longer at (another admin changed it); the refusal carries the
	// current revision and nothing was written.
	PolicyConflict Code = "policy_conflict"
	// PolicyNotFound: the policy key holds nothing.
	PolicyNotFound Code = "policy_not_found"
	// AuthRequired: the tool's server needs an authorization its
	// credential profile does not hold now (an OAuth token expired and
	// could not be refreshed, was revoked, or was never granted for this
	// principal); the profile must be re-authorized. The call was not run.
	AuthRequired Code = "auth_required"
	// InsufficientScope: the server refused the call for want of an OAuth
	// scope the credential was not granted (step-up); the message names
	// the scope. Re-authorizing the profile for it may allow the call.
	InsufficientScope Code = "insufficient_scope"
	// PendingReview: the tool's contract is not the revision accepted for
	// the tenant and its provider holds drift for review (drift: hold);
	// the tool is left out of the turn until an approver accepts it
	// (docs/approvals.md). Given in degraded reports, not to a call: a
	// held tool is not in the turn's catalogue (a call is unknown_tool).
	PendingReview Code = "pending_review"
	// HiddenText: the tool's model-facing text (title, description,
	// schemas, annotations) carries invisible or bidirectional-control
	// characters and its provider's policy refuses such tools
	// (refuse_hidden_text); the tool is left out of every turn.
	HiddenText Code = "hidden_text"
	// Internal: a SharedOS fault, not the caller's: a bug or an
	// infrastructure failure.
	Internal Code = "internal"
)

// Codes lists every code, in a stable order.
func Codes() []Code {
	return []Code{
		UnknownTool, NamespaceDisabled, NotDiscoverable, InvalidArguments,
		ApprovalRequired, ApprovalDenied, ApprovalInvalid, ApprovalForbidden,
		NoMatchingGrant, StepCeilingExceeded, TurnClosed, TurnNotFound,
		ProviderUnavailable, ProviderTimeout, ProviderError, CapabilityChanged,
		Overloaded, InvalidRequest, NodeUnavailable, AuditUnavailable,
		DeadlineExceeded, ResultTooLarge, RateLimited, TenantForbidden, CredentialForbidden, PolicyStale,
		PolicyForbidden, PolicyConflict, PolicyNotFound, AuthRequired, InsufficientScope, PendingReview, HiddenText, Internal,
	}
}

// Known reports whether c is one of the defined codes.
func (c Code) Known() bool {
	for _, k := range Codes() {
		if k == c {
			return true
		}
	}
	return false
}

// Error is a refusal or failure carrying a stable code. Two Errors are the
// same for errors.Is when their codes are equal, whatever their messages.
type Error struct {
	Code    Code
	Message string
	// RetryAfter, when set (rate_limited), is how long to wait before
	// the same request can succeed.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "sharedos: " + string(e.Code)
	}
	return "sharedos: " + string(e.Code) + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// New returns an *Error with the code and a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Of returns the code carried by err, or Internal when err carries none.
// It returns "" for a nil error.
func Of(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Sentinels for errors.Is. Their messages are empty; match, don't print.
var (
	ErrUnknownTool         = &Error{Code: UnknownTool}
	ErrNamespaceDisabled   = &Error{Code: NamespaceDisabled}
	ErrNotDiscoverable     = &Error{Code: NotDiscoverable}
	ErrInvalidArguments    = &Error{Code: InvalidArguments}
	ErrNoMatchingGrant     = &Error{Code: NoMatchingGrant}
	ErrStepCeilingExceeded = &Error{Code: StepCeilingExceeded}
	ErrTurnClosed          = &Error{Code: TurnClosed}
	ErrTurnNotFound        = &Error{Code: TurnNotFound}
	ErrProviderUnavailable = &Error{Code: ProviderUnavailable}
	ErrProviderTimeout     = &Error{Code: ProviderTimeout}
	ErrProviderError       = &Error{Code: ProviderError}
	ErrCapabilityChanged   = &Error{Code: CapabilityChanged}
	ErrOverloaded          = &Error{Code: Overloaded}
	ErrInvalidRequest      = &Error{Code: InvalidRequest}
	ErrNodeUnavailable     = &Error{Code: NodeUnavailable}
	ErrAuditUnavailable    = &Error{Code: AuditUnavailable}
	ErrDeadlineExceeded    = &Error{Code: DeadlineExceeded}
	ErrResultTooLarge      = &Error{Code: ResultTooLarge}
	ErrRateLimited         = &Error{Code: RateLimited}
	ErrTenantForbidden     = &Error{Code: TenantForbidden}
	ErrCredentialForbidden = &Error{Code: CredentialForbidden}
	ErrApprovalRequired    = &Error{Code: ApprovalRequired}
	ErrApprovalDenied      = &Error{Code: ApprovalDenied}
	ErrApprovalInvalid     = &Error{Code: ApprovalInvalid}
	ErrApprovalForbidden   = &Error{Code: ApprovalForbidden}
	ErrPolicyStale         = &Error{Code: PolicyStale}
	ErrPolicyForbidden     = &Error{Code: PolicyForbidden}
	ErrPolicyConflict      = &Error{Code: PolicyConflict}
	ErrPolicyNotFound      = &Error{Code: PolicyNotFound}
	ErrAuthRequired        = &Error{Code: AuthRequired}
	ErrInsufficientScope   = &Error{Code: InsufficientScope}
	ErrPendingReview       = &Error{Code: PendingReview}
	ErrHiddenText          = &Error{Code: HiddenText}
	ErrInternal            = &Error{Code: Internal}
)
