package mcpfront

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

// Version is the implementation version the front reports.
const Version = "0.1.0"

// Meta keys on results.
const (
	MetaCatalogHash = "io.sharedos/catalogHash"
	MetaCallID      = "io.sharedos/callId"
	// MetaDegraded, on a listing, names the providers the turn's
	// resolution did not get whole (a []Degraded): absent when it got
	// every one.
	MetaDegraded = "io.sharedos/degraded"
	// MetaApproval, on a tools/call's _meta, names the approval the call
	// runs on (a string: the request id an approval_required result
	// carried). It is optional: the same call made again in its turn with
	// the same argument bytes finds its approval without it.
	MetaApproval = "io.sharedos/approval"
)

// Degraded is one provider the turn's resolution did not get whole:
// status "failed" (none of its tools; code the failure's class) or
// "partial" (message lists the tools it refused, each with its reason).
type Degraded struct {
	Provider string `json:"provider"`
	Status   string `json:"status"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Versions are the protocol revisions the front offers (server/discover)
// and negotiates (initialize), newest first: exactly those its tests run
// every client at. A request at another revision is refused 400 by the
// SDK's handler; an initialize asking for one is answered 2025-11-25.
func Versions() []string { return slices.Clone(fastVersions[:]) }

// CodeRefused is the JSON-RPC error code of a listing the turn refused
// (turn closed, not found, ...); its data is {code, message}.
const CodeRefused = -32000

// newServer is the turn's mcp.Server. Its tools are not registered on it:
// tools/list and tools/call are answered by the turn itself, through the
// kernel, so what a listing shows follows live authority and namespaces
// at its instant, and every call is decided by the turn actor.
func (f *Front) newServer(e *turnEntry) *mcp.Server {
	s := mcp.NewServer(implementation, &mcp.ServerOptions{
		// tools, and nothing else; listChanged false: the turn pins its
		// catalogue (ADR 0026), so the list never changes under a client.
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}},
		Instructions:              "Tools of one SharedOS turn. Every call is checked against the turn's live grants.",
		Logger:                    f.opts.Logger,
		SupportedProtocolVersions: fastVersions[:],
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				return f.traced(ctx, e, method, req, func(ctx context.Context) (mcp.Result, error) { return f.list(ctx, e, req.(*mcp.ListToolsRequest)) })
			case "tools/call":
				return f.traced(ctx, e, method, req, func(ctx context.Context) (mcp.Result, error) { return f.call(ctx, e, req.(*mcp.CallToolRequest)) })
			case "prompts/list", "prompts/get", "resources/list", "resources/read", "resources/templates/list",
				"resources/subscribe", "resources/unsubscribe", "completion/complete", "logging/setLevel":
				// Capabilities this server does not declare.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + method}
			}
			return next(ctx, method, req)
		}
	})
	return s
}

func (f *Front) list(ctx context.Context, e *turnEntry, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	access, err := f.tokenAccess(e, extraToken(req.Extra))
	if err != nil {
		return nil, refusedError(err)
	}
	page := actors.ListPage{MaxTools: f.opts.PageSize}
	if req.Params != nil {
		page.After = req.Params.Cursor
	}
	l, err := f.k.ListToolsPage(ctx, access, page)
	if err != nil {
		f.noteRefusal(e, err)
		if reason.Of(err) == reason.InvalidRequest && page.After != "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor: " + err.Error()}
		}
		return nil, refusedError(err)
	}
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, len(l.Tools)), NextCursor: l.NextCursor}
	res.Meta = mcp.Meta{MetaCatalogHash: l.CatalogHash}
	if len(l.Degraded) > 0 {
		d := make([]Degraded, len(l.Degraded))
		for i, st := range l.Degraded {
			d[i] = Degraded{Provider: st.Provider, Status: st.Status, Code: st.Reason, Message: st.Error}
		}
		res.Meta[MetaDegraded] = d
	}
	res.TTLMs = int(max(f.opts.ListTTL, 0).Milliseconds())
	res.CacheScope = "private" // one token's view: never shared
	for i, t := range l.Tools {
		mt := &mcp.Tool{Name: t.Alias, Title: t.Title, Description: t.Description, InputSchema: json.RawMessage(t.InputSchema)}
		if len(t.Icons) > 0 {
			_ = json.Unmarshal(t.Icons, &mt.Icons) // canonical JSON the catalogue checked
		}
		if len(t.OutputSchema) > 0 {
			mt.OutputSchema = json.RawMessage(t.OutputSchema)
		}
		if len(t.Annotations) > 0 {
			var a mcp.ToolAnnotations
			if json.Unmarshal(t.Annotations, &a) == nil {
				mt.Annotations = &a
			}
		}
		res.Tools[i] = mt
	}
	return res, nil
}

func (f *Front) call(ctx context.Context, e *turnEntry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	approval, _ := req.Params.GetMeta()[MetaApproval].(string)
	res, err := f.callTool(ctx, e, extraToken(req.Extra), req.Params.Name, req.Params.Arguments, approval)
	if err == nil && needsResultType(requestVersion(req)) {
		markComplete(res)
	}
	return res, err
}

// requestVersion is the protocol revision req is served at: its
// MCP-Protocol-Version header (the stateless handler admits a request
// only at a version it serves), else what the session negotiated.
func requestVersion(req *mcp.CallToolRequest) string {
	if req.Extra != nil && req.Extra.Header != nil {
		if v := req.Extra.Header.Get("Mcp-Protocol-Version"); v != "" {
			return v
		}
	}
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil {
			return p.ProtocolVersion
		}
	}
	return ""
}

// callTool is a tools/call of name with arguments by the bearer of the
// verified token ti: call's work, for the SDK's path and the fast path.
func (f *Front) callTool(ctx context.Context, e *turnEntry, ti *auth.TokenInfo, name string, arguments json.RawMessage, approval string) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	access, err := f.tokenAccess(e, ti)
	if err != nil {
		return refusal(err), nil
	}
	args := []byte(arguments)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	res, err := f.k.InvokeWith(ctx, access, name, args, actors.CallOptions{Approval: approval})
	if err != nil {
		f.noteRefusal(e, err)
		if reason.Of(err) == reason.UnknownTool {
			// A name this turn never showed: a protocol error, as for any
			// MCP server asked for a tool it does not have.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
		}
		return refusal(err), nil
	}
	out := &mcp.CallToolResult{IsError: res.Result.IsError, Meta: mcp.Meta{MetaCatalogHash: res.CatalogHash, MetaCallID: res.CallID}}
	if len(res.Result.Structured) > 0 {
		out.StructuredContent = json.RawMessage(res.Result.Structured)
	}
	if out.Content, err = callContent(&res.Result); err != nil {
		return refusal(reason.New(reason.ProviderError, "%s: %v", name, err)), nil
	}
	return out, nil
}

// Refusal is the structuredContent of a refused or failed call.
type Refusal struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	CallID       string `json:"callId,omitempty"`
	CatalogHash  string `json:"catalogHash,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
	// Dispatched says whether the call reached its provider (absent when
	// the node cannot tell).
	Dispatched *bool `json:"dispatched,omitempty"`
	// Approval, on approval_required and approval_denied, is the approval
	// request: once an approver approves it, the same call (or one naming
	// it in _meta MetaApproval) runs once.
	Approval *ApprovalRequest `json:"approval,omitempty"`
}

// ApprovalRequest is what an approver is asked to approve: exactly one
// call of this turn.
type ApprovalRequest struct {
	ID          string    `json:"id"`
	Status      string    `json:"status"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Provider    string    `json:"provider"`
	Tool        string    `json:"tool"`
	Revision    string    `json:"revision"`
	ArgsHash    string    `json:"argsSha256"`
	Principal   string    `json:"principal"`
	Turn        string    `json:"turn"`
	CatalogHash string    `json:"catalogHash"`
	DecidedBy   string    `json:"decidedBy,omitempty"`
	Reason      string    `json:"reason,omitempty"`
}

// refusal is a call the turn refused or that failed: an MCP tool error
// whose structuredContent carries the reason code and message.
func refusal(err error) *mcp.CallToolResult {
	r := Refusal{Code: string(reason.Of(err)), Message: err.Error()}
	var re *reason.Error
	if errors.As(err, &re) {
		r.Message = re.Message
		r.RetryAfterMs = re.RetryAfter.Milliseconds()
	}
	var ce *actors.CallError
	if errors.As(err, &ce) {
		r.CallID, r.CatalogHash = ce.CallID, ce.CatalogHash
		if ce.Dispatch != actors.DispatchUnknown {
			d := ce.Dispatch == actors.Dispatched
			r.Dispatched = &d
		}
		if a := ce.Approval; a != nil {
			r.Approval = &ApprovalRequest{ID: a.ID, Status: string(a.Status), ExpiresAt: a.ExpiresAt, Provider: a.Provider, Tool: a.Tool,
				Revision: a.Revision, ArgsHash: a.ArgsHash, Principal: a.Principal, Turn: a.Turn, CatalogHash: a.CatalogHash,
				DecidedBy: a.DecidedBy, Reason: a.Reason}
		}
	}
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: r.Code + ": " + r.Message}},
		StructuredContent: r,
	}
}

// refusedError is a refused listing as a JSON-RPC error.
func refusedError(err error) error {
	return &jsonrpc.Error{Code: CodeRefused, Message: err.Error(), Data: mustJSON(map[string]string{"code": string(reason.Of(err)), "message": err.Error()})}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// noteRefusal takes the turn's entry out when the kernel says the turn
// closed: its tokens are refused 403 from the next request on.
func (f *Front) noteRefusal(e *turnEntry, err error) {
	if reason.Of(err) == reason.TurnClosed {
		f.dropEntry(e)
	}
}

// extraToken is the verified token a request carries (nil: none).
func extraToken(extra *mcp.RequestExtra) *auth.TokenInfo {
	if extra == nil {
		return nil
	}
	return extra.TokenInfo
}

// tokenAccess is the access the request's token ti operates the turn with.
func (f *Front) tokenAccess(e *turnEntry, ti *auth.TokenInfo) (authority.AccessContext, error) {
	var c *Claims
	if ti != nil {
		c, _ = ti.Extra["claims"].(*Claims)
	}
	if c == nil {
		return authority.AccessContext{}, reason.New(reason.Internal, "no verified token on the request")
	}
	f.mu.RLock()
	m, ok := e.tokens[c.ID]
	f.mu.RUnlock()
	if !ok {
		return authority.AccessContext{}, reason.New(reason.TurnNotFound, "token %s is not issued for turn %s", c.ID, c.Turn)
	}
	return m.access, nil
}
