package messages

import (
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

// Version is the protocol version this package speaks.
const Version = 1

// Op names an operation; it is the last subject token.
type Op string

// The operations.
const (
	OpOpen             Op = "open"
	OpAttach           Op = "attach"
	OpList             Op = "list"
	OpNamespaces       Op = "namespaces"
	OpUpdateNamespaces Op = "update_namespaces"
	OpInvoke           Op = "invoke"
	OpClose            Op = "close"
)

// QueueGroup is the queue group nodes share for opens and one-operation turns.
const QueueGroup = "sharedos-nodes"

// NodeQueueGroup is the queue group of the subjects that name one node
// (its turns): only that node subscribes, so a request is delivered once,
// also while the node hands its subscriptions over as it drains.
func NodeQueueGroup(node string) string { return QueueGroup + "-node-" + node }

// OpenSubject is where opens go (any node).
func OpenSubject(prefix string) string { return prefix + ".turn.open" }

// TurnSubject is where a turn's later operations go: its node.
func TurnSubject(prefix, node string, op Op) string {
	return prefix + ".turn." + node + "." + string(op)
}

// OneOpSubject is where operations naming no turn go (any node).
func OneOpSubject(prefix string, op Op) string { return prefix + ".op." + string(op) }

// Access is the caller's authority context. The node stamps the
// operation's instant itself: a caller cannot choose the time its grants
// are judged at.
type Access struct {
	Tenant     string            `msgpack:"tenant"`
	Principal  string            `msgpack:"principal"`
	Credential string            `msgpack:"credential,omitempty"`
	TurnID     string            `msgpack:"turn,omitempty"`
	Namespaces []string          `msgpack:"namespaces,omitempty"`
	Attributes map[string]string `msgpack:"attributes,omitempty"`
	// Lease is the caller's lease on the turn (OpenReply.LeaseID): every
	// operation on an open turn carries it. Never sent to providers.
	Lease string `msgpack:"lease,omitempty"`
}

// Error is a refusal or failure on the wire.
type Error struct {
	Code    string `msgpack:"code"`
	Message string `msgpack:"message,omitempty"`
	// RetryAfterMs, on rate_limited, is how long to wait before retrying.
	RetryAfterMs uint32 `msgpack:"retry_after_ms,omitempty"`
}

// Err returns e as a *reason.Error (nil for nil).
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	return &reason.Error{Code: reason.Code(e.Code), Message: e.Message, RetryAfter: time.Duration(e.RetryAfterMs) * time.Millisecond}
}

// ErrorOf converts err to its wire form (nil for nil).
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var re *reason.Error
	if r, ok := err.(*reason.Error); ok {
		re = r
		msg = r.Message
	}
	if re == nil {
		return &Error{Code: string(reason.Of(err)), Message: msg}
	}
	e := &Error{Code: string(re.Code), Message: msg}
	if re.RetryAfter > 0 {
		e.RetryAfterMs = uint32(min(max(re.RetryAfter.Milliseconds(), 1), 1<<31))
	}
	return e
}

// OpenRequest opens a turn, or attaches to it when Access.TurnID names an
// open turn with the same authority.
type OpenRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
}

// OpenReply answers OpenRequest.
type OpenReply struct {
	V        int    `msgpack:"v"`
	Error    *Error `msgpack:"error,omitempty"`
	Node     string `msgpack:"node,omitempty"`
	TurnID   string `msgpack:"turn,omitempty"`
	LeaseID  string `msgpack:"lease,omitempty"`
	Attached bool   `msgpack:"attached,omitempty"`
}

// TurnRequest is list and namespaces.
type TurnRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
}

// Tool is a listed tool. Schemas and annotations are JSON.
type Tool struct {
	Alias        string `msgpack:"alias"`
	Provider     string `msgpack:"provider"`
	Name         string `msgpack:"name"`
	Namespace    string `msgpack:"namespace"`
	Revision     string `msgpack:"revision"`
	Description  string `msgpack:"description"`
	InputSchema  []byte `msgpack:"input_schema"`
	OutputSchema []byte `msgpack:"output_schema,omitempty"`
	Annotations  []byte `msgpack:"annotations,omitempty"`
	// Title is the tool's human-readable name; Icons its icons (a JSON
	// array). Both optional.
	Title string `msgpack:"title,omitempty"`
	Icons []byte `msgpack:"icons,omitempty"`
}

// ListRequest is list: TurnRequest's keys and a cursor — or, with a
// profile, the listing as a model API shows it (docs/model-facing.md),
// and with a query as well, a search of the turn's visible tools.
type ListRequest struct {
	V      int    `msgpack:"v"`
	Access Access `msgpack:"access"`
	// Cursor continues a listing: the previous reply's next_cursor.
	Cursor    string `msgpack:"cursor,omitempty"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
	// Profile asks for the listing translated for a model API (openai,
	// openai-strict, anthropic, anthropic-strict, gemini,
	// gemini-jsonschema, mcp): answered in ListReply.Model, unpaged.
	Profile string `msgpack:"profile,omitempty"`
	// Budget, with a profile, bounds the listing's tokens; Encoding names
	// the OpenAI encoding they are counted in (default o200k_base).
	Budget   int    `msgpack:"budget,omitempty"`
	Encoding string `msgpack:"encoding,omitempty"`
	// Query, with a profile, makes the request a search: the visible
	// tools ranked for it, the best K (0: all that match) sent.
	Query string `msgpack:"query,omitempty"`
	K     int    `msgpack:"k,omitempty"`
}

// ModelListing is a listing as one model profile shows it.
type ModelListing struct {
	Profile string `msgpack:"profile"`
	// Listing is the JSON array to send the model API, exactly (the value
	// of its "tools" / "functionDeclarations"); Hash is its SHA-256 hex,
	// the projection_hash the trail records.
	Listing     []byte `msgpack:"listing"`
	Hash        string `msgpack:"projection_hash"`
	Tokens      int    `msgpack:"tokens"`
	TokenMethod string `msgpack:"token_method"`
	// Tools are the tools sent, in order: the name the model sees (send
	// it back as InvokeRequest.Tool with this profile) and the identity.
	Tools []ModelTool `msgpack:"tools,omitempty"`
	// Unrepresentable are visible tools the profile cannot express
	// without changing what they accept, each with every reason;
	// OverLimit those past the profile's per-request limits, OverBudget
	// those past the budget.
	Unrepresentable []Unrepresentable `msgpack:"unrepresentable,omitempty"`
	OverLimit       []ToolIdentity    `msgpack:"over_limit,omitempty"`
	OverBudget      []ToolIdentity    `msgpack:"over_budget,omitempty"`
}

// ModelTool is one tool a model listing sent.
type ModelTool struct {
	Name     string `msgpack:"name"`
	Provider string `msgpack:"provider"`
	Tool     string `msgpack:"tool"`
	Revision string `msgpack:"revision"`
	Tokens   int    `msgpack:"tokens"`
}

// ToolIdentity is a tool's server-scoped identity.
type ToolIdentity struct {
	Provider string `msgpack:"provider"`
	Tool     string `msgpack:"tool"`
}

// Unrepresentable is a tool left out of a model listing, with why: each
// reason names the schema keyword, its JSON pointer and a code.
type Unrepresentable struct {
	Provider string       `msgpack:"provider"`
	Tool     string       `msgpack:"tool"`
	Reasons  []ModelIssue `msgpack:"reasons"`
}

// ModelIssue is one reason a tool cannot be represented.
type ModelIssue struct {
	Keyword string `msgpack:"keyword,omitempty"`
	Path    string `msgpack:"path,omitempty"`
	Reason  string `msgpack:"reason"`
}

// ProviderFailure names a provider the turn's resolution did not get
// whole: status "failed" (none of its tools; code is the failure class)
// or "partial" (some tools refused; message says which and why).
type ProviderFailure struct {
	Provider string `msgpack:"provider"`
	Status   string `msgpack:"status"`
	Code     string `msgpack:"code,omitempty"`
	Message  string `msgpack:"message,omitempty"`
}

// ListReply answers list. A listing that does not fit one reply is paged:
// NextCursor, when set, is sent back as ListRequest.Cursor for the rest.
type ListReply struct {
	V           int               `msgpack:"v"`
	Error       *Error            `msgpack:"error,omitempty"`
	CatalogHash string            `msgpack:"catalog_hash,omitempty"`
	Tools       []Tool            `msgpack:"tools,omitempty"`
	NextCursor  string            `msgpack:"next_cursor,omitempty"`
	Degraded    []ProviderFailure `msgpack:"providers_degraded,omitempty"`
	// Model answers a request with a profile (Tools is then empty).
	Model *ModelListing `msgpack:"model,omitempty"`
}

// Namespace describes one namespace of a turn's catalogue.
type Namespace struct {
	Name    string `msgpack:"name"`
	Enabled bool   `msgpack:"enabled"`
	Tools   int    `msgpack:"tools"`
}

// NamespacesReply answers namespaces.
type NamespacesReply struct {
	V          int         `msgpack:"v"`
	Error      *Error      `msgpack:"error,omitempty"`
	Namespaces []Namespace `msgpack:"namespaces,omitempty"`
}

// UpdateNamespacesRequest replaces the turn's enabled namespaces.
type UpdateNamespacesRequest struct {
	V          int      `msgpack:"v"`
	Access     Access   `msgpack:"access"`
	Namespaces []string `msgpack:"namespaces"`
	TimeoutMs  uint32   `msgpack:"timeout_ms,omitempty"`
}

// AckReply answers update_namespaces and close.
type AckReply struct {
	V     int    `msgpack:"v"`
	Error *Error `msgpack:"error,omitempty"`
}

// InvokeRequest calls a tool by its model-facing alias with JSON arguments.
type InvokeRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	Tool      string `msgpack:"tool"`
	Args      []byte `msgpack:"args,omitempty"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
	// RequestID, if set (at most 128 bytes; the Go client sends 16
	// random bytes, hex), makes the call safe to send again on a named
	// turn: the turn runs it at most once per lease and id, and answers a
	// retry with the same tool and arguments with the first execution's
	// answer (docs/protocol.md, "Retrying a call").
	RequestID string `msgpack:"request_id,omitempty"`
	// Profile, when set, says Tool is a name a model listing of that
	// profile showed in this turn (ModelTool.Name); a name it never
	// showed is unknown_tool.
	Profile string `msgpack:"profile,omitempty"`
	// Approval names the approval the call runs on: the id an
	// approval_required reply carried (InvokeReply.Approval), once an
	// approver approved it. A call made again in its turn with exactly
	// the arguments it was refused with finds its approval without it
	// (docs/approvals.md). At most 128 bytes.
	Approval string `msgpack:"approval,omitempty"`
}

// InvokeReply answers invoke.
type InvokeReply struct {
	V           int    `msgpack:"v"`
	Error       *Error `msgpack:"error,omitempty"`
	CallID      string `msgpack:"call,omitempty"`
	CatalogHash string `msgpack:"catalog_hash,omitempty"`
	Alias       string `msgpack:"alias,omitempty"`
	Provider    string `msgpack:"provider,omitempty"`
	Name        string `msgpack:"name,omitempty"`
	Text        string `msgpack:"text,omitempty"`
	Structured  []byte `msgpack:"structured,omitempty"`
	IsError     bool   `msgpack:"is_error,omitempty"`
	DurationUs  int64  `msgpack:"duration_us,omitempty"`
	// Dispatched, on a failed or refused call, says whether the call was
	// sent to its provider (true: it may have run); absent when the node
	// cannot tell (the caller's deadline passed before the turn answered)
	// and on success.
	Dispatched *bool `msgpack:"dispatched,omitempty"`
	// Content, when present, is the result's content blocks as the tool
	// sent them, and Text is empty; a result of one plain text block is
	// carried as Text alone.
	Content []Content `msgpack:"content,omitempty"`
	// Approval, on approval_required and approval_denied, is the approval
	// request: its id, expiry and exactly what is to be approved.
	Approval *Approval `msgpack:"approval,omitempty"`
}

// Approval is an approval request on the wire: the one call an approver
// is asked to approve, and where it stands.
type Approval struct {
	ID     string `msgpack:"id"`
	Status string `msgpack:"status"`
	// The call: its tenant, principal, turn and call id; the tool's
	// identity, turn alias and revision; the turn's catalogHash; the
	// argument bytes exactly and their SHA-256.
	Tenant      string `msgpack:"tenant"`
	Principal   string `msgpack:"principal"`
	Turn        string `msgpack:"turn"`
	CallID      string `msgpack:"call"`
	Provider    string `msgpack:"provider"`
	Tool        string `msgpack:"tool"`
	Alias       string `msgpack:"alias"`
	Revision    string `msgpack:"revision"`
	CatalogHash string `msgpack:"catalog_hash"`
	Args        []byte `msgpack:"args"`
	ArgsHash    string `msgpack:"args_sha256"`
	Rule        string `msgpack:"rule"`
	// RequestedAtMs and ExpiresAtMs are Unix milliseconds.
	RequestedAtMs int64 `msgpack:"requested_at_ms"`
	ExpiresAtMs   int64 `msgpack:"expires_at_ms"`
	// DecidedBy and Reason, once decided.
	DecidedBy string `msgpack:"decided_by,omitempty"`
	Reason    string `msgpack:"reason,omitempty"`
}

// ApprovalOf is st on the wire (nil for nil).
func ApprovalOf(st *approval.State) *Approval {
	if st == nil {
		return nil
	}
	return &Approval{ID: st.ID, Status: string(st.Status), Tenant: st.Tenant, Principal: st.Principal, Turn: st.Turn, CallID: st.CallID,
		Provider: st.Provider, Tool: st.Tool, Alias: st.Alias, Revision: st.Revision, CatalogHash: st.CatalogHash,
		Args: st.Arguments, ArgsHash: st.ArgsHash, Rule: st.Rule, RequestedAtMs: st.RequestedAt.UnixMilli(), ExpiresAtMs: st.ExpiresAt.UnixMilli(),
		DecidedBy: st.DecidedBy, Reason: st.Reason}
}

// State is a as an approval state (nil for nil).
func (a *Approval) State() *approval.State {
	if a == nil {
		return nil
	}
	return &approval.State{Request: approval.Request{ID: a.ID, Tenant: a.Tenant, Principal: a.Principal, Turn: a.Turn, CallID: a.CallID,
		Provider: a.Provider, Tool: a.Tool, Alias: a.Alias, Revision: a.Revision, CatalogHash: a.CatalogHash,
		Arguments: a.Args, ArgsHash: a.ArgsHash, Rule: a.Rule, RequestedAt: time.UnixMilli(a.RequestedAtMs).UTC(), ExpiresAt: time.UnixMilli(a.ExpiresAtMs).UTC()},
		Status: approval.Status(a.Status), DecidedBy: a.DecidedBy, Reason: a.Reason}
}

// CloseRequest releases a lease: LeaseID, or Access.Lease when LeaseID is
// empty. A close carrying neither is refused invalid_request.
type CloseRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	LeaseID   string `msgpack:"lease"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
}

// Message is every wire type.
type Message interface {
	version() int
}

func (m *OpenRequest) version() int             { return m.V }
func (m *OpenReply) version() int               { return m.V }
func (m *TurnRequest) version() int             { return m.V }
func (m *ListRequest) version() int             { return m.V }
func (m *ListReply) version() int               { return m.V }
func (m *NamespacesReply) version() int         { return m.V }
func (m *UpdateNamespacesRequest) version() int { return m.V }
func (m *AckReply) version() int                { return m.V }
func (m *InvokeRequest) version() int           { return m.V }
func (m *InvokeReply) version() int             { return m.V }
func (m *CloseRequest) version() int            { return m.V }

// Encode encodes m. The hot-path messages are encoded without reflection
// (fast.go), to the bytes msgpack.Marshal gives.
func Encode(m Message) ([]byte, error) {
	if f, ok := m.(fastMessage); ok && !hasContent(m) {
		return f.appendMsgpack(make([]byte, 0, 256)), nil
	}
	return msgpack.Marshal(m)
}

// hasContent reports whether m is a reply carrying content blocks, which
// the fast path leaves to msgpack (and its decoder, seeing the key, to the
// reflective one).
func hasContent(m Message) bool {
	switch m := m.(type) {
	case *InvokeReply:
		return len(m.Content) > 0 || m.Approval != nil
	case *ProviderInvokeReply:
		return len(m.Content) > 0
	}
	return false
}

// Decode bounds and guards an untrusted frame, decodes it into m and
// checks its version. Every failure wraps ErrMalformed (errors.Is) and
// maps to invalid_request on the wire.
func Decode(b []byte, m Message, lim Limits) (err error) {
	if err := Guard(b, lim); err != nil {
		return err
	}
	if err := checkShape(b, m); err != nil { // maps with string keys only (shape.go)
		return err
	}
	if f, ok := m.(fastMessage); ok && f.decodeMsgpack(b) {
		return checkVersion(m)
	}
	// msgpack v5.4.1 panics on some well-formed frames (nil decoded into a
	// struct-typed field); a frame is never worth a process.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: decoder panicked: %v", ErrMalformed, r)
		}
	}()
	if err := msgpack.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return checkVersion(m)
}

func checkVersion(m Message) error {
	if v := m.version(); v != Version {
		return fmt.Errorf("%w: protocol version %d; this node speaks %d", ErrMalformed, v, Version)
	}
	return nil
}

// Request is a turn-protocol request: it carries the caller's access and
// how long the caller will wait.
type Request interface {
	Message
	RequestAccess() Access
	RequestTimeoutMs() uint32
}

func (m *OpenRequest) RequestAccess() Access             { return m.Access }
func (m *OpenRequest) RequestTimeoutMs() uint32          { return m.TimeoutMs }
func (m *TurnRequest) RequestAccess() Access             { return m.Access }
func (m *TurnRequest) RequestTimeoutMs() uint32          { return m.TimeoutMs }
func (m *ListRequest) RequestAccess() Access             { return m.Access }
func (m *ListRequest) RequestTimeoutMs() uint32          { return m.TimeoutMs }
func (m *UpdateNamespacesRequest) RequestAccess() Access { return m.Access }
func (m *UpdateNamespacesRequest) RequestTimeoutMs() uint32 {
	return m.TimeoutMs
}
func (m *InvokeRequest) RequestAccess() Access    { return m.Access }
func (m *InvokeRequest) RequestTimeoutMs() uint32 { return m.TimeoutMs }
func (m *CloseRequest) RequestAccess() Access     { return m.Access }
func (m *CloseRequest) RequestTimeoutMs() uint32  { return m.TimeoutMs }

// Reply is a turn-protocol reply: each carries an optional error.
type Reply interface {
	Message
	ReplyError() *Error
}

func (m *OpenReply) ReplyError() *Error       { return m.Error }
func (m *ListReply) ReplyError() *Error       { return m.Error }
func (m *NamespacesReply) ReplyError() *Error { return m.Error }
func (m *AckReply) ReplyError() *Error        { return m.Error }
func (m *InvokeReply) ReplyError() *Error     { return m.Error }

// AccessOf is the wire form of an access context. The instant is not sent:
// the receiving node stamps its own.
func AccessOf(a authority.AccessContext) Access {
	return Access{Tenant: a.Tenant, Principal: a.Principal, Credential: a.CredentialProfile, TurnID: a.TurnID,
		Namespaces: a.EnabledNamespaces, Attributes: a.Attributes, Lease: a.LeaseID}
}

// Context is the access context a wire Access describes, at the instant now.
func (a Access) Context(now time.Time) authority.AccessContext {
	return authority.AccessContext{Tenant: a.Tenant, Principal: a.Principal, CredentialProfile: a.Credential,
		TurnID: a.TurnID, Now: now, EnabledNamespaces: a.Namespaces, Attributes: a.Attributes, LeaseID: a.Lease}
}
