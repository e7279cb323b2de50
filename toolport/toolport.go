// Package toolport is the port through which the kernel reaches the
// places tools live: a ContextToolProvider answers a turn's catalogue for
// its AccessContext and executes the calls the turn decided. The kernel
// (package actors) takes its providers as this interface, so a program
// embedding the kernel can give it providers of its own; the providers
// the node ships (static tools, remote providers on the bus, MCP servers)
// implement it.
//
// The port names only public types: the access context (authority), tool
// definitions and identities (catalog), content blocks (messages) and
// reason codes (reason).
package toolport

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// ContextToolProvider is the port to a provider of tools.
//
// Concurrency: both methods may be called concurrently, for many turns at
// once, and never from a turn's mailbox — the kernel calls them from their
// own goroutines, so they may block, but must return promptly once ctx is
// done (ctx carries the deadline).
//
// Catalog is called once per turn, with the turn's AccessContext, and
// returns what the provider offers that context. It must not return a
// shared mutable slice. An error means "this provider's catalogue is
// unknown", never "empty": return an empty Catalog for "no tools".
//
// Invoke executes one tool at the revision the turn pinned. A provider
// whose current contract for that tool differs from the pinned revision
// (and that no longer honours the old one) must refuse with an error
// matching reason.ErrCapabilityChanged, and must never run a different
// contract or a similarly named tool instead. A tool that ran and failed
// reports Result.IsError; an error return means the provider could not
// run it. Errors may carry a reason code (reason.Error); the kernel
// classifies the rest (see Classify).
type ContextToolProvider interface {
	ID() string
	Catalog(ctx context.Context, access authority.AccessContext) (Catalog, error)
	Invoke(ctx context.Context, call Call) (Result, error)
}

// Catalog is a provider's answer for one access context.
type Catalog struct {
	Definitions []catalog.Definition
	Freshness   Freshness
	// Refused names tools the provider itself left out of this answer,
	// each "name: reason" (an MCP server's tool over a discovery limit);
	// the kernel reports them as the provider's partial status.
	Refused []string
}

// Freshness is how long a provider vouches for a catalogue and for whom,
// following the discovery contract's ttlMs and cacheScope. The kernel
// holds a turn's catalogue for the turn regardless (ADR 0026); freshness
// bounds how long a provider keeps honouring a revision it advertised.
type Freshness struct {
	TTL time.Duration
	// Scope is "principal" (default), "tenant" or "global": who else may be
	// shown the same answer.
	Scope string
}

// Call is one execution request.
type Call struct {
	Access   authority.AccessContext
	CallID   string
	Tool     catalog.Identity
	Revision string
	// Token is the provider's own revision token for the pinned contract
	// (catalog.Definition.Token), when it gave one.
	Token     string
	Arguments json.RawMessage
	// Resource is the resource the kernel resolved and authorized.
	Resource string
	// CatalogHash is the catalogHash of the turn's held catalogue the call
	// was decided against; Node is the deciding node.
	CatalogHash string
	Node        string
}

// Result is what a tool returned.
type Result struct {
	// Text is the human/model-readable result: one plain text block.
	Text string
	// Structured is an optional JSON value matching the output schema.
	Structured json.RawMessage
	// IsError: the tool ran and reports failure (outcome "tool_error").
	IsError bool
	// Content, when present, is the result's typed content blocks as the
	// tool sent them (text, image, audio, resource links, embedded
	// resources, each with its annotations and _meta), and Text is empty.
	Content []Content
}

// Content is one typed block of a result (the wire's own type).
type Content = messages.Content

// Size is about the bytes r takes in a reply: what a turn bounds by the
// bus's message size (result_too_large beyond it, never cut).
func (r *Result) Size() int {
	n := len(r.Text) + len(r.Structured)
	for i := range r.Content {
		n += r.Content[i].Bytes()
	}
	return n
}

// Classify maps a provider error to its reason code: codes the provider
// set are kept when they are provider-facing, deadlines become
// provider_timeout, everything else provider_error.
func Classify(err error) reason.Code {
	var re *reason.Error
	if errors.As(err, &re) {
		switch re.Code {
		case reason.ProviderUnavailable, reason.ProviderTimeout, reason.ProviderError, reason.CapabilityChanged, reason.Overloaded,
			reason.AuthRequired, reason.InsufficientScope:
			return re.Code
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return reason.ProviderTimeout
	}
	return reason.ProviderError
}

// ClassifiedError returns err as a *reason.Error with its class. A coded
// error keeps its message (it already names the provider); anything else
// is prefixed with the provider id.
func ClassifiedError(provider string, err error) *reason.Error {
	var re *reason.Error
	if errors.As(err, &re) {
		return &reason.Error{Code: Classify(err), Message: re.Message}
	}
	return reason.New(Classify(err), "provider %s: %v", provider, err)
}
