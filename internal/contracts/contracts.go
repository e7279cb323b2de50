// Package contracts serves contract review over NATS: an approver lists
// the contract baselines of its tenants, reads the structural diff of a
// revision held for review, and accepts or rejects it. Service answers
// on "<prefix>.contracts.<op>" in a queue group (one node answers each
// request); Client is the Go API the CLI (`node contracts`) and the
// console use. The decisions themselves are contract.Gate's.
package contracts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/busrpc"
	"github.com/sharedos/sharedos/reason"
)

// The operations, each on subject "<prefix>.contracts.<op>".
const (
	OpList   = "list"
	OpDiff   = "diff"
	OpAccept = "accept"
	OpReject = "reject"
)

// Ops lists the operations.
func Ops() []string { return []string{OpList, OpDiff, OpAccept, OpReject} }

// Subjects are the review service's subjects, "<prefix>.contracts.>".
func Subjects(prefix string) string { return prefix + ".contracts.>" }

// Subject is operation op's subject.
func Subject(prefix, op string) string { return prefix + ".contracts." + op }

// Request is a review request (JSON). list reads Tenant (optional) and
// Pending; diff reads the key; accept and reject the key, Revision and
// Why.
type Request struct {
	Tenant   string `json:"tenant,omitempty"`
	Provider string `json:"provider,omitempty"`
	Tool     string `json:"tool,omitempty"`
	// Revision is the pending revision the review decides (as list or
	// diff showed it): a revision superseded meanwhile is refused.
	Revision string `json:"revision,omitempty"`
	Why      string `json:"why,omitempty"`
	// Pending, on list: only the baselines with a revision held for review.
	Pending bool `json:"pending,omitempty"`
}

// MaxRequestBytes bounds a request.
const MaxRequestBytes = 16 << 10

// Baseline is one (tenant, provider, tool)'s baseline as the service
// shows it. Titles and descriptions are made visible (contract.Visible).
type Baseline struct {
	Tenant   string `json:"tenant"`
	Provider string `json:"provider"`
	Tool     string `json:"tool"`
	// Accepted and Pending are revisions ("" for none).
	Accepted string `json:"accepted,omitempty"`
	Pending  string `json:"pending,omitempty"`
	// PendingSince is when a resolution first saw the pending revision.
	PendingSince time.Time `json:"pending_since,omitzero"`
	// Classes classify the pending revision against the accepted one.
	Classes  []contract.Class `json:"classes,omitempty"`
	Rejected []string         `json:"rejected,omitempty"`
	Last     *contract.Review `json:"last,omitempty"`
	// Diff (on diff) is the readable structural diff, one line each.
	Diff []string `json:"diff,omitempty"`
	// Title and Description (on diff) are the pending revision's (else the
	// accepted one's), made visible.
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
}

// Reply is a review reply: Error, or the operation's fields.
type Reply struct {
	Error     *ErrorInfo         `json:"error,omitempty"`
	Baselines []Baseline         `json:"baselines,omitempty"`
	Baseline  *Baseline          `json:"baseline,omitempty"`
	Reviewed  *contract.Reviewed `json:"reviewed,omitempty"`
}

// ErrorInfo is a refusal with a stable reason code.
type ErrorInfo struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
}

// View shows baselines: the service's answers, without the bus (what a
// console page renders).
func View(e contract.Entry, withDiff bool) Baseline {
	r := e.Record
	b := Baseline{Tenant: e.Key.Tenant, Provider: e.Key.Provider, Tool: e.Key.Tool, Rejected: r.Rejected, Last: r.Last}
	if r.Accepted != nil {
		b.Accepted = r.Accepted.Revision
	}
	prev, _ := r.Accepted.Decode()
	cur, _ := r.Pending.Decode()
	if r.Pending != nil {
		b.Pending, b.PendingSince = r.Pending.Revision, r.Pending.Seen
		if cur != nil {
			b.Classes = contract.Classify(prev, cur).Classes
		}
	}
	if withDiff {
		shown := cur
		if shown == nil {
			shown = prev
		}
		if shown != nil {
			b.Title, b.Description = contract.Visible(shown.Title), contract.Visible(shown.Description)
		}
		if cur != nil {
			b.Diff = contract.Diff(prev, cur)
		}
	}
	return b
}

// ServiceOptions configure the service.
type ServiceOptions struct {
	Prefix string
	// Approves reports whether the bus account a request came from may
	// review tenant's baselines (an approver bound to it). Required.
	Approves func(account, tenant string) bool
	// Tenants lists the tenants account approves (for a list naming
	// none). Required.
	Tenants func(account string) []string
	// MaxConcurrent bounds the requests handled at once. Default 16.
	MaxConcurrent int
	Timeout       time.Duration
	Logger        *slog.Logger
}

// Service answers review requests.
type Service struct {
	gate *contract.Gate
	opts ServiceOptions
	sub  *nats.Subscription
	sem  chan struct{}
	wg   sync.WaitGroup
}

// Serve starts the review service of gate on nc.
func Serve(nc *nats.Conn, gate *contract.Gate, opts ServiceOptions) (*Service, error) {
	if opts.Approves == nil || opts.Tenants == nil {
		return nil, errors.New("contracts: ServiceOptions.Approves and Tenants are required")
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = 16
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{gate: gate, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent)}
	sub, err := nc.QueueSubscribe(Subjects(opts.Prefix), "sharedos-contracts", func(m *nats.Msg) {
		select {
		case s.sem <- struct{}{}:
		default:
			respond(m, Reply{Error: &ErrorInfo{Code: reason.Overloaded, Message: "too many review requests in progress on this node"}})
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			respond(m, s.handle(m))
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("contracts: serve: %w", err)
	}
	s.sub = sub
	return s, nil
}

// Stop stops taking requests and waits for those in progress; idempotent.
func (s *Service) Stop() {
	_ = s.sub.Unsubscribe()
	s.wg.Wait()
}

func respond(m *nats.Msg, rep Reply) {
	b, err := json.Marshal(rep)
	if err != nil {
		b, _ = json.Marshal(Reply{Error: &ErrorInfo{Code: reason.Internal, Message: err.Error()}})
	}
	_ = m.Respond(b)
}

func refuse(code reason.Code, format string, args ...any) Reply {
	return Reply{Error: &ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func (s *Service) handle(m *nats.Msg) Reply {
	info := m.Header.Get("Nats-Request-Info")
	var ci struct {
		Account string `json:"acc"`
	}
	if info == "" || len(info) > 4096 || json.Unmarshal([]byte(info), &ci) != nil || ci.Account == "" {
		return refuse(reason.ApprovalForbidden, "the request did not come through an approver identity's account")
	}
	if len(m.Data) > MaxRequestBytes {
		return refuse(reason.InvalidRequest, "a request of %d bytes, more than %d", len(m.Data), MaxRequestBytes)
	}
	var req Request
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return refuse(reason.InvalidRequest, "not a review request: %v", err)
		}
	}
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	rep, err := s.do(ctx, ci.Account, op, req)
	if err != nil {
		s.opts.Logger.Info("contracts: request refused", "op", op, "by", ci.Account, "err", err)
		return Reply{Error: errorInfo(err)}
	}
	return rep
}

// Do carries out one review request as account: what the service
// answers, for a caller in the node's process.
func (s *Service) do(ctx context.Context, account, op string, req Request) (Reply, error) {
	return Do(ctx, s.gate, Caller{Name: account, Approves: func(t string) bool { return s.opts.Approves(account, t) },
		Tenants: s.opts.Tenants(account)}, op, req)
}

// Caller is who asks: a name for the record, and the tenants it may review.
type Caller struct {
	Name     string
	Approves func(tenant string) bool
	// Tenants are those a list names when the request names none.
	Tenants []string
}

// Do carries out one review operation against gate as caller (the
// service's handler; a console in the node's process calls it directly).
func Do(ctx context.Context, gate *contract.Gate, caller Caller, op string, req Request) (Reply, error) {
	var rep Reply
	switch op {
	case OpList:
		tenants := caller.Tenants
		if req.Tenant != "" {
			if !caller.Approves(req.Tenant) {
				return rep, forbidden(caller.Name, req.Tenant)
			}
			tenants = []string{req.Tenant}
		}
		for _, t := range tenants {
			es, err := gate.Store().List(ctx, t)
			if err != nil {
				return rep, err
			}
			for _, e := range es {
				if !req.Pending || e.Record.Pending != nil {
					rep.Baselines = append(rep.Baselines, View(e, false))
				}
			}
		}
	case OpDiff, OpAccept, OpReject:
		k := contract.Key{Tenant: req.Tenant, Provider: req.Provider, Tool: req.Tool}
		if k.Tenant == "" || k.Provider == "" || k.Tool == "" {
			return rep, fmt.Errorf("%w: name the tenant, provider and tool", errInvalid)
		}
		if !caller.Approves(k.Tenant) {
			return rep, forbidden(caller.Name, k.Tenant)
		}
		if op == OpDiff {
			r, rev, err := gate.Store().Get(ctx, k)
			if err != nil {
				return rep, err
			}
			if rev == 0 {
				return rep, fmt.Errorf("%w: %s", contract.ErrNotFound, k)
			}
			b := View(contract.Entry{Key: k, Record: r, Revision: rev}, true)
			rep.Baseline = &b
			return rep, nil
		}
		if req.Revision == "" {
			return rep, fmt.Errorf("%w: name the pending revision (as list or diff shows it)", errInvalid)
		}
		if len(req.Why) > 1024 {
			return rep, fmt.Errorf("%w: a reason of %d bytes, more than 1024", errInvalid, len(req.Why))
		}
		var rv contract.Reviewed
		var err error
		if op == OpAccept {
			rv, err = gate.Accept(ctx, k, req.Revision, caller.Name, req.Why)
		} else {
			rv, err = gate.Reject(ctx, k, req.Revision, caller.Name, req.Why)
		}
		if err != nil && rv.Revision == "" {
			return rep, err
		}
		rep.Reviewed = &rv
		return rep, err
	default:
		return rep, fmt.Errorf("%w: no review operation %q (%s)", errInvalid, op, strings.Join(Ops(), ", "))
	}
	return rep, nil
}

var (
	errInvalid   = errors.New("contracts: invalid request")
	errForbidden = errors.New("contracts: forbidden")
)

func forbidden(who, tenant string) error {
	return fmt.Errorf("%w: %q is not an approver of tenant %q", errForbidden, who, tenant)
}

func errorInfo(err error) *ErrorInfo {
	code := reason.Internal
	switch {
	case errors.Is(err, errForbidden):
		code = reason.ApprovalForbidden
	case errors.Is(err, errInvalid):
		code = reason.InvalidRequest
	case errors.Is(err, contract.ErrNotFound):
		code = reason.PolicyNotFound
	case errors.Is(err, contract.ErrNotPending), errors.Is(err, contract.ErrConflict):
		code = reason.PolicyConflict
	case errors.Is(err, context.DeadlineExceeded):
		code = reason.DeadlineExceeded
	case strings.Contains(err.Error(), "not recorded"):
		code = reason.AuditUnavailable
	}
	return &ErrorInfo{Code: code, Message: err.Error()}
}

// Client calls the review service as the identity its connection is.
// Safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
}

// NewClient returns a client of the service under prefix.
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

// Do sends req as operation op; a refusal is a *reason.Error.
func (c *Client) Do(ctx context.Context, op string, req Request) (Reply, error) {
	var rep Reply
	if err := busrpc.Call(ctx, c.nc, busrpc.Service{Name: "contract review", Role: "an approver"}, Subject(c.prefix, op), c.timeout, req, &rep); err != nil {
		return Reply{}, err
	}
	if e := rep.Error; e != nil {
		return rep, reason.New(e.Code, "%s", e.Message)
	}
	return rep, nil
}

// List returns the baselines of tenant ("": every tenant the caller
// approves), only those pending review when pending.
func (c *Client) List(ctx context.Context, tenant string, pending bool) ([]Baseline, error) {
	rep, err := c.Do(ctx, OpList, Request{Tenant: tenant, Pending: pending})
	return rep.Baselines, err
}

// Diff returns k's baseline with the diff of its pending revision.
func (c *Client) Diff(ctx context.Context, k contract.Key) (Baseline, error) {
	rep, err := c.Do(ctx, OpDiff, Request{Tenant: k.Tenant, Provider: k.Provider, Tool: k.Tool})
	if err != nil || rep.Baseline == nil {
		return Baseline{}, err
	}
	return *rep.Baseline, nil
}

// Accept makes k's pending revision (which must be revision) its baseline.
func (c *Client) Accept(ctx context.Context, k contract.Key, revision, why string) (contract.Reviewed, error) {
	return c.review(ctx, OpAccept, k, revision, why)
}

// Reject refuses k's pending revision (which must be revision).
func (c *Client) Reject(ctx context.Context, k contract.Key, revision, why string) (contract.Reviewed, error) {
	return c.review(ctx, OpReject, k, revision, why)
}

func (c *Client) review(ctx context.Context, op string, k contract.Key, revision, why string) (contract.Reviewed, error) {
	rep, err := c.Do(ctx, op, Request{Tenant: k.Tenant, Provider: k.Provider, Tool: k.Tool, Revision: revision, Why: why})
	if rep.Reviewed == nil {
		return contract.Reviewed{}, err
	}
	return *rep.Reviewed, err
}
