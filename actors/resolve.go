package actors

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// maxToolsPerProvider bounds one provider's catalogue (every page of it);
// beyond it the answer is refused as malformed rather than truncated.
const maxToolsPerProvider = providers.MaxCatalogTools

// resolve derives a turn's catalogue and authority: every provider is asked
// once, concurrently, each within ResolveTimeout. A provider that fails is
// recorded with its failure class and its tools are absent — unless it is
// required, in which case the whole resolution fails with that class. It
// runs off the turn's mailbox and touches no turn state.
//
// It returns by ResolveTimeout (plus resolveGrace) whatever the ports do:
// a provider or authority source that ignores its context is abandoned
// (its goroutine ends when it returns) and classified provider_timeout,
// so a turn never stays resolving.
func resolve(ctx context.Context, sh *shared, access authority.AccessContext) turn.Resolution {
	type answer struct {
		tools  []*catalog.Tool
		status audit.ProviderStatus
	}
	set := sh.provs.Load()
	answers := make([]answer, len(set.order))
	var wg sync.WaitGroup
	for i, id := range set.order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tools, st := resolveProvider(ctx, sh, set.byID[id], access)
			answers[i] = answer{tools, st}
		}()
	}
	// The authority source, while the providers answer.
	actx, cancel := context.WithTimeout(ctx, sh.opts.ResolveTimeout)
	auth, err := bounded(actx, func(c context.Context) (authority.Authority, error) {
		return sh.opts.Authority.Resolve(c, access)
	})
	cancel()
	wg.Wait()
	if err != nil {
		code := reason.Internal
		if errors.Is(err, context.DeadlineExceeded) {
			code = reason.ProviderTimeout
		}
		return turn.Resolution{Err: reason.New(code, "resolving authority: %v", err)}
	}

	res := turn.Resolution{Authority: auth, Providers: make([]audit.ProviderStatus, len(answers))}
	var all []*catalog.Tool
	for i, a := range answers {
		res.Providers[i] = a.status
		if a.status.Status == "failed" && set.required[a.status.Provider] && res.Err == nil {
			res.Err = reason.New(reason.Code(a.status.Reason), "required provider %s: %s", a.status.Provider, a.status.Error)
		}
		all = append(all, a.tools...)
	}
	if res.Err != nil {
		return res
	}
	reg, err := catalog.Build(all)
	if err != nil {
		res.Err = reason.New(reason.Internal, "building registry: %v", err)
		return res
	}
	res.Registry = sh.registries.share(reg)
	return res
}

// registryIntern shares held catalogues between turns that resolved the
// same one: content-addressed by catalogHash (which covers every tool's
// whole contract and alias), never by who asked, so it cannot hand one
// principal's catalogue to another the way the context-keyed cache ADR
// 0026 rejects would; a turn holds exactly what it resolved, in one copy
// instead of one per turn. It holds registries weakly: a catalogue no turn
// holds any more is collected and forgotten. Safe for concurrent use.
type registryIntern struct {
	mu sync.RWMutex
	m  map[string]weak.Pointer[catalog.Registry]
}

func newRegistryIntern() *registryIntern {
	return &registryIntern{m: map[string]weak.Pointer[catalog.Registry]{}}
}

// share returns the registry held under r's catalogHash if it is the same
// catalogue as r (the same tools, aliases, revisions and provider revision
// tokens), and otherwise r, which it remembers.
//
// A hit — every turn after the first to resolve a catalogue — takes the
// lock for reading only and compares outside it: turns opening at once
// do not queue behind each other's comparisons.
func (in *registryIntern) share(r *catalog.Registry) *catalog.Registry {
	key := r.Hash()
	in.mu.RLock()
	held := in.m[key].Value()
	in.mu.RUnlock()
	if held != nil && sameRegistry(held, r) {
		return held
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if cur := in.m[key].Value(); cur != nil && cur != held && sameRegistry(cur, r) {
		return cur // another turn put it there meanwhile
	}
	wp := weak.Make(r)
	in.m[key] = wp
	runtime.AddCleanup(r, func(key string) {
		in.mu.Lock()
		if cur, ok := in.m[key]; ok && cur.Value() == nil {
			delete(in.m, key)
		}
		in.mu.Unlock()
	}, key)
	return r
}

// len is the number of registries held by some turn.
func (in *registryIntern) len() int {
	in.mu.RLock()
	defer in.mu.RUnlock()
	n := 0
	for _, wp := range in.m {
		if wp.Value() != nil {
			n++
		}
	}
	return n
}

// sameRegistry compares what catalogHash does not cover: the providers'
// own revision tokens, sent back on invoke.
func sameRegistry(a, b *catalog.Registry) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i := range a.Len() {
		ta, aa := a.At(i)
		tb, ab := b.At(i)
		if aa != ab || ta.Identity != tb.Identity || ta.Revision != tb.Revision || ta.Token != tb.Token {
			return false
		}
	}
	return true
}

func resolveProvider(ctx context.Context, sh *shared, p providers.ContextToolProvider, access authority.AccessContext) ([]*catalog.Tool, audit.ProviderStatus) {
	st := audit.ProviderStatus{Provider: p.ID(), Status: "ok"}
	ctx, cancel := context.WithTimeout(ctx, sh.opts.ResolveTimeout)
	defer cancel()
	start := time.Now()
	cat, err := bounded(ctx, func(c context.Context) (providers.Catalog, error) { return askCatalog(c, p, access) })
	st.DurationMicros = time.Since(start).Microseconds()
	if err == nil && len(cat.Definitions) > maxToolsPerProvider {
		err = reason.New(reason.ProviderError, "%d definitions; limit %d", len(cat.Definitions), maxToolsPerProvider)
	}
	if err != nil {
		st.Status, st.Reason, st.Error = "failed", string(providers.Classify(err)), truncate(err.Error(), 512)
		// Recorded in tool.catalog.resolved; the provider's own state
		// changes are logged once each where it is reached (Remote).
		sh.log.Debug("provider catalogue failed", "provider", p.ID(), "reason", st.Reason, "err", err)
		return nil, st
	}
	tools := make([]*catalog.Tool, 0, len(cat.Definitions))
	for _, r := range cat.Refused[:min(len(cat.Refused), 64)] { // the provider's own refusals
		st.Refused = append(st.Refused, truncate(r, 256))
	}
	seen := make(map[string]bool, len(cat.Definitions))
	for _, d := range cat.Definitions {
		if seen[d.Name] {
			st.Refused = append(st.Refused, truncate(d.Name, 128)+": listed twice")
			continue
		}
		seen[d.Name] = true
		t, err := sh.normalizer.Normalize(p.ID(), d)
		if err != nil {
			st.Refused = append(st.Refused, truncate(err.Error(), 256))
			continue
		}
		tools = append(tools, t)
	}
	if g := sh.opts.Contracts; g != nil && !sh.opts.Switches.NoContractBaselines {
		var drift []contract.Drifted
		tools, drift = g.Admit(ctx, access.Tenant, p.ID(), tools)
		// The record names at most maxDriftRecorded drifted tools (a
		// provider's first resolution adopts every tool as new); every
		// held one is listed in Refused and PendingReview.
		for i, d := range drift {
			if i < maxDriftRecorded {
				cs := make([]string, len(d.Classes))
				for i, c := range d.Classes {
					cs[i] = string(c)
				}
				st.Drift = append(st.Drift, audit.ContractDrift{Tool: d.Tool, Revision: d.Revision, Decision: string(d.Decision), Classes: cs, Accepted: d.Accepted})
			}
			if d.Held() {
				st.Refused = append(st.Refused, truncate(heldLine(d), 256))
			}
			if d.Decision == contract.PendingReview {
				st.PendingReview = append(st.PendingReview, d.Tool)
			}
		}
	}
	if len(st.Refused) > 0 {
		st.Status = "partial"
	}
	st.Tools = len(tools)
	return tools, st
}

// resolveGrace is how long past its context's deadline a port may take to
// return before it is abandoned.
const resolveGrace = 100 * time.Millisecond

// bounded runs f and returns its answer, or ctx's error once ctx is done
// and f has not returned within resolveGrace: a port that ignores its
// context cannot hold a turn in resolving.
func bounded[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
	}
	t := time.NewTimer(resolveGrace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, fmt.Errorf("abandoned %v after its deadline: %w", resolveGrace, ctx.Err())
	}
}

// askCatalog calls the provider, turning a panic into a provider error.
func askCatalog(ctx context.Context, p providers.ContextToolProvider, access authority.AccessContext) (cat providers.Catalog, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = reason.New(reason.ProviderError, "provider %s panicked: %v", p.ID(), r)
		}
	}()
	return p.Catalog(ctx, access)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// maxDriftRecorded bounds the drifted tools one provider's status names.
const maxDriftRecorded = 256

// heldLine says why a drifted tool is out of the turn, as a degraded
// report lists it: "search: pending_review (description_changed)".
func heldLine(d contract.Drifted) string {
	line := d.Tool + ": " + string(d.Decision)
	if len(d.Classes) > 0 {
		cs := make([]string, len(d.Classes))
		for i, c := range d.Classes {
			cs[i] = string(c)
		}
		line += " (" + strings.Join(cs, ",") + ")"
	}
	if d.Detail != "" {
		line += ": " + d.Detail
	}
	return line
}
