package oauthtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Tool is one tool of the resource server: listed to tokens holding
// ListScope, run only for tokens holding CallScope too (else 403
// insufficient_scope naming it: step-up).
type Tool struct {
	Name      string
	ListScope string
	CallScope string
}

// ResourceServer is an MCP server (the official SDK's streamable HTTP
// handler) behind the SDK's bearer-token middleware, with its
// protected-resource metadata (RFC 9728) naming the authorization server.
// Each session's tools are those its token's scopes allow.
type ResourceServer struct {
	*httptest.Server
	// Calls counts tools/call requests that reached a tool.
	Calls atomic.Int64
	tools []Tool

	mu      sync.Mutex
	servers []*mcp.Server
}

// Close ends every MCP session (a client whose token was revoked cannot
// end its own), then the listener.
func (rs *ResourceServer) Close() {
	rs.CloseClientConnections()
	rs.mu.Lock()
	servers := rs.servers
	rs.mu.Unlock()
	for _, s := range servers {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	}
	rs.Server.Close()
}

// MCPPath is the MCP endpoint's path.
const MCPPath = "/mcp"

// NewResourceServer starts the resource server on loopback and registers
// its resource indicator with as.
func NewResourceServer(as *Server, tools []Tool) *ResourceServer {
	rs := &ResourceServer{tools: tools}
	mux := http.NewServeMux()
	rs.Server = httptest.NewUnstartedServer(mux)
	rs.Start()
	resource := rs.URL + MCPPath
	prmURL := rs.URL + "/.well-known/oauth-protected-resource" + MCPPath
	as.mu.Lock()
	as.Resources = append(as.Resources, resource)
	as.mu.Unlock()
	var scopes []string
	for _, t := range tools {
		for _, s := range []string{t.ListScope, t.CallScope} {
			if s != "" && !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	mux.Handle("GET /.well-known/oauth-protected-resource"+MCPPath, auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: resource, AuthorizationServers: []string{as.Issuer()}, ScopesSupported: scopes, BearerMethodsSupported: []string{"header"},
	}))
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return rs.serverFor(auth.TokenInfoFromContext(r.Context()))
	}, nil)
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return as.Verify(token, resource)
	}
	mux.Handle(MCPPath, auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prmURL})(rs.stepUp(prmURL, mcpHandler)))
	return rs
}

// serverFor builds the MCP server a session of ti's token sees.
func (rs *ResourceServer) serverFor(ti *auth.TokenInfo) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "oauthtest", Version: "1"}, nil)
	rs.mu.Lock()
	rs.servers = append(rs.servers, s)
	rs.mu.Unlock()
	for _, t := range rs.tools {
		if t.ListScope != "" && !slices.Contains(ti.Scopes, t.ListScope) {
			continue
		}
		s.AddTool(&mcp.Tool{Name: t.Name, InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				rs.Calls.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + t.Name + " as " + ti.UserID}}}, nil
			})
	}
	return s
}

// stepUp answers a tools/call of a tool whose CallScope the token lacks
// with 403 insufficient_scope (the MCP spec's step-up challenge).
func (rs *ResourceServer) stepUp(prmURL string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(b, &msg) == nil && msg.Method == "tools/call" {
				ti := auth.TokenInfoFromContext(r.Context())
				for _, t := range rs.tools {
					if t.Name == msg.Params.Name && t.CallScope != "" && !slices.Contains(ti.Scopes, t.CallScope) {
						w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q`,
							strings.Join(append(slices.Clone(ti.Scopes), t.CallScope), " "), prmURL))
						http.Error(w, "insufficient scope", http.StatusForbidden)
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
