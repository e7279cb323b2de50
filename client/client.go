// Package client is the Go client agent runtimes use to drive SharedOS
// turns over NATS.
//
//	c := client.New(nc, nil)
//	turn, err := c.Open(ctx, client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
//	tools, err := turn.ListTools(ctx)
//	res, err := turn.Invoke(ctx, "notes_put", []byte(`{"space":"acme","title":"t","body":"b"}`))
//	if errors.Is(err, reason.ErrNoMatchingGrant) { ... }
//	err = turn.Close(ctx)
//
// Every method honours its context's deadline (the node is told it, so it
// stops work the caller has given up on). Refusals are *reason.Error values
// matched with errors.Is against the reason sentinels; a node that is gone
// gives turn_not_found for its turns and node_unavailable for opens.
// A Client and a Turn are safe for concurrent use.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Options configure a Client; nil means defaults.
type Options struct {
	// Prefix of the node's subjects. Default "sharedos".
	Prefix string
	// Timeout applies when a context has no deadline. Default 30s.
	Timeout time.Duration
	// Limits bound replies before they are decoded.
	Limits messages.Limits
	// ResendAfter is how long an operation of a turn that is safe to send
	// again — a listing, the namespaces, a call (which carries a request
	// id, so the turn runs it once and answers a resend with its
	// answer) — waits for its answer before the same request is sent
	// again, the wait doubling each time, within the context's deadline.
	// An answer lost on the way (the connection moving to another
	// server, a node's server restarting) then costs this wait, not the
	// deadline. Default 2s; negative: never resend.
	ResendAfter time.Duration
	// OpenAttempts is how many times Open sends an open that no node took
	// (no node serving opens, or the one that answered refused it
	// overloaded or node_unavailable before opening anything), with a
	// short pause between, within the context's deadline. An open whose
	// answer is late is sent again like a listing (ResendAfter): if the
	// first one did open a turn, that turn has no holder and closes when
	// it idles out (kernel.idle_timeout); a draining node waits for it
	// until its drain_timeout. Default 3; 1: no retry.
	OpenAttempts int
	// TracerProvider, if set, records a client span per request,
	// "sharedos.{op}", under the span of the context the caller passes,
	// and sends its W3C trace context in the request's NATS headers, so
	// the node's spans (and the provider's and MCP server's beyond) join
	// the caller's trace. nil: no span and no header.
	TracerProvider trace.TracerProvider
}

// Client talks to SharedOS nodes over one NATS connection.
type Client struct {
	nc     *nats.Conn
	opts   Options
	tracer trace.Tracer
	resent atomic.Uint64
}

// New returns a Client using nc.
func New(nc *nats.Conn, opts *Options) *Client {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "sharedos"
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ResendAfter == 0 {
		o.ResendAfter = 2 * time.Second
	}
	if o.OpenAttempts <= 0 {
		o.OpenAttempts = 3
	}
	if o.Limits == (messages.Limits{}) {
		o.Limits = messages.DefaultLimits()
		o.Limits.MaxBytes = 8 << 20
	}
	return &Client{nc: nc, opts: o, tracer: traceprop.Tracer(o.TracerProvider)}
}

// Access is who is asking: the tenant, principal, credential profile id
// (never a secret), the namespaces to enable and extra attributes.
type Access = messages.Access

// Handle names an open turn: its node and id. Its string form is
// "node/turn", which Attach accepts from another process.
type Handle struct {
	Node   string `json:"node"`
	TurnID string `json:"turn_id"`
}

func (h Handle) String() string { return h.Node + "/" + h.TurnID }

// ParseHandle parses "node/turn".
func ParseHandle(s string) (Handle, error) {
	node, turn, ok := strings.Cut(s, "/")
	if !ok || node == "" || turn == "" {
		return Handle{}, fmt.Errorf("client: turn handle %q is not node/turn", s)
	}
	return Handle{Node: node, TurnID: turn}, nil
}

// Turn is an open turn and this caller's lease on it.
type Turn struct {
	c       *Client
	Handle  Handle
	LeaseID string
	// Attached is true when Open or Attach joined a turn that was already open.
	Attached bool
	access   Access
}

// Open opens a new turn on any node. An open no node took is sent again
// (Options.OpenAttempts): while a node drains or restarts the others
// take its opens.
func (c *Client) Open(ctx context.Context, access Access) (*Turn, error) {
	access.TurnID, access.Lease = "", ""
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	pause := 25 * time.Millisecond
	for attempt := 1; ; attempt++ {
		t, err := c.open(ctx, messages.OpenSubject(c.opts.Prefix), access)
		code := reason.Of(err)
		if err == nil || attempt >= c.opts.OpenAttempts || (code != reason.NodeUnavailable && code != reason.Overloaded) {
			return t, err
		}
		if re := (*reason.Error)(nil); errors.As(err, &re) && re.RetryAfter > pause {
			pause = re.RetryAfter
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// Attach joins an open turn (another connection of the same runtime, or
// the turn's MCP sandbox) with the same authority; it gets its own lease.
func (c *Client) Attach(ctx context.Context, h Handle, access Access) (*Turn, error) {
	access.TurnID, access.Lease = h.TurnID, ""
	return c.open(ctx, messages.TurnSubject(c.opts.Prefix, h.Node, messages.OpAttach), access)
}

func (c *Client) open(ctx context.Context, subject string, access Access) (*Turn, error) {
	var rep messages.OpenReply
	// A new turn's open is resent when its answer is late (a lost answer
	// leaves at most an unheld turn that idles out); an attach is not (a
	// second lease would hold the turn open after this caller closes).
	fresh := access.TurnID == ""
	if err := c.request(ctx, subject, func(ms uint32) messages.Message {
		return &messages.OpenRequest{V: messages.Version, Access: access, TimeoutMs: ms}
	}, &rep, false, fresh); err != nil {
		return nil, err
	}
	// Every later operation carries the turn and this caller's lease.
	access.TurnID, access.Lease = rep.TurnID, rep.LeaseID
	return &Turn{c: c, Handle: Handle{Node: rep.Node, TurnID: rep.TurnID}, LeaseID: rep.LeaseID, Attached: rep.Attached, access: access}, nil
}

// Access returns the access context the turn's operations carry.
func (t *Turn) Access() Access { return t.access }

func (t *Turn) subject(op messages.Op) string {
	return messages.TurnSubject(t.c.opts.Prefix, t.Handle.Node, op)
}

// ListTools lists the tools the turn's principal may see now.
func (t *Turn) ListTools(ctx context.Context) (*messages.ListReply, error) {
	return t.c.list(ctx, t.subject(messages.OpList), t.access, true)
}

// ListNamespaces lists the namespaces of the turn's catalogue.
func (t *Turn) ListNamespaces(ctx context.Context) ([]messages.Namespace, error) {
	return t.c.namespaces(ctx, t.subject(messages.OpNamespaces), t.access, true)
}

// UpdateNamespaces replaces the turn's enabled namespaces.
func (t *Turn) UpdateNamespaces(ctx context.Context, namespaces []string) error {
	var rep messages.AckReply
	return t.c.request(ctx, t.subject(messages.OpUpdateNamespaces), func(ms uint32) messages.Message {
		return &messages.UpdateNamespacesRequest{V: messages.Version, Access: t.access, Namespaces: namespaces, TimeoutMs: ms}
	}, &rep, true, false)
}

// Invoke calls the tool the turn lists as alias with JSON arguments.
func (t *Turn) Invoke(ctx context.Context, alias string, args []byte) (*messages.InvokeReply, error) {
	return t.c.invoke(ctx, t.subject(messages.OpInvoke), t.access, "", alias, args, true)
}

// Close releases this caller's lease; the turn closes when its last lease
// is released. Closing twice is harmless, so a close whose answer is late
// is sent again (Options.ResendAfter); when the first one had closed the
// turn, the resend finds no turn, which is what was asked.
func (t *Turn) Close(ctx context.Context) error {
	var rep messages.AckReply
	resent, err := t.c.requestCounted(ctx, t.subject(messages.OpClose), func(ms uint32) messages.Message {
		return &messages.CloseRequest{V: messages.Version, Access: t.access, LeaseID: t.LeaseID, TimeoutMs: ms}
	}, &rep, true, true)
	if resent && errors.Is(err, reason.ErrTurnNotFound) {
		return nil
	}
	return err
}

// ListTools lists tools in a turn of one operation (no turn is opened).
func (c *Client) ListTools(ctx context.Context, access Access) (*messages.ListReply, error) {
	access.TurnID = ""
	return c.list(ctx, messages.OneOpSubject(c.opts.Prefix, messages.OpList), access, false)
}

// Invoke calls a tool in a turn of one operation.
func (c *Client) Invoke(ctx context.Context, access Access, alias string, args []byte) (*messages.InvokeReply, error) {
	access.TurnID = ""
	return c.invoke(ctx, messages.OneOpSubject(c.opts.Prefix, messages.OpInvoke), access, "", alias, args, false)
}

// ListNamespaces lists namespaces in a turn of one operation.
func (c *Client) ListNamespaces(ctx context.Context, access Access) ([]messages.Namespace, error) {
	access.TurnID = ""
	return c.namespaces(ctx, messages.OneOpSubject(c.opts.Prefix, messages.OpNamespaces), access, false)
}

// maxListPages bounds how many pages a listing may take.
const maxListPages = 4096

// list follows a listing's pages to the end and returns them as one reply.
// Every page must carry the same catalogHash: pages of one turn always do
// (its catalogue is held); pages of turns of one operation are separate
// resolutions, and a catalogue that moved between them is an error.
func (c *Client) list(ctx context.Context, subject string, access Access, turn bool) (*messages.ListReply, error) {
	var all *messages.ListReply
	cursor := ""
	for range maxListPages {
		rep, err := c.listPage(ctx, subject, access, cursor, turn)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = rep
		} else {
			if rep.CatalogHash != all.CatalogHash {
				return nil, fmt.Errorf("client: the catalogue changed between listing pages (%s, then %s)", all.CatalogHash, rep.CatalogHash)
			}
			all.Tools = append(all.Tools, rep.Tools...)
		}
		if rep.NextCursor == "" {
			all.NextCursor = ""
			return all, nil
		}
		if rep.NextCursor == cursor {
			return nil, fmt.Errorf("client: listing cursor %q did not advance", cursor)
		}
		cursor = rep.NextCursor
	}
	return nil, fmt.Errorf("client: listing did not end within %d pages", maxListPages)
}

// ListPage lists one page of the turn's tools, after cursor (a previous
// page's NextCursor; "" for the first).
func (t *Turn) ListPage(ctx context.Context, cursor string) (*messages.ListReply, error) {
	return t.c.listPage(ctx, t.subject(messages.OpList), t.access, cursor, true)
}

func (c *Client) listPage(ctx context.Context, subject string, access Access, cursor string, turn bool) (*messages.ListReply, error) {
	var rep messages.ListReply
	if err := c.request(ctx, subject, func(ms uint32) messages.Message {
		return &messages.ListRequest{V: messages.Version, Access: access, Cursor: cursor, TimeoutMs: ms}
	}, &rep, turn, turn); err != nil {
		return nil, err
	}
	return &rep, nil
}

// CallError is a call the node refused or that failed: the reason (match
// it with errors.Is against the reason sentinels) and the reply, which
// names the call and its catalogHash whenever the turn recorded it, and
// whether it was dispatched to its provider.
type CallError struct {
	Err   error
	Reply *messages.InvokeReply
}

func (e *CallError) Error() string { return e.Err.Error() }

// Unwrap returns the reason.
func (e *CallError) Unwrap() error { return e.Err }

func (c *Client) namespaces(ctx context.Context, subject string, access Access, turn bool) ([]messages.Namespace, error) {
	var rep messages.NamespacesReply
	if err := c.request(ctx, subject, func(ms uint32) messages.Message {
		return &messages.TurnRequest{V: messages.Version, Access: access, TimeoutMs: ms}
	}, &rep, turn, turn); err != nil {
		return nil, err
	}
	return rep.Namespaces, nil
}

func (c *Client) invoke(ctx context.Context, subject string, access Access, profile, alias string, args []byte, turn bool) (*messages.InvokeReply, error) {
	return c.invokeWith(ctx, subject, access, profile, alias, args, "", turn)
}

// invokeWith is invoke naming an approval ("" for none).
func (c *Client) invokeWith(ctx context.Context, subject string, access Access, profile, alias string, args []byte, approval string, turn bool) (*messages.InvokeReply, error) {
	var rep messages.InvokeReply
	var id string
	if turn { // a named turn runs a call with a request id once: safe to resend
		id = newRequestID()
	}
	if err := c.request(ctx, subject, func(ms uint32) messages.Message {
		return &messages.InvokeRequest{V: messages.Version, Access: access, Tool: alias, Args: args, TimeoutMs: ms, RequestID: id, Profile: profile, Approval: approval}
	}, &rep, turn, turn); err != nil {
		if rep.Error != nil {
			return nil, &CallError{Err: err, Reply: &rep}
		}
		return nil, err
	}
	return &rep, nil
}

// request sends one request, decodes the reply into rep and returns the
// refusal the reply carries, if any. build gets the
// time the caller will wait, in milliseconds, for the node's own deadline.
// turn says the subject names a turn's node (no responders = turn gone);
// resend, that the request is safe to send again when its answer is late
// (Options.ResendAfter).
func (c *Client) request(ctx context.Context, subject string, build func(uint32) messages.Message, rep messages.Reply, turn, resend bool) error {
	_, err := c.requestCounted(ctx, subject, build, rep, turn, resend)
	return err
}

// requestCounted is request, also saying whether the request was sent
// more than once.
func (c *Client) requestCounted(ctx context.Context, subject string, build func(uint32) messages.Message, rep messages.Reply, turn, resend bool) (resent bool, _ error) {
	if c.tracer == nil {
		return c.send(ctx, subject, build, rep, turn, resend, nil)
	}
	ctx, span := c.startSpan(ctx, subject)
	m := &nats.Msg{}
	traceprop.Inject(ctx, m)
	resent, err := c.send(ctx, subject, build, rep, turn, resend, m.Header)
	traceprop.End(span, codeOf(err))
	return resent, err
}

// send is requestCounted with the request's headers.
func (c *Client) send(ctx context.Context, subject string, build func(uint32) messages.Message, rep messages.Reply, turn, resend bool, hdr nats.Header) (resent bool, _ error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	wait := time.Until(dl)
	if wait <= 0 {
		return false, reason.New(reason.DeadlineExceeded, "the deadline passed before the request was sent")
	}
	// Leave the node a little less than our wait, so its answer (even a
	// timeout) arrives before we give up.
	ms := uint32(min(wait.Milliseconds()*9/10, 1<<31))
	data, err := messages.Encode(build(ms))
	if err != nil {
		return false, fmt.Errorf("client: encoding request: %w", err)
	}
	msg, resent, err := c.exchange(ctx, subject, data, hdr, resend)
	switch {
	case errors.Is(err, nats.ErrNoResponders) && turn:
		return resent, reason.New(reason.TurnNotFound, "no node answers for %s (the turn's node is gone)", subject)
	case errors.Is(err, nats.ErrNoResponders):
		return resent, reason.New(reason.NodeUnavailable, "no SharedOS node is serving %s", subject)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return resent, reason.New(reason.DeadlineExceeded, "no answer on %s within the deadline; an operation may still have taken effect", subject)
	case err != nil:
		return resent, fmt.Errorf("client: %s: %w", subject, err)
	}
	if err := messages.Decode(msg.Data, rep, c.opts.Limits); err != nil {
		return resent, fmt.Errorf("client: reply on %s: %w", subject, err)
	}
	return resent, rep.ReplyError().Err()
}

// exchange sends data on subject and returns the answer. With resend, a
// request not answered within the attempt's wait (ResendAfter, doubling)
// is sent again, byte for byte, until ctx ends; a connection that is
// reconnecting is waited for the same way.
func (c *Client) exchange(ctx context.Context, subject string, data []byte, hdr nats.Header, resend bool) (_ *nats.Msg, resent bool, _ error) {
	if !resend || c.opts.ResendAfter < 0 {
		msg, err := c.ask(ctx, subject, data, hdr)
		return msg, false, err
	}
	wait := c.opts.ResendAfter
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		msg, err := c.ask(actx, subject, data, hdr)
		cancel()
		late := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrConnectionReconnecting)
		switch {
		case err == nil, !late:
			return msg, resent, err
		case ctx.Err() != nil:
			return nil, resent, ctx.Err()
		}
		if errors.Is(err, nats.ErrConnectionReconnecting) {
			select { // the request was not sent: wait a little, not a whole attempt
			case <-ctx.Done():
				return nil, resent, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		c.resent.Add(1)
		resent, wait = true, wait*2
	}
}

// Resent is how many requests this client sent again because their answer
// was late (Options.ResendAfter).
func (c *Client) Resent() uint64 { return c.resent.Load() }

// newRequestID is a call's request id: 16 random bytes, hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Resume returns a Turn for a handle and lease obtained earlier (by this
// process or another, e.g. the CLI's saved turn) without a round trip.
func (c *Client) Resume(h Handle, leaseID string, access Access) *Turn {
	access.TurnID, access.Lease = h.TurnID, leaseID
	return &Turn{c: c, Handle: h, LeaseID: leaseID, access: access}
}
