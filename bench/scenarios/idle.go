package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/bench/harness"
)

// liveBytes is the live heap plus goroutine stacks after a full collection.
func liveBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

// IdleTurns measures the memory an idle open turn holds on a node: it
// opens n turns of one principal and measures the live heap's growth
// ("opened": nothing done yet), then lists once on each, so each resolves
// and holds its catalogue, and measures again ("resolved"). The kernel
// runs in process with the static tool and audit discarded, so only what
// the node keeps per turn is counted. progress, if set, gets a line per
// phase; profileDir, if set, receives the heap profiles of the open turns
// (idle-<n>-opened.heap.pprof and idle-<n>-resolved.heap.pprof; read them
// with go tool pprof -sample_index=inuse_space).
func (e *Env) IdleTurns(ctx context.Context, n int, progress io.Writer, profileDir string) (_ []harness.Memory, err error) {
	if profileDir != "" {
		// Sample every allocation of at least 64 bytes, so the profiles
		// account for what each turn holds rather than a sample of it.
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 64
	}
	peak := harness.StartPeakRSS()
	nd, err := e.startNode(ctx, nodeConfig{audit: AuditDiscard, tool: ToolStatic, maxTurns: n + 1024, idleTimeout: time.Hour})
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := nd.close(sctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	k := nd.kernel
	// Warm the kernel (pools, the directory's first map buckets, the
	// normalizer) with one turn, closed again, so it is not counted.
	if err := oneTurn(ctx, k); err != nil {
		return nil, err
	}
	// The load generator's own record of the turns (whose ids share the
	// kernel's strings) is allocated before the baseline.
	turns := make([]authority.AccessContext, n)
	base := liveBytes()
	start := time.Now()
	if err := forEach(ctx, n, func(i int) error {
		a, err := openTurn(ctx, k)
		turns[i] = a
		return err
	}); err != nil {
		return nil, fmt.Errorf("opening %d turns: %w", n, err)
	}
	openSecs := time.Since(start).Seconds()
	opened := liveBytes()
	if err := heapProfile(profileDir, fmt.Sprintf("idle-%d-opened", n)); err != nil {
		return nil, err
	}
	if progress != nil {
		fmt.Fprintf(progress, "  idle turns: %d opened in %.1fs\n", n, openSecs)
	}
	start = time.Now()
	if err := forEach(ctx, n, func(i int) error {
		_, err := k.ListTools(ctx, turns[i])
		return err
	}); err != nil {
		return nil, fmt.Errorf("listing on %d turns: %w", n, err)
	}
	resolveSecs := time.Since(start).Seconds()
	resolved := liveBytes()
	catalogues := k.Catalogues()
	if err := heapProfile(profileDir, fmt.Sprintf("idle-%d-resolved", n)); err != nil {
		return nil, err
	}
	if progress != nil {
		fmt.Fprintf(progress, "  idle turns: %d resolved in %.1fs\n", n, resolveSecs)
	}
	runtime.KeepAlive(turns)
	rss := peak.Peak()
	return []harness.Memory{
		{Name: "idle-turns", Turns: n, State: "opened", BytesPerTurn: float64(opened-base) / float64(n), Registries: 0, Seconds: openSecs, PeakRSSBytes: rss},
		{Name: "idle-turns", Turns: n, State: "resolved", BytesPerTurn: float64(resolved-base) / float64(n), Registries: catalogues, Seconds: resolveSecs, PeakRSSBytes: rss},
	}, nil
}

// heapProfile writes the heap profile to dir/name.heap.pprof (nothing
// when dir is empty).
func heapProfile(dir, name string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".heap.pprof"))
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}

func oneTurn(ctx context.Context, k *actors.Kernel) error {
	a, err := openTurn(ctx, k)
	if err != nil {
		return err
	}
	if _, err := k.ListTools(ctx, a); err != nil {
		return err
	}
	return k.Close(ctx, a, a.LeaseID)
}

// forEach runs f(0..n-1) on a few goroutines and returns the first error.
func forEach(ctx context.Context, n int, f func(i int) error) error {
	var (
		next  atomic.Int64
		first error
		once  sync.Once
		wg    sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
