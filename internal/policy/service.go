package policy

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

	"github.com/sharedos/sharedos/internal/busrpc"
	"github.com/sharedos/sharedos/reason"
)

// The admin operations, each on subject "<prefix>.policy.<op>".
const (
	OpGet    = "get"
	OpPut    = "put"
	OpDelete = "delete"
	OpList   = "list"
	OpExport = "export"
	OpDiff   = "diff"
	OpImport = "import"
)

// Ops lists the admin operations.
func Ops() []string { return []string{OpGet, OpPut, OpDelete, OpList, OpExport, OpDiff, OpImport} }

// Subject is the subject of admin operation op.
func Subject(prefix, op string) string { return prefix + ".policy." + op }

// Request is an admin request (JSON). Which fields an operation reads:
// get Key; put Key, Value, Revision; delete Key, Revision; export JSON;
// diff and import Document (import: Since).
type Request struct {
	Key string `json:"key,omitempty"`
	// Value is the item as YAML or JSON text.
	Value string `json:"value,omitempty"`
	// Revision is the revision the key must still be at (0: it must hold
	// nothing).
	Revision uint64 `json:"revision,omitempty"`
	// Document is a policy document as YAML or JSON text.
	Document string `json:"document,omitempty"`
	// Since, on import: refuse (policy_conflict) if any key the import
	// changes was written after this bucket revision (the one a diff
	// reported), so an import is exactly the change that was reviewed.
	Since uint64 `json:"since,omitempty"`
	// JSON asks export for JSON instead of YAML.
	JSON bool `json:"json,omitempty"`
}

// EntryInfo is an entry as the service answers it.
type EntryInfo struct {
	Key      string          `json:"key"`
	Revision uint64          `json:"revision"`
	By       string          `json:"by,omitempty"`
	At       time.Time       `json:"at,omitzero"`
	Hash     string          `json:"sha256,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
}

// ChangeInfo is one change of a diff or an import.
type ChangeInfo struct {
	Key      string          `json:"key"`
	Op       Op              `json:"op"`
	Revision uint64          `json:"revision"`
	From     json.RawMessage `json:"from,omitempty"`
	To       json.RawMessage `json:"to,omitempty"`
}

// Reply is an admin reply: Error, or the operation's fields.
type Reply struct {
	Error    *ErrorInfo   `json:"error,omitempty"`
	Entry    *EntryInfo   `json:"entry,omitempty"`
	Entries  []EntryInfo  `json:"entries,omitempty"`
	Changes  []ChangeInfo `json:"changes,omitempty"`
	Document string       `json:"document,omitempty"`
	// Revision: the removal's, on delete; the bucket revision the answer
	// was read at, on list, export and diff (a diff's Since).
	Revision uint64 `json:"revision,omitempty"`
}

// ErrorInfo is a refusal: a stable reason code, and on policy_conflict the
// key's current revision.
type ErrorInfo struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
	Current *uint64     `json:"current_revision,omitempty"`
}

// ServiceOptions configure the admin service.
type ServiceOptions struct {
	Prefix string
	// Admin reports whether the bus account a request came from (its
	// Nats-Request-Info) is an admin identity, and which keys it has
	// (Scope); every other caller is refused policy_forbidden. An admin
	// asking for a key outside its scope is refused policy_forbidden too
	// (a list or export answers only the keys within it).
	Admin func(account string) (Scope, bool)
	// Refused, when set, records an operation refused for the admin's
	// scope (the policy.refused audit event) before it is answered; a
	// refusal it fails to record is still answered policy_forbidden.
	Refused func(ctx context.Context, by string, e *ForbiddenError) error
	// MaxRequestBytes bounds a request; default MaxDocumentBytes.
	MaxRequestBytes int
	// Timeout bounds one operation. Default 30s.
	Timeout time.Duration
	// MaxConcurrent bounds the requests handled at once; beyond it a
	// request is refused overloaded. Default 16.
	MaxConcurrent int
	Logger        *slog.Logger
}

// Service answers admin requests on the node's connection, in a queue
// group: one node of the cluster answers each.
type Service struct {
	store *Store
	opts  ServiceOptions
	sub   *nats.Subscription
	sem   chan struct{}
	wg    sync.WaitGroup
	ctx   context.Context
	stop  context.CancelFunc
}

const requestInfoHeader = "Nats-Request-Info"

// Serve starts the admin service of store on nc.
func Serve(nc *nats.Conn, store *Store, opts ServiceOptions) (*Service, error) {
	if opts.Admin == nil {
		return nil, errors.New("policy: ServiceOptions.Admin is required")
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = MaxDocumentBytes
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = 16
	}
	s := &Service{store: store, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	sub, err := nc.QueueSubscribe(opts.Prefix+".policy.*", "sharedos-policy", func(m *nats.Msg) {
		select {
		case s.sem <- struct{}{}:
		default:
			b, _ := json.Marshal(Reply{Error: &ErrorInfo{Code: reason.Overloaded, Message: fmt.Sprintf("%d policy requests in progress on this node", cap(s.sem))}})
			_ = m.Respond(b)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.handle(m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("policy: serve: %w", err)
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

// caller is the admin identity that sent m and its scope, or a refusal.
func (s *Service) caller(m *nats.Msg) (string, Scope, *ErrorInfo) {
	info := m.Header.Get(requestInfoHeader)
	if info == "" || len(info) > 4096 {
		return "", Scope{}, &ErrorInfo{Code: reason.PolicyForbidden, Message: "the request did not come through an admin identity's account"}
	}
	var ci struct {
		Account string `json:"acc"`
	}
	if err := json.Unmarshal([]byte(info), &ci); err != nil || ci.Account == "" {
		return "", Scope{}, &ErrorInfo{Code: reason.PolicyForbidden, Message: "the request's identity header names no account"}
	}
	sc, ok := s.opts.Admin(ci.Account)
	if !ok {
		return "", Scope{}, &ErrorInfo{Code: reason.PolicyForbidden, Message: fmt.Sprintf("bus identity %q is not an admin", ci.Account)}
	}
	return ci.Account, sc, nil
}

func (s *Service) handle(m *nats.Msg) {
	var rep Reply
	defer func() {
		b, err := json.Marshal(rep)
		if err != nil {
			b, _ = json.Marshal(Reply{Error: &ErrorInfo{Code: reason.Internal, Message: err.Error()}})
		}
		if err := m.Respond(b); err != nil {
			s.opts.Logger.Debug("policy: answer not sent", "err", err)
		}
	}()
	by, sc, refusal := s.caller(m)
	if refusal != nil {
		rep.Error = refusal
		return
	}
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if len(m.Data) > s.opts.MaxRequestBytes {
		rep.Error = &ErrorInfo{Code: reason.InvalidRequest, Message: fmt.Sprintf("a request of %d bytes, more than %d", len(m.Data), s.opts.MaxRequestBytes)}
		return
	}
	var req Request
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			rep.Error = &ErrorInfo{Code: reason.InvalidRequest, Message: "the request is not JSON of an admin request: " + err.Error()}
			return
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.Timeout)
	defer cancel()
	if err := s.do(ctx, op, by, sc, req, &rep); err != nil {
		var forbidden *ForbiddenError
		if errors.As(err, &forbidden) && s.opts.Refused != nil {
			if rerr := s.opts.Refused(ctx, by, forbidden); rerr != nil {
				s.opts.Logger.Error("policy: a refusal could not be recorded", "op", op, "by", by, "key", forbidden.Key.String(), "err", rerr)
			}
		}
		rep = Reply{Error: errorInfo(err)}
		s.opts.Logger.Info("policy: request refused", "op", op, "by", by, "code", rep.Error.Code, "err", err)
	}
}

func (s *Service) do(ctx context.Context, op, by string, sc Scope, req Request, rep *Reply) error {
	key := func() (Key, error) {
		k, err := ParseKey(req.Key)
		if err != nil {
			return k, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !sc.Covers(k) {
			return k, &ForbiddenError{Op: op, Key: k, Scope: sc}
		}
		return k, nil
	}
	switch op {
	case OpGet:
		k, err := key()
		if err != nil {
			return err
		}
		e, err := s.store.Get(ctx, k)
		if err != nil {
			return err
		}
		rep.Entry = entryInfo(e, true)
	case OpPut:
		k, err := key()
		if err != nil {
			return err
		}
		e, err := s.store.Put(ctx, k, []byte(req.Value), req.Revision, by)
		if err != nil {
			return err
		}
		rep.Entry = entryInfo(e, false)
	case OpDelete:
		k, err := key()
		if err != nil {
			return err
		}
		if rep.Revision, err = s.store.Delete(ctx, k, req.Revision, by); err != nil {
			return err
		}
	case OpList:
		es, err := s.store.List(ctx)
		if err != nil {
			return err
		}
		for _, e := range sc.within(es) {
			rep.Entries = append(rep.Entries, *entryInfo(e, false))
			rep.Revision = max(rep.Revision, e.Revision)
		}
	case OpExport:
		d, es, err := s.store.ExportWithin(ctx, sc)
		if err != nil {
			return err
		}
		out, err := d.Marshal(req.JSON)
		if err != nil {
			return err
		}
		rep.Document = string(out)
		for _, e := range es {
			rep.Revision = max(rep.Revision, e.Revision)
		}
	case OpDiff, OpImport:
		d, err := ParseDocument([]byte(req.Document))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		var changes []Diff
		if op == OpDiff {
			changes, rep.Revision, err = s.store.diffAt(ctx, d, sc)
		} else {
			changes, err = s.store.ImportWithin(ctx, d, req.Since, by, sc)
		}
		for _, c := range changes {
			rep.Changes = append(rep.Changes, ChangeInfo{Key: c.Key.String(), Op: c.Op, Revision: c.Revision, From: c.From, To: c.To})
		}
		return err
	default:
		return fmt.Errorf("%w: no admin operation %q (%s)", ErrInvalid, op, strings.Join(Ops(), ", "))
	}
	return nil
}

func entryInfo(e Entry, withValue bool) *EntryInfo {
	ei := &EntryInfo{Key: e.Key.String(), Revision: e.Revision, By: e.By, At: e.At, Hash: e.Hash()}
	if withValue {
		ei.Value = e.Value
	}
	return ei
}

// errorInfo classifies err with a stable reason code.
func errorInfo(err error) *ErrorInfo {
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		cur := conflict.Current
		return &ErrorInfo{Code: reason.PolicyConflict, Message: err.Error(), Current: &cur}
	case errors.Is(err, ErrConflict):
		return &ErrorInfo{Code: reason.PolicyConflict, Message: err.Error()}
	case errors.Is(err, ErrForbidden):
		return &ErrorInfo{Code: reason.PolicyForbidden, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &ErrorInfo{Code: reason.PolicyNotFound, Message: err.Error()}
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge), errors.Is(err, ErrInvalidKey):
		return &ErrorInfo{Code: reason.InvalidRequest, Message: err.Error()}
	case errors.Is(err, ErrUnrecorded):
		return &ErrorInfo{Code: reason.AuditUnavailable, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &ErrorInfo{Code: reason.DeadlineExceeded, Message: err.Error()}
	}
	return &ErrorInfo{Code: reason.Internal, Message: err.Error()}
}

// Client calls the admin service as the identity its connection is.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
}

// NewClient returns a client of the admin service under prefix.
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

// Do sends req as operation op and returns the reply; a refusal is a
// *reason.Error (on policy_conflict, *ConflictReply with the current
// revision wraps it).
func (c *Client) Do(ctx context.Context, op string, req Request) (Reply, error) {
	var rep Reply
	if err := busrpc.Call(ctx, c.nc, busrpc.Service{Name: "the policy service", Role: "an admin"}, Subject(c.prefix, op), c.timeout, req, &rep); err != nil {
		return Reply{}, err
	}
	if e := rep.Error; e != nil {
		rerr := reason.New(e.Code, "%s", e.Message)
		if e.Current != nil {
			return rep, &ConflictReply{Err: rerr, Current: *e.Current}
		}
		return rep, rerr
	}
	return rep, nil
}

// ConflictReply is a policy_conflict refusal with the key's current revision.
type ConflictReply struct {
	Err     *reason.Error
	Current uint64
}

func (e *ConflictReply) Error() string { return e.Err.Error() }

// Unwrap gives the refusal, so errors.Is matches its code.
func (e *ConflictReply) Unwrap() error { return e.Err }
