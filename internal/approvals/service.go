package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/reason"
)

// The approver operations, each on subject "<prefix>.approvals.<op>".
const (
	OpList    = "list"
	OpShow    = "show"
	OpApprove = "approve"
	OpDeny    = "deny"
)

// Ops lists the operations.
func Ops() []string { return []string{OpList, OpShow, OpApprove, OpDeny} }

// Subject is the subject of operation op.
func Subject(prefix, op string) string { return prefix + ".approvals." + op }

// Request is an approver's request (JSON). list reads Tenant and All;
// show ID (and Tenant, if the approver has several); approve and deny ID,
// Tenant and Reason.
type Request struct {
	Tenant string `json:"tenant,omitempty"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason,omitempty"`
	// All lists decided and expired requests too (default: pending ones).
	All bool `json:"all,omitempty"`
}

// Reply answers a request: Error, or the requests.
type Reply struct {
	Error    *ErrorInfo       `json:"error,omitempty"`
	Requests []approval.State `json:"requests,omitempty"`
	Request  *approval.State  `json:"request,omitempty"`
}

// ErrorInfo is a refusal with a stable reason code.
type ErrorInfo struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
}

// MaxRequestBytes bounds a request.
const MaxRequestBytes = 16 << 10

// ServiceOptions configure the service.
type ServiceOptions struct {
	Prefix string
	// Identity looks up the bus identity a request's account names; only
	// approvers are served.
	Identity func(account string) (identity.Identity, bool)
	// Timeout bounds one operation. Default 10s.
	Timeout time.Duration
	// MaxConcurrent bounds requests in progress (beyond: overloaded).
	// Default 16.
	MaxConcurrent int
	Logger        *slog.Logger
}

// Service answers approvers on a node's connection, in a queue group.
type Service struct {
	q    *approval.Requests
	b    *Bucket
	opts ServiceOptions
	sub  *nats.Subscription
	sem  chan struct{}
	wg   sync.WaitGroup
	ctx  context.Context
	stop context.CancelFunc
}

// Serve starts the service: q decides (recording each decision), b finds
// and lists.
func Serve(nc *nats.Conn, q *approval.Requests, b *Bucket, opts ServiceOptions) (*Service, error) {
	if opts.Identity == nil {
		return nil, errors.New("approvals: ServiceOptions.Identity is required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{q: q, b: b, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	sub, err := nc.QueueSubscribe(opts.Prefix+".approvals.*", "sharedos-approvals", func(m *nats.Msg) {
		select {
		case s.sem <- struct{}{}:
		default:
			respond(m, Reply{Error: &ErrorInfo{Code: reason.Overloaded, Message: "too many approvals requests in progress on this node"}}, opts.Logger)
			return
		}
		s.wg.Go(func() {
			defer func() { <-s.sem }()
			respond(m, s.handle(m), opts.Logger)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: serve: %w", err)
	}
	s.sub = sub
	return s, nil
}

// Stop stops taking requests and waits for those in progress; idempotent.
func (s *Service) Stop() {
	_ = s.sub.Unsubscribe()
	s.wg.Wait()
	s.stop()
}

func respond(m *nats.Msg, rep Reply, log *slog.Logger) {
	b, err := json.Marshal(rep)
	if err != nil {
		b, _ = json.Marshal(Reply{Error: &ErrorInfo{Code: reason.Internal, Message: err.Error()}})
	}
	if err := m.Respond(b); err != nil {
		log.Debug("approvals: answer not sent", "err", err)
	}
}

// caller is the approver identity that sent m.
func (s *Service) caller(m *nats.Msg) (identity.Identity, *ErrorInfo) {
	info := m.Header.Get("Nats-Request-Info")
	var ci struct {
		Account string `json:"acc"`
	}
	if info == "" || len(info) > 4096 || json.Unmarshal([]byte(info), &ci) != nil || ci.Account == "" {
		return identity.Identity{}, &ErrorInfo{Code: reason.ApprovalForbidden, Message: "the request did not come through an approver identity's account"}
	}
	id, ok := s.opts.Identity(ci.Account)
	if !ok || id.Role != identity.Approver {
		return identity.Identity{}, &ErrorInfo{Code: reason.ApprovalForbidden, Message: fmt.Sprintf("bus identity %q is not an approver", ci.Account)}
	}
	return id, nil
}

func (s *Service) handle(m *nats.Msg) Reply {
	id, refusal := s.caller(m)
	if refusal != nil {
		return Reply{Error: refusal}
	}
	if len(m.Data) > MaxRequestBytes {
		return Reply{Error: &ErrorInfo{Code: reason.InvalidRequest, Message: fmt.Sprintf("a request of %d bytes, more than %d", len(m.Data), MaxRequestBytes)}}
	}
	var req Request
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return Reply{Error: &ErrorInfo{Code: reason.InvalidRequest, Message: "not JSON of an approvals request: " + err.Error()}}
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.Timeout)
	defer cancel()
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	rep, err := s.do(ctx, op, id, req)
	if err != nil {
		rep = Reply{Error: errorInfo(err)}
		s.opts.Logger.Info("approvals: request refused", "op", op, "by", id.Name, "code", rep.Error.Code, "err", err)
	}
	return rep
}

func (s *Service) do(ctx context.Context, op string, id identity.Identity, req Request) (Reply, error) {
	tenants := id.Tenants
	if id.AllTenantsBound() {
		tenants = []string{""}
	}
	if req.Tenant != "" {
		if !id.Approves(req.Tenant) {
			return Reply{}, reason.New(reason.ApprovalForbidden, "%s is not an approver of tenant %s", id.Name, req.Tenant)
		}
		tenants = []string{req.Tenant}
	}
	switch op {
	case OpList:
		var out []approval.State
		now := time.Now()
		for _, t := range tenants {
			sts, err := s.q.List(ctx, t)
			if err != nil {
				return Reply{}, err
			}
			for _, st := range sts {
				if req.All || st.Status == approval.Pending && !st.Expired(now) {
					out = append(out, st)
				}
			}
		}
		return Reply{Requests: out}, nil
	case OpShow, OpApprove, OpDeny:
		tenant, err := s.b.Find(ctx, req.ID, tenants)
		if err != nil {
			return Reply{}, err
		}
		if op == OpShow {
			st, _, err := s.q.Get(ctx, tenant, req.ID)
			return Reply{Request: &st}, err
		}
		st, err := s.q.Decide(ctx, tenant, req.ID, approval.Decision{Approve: op == OpApprove, By: id.Name, Principals: slices.Clone(id.Principals), Reason: req.Reason})
		if err != nil {
			return Reply{}, err
		}
		return Reply{Request: &st}, nil
	}
	return Reply{}, reason.New(reason.InvalidRequest, "no approvals operation %q (%s)", op, strings.Join(Ops(), ", "))
}

func errorInfo(err error) *ErrorInfo {
	var re *reason.Error
	switch {
	case errors.As(err, &re):
		return &ErrorInfo{Code: re.Code, Message: re.Message}
	case errors.Is(err, approval.ErrNotFound):
		return &ErrorInfo{Code: reason.ApprovalInvalid, Message: err.Error()}
	case errors.Is(err, approval.ErrConflict):
		return &ErrorInfo{Code: reason.ApprovalInvalid, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &ErrorInfo{Code: reason.DeadlineExceeded, Message: err.Error()}
	}
	return &ErrorInfo{Code: reason.Internal, Message: err.Error()}
}
