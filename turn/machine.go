package turn

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
)

// Config is fixed for a turn's life.
type Config struct {
	Node string
	// Incarnation is random per turn; event ids are Incarnation-seq.
	Incarnation string
	// StepCeiling is the number of allowed calls per turn; 0 means none
	// are allowed... so callers always set it (the kernel defaults it).
	StepCeiling int
	// MaxInFlight bounds concurrent executions; beyond it calls are
	// refused overloaded. 0 means unbounded.
	MaxInFlight int
	// OneOperation marks a turn of one operation.
	OneOperation bool
	// Switches turn off protections; only the conformance suite's proofs set them.
	Switches Switches
	// Projections memoizes model-facing translations by tool revision
	// and profile, across turns (safe for concurrent use); nil translates
	// every tool each time.
	Projections *projection.Cache
	// Approvals are the approval rules in force (live: each decision
	// reads them at its instant); nil names no call.
	Approvals *approval.Live
}

// Switches each disable one mechanism so the conformance suite can show
// the row that depends on it fails without it. Never set in production;
// the configuration file cannot set them.
type Switches struct {
	// ReresolvePerOperation drops the held registry after every operation.
	ReresolvePerOperation bool
	// FreezeAuthority evaluates grants at the turn's opening instant.
	FreezeAuthority bool
	// IgnoreNamespaces skips the per-operation namespace check.
	IgnoreNamespaces bool
	// NoStepCeiling skips the step ceiling.
	NoStepCeiling bool
	// NoContractBaselines skips the contract gate at resolution (read by
	// the kernel): a drifted tool of a holding provider is held anyway.
	NoContractBaselines bool
	// OmitCatalogHash leaves catalogHash off tool.invoked.
	OmitCatalogHash bool
	// NoOneOperationTurns refuses operations that name no turn instead of
	// running each as a turn of one operation (read by the kernel).
	NoOneOperationTurns bool
	// NoLeaseCheck lets an operation on a named turn through without a
	// lease the turn holds (read by the turn actor).
	NoLeaseCheck bool
	// StampAtAdmission judges each operation at the instant the node
	// admitted it instead of the instant the turn decides it (read by the
	// turn actor): an operation waiting behind the first resolution is
	// then decided with a stale instant.
	StampAtAdmission bool
	// NoTenantBinding serves a runtime identity for tenants it is not
	// bound to (not a kernel mechanism: the NATS front's, which the
	// conformance columns switch off with it).
	NoTenantBinding bool
	// NoProjectionRecord leaves a model-facing listing's projection (its
	// profile, hash and names) out of its tool.catalog.listed.
	NoProjectionRecord bool
	// AnyModelName lets a call under a model profile name any tool of the
	// turn by its alias, shown to that profile or not.
	AnyModelName bool
	// NoCredentialBinding lets an access name any credential profile,
	// bound to its principal or not (read by the kernel).
	NoCredentialBinding bool
	// NoLiveValidity judges the grants a turn holds only on the windows
	// they had when the turn resolved them: a grant revoked or shortened
	// in the policy store since then stays valid for the turn.
	NoLiveValidity bool
	// NoGrantCheck makes providers run calls without verifying the node's
	// signed execution grant (not a kernel mechanism: the provider SDK's,
	// which the remote-provider column switches off with it).
	NoGrantCheck bool
	// NoApprovals ignores the approval rules: a call they name runs
	// without an approver's approval.
	NoApprovals bool
	// NoApprovalBinding takes any approved approval for any call that
	// needs one, whatever call it was given for, and however often.
	NoApprovalBinding bool
}

type phase int

const (
	open phase = iota
	closing
	closed
)

// Machine is one turn's state. It is not safe for concurrent use: its
// owner (the turn actor) calls it one input at a time.
type Machine struct {
	cfg      Config
	access   authority.AccessContext // as opened; Now is the opening instant
	ns       []string
	phase    phase
	steps    int
	seq      uint64
	prevHash string
	// last is the latest instant recorded: every input's instant is
	// clamped to it, so event times never decrease with seq.
	last time.Time

	auth      authority.Authority
	registry  *catalog.Registry
	providers []audit.ProviderStatus // as the resolution found them

	inFlight map[string]*inFlight
	callSeq  int

	// shows is what the turn has shown each model profile (projection.go).
	shows map[projection.Profile]*profileShow

	// requests are the approval requests this turn made, by the call
	// they are for (approvalKey); used the approvals its calls used.
	requests map[string]string
	used     map[string]bool
}

type inFlight struct {
	tool      *catalog.Tool
	alias     string
	hash      string
	start     time.Time
	transport string
}

// New opens a turn for access at its instant and returns the turn.opened record.
func New(cfg Config, access authority.AccessContext) (*Machine, *audit.Record) {
	m := &Machine{
		cfg:    cfg,
		access: access,
		ns:     normalizeNamespaces(access.EnabledNamespaces),
		last:   access.Now,
	}
	return m, m.record(access.Now, &audit.Event{Type: audit.TurnOpened, Namespaces: m.ns, Caller: access.Caller})
}

func normalizeNamespaces(ns []string) []string {
	out := slices.Clone(ns)
	slices.Sort(out)
	return slices.Compact(out)
}

// at is the instant an input is judged and recorded at: now, or the
// turn's latest instant if now is earlier (a clock stepped back, or an
// instant stamped before one already recorded). Within a turn, event
// times never decrease with seq. (Switches.StampAtAdmission turns it off
// for the conformance proof.)
func (m *Machine) at(now time.Time) time.Time {
	if now.Before(m.last) && !m.cfg.Switches.StampAtAdmission {
		return m.last
	}
	return now
}

// Key is the turn's authority key.
func (m *Machine) Key() string { return authority.TurnAuthorityKey(m.access) }

// TurnID is the turn's id.
func (m *Machine) TurnID() string { return m.access.TurnID }

// Access is the context the turn was opened with.
func (m *Machine) Access() authority.AccessContext { return m.access }

// Resolved reports whether the registry is held.
func (m *Machine) Resolved() bool { return m.registry != nil }

// Registry returns the held registry, or nil.
func (m *Machine) Registry() *catalog.Registry { return m.registry }

// Closed reports whether the turn takes no more operations.
func (m *Machine) Closed() bool { return m.phase != open }

// InFlight is the number of executions dispatched and not completed.
func (m *Machine) InFlight() int { return len(m.inFlight) }

// Steps is the number of allowed calls so far.
func (m *Machine) Steps() int { return m.steps }

// Namespaces returns the enabled namespaces.
func (m *Machine) Namespaces() []string { return slices.Clone(m.ns) }

// CheckAccess refuses an operation whose context does not belong to this
// turn: a different authority key is a different turn, and saying so would
// reveal that this one exists, so it is turn_not_found.
func (m *Machine) CheckAccess(access authority.AccessContext) error {
	if m.phase != open {
		return reason.New(reason.TurnClosed, "turn %s is closed", m.access.TurnID)
	}
	if !sameAuthority(access, m.access) {
		return reason.New(reason.TurnNotFound, "no turn %s for this principal", access.TurnID)
	}
	return nil
}

// sameAuthority reports whether a and b have the same turn authority key:
// the key is an injective encoding of exactly these fields (hashed), so
// comparing them is the same test without hashing on every operation.
func sameAuthority(a, b authority.AccessContext) bool {
	return a.Tenant == b.Tenant && a.Principal == b.Principal && a.CredentialProfile == b.CredentialProfile &&
		a.TurnID == b.TurnID && maps.Equal(a.Attributes, b.Attributes)
}

// Resolution is the outcome of resolving a turn's catalogue.
type Resolution struct {
	Authority authority.Authority
	Registry  *catalog.Registry
	Providers []audit.ProviderStatus
	// Err is set when resolution failed (a required provider failed, or
	// authority could not be resolved); nothing is held then.
	Err *reason.Error
}

// Resolve records the resolution. On success the registry and authority
// are held for the rest of the turn; on failure nothing is held and the
// next operation that needs the catalogue tries again.
func (m *Machine) Resolve(now time.Time, r Resolution) *audit.Record {
	now = m.at(now)
	ev := &audit.Event{Type: audit.CatalogResolved, Catalog: &audit.Catalog{Providers: r.Providers, Tools: []audit.Tool{}}}
	if r.Err != nil {
		return m.record(now, ev)
	}
	m.auth, m.registry, m.providers = r.Authority, r.Registry, r.Providers
	if m.cfg.Switches.NoLiveValidity {
		m.auth = m.auth.Held()
	}
	for i := range r.Registry.Len() {
		t, alias := r.Registry.At(i)
		ev.Catalog.Tools = append(ev.Catalog.Tools, audit.Tool{
			Alias: alias, Provider: t.Identity.Provider, Name: t.Identity.Name, Namespace: t.Namespace, Revision: t.Revision,
		})
	}
	ev.CatalogHash = r.Registry.Hash()
	return m.record(now, ev)
}

// done is called after each operation that used the registry.
func (m *Machine) done() {
	if m.cfg.Switches.ReresolvePerOperation && len(m.inFlight) == 0 {
		m.registry = nil
	}
}

func (m *Machine) authInstant(now time.Time) time.Time {
	if m.cfg.Switches.FreezeAuthority {
		return m.access.Now
	}
	return now
}

func (m *Machine) nsEnabled(ns string) bool {
	return m.cfg.Switches.IgnoreNamespaces || slices.Contains(m.ns, ns)
}

// Degraded returns the providers whose catalogue the held resolution did
// not get whole (failed, or some tools refused), with their failure class:
// a runtime can tell an empty listing from a failed discovery.
func (m *Machine) Degraded() []audit.ProviderStatus {
	var out []audit.ProviderStatus
	for _, p := range m.providers {
		if p.Status != "ok" {
			out = append(out, p)
		}
	}
	return out
}

// Listed is one tool as a listing shows it.
type Listed struct {
	Alias string
	Tool  *catalog.Tool
}

// List answers a listing at now: the held tools whose namespace is enabled
// and whose capability a grant valid now covers.
func (m *Machine) List(now time.Time) ([]Listed, string, *audit.Record, error) {
	listed, _, hash, rec, err := m.ListPage(now, Page{})
	return listed, hash, rec, err
}

// Page bounds one listing. After is the alias the previous page ended
// with ("" for the first page); MaxBytes bounds the sum of ListedSize over
// the page's tools (0: no bound). A page holds at least one tool, so a
// listing always progresses.
type Page struct {
	After    string
	MaxBytes int
	// MaxTools, when positive, cuts the page after that many tools.
	MaxTools int
	// Transport is recorded on the listing (audit.Event.Transport).
	Transport string
}

// ListedSize estimates the bytes one listed tool takes in a reply: its
// fields plus a fixed allowance for keys and framing. Catalogue limits
// keep every tool far below any reply bound.
func ListedSize(alias string, t *catalog.Tool) int {
	return 160 + len(alias) + len(t.Identity.Provider) + len(t.Identity.Name) + len(t.Namespace) + len(t.Revision) +
		len(t.Description) + len(t.InputSchema) + len(t.OutputSchema) + len(t.Annotations) + len(t.Title) + len(t.Icons)
}

// ListPage answers one page of a listing at now, in the registry's
// (identity) order, and the cursor of the next page ("" after the last).
// Each page is judged at its own instant and recorded as its own
// tool.catalog.listed with the aliases it showed: the trail says exactly
// what the model was shown, and when.
func (m *Machine) ListPage(now time.Time, p Page) (listed []Listed, next, hash string, rec *audit.Record, err error) {
	now = m.at(now)
	if err := m.ready(); err != nil {
		return nil, "", "", nil, err
	}
	defer m.done()
	start := 0
	if p.After != "" {
		start = -1
		for i := range m.registry.Len() {
			if _, alias := m.registry.At(i); alias == p.After {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, "", "", nil, reason.New(reason.InvalidRequest, "cursor %q names no tool of turn %s", p.After, m.access.TurnID)
		}
	}
	if err := m.policyInForce(now); err != nil {
		return nil, "", "", nil, err
	}
	at := m.authInstant(now)
	aliases := []string{}
	size := 0
	for i := start; i < m.registry.Len(); i++ {
		t, alias := m.registry.At(i)
		if !m.nsEnabled(t.Namespace) || !m.auth.CanDiscover(t.Capability, at) {
			continue
		}
		n := ListedSize(alias, t)
		if p.MaxBytes > 0 && len(listed) > 0 && size+n > p.MaxBytes || p.MaxTools > 0 && len(listed) >= p.MaxTools {
			next = aliases[len(aliases)-1]
			break
		}
		size += n
		listed = append(listed, Listed{Alias: alias, Tool: t})
		aliases = append(aliases, alias)
	}
	hash = m.registry.Hash()
	rec = m.record(now, &audit.Event{Type: audit.CatalogListed, CatalogHash: hash, Namespaces: m.ns, Listed: aliases, Transport: p.Transport})
	return listed, next, hash, rec, nil
}

// NamespaceInfo describes one namespace of the held registry.
type NamespaceInfo struct {
	Name    string
	Enabled bool
	Tools   int
}

// ListNamespaces lists the held registry's namespaces and whether each is
// enabled. It records nothing: it shows no tools.
func (m *Machine) ListNamespaces() ([]NamespaceInfo, error) {
	if err := m.ready(); err != nil {
		return nil, err
	}
	defer m.done()
	var out []NamespaceInfo
	idx := map[string]int{}
	for i := range m.registry.Len() {
		t, _ := m.registry.At(i)
		j, ok := idx[t.Namespace]
		if !ok {
			j = len(out)
			idx[t.Namespace] = j
			out = append(out, NamespaceInfo{Name: t.Namespace, Enabled: slices.Contains(m.ns, t.Namespace)})
		}
		out[j].Tools++
	}
	slices.SortFunc(out, func(a, b NamespaceInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// UpdateNamespaces replaces the enabled namespaces; it takes effect from
// the next operation of this turn.
func (m *Machine) UpdateNamespaces(now time.Time, ns []string) (*audit.Record, error) {
	now = m.at(now)
	if m.phase != open {
		return nil, reason.New(reason.TurnClosed, "turn %s is closed", m.access.TurnID)
	}
	for _, n := range ns {
		if n == "" || len(n) > 128 {
			return nil, reason.New(reason.InvalidRequest, "namespace %q is empty or longer than 128 bytes", n)
		}
	}
	if len(ns) > 1024 {
		return nil, reason.New(reason.InvalidRequest, "%d namespaces; limit 1024", len(ns))
	}
	m.ns = normalizeNamespaces(ns)
	return m.record(now, &audit.Event{Type: audit.NamespacesUpdated, Namespaces: m.ns}), nil
}

func (m *Machine) ready() error {
	if m.phase != open {
		return reason.New(reason.TurnClosed, "turn %s is closed", m.access.TurnID)
	}
	if m.registry == nil {
		return reason.New(reason.Internal, "turn %s: catalogue not resolved", m.access.TurnID)
	}
	return nil
}

// Invocation is a call as the caller made it.
type Invocation struct {
	Alias     string
	Arguments json.RawMessage
	// Late is set by the shell when the caller's deadline passed before
	// the call could be decided: it is refused deadline_exceeded, not
	// decided, and never runs.
	Late bool
	// Transport is recorded on the call's events (audit.Event.Transport).
	Transport string
	// Profile, when set, says Alias is a name this turn showed under that
	// model profile (Project); it is resolved to the tool it was shown
	// for, and a name the turn never showed is unknown_tool.
	Profile projection.Profile
	// ApprovalID names the approval the caller presents ("" for none).
	ApprovalID string
	// Approval is the presented approval (ApprovalID, or the request this
	// turn made for exactly this call: ApprovalFor) as the shell read it
	// from the store, at revision ApprovalRev; nil when there is none.
	Approval    *approval.State
	ApprovalRev uint64
}

// Decision is what Decide concluded. When Err is nil the call is allowed
// and the shell executes Tool at its revision, then calls Complete with CallID.
type Decision struct {
	CallID   string
	Alias    string
	Tool     *catalog.Tool
	Resource string
	Grant    string
	Err      *reason.Error
	// Request, on approval_required, is the approval request the caller
	// is told of; NewRequest says the shell must store it (durably,
	// before the caller is answered) and record ApprovalRequested.
	Request    *approval.Request
	NewRequest bool
	// Approval, on an allowed call an approval rule names, is the
	// approval it runs on: the shell consumes it at ApprovalRev (Store.Use)
	// before the tool runs, and the call does not run if that fails.
	Approval    *approval.State
	ApprovalRev uint64
}

// Decide decides a call at now against the held registry and live authority.
func (m *Machine) Decide(now time.Time, inv Invocation) (Decision, *audit.Record) {
	now = m.at(now)
	if err := m.ready(); err != nil {
		return Decision{Alias: inv.Alias, Err: err.(*reason.Error)}, nil
	}
	defer m.done()
	m.callSeq++
	shown := true
	if inv.Profile != "" {
		// The call is recorded under the turn's own alias: a model-facing
		// name never stands in for the tool's identity in the trail.
		var alias string
		if alias, shown = m.shownAlias(inv.Profile, inv.Alias); shown {
			inv.Alias = alias
		} else if m.cfg.Switches.AnyModelName {
			_, shown = m.registry.Lookup(inv.Alias)
		}
	}
	d := Decision{CallID: "c" + strconv.Itoa(m.callSeq), Alias: inv.Alias}
	if shown {
		d.Err = m.decide(now, inv, &d)
	} else {
		d.Err = reason.New(reason.UnknownTool, "no tool was shown as %q to profile %s in this turn", inv.Alias, inv.Profile)
	}
	call := &audit.Call{ID: d.CallID, Alias: inv.Alias, ArgsHash: argsHash(inv.Arguments), Decision: "allow"}
	if d.Tool != nil {
		call.Provider, call.Name, call.Revision = d.Tool.Identity.Provider, d.Tool.Identity.Name, d.Tool.Revision
	}
	call.Resource, call.Grant = d.Resource, d.Grant
	if d.Request != nil {
		call.Approval = d.Request.ID
	} else if d.Approval != nil {
		call.Approval = d.Approval.ID
	}
	if d.Err != nil {
		call.Decision, call.Reason = "deny", string(d.Err.Code)
	} else {
		m.steps++
		call.Step = m.steps
		if m.inFlight == nil {
			m.inFlight = map[string]*inFlight{}
		}
		m.inFlight[d.CallID] = &inFlight{tool: d.Tool, alias: inv.Alias, hash: m.registry.Hash(), start: now, transport: inv.Transport}
	}
	ev := &audit.Event{Type: audit.ToolInvoked, Call: call, Namespaces: m.ns, Transport: inv.Transport}
	if !m.cfg.Switches.OmitCatalogHash {
		ev.CatalogHash = m.registry.Hash()
	}
	return d, m.record(now, ev)
}

func (m *Machine) decide(now time.Time, inv Invocation, d *Decision) *reason.Error {
	if inv.Late {
		return reason.New(reason.DeadlineExceeded, "the caller's deadline passed before the call was decided; it did not run")
	}
	tool, ok := m.registry.Lookup(inv.Alias)
	if !ok {
		return reason.New(reason.UnknownTool, "no tool %q in this turn's catalogue", inv.Alias)
	}
	d.Tool = tool
	if !m.nsEnabled(tool.Namespace) {
		return reason.New(reason.NamespaceDisabled, "namespace %q is not enabled", tool.Namespace)
	}
	if err := m.policyInForce(now); err != nil {
		return err
	}
	at := m.authInstant(now)
	if !m.auth.CanDiscover(tool.Capability, at) {
		return reason.New(reason.NotDiscoverable, "no grant valid now covers %s", tool.Capability)
	}
	args, err := tool.ParseArguments(inv.Arguments)
	if err != nil {
		return reason.New(reason.InvalidArguments, "%v", err)
	}
	res, err := tool.Requirement.Resolve(args)
	if err != nil {
		return reason.New(reason.InvalidArguments, "%v", err)
	}
	d.Resource = res
	grant, ok := m.auth.CanInvoke(tool.Capability, res, at)
	if !ok {
		return reason.New(reason.NoMatchingGrant, "no grant valid now covers %s on %s", tool.Capability, res)
	}
	d.Grant = grant
	if !m.cfg.Switches.NoStepCeiling && m.steps >= m.cfg.StepCeiling {
		return reason.New(reason.StepCeilingExceeded, "turn used its %d steps", m.cfg.StepCeiling)
	}
	if err := m.approve(now, inv, tool, d); err != nil {
		return err
	}
	if m.cfg.MaxInFlight > 0 && len(m.inFlight) >= m.cfg.MaxInFlight {
		return reason.New(reason.Overloaded, "%d calls in flight in this turn", len(m.inFlight))
	}
	return nil
}

// approvalKey names one call exactly: the tool's identity and revision
// and the hash of the argument bytes.
func approvalKey(t *catalog.Tool, args []byte) string {
	return t.Identity.Provider + "\x00" + t.Identity.Name + "\x00" + t.Revision + "\x00" + argsHash(args)
}

// ApprovalFor is the approval the shell must read from the store before
// inv is decided: the one inv names, else the request this turn made for
// exactly this call (same tool, revision and argument bytes), so a call
// made again after its approval runs without naming it. "" for none.
func (m *Machine) ApprovalFor(inv Invocation) string {
	if inv.ApprovalID != "" || m.registry == nil || len(m.requests) == 0 {
		return inv.ApprovalID
	}
	if inv.Profile != "" {
		alias, ok := m.shownAlias(inv.Profile, inv.Alias)
		if !ok {
			return ""
		}
		inv.Alias = alias
	}
	t, ok := m.registry.Lookup(inv.Alias)
	if !ok {
		return ""
	}
	return m.requests[approvalKey(t, inv.Arguments)]
}

// ApprovalRequested records, after the refused call's tool.invoked, the
// approval request it made (Decision.NewRequest).
func (m *Machine) ApprovalRequested(now time.Time, r approval.Request) *audit.Record {
	return m.record(m.at(now), &audit.Event{Type: audit.ApprovalRequested, CatalogHash: r.CatalogHash, Approval: &audit.Approval{
		ID: r.ID, Rule: r.Rule, Tenant: r.Tenant, Principal: r.Principal, Turn: r.Turn, CallID: r.CallID,
		Provider: r.Provider, Name: r.Tool, Revision: r.Revision, ArgsHash: r.ArgsHash, ExpiresAt: r.ExpiresAt.UTC(),
	}})
}

// ForgetRequest drops a request the shell could not store: the next
// identical call asks again.
func (m *Machine) ForgetRequest(id string) {
	for k, v := range m.requests {
		if v == id {
			delete(m.requests, k)
		}
	}
}

// approve decides what an approval rule naming the call requires: an
// approval in force for exactly this call, unused in this turn — or it
// refuses approval_required with the request to approve (a new one, or
// the one still pending for this call).
func (m *Machine) approve(now time.Time, inv Invocation, tool *catalog.Tool, d *Decision) *reason.Error {
	if m.cfg.Switches.NoApprovals {
		return nil
	}
	rule, ok := m.cfg.Approvals.Rules().Match(approval.Subject{Tenant: m.access.Tenant, Provider: tool.Identity.Provider,
		Tool: tool.Identity.Name, Capability: tool.Capability, Annotations: tool.Annotations})
	if !ok {
		return nil
	}
	if m.cfg.OneOperation {
		return reason.New(reason.ApprovalRequired, "rule %s needs an approver's approval for %s, and an approval is bound to its turn: call it in an open turn", rule.Name, tool.Identity)
	}
	st := inv.Approval
	if st != nil && inv.ApprovalID == "" && st.Status != approval.Denied && (st.Status == approval.Used || st.Expired(now)) {
		// The request this turn made for this call was used, or lapsed:
		// the same call again asks anew.
		st = nil
	}
	if st != nil {
		if m.cfg.Switches.NoApprovalBinding {
			if st.Status == approval.Approved || st.Status == approval.Used {
				d.Approval, d.ApprovalRev = st, inv.ApprovalRev
				return nil
			}
		}
		call := approval.Call{Tenant: m.access.Tenant, Principal: m.access.Principal, Turn: m.access.TurnID,
			Provider: tool.Identity.Provider, Tool: tool.Identity.Name, Revision: tool.Revision, CatalogHash: m.registry.Hash(), Arguments: inv.Arguments}
		if err := approval.Check(*st, call, now); err != nil {
			if err.Code == reason.ApprovalRequired || err.Code == reason.ApprovalDenied {
				req := st.Request
				d.Request = &req
			}
			return err
		}
		if m.used[st.ID] {
			return reason.New(reason.ApprovalInvalid, "approval %s was used by an earlier call of this turn", st.ID)
		}
		if m.used == nil {
			m.used = map[string]bool{}
		}
		m.used[st.ID] = true
		delete(m.requests, approvalKey(tool, inv.Arguments))
		d.Approval, d.ApprovalRev = st, inv.ApprovalRev
		return nil
	}
	if inv.ApprovalID != "" {
		return reason.New(reason.ApprovalInvalid, "no approval %s (never requested, or expired and dropped)", inv.ApprovalID)
	}
	req := &approval.Request{
		ID: "apr-" + m.cfg.Incarnation + "-" + d.CallID, Tenant: m.access.Tenant, Principal: m.access.Principal,
		CredentialProfile: m.access.CredentialProfile, Caller: m.access.Caller, Turn: m.access.TurnID, CallID: d.CallID,
		Provider: tool.Identity.Provider, Tool: tool.Identity.Name, Alias: d.Alias, Revision: tool.Revision, CatalogHash: m.registry.Hash(),
		Arguments: slices.Clone([]byte(inv.Arguments)), ArgsHash: argsHash(inv.Arguments), Rule: rule.Name, SeparateDuties: rule.SeparateDuties,
		RequestedAt: now.UTC(), ExpiresAt: now.Add(rule.Expiry).UTC(),
	}
	if m.requests == nil {
		m.requests = map[string]string{}
	}
	m.requests[approvalKey(tool, inv.Arguments)] = req.ID
	d.Request, d.NewRequest = req, true
	return reason.New(reason.ApprovalRequired, "rule %s needs an approver's approval for this call of %s: request %s, until %s",
		rule.Name, tool.Identity, req.ID, req.ExpiresAt.Format(time.RFC3339))
}

// policyInForce refuses a decision the turn's live policy cannot support
// at now: a view of the policy store unconfirmed beyond its staleness
// bound (policy_stale), or a credential binding withdrawn from the turn's
// principal since it opened (credential_forbidden). Without live policy
// it refuses nothing.
func (m *Machine) policyInForce(now time.Time) *reason.Error {
	if m.auth.Stale(now) {
		return reason.New(reason.PolicyStale, "the node's view of the policy store is older than its staleness bound; no decision until it is current again")
	}
	if !m.cfg.Switches.NoCredentialBinding && !m.auth.CredentialInForce() {
		return reason.New(reason.CredentialForbidden, "credential profile %q is no longer bound to %s/%s", m.access.CredentialProfile, m.access.Tenant, m.access.Principal)
	}
	return nil
}

func argsHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Completion is how an execution ended.
type Completion struct {
	CallID string
	// Err is the classified failure (provider or durability); nil when the
	// tool ran (IsError says whether it reported failure).
	Err       *reason.Error
	IsError   bool
	ResultLen int
}

// Complete records a dispatched call's end at now.
func (m *Machine) Complete(now time.Time, c Completion) (*audit.Record, error) {
	now = m.at(now)
	f, ok := m.inFlight[c.CallID]
	if !ok {
		return nil, fmt.Errorf("turn %s: completion for unknown call %s", m.access.TurnID, c.CallID)
	}
	delete(m.inFlight, c.CallID)
	call := &audit.Call{
		ID: c.CallID, Alias: f.alias, Provider: f.tool.Identity.Provider, Name: f.tool.Identity.Name, Revision: f.tool.Revision,
		Outcome: "ok", Duration: now.Sub(f.start).Microseconds(), ResultLen: c.ResultLen,
	}
	switch {
	case c.Err != nil:
		call.Outcome, call.Reason = "failed", string(c.Err.Code)
	case c.IsError:
		call.Outcome = "tool_error"
	}
	rec := m.record(now, &audit.Event{Type: audit.ToolCompleted, CatalogHash: f.hash, Call: call, Transport: f.transport})
	m.done()
	return rec, nil
}

// Attached records that another caller took a lease on the open turn;
// caller is the bus identity taking it; holders is how many leases the
// turn holds now. Only the lease id's hash is recorded: the id is a
// capability.
func (m *Machine) Attached(now time.Time, leaseID, caller string, holders int) (*audit.Record, error) {
	if m.phase != open {
		return nil, reason.New(reason.TurnClosed, "turn %s is closed", m.access.TurnID)
	}
	return m.record(m.at(now), &audit.Event{Type: audit.TurnAttached, Caller: caller, Lease: &audit.Lease{IDHash: argsHash([]byte(leaseID)), Holders: holders}}), nil
}

// Detached records that a caller released its lease; holders is how many
// leases the turn holds now (at 0 the shell closes the turn next).
func (m *Machine) Detached(now time.Time, leaseID string, holders int) *audit.Record {
	return m.record(m.at(now), &audit.Event{Type: audit.TurnDetached, Lease: &audit.Lease{IDHash: argsHash([]byte(leaseID)), Holders: holders}})
}

// BeginClose stops the turn taking operations. It reports whether the turn
// can finish now (nothing in flight); otherwise the shell calls Finish
// after the last completion.
func (m *Machine) BeginClose() bool {
	if m.phase == open {
		m.phase = closing
	}
	return len(m.inFlight) == 0
}

// Finish closes the turn and returns turn.closed; why is one of
// audit.CloseReasons. It returns nil if the turn was already closed.
func (m *Machine) Finish(now time.Time, why string) *audit.Record {
	now = m.at(now)
	if m.phase == closed {
		return nil
	}
	m.phase = closed
	ev := &audit.Event{Type: audit.TurnClosed, Close: &audit.Close{Reason: why, Steps: m.steps, Events: m.seq + 1}}
	if m.registry != nil {
		ev.CatalogHash = m.registry.Hash()
	}
	return m.record(now, ev)
}

// record completes ev with the turn's identity and chain position, encodes
// it and advances the chain.
func (m *Machine) record(now time.Time, ev *audit.Event) *audit.Record {
	ev.ID = m.cfg.Incarnation + "-" + strconv.FormatUint(m.seq, 10)
	ev.Time = now.UTC()
	if now.After(m.last) {
		m.last = now
	}
	ev.Node = m.cfg.Node
	ev.Tenant, ev.Principal, ev.CredentialProfile = m.access.Tenant, m.access.Principal, m.access.CredentialProfile
	ev.TurnID = m.access.TurnID
	ev.OneOperation = m.cfg.OneOperation
	ev.Seq, ev.PrevHash = m.seq, m.prevHash
	rec, err := audit.Encode(ev)
	if err != nil {
		// Only a time outside years 0-9999 can fail to encode; the
		// kernel's clock never produces one.
		panic(fmt.Sprintf("turn %s: encoding %s: %v", m.access.TurnID, ev.Type, err))
	}
	m.seq++
	m.prevHash = rec.Hash
	return rec
}
