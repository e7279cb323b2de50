package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
)

// Handler executes a tool in process.
type Handler func(ctx context.Context, call Call) (Result, error)

// MemoryTool is a definition with the handler that runs it.
type MemoryTool struct {
	Definition catalog.Definition
	Handler    Handler
}

type honoured struct {
	name    string
	handler Handler
}

// Memory is a programmable in-memory provider. Tests change its
// definitions between resolutions and count its calls. Every revision it
// has advertised stays executable (with the handler it was advertised
// with) until Retire — the way a definition that carries its executor
// behaves in process; Retire models a deployment that removed the old
// contract, after which calls pinned to it are refused capability_changed.
// Safe for concurrent use.
type Memory struct {
	id string

	mu       sync.Mutex
	current  []MemoryTool
	honoured map[string]honoured // by revision
	failWith error
	catalogs atomic.Int64
	invokes  atomic.Int64
	gate     chan struct{} // when set, Catalog waits for it
}

// NewMemory returns a provider with the given tools.
func NewMemory(id string, tools ...MemoryTool) *Memory {
	m := &Memory{id: id, honoured: map[string]honoured{}}
	m.Set(tools...)
	return m
}

// ID returns the provider id.
func (m *Memory) ID() string { return m.id }

// Set replaces what the next resolution sees. Revisions advertised before
// stay executable.
func (m *Memory) Set(tools ...MemoryTool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.current = append([]MemoryTool(nil), tools...)
	for _, t := range tools {
		if rev, err := revisionOf(m.id, t.Definition); err == nil {
			m.honoured[rev] = honoured{name: t.Definition.Name, handler: t.Handler}
		}
	}
}

// Retire stops honouring every revision of the named tool but its current one.
func (m *Memory) Retire(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	current := ""
	for _, t := range m.current {
		if t.Definition.Name == name {
			current, _ = revisionOf(m.id, t.Definition)
		}
	}
	for rev, h := range m.honoured {
		if h.name == name && rev != current {
			delete(m.honoured, rev)
		}
	}
}

// FailWith makes Catalog fail with err (nil restores it).
func (m *Memory) FailWith(err error) {
	m.mu.Lock()
	m.failWith = err
	m.mu.Unlock()
}

// Gate makes Catalog wait until the returned release func is called (tests
// of concurrent first operations).
func (m *Memory) Gate() (release func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.gate = ch
	m.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// CatalogCalls is how many times Catalog was called.
func (m *Memory) CatalogCalls() int64 { return m.catalogs.Load() }

// InvokeCalls is how many times Invoke was called.
func (m *Memory) InvokeCalls() int64 { return m.invokes.Load() }

// Catalog returns the current definitions.
func (m *Memory) Catalog(ctx context.Context, _ authority.AccessContext) (Catalog, error) {
	m.catalogs.Add(1)
	m.mu.Lock()
	gate, fail := m.gate, m.failWith
	defs := make([]catalog.Definition, len(m.current))
	for i, t := range m.current {
		defs[i] = t.Definition
	}
	m.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return Catalog{}, ctx.Err()
		}
	}
	if fail != nil {
		return Catalog{}, fail
	}
	return Catalog{Definitions: defs, Freshness: Freshness{Scope: "principal"}}, nil
}

// Invoke runs the handler advertised with call.Revision.
func (m *Memory) Invoke(ctx context.Context, call Call) (Result, error) {
	m.invokes.Add(1)
	m.mu.Lock()
	h, ok := m.honoured[call.Revision]
	m.mu.Unlock()
	if !ok {
		return Result{}, reason.New(reason.CapabilityChanged, "%s: revision %.12s is no longer offered", call.Tool, call.Revision)
	}
	if h.handler == nil {
		return Result{Text: fmt.Sprintf("%s ok", call.Tool.Name)}, nil
	}
	return h.handler(ctx, call)
}

// HeldHandler is a handler for tests of calls in flight: it counts its
// runs in runs and answers result(run) (runs counted from 1) once release
// is closed, or fails with the call context's error if that ends first.
func HeldHandler(release <-chan struct{}, runs *atomic.Int32, result func(run int32) Result) Handler {
	return func(ctx context.Context, _ Call) (Result, error) {
		n := runs.Add(1)
		select {
		case <-release:
			return result(n), nil
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
}

// EchoHandler returns the arguments as the structured result.
func EchoHandler(_ context.Context, call Call) (Result, error) {
	return Result{Text: string(call.Arguments), Structured: json.RawMessage(call.Arguments)}, nil
}
