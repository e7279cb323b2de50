package messages

// The provider protocol: how a node reaches a provider over NATS. Two
// requests, on subjects under the prefix:
//
//	<prefix>.provider.<provider id>.catalog   ProviderCatalogRequest → ProviderCatalogReply
//	<prefix>.provider.<provider id>.invoke    ProviderInvokeRequest  → ProviderInvokeReply
//
// Instances of one provider share the queue group ProviderQueueGroup(id).

// ProviderCatalogSubject is where a provider answers catalogue requests.
func ProviderCatalogSubject(prefix, provider string) string {
	return prefix + ".provider." + provider + ".catalog"
}

// ProviderInvokeSubject is where a provider executes its tools.
func ProviderInvokeSubject(prefix, provider string) string {
	return prefix + ".provider." + provider + ".invoke"
}

// ProviderInstanceSubject is where one instance of a provider — the one
// a node hosts, named by the node — also answers op ("catalog" or
// "invoke"), outside the queue group: the hosting node asks its own
// instance first, so another node's instance being slow, paused or gone
// never stalls its turns.
func ProviderInstanceSubject(prefix, provider, instance, op string) string {
	return prefix + ".provider." + provider + ".at." + instance + "." + op
}

// ProviderQueueGroup is the queue group a provider's instances share.
func ProviderQueueGroup(provider string) string { return "sharedos-provider-" + provider }

// ProviderCatalogRequest asks for the tools offered to an access context.
// A catalogue comes in pages: the first request has no Cursor; each reply
// with a NextCursor is followed by a request carrying it, until a reply
// has none.
type ProviderCatalogRequest struct {
	V         int    `msgpack:"v"`
	Access    Access `msgpack:"access"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
	// Cursor is the NextCursor of the previous page; empty for the first.
	Cursor string `msgpack:"cursor,omitempty"`
}

// MaxCursorBytes bounds a catalogue cursor; a node refuses a longer
// NextCursor (provider_error).
const MaxCursorBytes = 1024

// ProviderTool is one tool a provider offers. Schemas and annotations are
// JSON documents. Revision is the provider's own token for this exact
// contract: opaque to the node, sent back on invoke, and changed by the
// provider whenever the contract changes (the Go SDK uses the SHA-256 of
// the canonical contract).
type ProviderTool struct {
	Name         string `msgpack:"name"`
	Namespace    string `msgpack:"namespace,omitempty"`
	Description  string `msgpack:"description"`
	InputSchema  []byte `msgpack:"input_schema"`
	OutputSchema []byte `msgpack:"output_schema,omitempty"`
	Annotations  []byte `msgpack:"annotations,omitempty"`
	Capability   string `msgpack:"capability"`
	Requirement  string `msgpack:"requirement"`
	Revision     string `msgpack:"revision"`
	// Title (hashed into the node's revision) and Icons (a JSON array;
	// display only), both optional.
	Title string `msgpack:"title,omitempty"`
	Icons []byte `msgpack:"icons,omitempty"`
}

// ProviderCatalogReply answers ProviderCatalogRequest.
type ProviderCatalogReply struct {
	V     int            `msgpack:"v"`
	Error *Error         `msgpack:"error,omitempty"`
	Tools []ProviderTool `msgpack:"tools,omitempty"`
	// TTLMs: how long the provider keeps honouring these revisions (ms).
	TTLMs uint32 `msgpack:"ttl_ms,omitempty"`
	// Scope: "principal" (default), "tenant" or "global".
	Scope string `msgpack:"scope,omitempty"`
	// NextCursor, when set, names the next page of the same catalogue.
	NextCursor string `msgpack:"next_cursor,omitempty"`
}

// ProviderInvokeRequest executes one tool at the revision a turn pinned.
type ProviderInvokeRequest struct {
	V        int    `msgpack:"v"`
	Access   Access `msgpack:"access"`
	CallID   string `msgpack:"call"`
	Tool     string `msgpack:"tool"`
	Revision string `msgpack:"revision"`
	Args     []byte `msgpack:"args,omitempty"`
	// Resource is the resource the node resolved from the arguments and
	// authorized against the principal's grants.
	Resource  string `msgpack:"resource,omitempty"`
	TimeoutMs uint32 `msgpack:"timeout_ms,omitempty"`
	// The execution grant (docs/protocol.md, "Execution grants"): Grant is
	// the RFC 8785 canonical JSON of the grant object the node decided,
	// GrantSig the Ed25519 signature over exactly those bytes, GrantKey the
	// id of the signing key (hex of the first 16 bytes of the SHA-256 of
	// the 32-byte public key). A provider verifies the signature over the
	// raw bytes, then every field of the grant against this request.
	Grant    []byte `msgpack:"grant,omitempty"`
	GrantSig []byte `msgpack:"grant_sig,omitempty"`
	GrantKey string `msgpack:"grant_key,omitempty"`
}

// ProviderInvokeReply answers ProviderInvokeRequest. Error is set when the
// provider did not run the tool (capability_changed, provider_error, …);
// IsError when the tool ran and reports failure.
type ProviderInvokeReply struct {
	V          int    `msgpack:"v"`
	Error      *Error `msgpack:"error,omitempty"`
	Text       string `msgpack:"text,omitempty"`
	Structured []byte `msgpack:"structured,omitempty"`
	IsError    bool   `msgpack:"is_error,omitempty"`
	// Content, when present, is the result's content blocks and Text is
	// empty (InvokeReply.Content).
	Content []Content `msgpack:"content,omitempty"`
}

func (m *ProviderCatalogRequest) version() int { return m.V }
func (m *ProviderCatalogReply) version() int   { return m.V }
func (m *ProviderInvokeRequest) version() int  { return m.V }
func (m *ProviderInvokeReply) version() int    { return m.V }
