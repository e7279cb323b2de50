package messages

// OpToken mints an execution token for the MCP front (docs/protocol.md,
// "Execution tokens"): the turn's lease holder asks the turn's node.
const OpToken Op = "token"

// TokenRequest asks for an execution token for the open turn Access names
// (its lease included). TTLMs is the token's lifetime (0: the node's
// default, 10 minutes; at most an hour).
type TokenRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	TTLMs     uint32 `msgpack:"ttl_ms,omitempty"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
}

// TokenReply answers token: the token, the MCP endpoint it is for (its
// audience), and what it binds.
type TokenReply struct {
	V           int    `msgpack:"v"`
	Error       *Error `msgpack:"error,omitempty"`
	Token       string `msgpack:"token,omitempty"`
	URL         string `msgpack:"url,omitempty"`
	TokenID     string `msgpack:"token_id,omitempty"`
	CatalogHash string `msgpack:"catalog_hash,omitempty"`
	// ExpiresMs is the token's expiry, Unix milliseconds.
	ExpiresMs int64 `msgpack:"expires_ms,omitempty"`
}

func (m *TokenRequest) version() int             { return m.V }
func (m *TokenReply) version() int               { return m.V }
func (m *TokenRequest) RequestAccess() Access    { return m.Access }
func (m *TokenRequest) RequestTimeoutMs() uint32 { return m.TimeoutMs }
func (m *TokenReply) ReplyError() *Error         { return m.Error }
