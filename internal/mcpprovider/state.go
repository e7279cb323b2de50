package mcpprovider

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/reason"
)

// State is where discovery stands for one (server, credential profile).
type State string

// The discovery states. Only ready serves tools; stale and refreshing
// keep the last snapshot as last-known (shown, never executed unverified).
const (
	StateUnknown      State = "unknown"       // never asked
	StateLoading      State = "loading"       // first discovery under way
	StateReady        State = "ready"         // a fresh, verified snapshot
	StateStale        State = "stale"         // the snapshot expired or a hint said it changed
	StateRefreshing   State = "refreshing"    // re-discovery under way, last-known kept
	StateAuthRequired State = "auth_required" // the server refused the credential (or none is configured)
	StateIncompatible State = "incompatible"  // protocol mismatch or no tools support
	StateFailed       State = "failed"        // any other failure
)

// States lists every state, in the order above (for gauges).
var States = []State{StateUnknown, StateLoading, StateReady, StateStale, StateRefreshing, StateAuthRequired, StateIncompatible, StateFailed}

// Class is why a discovery or call failed.
type Class string

// The failure classes, each mapped from what the SDK and HTTP return.
const (
	ClassNone               Class = ""
	ClassNetworkUnreachable Class = "network_unreachable" // no connection, process did not start, stream closed, 502/503/504
	ClassTimeout            Class = "timeout"             // no answer within the deadline
	ClassAuthExpired        Class = "auth_expired"        // HTTP 401, or the profile's secret is missing
	ClassPermissionDenied   Class = "permission_denied"   // HTTP 403, or a profile the server is not configured for
	ClassProtocolMismatch   Class = "protocol_mismatch"   // no protocol revision in common
	ClassMalformedResponse  Class = "malformed_response"  // an answer that does not decode, or over a limit
	ClassServerBug          Class = "server_bug"          // JSON-RPC internal errors, HTTP 500, pagination that does not end
	ClassRateLimited        Class = "rate_limited"        // HTTP 429
	ClassUnsupported        Class = "unsupported_operation"
	ClassInsufficientScope  Class = "insufficient_scope" // HTTP 403 with a Bearer insufficient_scope challenge (step-up)
)

// event is an input to the discovery state machine.
type event int

const (
	evStart   event = iota // a discovery begins
	evSuccess              // it returned a listing
	evFailure              // it failed (with a class)
	evHint                 // list_changed, a dropped stream, a reconnect
	evExpire               // the snapshot's TTL passed
)

// next is the discovery state machine: pure, no I/O.
func next(s State, e event, c Class, hasSnapshot bool) State {
	switch e {
	case evStart:
		if hasSnapshot {
			return StateRefreshing
		}
		return StateLoading
	case evSuccess:
		return StateReady
	case evFailure:
		switch c {
		case ClassAuthExpired, ClassPermissionDenied:
			return StateAuthRequired
		case ClassProtocolMismatch, ClassUnsupported:
			return StateIncompatible
		}
		return StateFailed
	case evHint, evExpire:
		if s == StateReady {
			return StateStale
		}
	}
	return s
}

// failure is a classified error. Its message never holds a credential.
// code, when set, is its reason code instead of the class's; retry marks
// a token the server refused that one refresh may cure.
type failure struct {
	class Class
	code  reason.Code
	retry bool
	msg   string
}

func (f *failure) Error() string { return string(f.class) + ": " + f.msg }

// code is the kernel's reason code for a class.
func (c Class) code() reason.Code {
	switch c {
	case ClassTimeout:
		return reason.ProviderTimeout
	case ClassRateLimited:
		return reason.Overloaded
	case ClassInsufficientScope:
		return reason.InsufficientScope
	case ClassNetworkUnreachable, ClassAuthExpired, ClassPermissionDenied:
		return reason.ProviderUnavailable
	}
	return reason.ProviderError
}

// classify maps an SDK, transport or HTTP outcome to a class. status and
// tooLarge are what the transport observed during the operation.
func classify(err error, status int, tooLarge int64) Class {
	var f *failure
	switch {
	case err == nil:
		return ClassNone
	case errors.As(err, &f):
		return f.class
	case tooLarge > 0:
		return ClassMalformedResponse
	}
	switch {
	case status == http.StatusUnauthorized:
		return ClassAuthExpired
	case status == http.StatusForbidden:
		return ClassPermissionDenied
	case status == http.StatusTooManyRequests:
		return ClassRateLimited
	case status == http.StatusBadGateway, status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return ClassNetworkUnreachable
	case status == http.StatusNotFound, status == http.StatusMethodNotAllowed, status == http.StatusNotAcceptable:
		return ClassUnsupported
	case status >= 500:
		return ClassServerBug
	case status >= 400:
		return ClassMalformedResponse
	}
	var ne net.Error
	var ue *url.Error
	var ee *exec.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.As(err, &ee), errors.As(err, &ne), errors.As(err, &ue), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, mcp.ErrConnectionClosed):
		return ClassNetworkUnreachable
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		switch we.Code {
		case jsonrpc.CodeMethodNotFound:
			return ClassUnsupported
		case mcp.CodeUnsupportedProtocolVersion:
			return ClassProtocolMismatch
		case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
			return ClassMalformedResponse
		}
		return ClassServerBug
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unsupported protocol version"):
		return ClassProtocolMismatch
	case strings.Contains(msg, "decode"), strings.Contains(msg, "unmarshal"), strings.Contains(msg, "invalid character"):
		return ClassMalformedResponse
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "EOF"), strings.Contains(msg, "closed"), strings.Contains(msg, "broken pipe"):
		return ClassNetworkUnreachable
	}
	return ClassServerBug
}
