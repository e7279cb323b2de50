package actors

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/internal/ratelimit"
	"github.com/sharedos/sharedos/internal/workpool"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/toolport"
	"github.com/sharedos/sharedos/turn"
)

// RateLimit is a token bucket kept per principal (tenant and principal):
// Rate requests a second on average, up to Burst at once. The zero value
// is no limit.
type RateLimit struct {
	Rate  float64
	Burst int
}

// Defaults for Options: what a zero field takes.
const (
	DefaultNode                 = "node"
	DefaultStepCeiling          = 64
	DefaultMaxInFlightPerTurn   = 32
	DefaultMaxTurns             = 100000
	DefaultMaxLeasesPerTurn     = 64
	DefaultMaxTurnsPerPrincipal = 1024
	DefaultIdleTimeout          = 10 * time.Minute
	DefaultLinger               = 30 * time.Second
	DefaultResolveTimeout       = 5 * time.Second
	DefaultCallTimeout          = 30 * time.Second
)

// Options configure a Kernel. Zero values take the defaults named.
type Options struct {
	// Node names this node; it prefixes minted turn ids and is recorded on
	// every event. Default "node".
	Node string
	// Providers are the tool providers, asked once per turn.
	Providers []toolport.ContextToolProvider
	// Required names providers whose failure fails resolution (with the
	// failure's class) instead of leaving their tools absent.
	Required []string
	// Authority resolves a principal's grants, once per turn. Required.
	Authority authority.Source
	// Credentials says which credential profiles each principal may act
	// with; an open (or a turn of one operation) naming any other is
	// refused credential_forbidden and recorded in the tenant's trail.
	// Nil permits no profile but the empty one: set
	// authority.AnyCredential{} only where the embedder is itself the
	// authority over every context it builds.
	Credentials authority.CredentialPolicy
	// SharesTurns reports whether bus identity caller may attach to a turn
	// that bus identity opener opened. A turn's id appears in every audit
	// event, so by default only the opener attaches (nil: caller ==
	// opener); anyone else is answered turn_not_found, as for a turn that
	// does not exist.
	SharesTurns func(opener, caller string) bool
	// Sink receives audit records. Default: audit.Discard.
	Sink audit.Sink
	// AwaitCompletion makes a call's answer wait for its tool.completed
	// to be stored. Default false: the answer waits for the call's
	// tool.invoked and every earlier record of its turn, and the
	// tool.completed is stored before anything later of that turn is
	// answered or run — one stored commit per call instead of two
	// (docs/audit.md, "What an answer waits for").
	AwaitCompletion bool
	// Clock stamps every operation's instant. Default time.Now.
	Clock func() time.Time
	// StepCeiling is the number of allowed calls per turn. Default 64.
	StepCeiling int
	// MaxInFlightPerTurn bounds concurrent executions per turn. Default 32.
	MaxInFlightPerTurn int
	// MaxTurns bounds open turns on this node; opens beyond it are refused
	// overloaded. Default 100000.
	MaxTurns int
	// MaxTurnsPerPrincipal bounds one principal's open turns on this node
	// (turns of one operation included); beyond it opens are refused
	// overloaded. Default 1024.
	MaxTurnsPerPrincipal int
	// MaxLeasesPerTurn bounds the leases held on one turn; attaches beyond
	// it are refused overloaded. Default 64.
	MaxLeasesPerTurn int
	// OpenRate limits each principal's opens and attaches on this node;
	// CallRate each principal's invokes (across its turns, one-operation
	// ones included). Beyond them requests are refused rate_limited with
	// the time to wait. Zero: no limit.
	OpenRate RateLimit
	CallRate RateLimit
	// IdleTimeout closes a turn with no operations for this long. Default 10m.
	IdleTimeout time.Duration
	// Linger is how long a closed turn keeps answering turn_closed before
	// its actor stops. Default 30s.
	Linger time.Duration
	// ResolveTimeout bounds each provider's catalogue answer. Default 5s.
	ResolveTimeout time.Duration
	// CallTimeout bounds each execution. Default 30s. An execution's
	// deadline is the earlier of this and the caller's own deadline (less
	// a margin to record and answer); the provider receives that.
	CallTimeout time.Duration
	// MaxReplyBytes bounds what one answer may carry, so that every answer
	// fits the transport (the node sets it from NATS's max payload): a
	// listing is paged to fit, and a tool result larger than this less
	// ReplyOverhead is refused result_too_large (and recorded so). 0: no
	// bound (in-process callers).
	MaxReplyBytes int
	// Limits bound provider definitions and call arguments.
	Limits catalog.Limits
	// Contracts, when set, gates every provider's tools against their
	// accepted contract baselines at each resolution (docs/approvals.md):
	// a drifted tool of a holding provider is left out of the turn and
	// recorded pending_review. Nil: every tool a provider offers is held.
	Contracts *contract.Gate
	// Approvals are the approval rules and the store of their requests
	// (docs/approvals.md). Zero: no call needs an approval.
	Approvals Approvals
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// Switches disable protections for the conformance suite's proofs.
	// Never set in production.
	Switches turn.Switches
}

func (o Options) withDefaults() Options {
	if o.Node == "" {
		o.Node = DefaultNode
	}
	if o.Sink == nil {
		o.Sink = audit.Discard{}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.StepCeiling == 0 {
		o.StepCeiling = DefaultStepCeiling
	}
	if o.MaxInFlightPerTurn == 0 {
		o.MaxInFlightPerTurn = DefaultMaxInFlightPerTurn
	}
	if o.MaxTurns == 0 {
		o.MaxTurns = DefaultMaxTurns
	}
	if o.MaxLeasesPerTurn == 0 {
		o.MaxLeasesPerTurn = DefaultMaxLeasesPerTurn
	}
	if o.MaxTurnsPerPrincipal == 0 {
		o.MaxTurnsPerPrincipal = DefaultMaxTurnsPerPrincipal
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.ResolveTimeout == 0 {
		o.ResolveTimeout = DefaultResolveTimeout
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Credentials == nil {
		o.Credentials = (*authority.StaticCredentials)(nil)
	}
	if o.SharesTurns == nil {
		o.SharesTurns = func(opener, caller string) bool { return opener == caller }
	}
	return o
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validID is idPattern.MatchString without the regexp engine (every
// operation checks its turn id).
func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Validate reports a configuration the kernel cannot run with.
func (o Options) Validate() error {
	o = o.withDefaults()
	if o.Authority == nil {
		return errors.New("actors: Options.Authority is required")
	}
	if !idPattern.MatchString(o.Node) {
		return fmt.Errorf("actors: node id %q must match %s", o.Node, idPattern)
	}
	if o.StepCeiling < 0 || o.MaxInFlightPerTurn < 0 || o.MaxTurns < 0 || o.MaxLeasesPerTurn < 0 || o.MaxTurnsPerPrincipal < 0 ||
		o.OpenRate.Rate < 0 || o.OpenRate.Burst < 0 || o.CallRate.Rate < 0 || o.CallRate.Burst < 0 {
		return errors.New("actors: limits must not be negative")
	}
	seen := map[string]bool{}
	for _, p := range o.Providers {
		if p == nil {
			return errors.New("actors: nil provider")
		}
		if seen[p.ID()] {
			return fmt.Errorf("actors: provider %q configured twice", p.ID())
		}
		seen[p.ID()] = true
	}
	for _, r := range o.Required {
		if !seen[r] {
			return fmt.Errorf("actors: required provider %q is not configured", r)
		}
	}
	if o.Approvals.Rules != nil && o.Approvals.Store == nil {
		return errors.New("actors: Options.Approvals.Rules need a Store for their requests")
	}
	return nil
}

// providerSet is one immutable set of providers.
type providerSet struct {
	byID     map[string]providers.ContextToolProvider
	order    []string
	required map[string]bool
}

func newProviderSet(ps []providers.ContextToolProvider, required []string) *providerSet {
	s := &providerSet{byID: make(map[string]providers.ContextToolProvider, len(ps)), required: make(map[string]bool, len(required))}
	for _, p := range ps {
		s.byID[p.ID()] = p
		s.order = append(s.order, p.ID())
	}
	for _, r := range required {
		s.required[r] = true
	}
	return s
}

// SetProviders replaces the kernel's providers (and which are required),
// checked as Options are. Turns resolved from then on ask the new set;
// turns already resolved keep the catalogue they hold, and a call of
// theirs to a provider no longer in the set fails provider_unavailable.
// Safe for concurrent use.
func (k *Kernel) SetProviders(ps []toolport.ContextToolProvider, required []string) error {
	o := k.sh.opts
	o.Providers, o.Required = ps, required
	if err := o.Validate(); err != nil {
		return err
	}
	k.sh.provs.Store(newProviderSet(ps, required))
	return nil
}

// shared is what every turn actor of a kernel reads. Immutable after New,
// apart from the Normalizer's internally synchronized cache and the
// provider set, replaced whole behind an atomic pointer.
type shared struct {
	opts Options
	// provs is the provider set: Options.Providers and Required, replaced
	// whole by SetProviders. A resolution reads it once, so each turn's
	// catalogue comes from one set.
	provs      atomic.Pointer[providerSet]
	normalizer *catalog.Normalizer
	log        *slog.Logger
	// pool runs turn mailboxes and executions on warm goroutines.
	pool *workpool.Pool
	// turnProps spawn every turn actor.
	turnProps *actor.Props
	// registries shares identical held catalogues between turns.
	registries *registryIntern
	// opens and calls rate-limit each principal (nil: no limit).
	opens, calls *ratelimit.Limiter
	// projections memoizes model-facing translations across turns.
	projections *projection.Cache
}

// ReplyOverhead is what MaxReplyBytes keeps for a reply's own fields
// (ids, hashes, alias, error, framing) around a tool result.
const ReplyOverhead = 4096

// Kernel is a node's turn kernel. Its methods are safe for concurrent use.
type Kernel struct {
	sh       *shared
	system   *actor.ActorSystem
	dir      *actor.PID
	replies  *replies
	ops      opGate
	stopOnce sync.Once
}

// opGate counts the kernel's operations in flight and closes for new ones
// at shutdown. One atomic word holds both the count and the draining bit,
// so entering and draining cannot race the way a WaitGroup's Add racing
// its Wait does.
type opGate struct {
	state    atomic.Int64
	idleOnce sync.Once
	idle     chan struct{}
}

const drainingBit = int64(1) << 62

// enter counts an operation in; it refuses (false) once draining, unless
// evenDraining (closes must still reach their turns during a drain).
func (g *opGate) enter(evenDraining bool) bool {
	if g.state.Add(1)&drainingBit != 0 && !evenDraining {
		g.leave()
		return false
	}
	return true
}

// leave counts an operation out; the last one out of a draining kernel
// signals idle.
func (g *opGate) leave() {
	if g.state.Add(-1) == drainingBit {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// others reports whether operations other than the caller's are in flight.
func (g *opGate) others() bool { return g.state.Load()&^drainingBit > 1 }

// drain closes the gate and returns a channel closed once no operation is
// in flight.
func (g *opGate) drain() <-chan struct{} {
	if old := g.state.Or(drainingBit); old&^drainingBit == 0 {
		g.idleOnce.Do(func() { close(g.idle) })
	}
	return g.idle
}

const directoryName = "turns"

// New starts a kernel.
func New(opts Options) (*Kernel, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	sh := &shared{
		opts:       opts,
		normalizer: catalog.NewNormalizer(opts.Limits, 4096),
		// A tool's translation per profile, by revision: a node's distinct
		// tools times the profiles in use.
		projections: projection.NewCache(16384),
		log:         opts.Logger,
		// Enough warm workers for every mailbox and execution a loaded
		// node runs at once; a new goroutine instead grows its stack again
		// (6% of a loaded node's CPU at 4 per core).
		pool: workpool.New(max(64, 4*runtime.GOMAXPROCS(0))),
	}
	sh.turnProps = newTurnProps(sh)
	sh.registries = newRegistryIntern()
	sh.opens, sh.calls = ratelimit.New(ratelimit.Limit(opts.OpenRate)), ratelimit.New(ratelimit.Limit(opts.CallRate))
	sh.provs.Store(newProviderSet(opts.Providers, opts.Required))
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return opts.Logger.With("component", "protoactor") }),
		// A request to a closed turn is answered turn_closed/turn_not_found;
		// it is not worth a log line each.
		actor.WithDeadLetterRequestLogging(false),
	)
	dir, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newDirectory(sh) },
		actor.WithSupervisor(stopOnPanic(sh.log))), directoryName)
	if err != nil {
		return nil, fmt.Errorf("actors: starting directory: %w", err)
	}
	return &Kernel{sh: sh, system: system, dir: dir, replies: newReplies(system.ProcessRegistry), ops: opGate{idle: make(chan struct{})}}, nil
}

// stopOnPanic stops a turn actor that panicked instead of restarting it: a
// restarted turn would have lost its held catalogue and chain position,
// and silently re-resolving is exactly what ADR 0026 forbids. Its callers
// then get turn_not_found.
func stopOnPanic(log *slog.Logger) actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(0, time.Second, func(r any) actor.Directive {
		log.Error("turn actor failed; stopping it", "panic", fmt.Sprint(r))
		return actor.StopDirective
	})
}

// Node is this kernel's node id.
func (k *Kernel) Node() string { return k.sh.opts.Node }

func (k *Kernel) begin() error {
	if !k.ops.enter(false) {
		return reason.New(reason.Overloaded, "node %s is shutting down", k.sh.opts.Node)
	}
	return nil
}

// Open opens a turn for access and returns the caller's lease; the kernel
// mints the turn id ("<node>.<130 random bits>"), so a turn id is never
// opened twice, across restarts too. With a TurnID, Open attaches: it
// joins that turn if it is open under the same authority key, and is
// refused otherwise (turn_closed for a recently closed id, turn_not_found
// for any other) — a caller can never choose the id of a new turn.
func (k *Kernel) Open(ctx context.Context, access authority.AccessContext) (Opened, error) {
	if err := k.begin(); err != nil {
		return Opened{}, err
	}
	defer k.ops.leave()
	attach := access.TurnID != ""
	if !attach {
		access.TurnID = k.sh.opts.Node + "." + mintID()
	} else if !idPattern.MatchString(access.TurnID) {
		return Opened{}, reason.New(reason.InvalidRequest, "turn id %q must match %s", access.TurnID, idPattern)
	}
	if err := CheckAccess(access); err != nil {
		return Opened{}, err
	}
	access.Now = k.sh.opts.Clock()
	if err := k.rateLimit(k.sh.opens, access, "opens"); err != nil {
		return Opened{}, err
	}
	if err := k.checkCredential(ctx, access); err != nil {
		return Opened{}, err
	}
	res, err := k.request(ctx, k.dir, &openTurn{access: access, attach: attach})
	if err != nil {
		return Opened{}, err
	}
	return *res.(*Opened), nil
}

// RecordRefusal records a request a front refused before it reached any
// turn (tenant_forbidden: its caller may not act for the tenant it
// named), so the tenant's audit shows the attempt: a turn of one
// operation whose chain is turn.opened — the access as the request
// claimed it and the caller the bus established — and turn.closed with
// the refusal's code as its reason. It returns once turn.closed is
// stored; the turn counts against the node's and the principal's turn
// bounds like any other.
//
// What is recorded is bounded whatever the request claimed: the access's
// identity fields (each at most MaxIdentityBytes, checked first) and the
// caller; the claimed namespaces and attributes are left out, so a refused
// request costs the named tenant's trail one small turn.
func (k *Kernel) RecordRefusal(ctx context.Context, access authority.AccessContext, code reason.Code) error {
	if err := k.begin(); err != nil {
		return err
	}
	defer k.ops.leave()
	if err := CheckAccess(access); err != nil {
		return err
	}
	return k.recordRefusal(ctx, access, code)
}

// recordRefusal records the refused access as a turn of one operation
// closed with code (RecordRefusal), without judging it again.
func (k *Kernel) recordRefusal(ctx context.Context, access authority.AccessContext, code reason.Code) error {
	access = authority.AccessContext{Tenant: access.Tenant, Principal: access.Principal,
		CredentialProfile: access.CredentialProfile, Caller: access.Caller, Transport: access.Transport,
		Now: k.sh.opts.Clock(), TurnID: k.sh.opts.Node + ".op." + mintID()}
	_, err := k.request(ctx, k.dir, &oneOperation{access: access, op: &closeTurn{why: string(code)}})
	return err
}

// checkCredential refuses, and records in the tenant's trail, an access
// whose credential profile the policy does not permit for its principal.
func (k *Kernel) checkCredential(ctx context.Context, access authority.AccessContext) error {
	if k.sh.opts.Switches.NoCredentialBinding || k.sh.opts.Credentials.PermitsCredential(access.Tenant, access.Principal, access.CredentialProfile) {
		return nil
	}
	err := reason.New(reason.CredentialForbidden, "credential profile %q is not bound to %s/%s", access.CredentialProfile, access.Tenant, access.Principal)
	if rerr := k.recordRefusal(ctx, access, reason.CredentialForbidden); rerr != nil {
		k.sh.log.Warn("actors: refused credential_forbidden; recording the refusal failed", "tenant", access.Tenant, "principal", access.Principal, "err", rerr)
	}
	return err
}

// Close releases the caller's lease: leaseID, or access.LeaseID when
// leaseID is empty (a close names its lease like every other operation on
// the turn). The turn closes when its last lease is released; Close returns
// once turn.closed is recorded then. Releasing a lease twice is harmless;
// a close naming no lease is refused invalid_request, never answered as if
// it had released one.
func (k *Kernel) Close(ctx context.Context, access authority.AccessContext, leaseID string) error {
	k.ops.enter(true)
	defer k.ops.leave()
	if access.TurnID == "" {
		return reason.New(reason.InvalidRequest, "close needs a turn id")
	}
	if leaseID == "" {
		leaseID = access.LeaseID
	}
	if leaseID == "" {
		return reason.New(reason.InvalidRequest, "close needs the caller's lease (lease, or access.lease)")
	}
	_, err := k.request(ctx, k.dir, &releaseLease{access: access, leaseID: leaseID})
	return err
}

// ListTools lists the turn's tools as its principal may see them now.
// With an empty TurnID it is a turn of one operation. With MaxReplyBytes
// set, a listing that does not fit is cut into pages: ListTools returns
// the first; ListToolsPage the rest.
func (k *Kernel) ListTools(ctx context.Context, access authority.AccessContext) (ToolList, error) {
	return k.ListToolsPage(ctx, access, ListPage{})
}

// ListToolsPage lists one page of the turn's tools, starting after
// page.After (a previous page's NextCursor). Each page is judged at its
// own instant and recorded with the aliases it shows; the registry is
// held, so pages of one turn never mix two catalogues (compare
// CatalogHash). A turn of one operation resolves afresh for each page.
func (k *Kernel) ListToolsPage(ctx context.Context, access authority.AccessContext, page ListPage) (ToolList, error) {
	res, err := k.turnOp(ctx, access, func(a authority.AccessContext, dl time.Time) any {
		return &listTools{access: a, deadline: dl, page: page}
	})
	if err != nil {
		return ToolList{}, err
	}
	return *res.(*ToolList), nil
}

// ListFor lists the turn's visible tools as a model API's profile shows
// them, or (with req.Query) searches them (turn.ProjectionRequest); with
// an empty TurnID it is a turn of one operation. A name it shows can be
// invoked under that profile (InvokeAs).
func (k *Kernel) ListFor(ctx context.Context, access authority.AccessContext, req turn.ProjectionRequest) (ModelListing, error) {
	res, err := k.turnOp(ctx, access, func(a authority.AccessContext, _ time.Time) any {
		return &projectTools{access: a, req: req}
	})
	if err != nil {
		return ModelListing{}, err
	}
	return *res.(*ModelListing), nil
}

// ListNamespaces lists the namespaces of the turn's held catalogue.
func (k *Kernel) ListNamespaces(ctx context.Context, access authority.AccessContext) ([]NamespaceInfo, error) {
	res, err := k.turnOp(ctx, access, func(a authority.AccessContext, _ time.Time) any { return &listNamespaces{access: a} })
	if err != nil {
		return nil, err
	}
	return *res.(*[]NamespaceInfo), nil
}

// UpdateNamespaces replaces the turn's enabled namespaces.
func (k *Kernel) UpdateNamespaces(ctx context.Context, access authority.AccessContext, namespaces []string) error {
	_, err := k.turnOp(ctx, access, func(a authority.AccessContext, _ time.Time) any {
		return &updateNamespaces{access: a, namespaces: namespaces}
	})
	return err
}

// Invoke calls the tool the model knows as alias with JSON arguments. A
// call that was decided but did not complete with a result fails with a
// *CallError (its reason, call id, catalogHash and whether it was
// dispatched); errors.Is matches the reason code either way. The
// execution's deadline is the earlier of ctx's deadline and CallTimeout;
// when ctx's deadline passes first the call fails deadline_exceeded.
func (k *Kernel) Invoke(ctx context.Context, access authority.AccessContext, alias string, args []byte) (CallResult, error) {
	return k.InvokeKeyed(ctx, access, "", alias, args)
}

// InvokeKeyed is Invoke with a request id the caller chose: on a named
// turn the call runs at most once per lease and id, and a retry with the
// same id, tool and arguments gets the first execution's answer (see
// keyed.go for what a turn keeps, and for how long). "" is Invoke.
func (k *Kernel) InvokeKeyed(ctx context.Context, access authority.AccessContext, requestID, alias string, args []byte) (CallResult, error) {
	return k.InvokeAs(ctx, access, requestID, "", alias, args)
}

// InvokeAs is InvokeKeyed for a name the turn showed under a model
// profile (ListFor): it calls the tool it was shown for; a name the turn
// never showed that profile is unknown_tool. An empty profile is the
// turn's own aliases.
func (k *Kernel) InvokeAs(ctx context.Context, access authority.AccessContext, requestID string, profile projection.Profile, alias string, args []byte) (CallResult, error) {
	return k.InvokeWith(ctx, access, alias, args, CallOptions{RequestID: requestID, Profile: profile})
}

// Approvals are what a kernel needs for calls that need an approver.
type Approvals struct {
	// Rules name the calls that need an approval (live: replaced as
	// policy changes); nil names none.
	Rules *approval.Live
	// Store is where requests are stored and approvals read and
	// consumed, alike on every node of the cluster.
	Store approval.Store
}

// CallOptions are a call's optional parts.
type CallOptions struct {
	// RequestID makes the call keyed (InvokeKeyed).
	RequestID string
	// Profile says the alias is a name shown under that model profile
	// (InvokeAs).
	Profile projection.Profile
	// Approval names the approval the call runs on (a request id an
	// approval_required refusal carried, since approved). A call made
	// again in its turn with exactly the arguments it was refused with
	// finds its approval without it.
	Approval string
}

// MaxApprovalIDBytes bounds CallOptions.Approval.
const MaxApprovalIDBytes = 128

// InvokeWith is Invoke with CallOptions.
func (k *Kernel) InvokeWith(ctx context.Context, access authority.AccessContext, alias string, args []byte, o CallOptions) (CallResult, error) {
	requestID, profile := o.RequestID, o.Profile
	if len(o.Approval) > MaxApprovalIDBytes {
		return CallResult{}, reason.New(reason.InvalidRequest, "an approval id is at most %d bytes", MaxApprovalIDBytes)
	}
	if len(requestID) > MaxRequestIDBytes {
		return CallResult{}, reason.New(reason.InvalidRequest, "a request id is at most %d bytes", MaxRequestIDBytes)
	}
	if err := k.rateLimit(k.sh.calls, access, "calls"); err != nil {
		return CallResult{}, err
	}
	res, err := k.turnOp(ctx, access, func(a authority.AccessContext, dl time.Time) any {
		return &invokeTool{access: a, deadline: dl, inv: turn.Invocation{Alias: alias, Arguments: args, Transport: a.Transport, Profile: profile, ApprovalID: o.Approval}, requestID: requestID, span: trace.SpanContextFromContext(ctx)}
	})
	var ce *CallError
	var re *reason.Error
	if !errors.As(err, &ce) && errors.As(err, &re) && re.Code == reason.DeadlineExceeded {
		// The turn did not answer in time: it may or may not have
		// dispatched the call.
		err = &CallError{Err: re, Dispatch: DispatchUnknown}
	}
	if err != nil {
		return CallResult{}, err
	}
	return *res.(*CallResult), nil
}

// rateLimit refuses a request beyond the principal's rate, saying when to
// retry.
func (k *Kernel) rateLimit(l *ratelimit.Limiter, a authority.AccessContext, what string) error {
	if l == nil {
		return nil
	}
	if wait := l.Take(principalKey(a), k.sh.opts.Clock()); wait > 0 {
		return &reason.Error{Code: reason.RateLimited, RetryAfter: wait,
			Message: fmt.Sprintf("%s/%s is over its rate of %s (%g/s, burst %d) on node %s; retry in %v", a.Tenant, a.Principal, what, l.Limit().Rate, l.Limit().Burst, k.sh.opts.Node, wait.Round(time.Millisecond))}
	}
	return nil
}

// The bounds CheckAccess holds every access to.
const (
	// MaxIdentityBytes bounds the tenant, principal and credential profile.
	MaxIdentityBytes = 256
	// MaxNamespaces and MaxNamespaceBytes bound the enabled namespaces.
	MaxNamespaces     = 1024
	MaxNamespaceBytes = 128
	// MaxAttributes and MaxAttributeBytes bound the attributes (each key
	// and each value).
	MaxAttributes     = 64
	MaxAttributeBytes = 256
)

// CheckAccess refuses, invalid_request, an access whose fields are
// missing or out of bounds. Every front checks it before anything else
// is judged (a malformed tenant is malformed, not forbidden), and the
// kernel again on every operation.
func CheckAccess(a authority.AccessContext) error {
	if a.Tenant == "" || a.Principal == "" {
		return reason.New(reason.InvalidRequest, "tenant and principal are required")
	}
	for _, s := range []string{a.Tenant, a.Principal, a.CredentialProfile} {
		if len(s) > MaxIdentityBytes {
			return reason.New(reason.InvalidRequest, "tenant, principal and credential profile are limited to %d bytes", MaxIdentityBytes)
		}
	}
	if err := audit.CheckTenant(a.Tenant); err != nil {
		// A tenant is one subject token of the audit trail's subjects.
		return reason.New(reason.InvalidRequest, "%v", err)
	}
	if len(a.Attributes) > MaxAttributes || len(a.EnabledNamespaces) > MaxNamespaces {
		return reason.New(reason.InvalidRequest, "at most %d attributes and %d namespaces", MaxAttributes, MaxNamespaces)
	}
	for _, ns := range a.EnabledNamespaces {
		if len(ns) > MaxNamespaceBytes {
			return reason.New(reason.InvalidRequest, "a namespace name is limited to %d bytes", MaxNamespaceBytes)
		}
	}
	for k, v := range a.Attributes {
		if len(k) > MaxAttributeBytes || len(v) > MaxAttributeBytes {
			return reason.New(reason.InvalidRequest, "an attribute's key and value are limited to %d bytes each", MaxAttributeBytes)
		}
	}
	return nil
}

// turnOp sends an operation to the named turn, or runs it as a turn of one
// operation when no turn is named.
func (k *Kernel) turnOp(ctx context.Context, access authority.AccessContext, msg func(authority.AccessContext, time.Time) any) (any, error) {
	if err := k.begin(); err != nil {
		return nil, err
	}
	defer k.ops.leave()
	deadline, _ := ctx.Deadline()
	if err := CheckAccess(access); err != nil {
		return nil, err
	}
	access.Now = k.sh.opts.Clock()
	if access.TurnID == "" {
		if k.sh.opts.Switches.NoOneOperationTurns {
			return nil, reason.New(reason.TurnNotFound, "operation names no turn")
		}
		if err := k.checkCredential(ctx, access); err != nil {
			return nil, err
		}
		access.TurnID = k.sh.opts.Node + ".op." + mintID()
		return k.request(ctx, k.dir, &oneOperation{access: access, op: msg(access, deadline)})
	}
	if !validID(access.TurnID) {
		return nil, reason.New(reason.TurnNotFound, "no turn %q", access.TurnID)
	}
	pid := actor.NewPID(k.system.Address(), directoryName+"/"+access.TurnID)
	res, err := k.request(ctx, pid, msg(access, deadline))
	if errors.Is(err, actor.ErrDeadLetter) {
		// The turn is not open. Was it closed, or never here?
		if closed, _ := k.request(ctx, k.dir, &closedTurn{turnID: access.TurnID}); closed == true {
			return nil, reason.New(reason.TurnClosed, "turn %s is closed", access.TurnID)
		}
		return nil, reason.New(reason.TurnNotFound, "no open turn %s on node %s", access.TurnID, k.sh.opts.Node)
	}
	return res, err
}

// request sends msg to pid and waits for the answer within ctx (a minute
// when ctx has no deadline). An answer that is an error is returned as the
// error; a target that does not exist is actor.ErrDeadLetter.
func (k *Kernel) request(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= 0 {
		return nil, reason.New(reason.DeadlineExceeded, "the caller's deadline passed before the operation was sent")
	}
	res, err := k.ask(ctx, pid, msg, time.Minute)
	// A kernel request ends with a yield while other operations are in
	// flight. An answer reaches a waiting caller through the runtime's
	// runnext slot, which shares the answering goroutine's time slice;
	// so does every hand-off of the request before it (caller → mailbox
	// worker → execution → caller). A caller that asks again at once
	// thus keeps one P for a whole 10 ms slice while other callers'
	// goroutines wait, and one preempted at a slice's end waits in the
	// global run queue, which a busy P polls once every 61 slices: at 64
	// closed-loop callers on two cores a call waited up to a second while
	// the median was 13 µs (BenchmarkMediatedCallTail). The yield ends
	// the shared slice with the operation, so callers take turns. Alone
	// (no other operation in flight) nobody waits, and it is skipped.
	if k.ops.others() {
		runtime.Gosched()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return nil, err
	case errors.Is(err, context.DeadlineExceeded):
		return nil, reason.New(reason.DeadlineExceeded, "no answer within the caller's deadline")
	case err != nil:
		return nil, err
	}
	if e, ok := res.(error); ok {
		return nil, e
	}
	return res, nil
}

// OpenTurns returns how many turns are open on this node.
func (k *Kernel) OpenTurns(ctx context.Context) (int, error) {
	res, err := k.request(ctx, k.dir, &turnsSnapshot{})
	if err != nil {
		return 0, err
	}
	return res.(int), nil
}

// Catalogues returns how many distinct catalogues this node's turns hold.
// Turns that resolved the same catalogue (same catalogHash and provider
// revision tokens) share one copy, so with one principal and static
// providers it stays 1 however many turns are open. Catalogues no turn
// holds any more leave the count after a garbage collection.
func (k *Kernel) Catalogues() int { return k.sh.registries.len() }

// Shutdown stops taking operations, waits (within ctx) for those in flight,
// closes every open turn (recording turn.closed with reason "shutdown") and
// stops the actor system. Safe to call more than once.
func (k *Kernel) Shutdown(ctx context.Context) error {
	var err error
	k.stopOnce.Do(func() {
		select {
		case <-k.ops.drain():
		case <-ctx.Done():
			err = fmt.Errorf("actors: operations still in flight at shutdown: %w", ctx.Err())
		}
		if _, cerr := k.request(ctx, k.dir, &closeAll{}); cerr != nil && err == nil {
			err = fmt.Errorf("actors: closing turns: %w", cerr)
		}
		if serr := k.system.Root.StopFuture(k.dir).Wait(); serr != nil && err == nil {
			err = serr
		}
		k.system.Shutdown()
		k.sh.pool.Close()
	})
	return err
}

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// mintID is 130 random bits in lower-case base32: turn and lease ids,
// which name capabilities and are never reused.
func mintID() string { return randomBase32(26) }

// randomID is 100 random bits in lower-case base32 (a turn's incarnation).
func randomID() string { return randomBase32(20) }

// randomBase32 is n lower-case base32 characters (5 random bits each).
func randomBase32(n int) string {
	b := make([]byte, (n*5+7)/8)
	_, _ = rand.Read(b)
	return b32.EncodeToString(b)[:n]
}
