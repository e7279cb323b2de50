package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/config"
)

// ViewOptions configure a View.
type ViewOptions struct {
	// MaxStaleness bounds how long the view may go unconfirmed before
	// decisions on it are refused policy_stale (authority.Live). Required.
	MaxStaleness time.Duration
	// OnChange is called, from the view's goroutine, for each change the
	// view takes (not for the initial values), before the change is in
	// Live and before WaitFor's waiters for it wake; Document already
	// holds it.
	OnChange func(Entry, Op)
	// Approvals, when set, is kept equal to the bucket's approval rules
	// (approvals.<tenant>.<name>), replaced whole at each change.
	Approvals *approval.Live
	Logger    *slog.Logger
}

// View is a node's live copy of the store: it watches the bucket (pushed
// changes, no polling) and keeps Live — the grants and credential
// bindings the kernel judges every decision against — equal to what the
// bucket holds.
//
// Freshness: a view that has stopped hearing changes (cut off from the
// bucket's leader) cannot tell from silence that nothing changed, so it
// asks the leader, every quarter of MaxStaleness, for the bucket's last
// revision; once the view has applied that revision it confirms Live as
// current at the instant the question was sent. A view that cannot get
// an answer, or does not catch up, is stale MaxStaleness after its last
// confirmation, and decisions on it are refused.
type View struct {
	store *Store
	live  *authority.Live
	opts  ViewOptions
	w     jetstream.KeyWatcher

	mu    sync.Mutex
	items map[Key]Entry
	// seen is the latest revision taken from the watch; applied the
	// latest that Live holds.
	seen, applied uint64
	pending       []probe
	waiters       []waiter
	bad           map[Key]error

	ready  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

type probe struct {
	last uint64
	sent time.Time
}

type waiter struct {
	rev uint64
	ch  chan struct{}
}

// Watch starts a view of s that keeps live current, and returns once the
// view holds everything the bucket held when it started (or ctx ends).
// live is replaced with the bucket's grants and bindings.
func (s *Store) Watch(ctx context.Context, live *authority.Live, opts ViewOptions) (*View, error) {
	if opts.MaxStaleness <= 0 {
		return nil, errors.New("policy: ViewOptions.MaxStaleness is required")
	}
	if opts.Logger == nil {
		opts.Logger = s.opts.Logger
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := s.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("policy: watch: %w", err)
	}
	v := &View{store: s, live: live, opts: opts, w: w, items: map[Key]Entry{}, bad: map[Key]error{},
		ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	live.SetMaxStaleness(opts.MaxStaleness)
	go v.run(wctx)
	select {
	case <-v.ready:
	case <-ctx.Done():
		v.Stop()
		return nil, fmt.Errorf("policy: watch: the initial values did not arrive: %w", ctx.Err())
	}
	if err := v.Err(); err != nil {
		v.Stop()
		return nil, err
	}
	// Confirmed before it is used: a view is current from its start.
	if err := v.confirm(ctx); err != nil {
		v.Stop()
		return nil, fmt.Errorf("policy: the bucket's leader did not confirm the view: %w", err)
	}
	return v, nil
}

// Stop ends the view; idempotent, and returns once its goroutines have.
func (v *View) Stop() {
	v.cancel()
	<-v.done
}

func (v *View) run(ctx context.Context) {
	defer close(v.done)
	defer func() { _ = v.w.Stop() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-v.w.Updates():
			if !ok {
				v.opts.Logger.Error("policy: the bucket's watch ended; decisions turn policy_stale after policy.max_staleness")
				return
			}
			if e == nil {
				v.apply()
				if initial {
					initial = false
					close(v.ready)
					wg.Go(func() { v.probeLoop(ctx) })
				}
				continue
			}
			en, op := v.take(e)
			if !initial {
				// OnChange first: a waiter for this revision (WaitFor)
				// wakes once all of it is in effect.
				if v.opts.OnChange != nil && op != "" {
					v.opts.OnChange(en, op)
				}
				v.apply()
			}
		}
	}
}

// take records one update; it returns the entry and what it did ("" for
// nothing the view keeps).
func (v *View) take(e jetstream.KeyValueEntry) (Entry, Op) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen = max(v.seen, e.Revision())
	k, err := ParseKey(e.Key())
	if err != nil {
		v.opts.Logger.Warn("policy: a key the node does not read; ignored", "key", e.Key(), "err", err)
		return Entry{}, ""
	}
	if e.Operation() != jetstream.KeyValuePut {
		_, had := v.items[k]
		delete(v.items, k)
		delete(v.bad, k)
		if !had {
			return Entry{}, ""
		}
		return Entry{Key: k, Revision: e.Revision()}, Remove
	}
	en, err := decodeEntry(e)
	if err != nil {
		// Fail closed: an unreadable value holds no policy (a principal's
		// grants are gone until the key is written again).
		v.opts.Logger.Error("policy: an unreadable value; the key holds nothing until it is written again", "key", k, "revision", e.Revision(), "err", err)
		delete(v.items, k)
		v.bad[k] = err
		return Entry{Key: k, Revision: e.Revision()}, Remove
	}
	_, had := v.items[k]
	v.items[k] = en
	delete(v.bad, k)
	if had {
		return en, Change
	}
	return en, Add
}

// apply makes Live hold the view's grants and bindings (and
// ViewOptions.Approvals its approval rules), then confirms
// the probes and wakes the waiters the view's revision satisfies.
func (v *View) apply() {
	v.mu.Lock()
	defer v.mu.Unlock()
	items := make(map[Key][]byte, len(v.items))
	for k, e := range v.items {
		if k.Kind == Grants || k.Kind == Credentials || k.Kind == Approvals {
			items[k] = e.Value
		}
	}
	d, err := DocumentOf(items)
	if err == nil && v.opts.Approvals != nil {
		// Each rule was validated as it was read; rules never conflict
		// with one another (one key per tenant and name).
		err = v.opts.Approvals.Replace(config.ApprovalSpecs(d.Approvals))
	}
	if err == nil {
		grants := make(map[[2]string][]authority.GrantSpec, len(d.Principals))
		for _, p := range d.Principals {
			grants[[2]string{p.Tenant, p.Principal}] = p.Grants
		}
		bs := make([]authority.CredentialBinding, len(d.CredentialProfiles))
		for i, c := range d.CredentialProfiles {
			bs[i] = authority.CredentialBinding{Tenant: c.Tenant, Profile: c.Profile, Principals: c.Principals}
		}
		err = v.live.Replace(grants, bs)
	}
	if err != nil {
		// Values are validated one by one as they are read; a set that
		// does not compile together keeps the previous policy, and the
		// view stops confirming it, so decisions turn stale.
		v.opts.Logger.Error("policy: the bucket's grants and bindings do not compile together; keeping the previous ones", "revision", v.seen, "err", err)
		return
	}
	v.applied = v.seen
	keep := v.pending[:0]
	for _, p := range v.pending {
		if p.last <= v.applied {
			v.live.Confirm(p.sent)
		} else {
			keep = append(keep, p)
		}
	}
	v.pending = keep
	ws := v.waiters[:0]
	for _, w := range v.waiters {
		if w.rev <= v.applied {
			close(w.ch)
		} else {
			ws = append(ws, w)
		}
	}
	v.waiters = ws
}

// probeLoop confirms the view every quarter of MaxStaleness.
func (v *View) probeLoop(ctx context.Context) {
	every := v.probeEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, every)
		if err := v.confirm(qctx); err != nil && ctx.Err() == nil {
			v.opts.Logger.Debug("policy: the bucket's leader did not answer", "err", err)
		}
		cancel()
	}
}

func (v *View) probeEvery() time.Duration { return max(v.opts.MaxStaleness/4, 10*time.Millisecond) }

// confirm asks the bucket's leader for its last revision and confirms Live
// as current at the instant the leader last had a majority of the
// bucket's replicas with it — the instant it asked, less how long ago the
// majority's last member was heard — at once when the view has applied
// that revision, else when it does (apply). A leader cut off from its
// followers keeps answering as leader (its stream takes no writes, but it
// does not know that); its followers' ages show it, and a leader without
// a majority heard recently confirms nothing.
func (v *View) confirm(ctx context.Context) error {
	sent := time.Now()
	st, err := v.store.js.Stream(ctx, v.store.Stream())
	if err != nil {
		return err
	}
	ci := st.CachedInfo()
	if c := ci.Cluster; c != nil && len(c.Replicas) > 0 {
		if c.Leader == "" {
			return errors.New("policy: the bucket has no leader")
		}
		var heard []time.Duration
		for _, r := range c.Replicas {
			if r.Current && !r.Offline {
				heard = append(heard, r.Active)
			}
		}
		// A majority of the 1+len(Replicas) peers: the leader and
		// (len+1)/2 followers.
		need := (len(c.Replicas) + 1) / 2
		if len(heard) < need {
			return fmt.Errorf("policy: the bucket's leader has %d of its %d followers current, fewer than a majority needs", len(heard), len(c.Replicas))
		}
		slices.Sort(heard)
		sent = sent.Add(-heard[need-1])
	}
	last := ci.State.LastSeq
	v.mu.Lock()
	defer v.mu.Unlock()
	if last <= v.applied {
		v.live.Confirm(sent)
	} else if len(v.pending) < 64 {
		v.pending = append(v.pending, probe{last: last, sent: sent})
	}
	return nil
}

// Err is the first value the view could not read, if any.
func (v *View) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, err := range v.bad {
		return fmt.Errorf("policy: %s: %w", k, err)
	}
	return nil
}

// Revision is the latest revision the view has applied.
func (v *View) Revision() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.applied
}

// WaitFor returns once the view has applied revision rev, or ctx ends.
func (v *View) WaitFor(ctx context.Context, rev uint64) error {
	v.mu.Lock()
	if rev <= v.applied {
		v.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	v.waiters = append(v.waiters, waiter{rev: rev, ch: ch})
	v.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Document is the policy the view holds, with each key's entry.
func (v *View) Document() (Document, map[Key]Entry, error) {
	v.mu.Lock()
	items := make(map[Key][]byte, len(v.items))
	entries := make(map[Key]Entry, len(v.items))
	for k, e := range v.items {
		items[k], entries[k] = e.Value, e
	}
	v.mu.Unlock()
	d, err := DocumentOf(items)
	return d, entries, err
}
