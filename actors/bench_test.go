package actors_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
)

// benchKernel is a kernel with one static in-process provider whose tool
// does a little real work (hash.sha256), and the given sink.
func benchKernel(b *testing.B, sink audit.Sink, counted *providers.Memory) *actors.Kernel {
	b.Helper()
	static, err := providers.NewStatic("tools", []providers.StaticTool{{
		Definition: catalog.Definition{
			Name: "sha256", Namespace: "tools", Description: "SHA-256 of a text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":4096}},"required":["text"]}`),
			Capability:  "tools.hash", Requirement: "tools/hash",
		},
		Handler: providers.Builtins()["hash.sha256"],
	}})
	if err != nil {
		b.Fatal(err)
	}
	src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{
		{"acme", "ada"}: {{ID: "g", Capability: "tools.*", Resource: "tools/**"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ps := []providers.ContextToolProvider{static}
	if counted != nil {
		ps = append(ps, counted)
	}
	k, err := actors.New(actors.Options{
		Node: "bench", Providers: ps, Authority: src, Credentials: authority.AnyCredential{}, Sink: sink,
		StepCeiling: 1 << 30, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Shutdown(context.Background()) })
	return k
}

var benchAccess = authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "p", EnabledNamespaces: []string{"tools"}}

// BenchmarkMediatedCall is the ADR's "mediated call" in process: an open
// turn whose catalogue is resolved, calling a static in-process tool
// through the turn actor (decision, schema validation, requirement,
// grants, two audit records, execution on its own goroutine, completion
// back through the mailbox). It reports the median (p50-ns) besides the
// mean, and the provider catalogue calls made after the first (must be 0).
func BenchmarkMediatedCall(b *testing.B) {
	for _, sc := range []struct {
		name string
		sink func() audit.Sink
	}{
		{"discard-sink", func() audit.Sink { return audit.Discard{} }},
		{"memory-sink", func() audit.Sink { return audit.NewMemory() }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			counted := providers.NewMemory("counted")
			k := benchKernel(b, sc.sink(), counted)
			ctx := context.Background()
			o, err := k.Open(ctx, benchAccess)
			if err != nil {
				b.Fatal(err)
			}
			who := benchAccess
			who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
			if _, err := k.ListTools(ctx, who); err != nil {
				b.Fatal(err)
			}
			args := []byte(`{"text":"the catalogue is resolved once per turn"}`)
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := k.Invoke(ctx, who, "tools_sha256", args); err != nil {
					b.Fatal(err)
				}
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(counted.CatalogCalls()-1), "catalog-calls-after-first")
		})
	}
}

// BenchmarkMediatedCallParallel is the same call from many goroutines, each
// on its own turn: throughput across turns.
func BenchmarkMediatedCallParallel(b *testing.B) {
	k := benchKernel(b, audit.Discard{}, nil)
	ctx := context.Background()
	args := []byte(`{"text":"parallel"}`)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		o, err := k.Open(ctx, benchAccess)
		if err != nil {
			b.Error(err)
			return
		}
		who := benchAccess
		who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
		for pb.Next() {
			if _, err := k.Invoke(ctx, who, "tools_sha256", args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCatalogueResolution is a whole turn's resolution: open, first
// listing (which resolves), close. With a warm Normalizer the schemas are
// not recompiled; the provider is asked exactly once per turn.
func BenchmarkCatalogueResolution(b *testing.B) {
	counted := providers.NewMemory("counted")
	k := benchKernel(b, audit.Discard{}, counted)
	ctx := context.Background()
	b.ReportAllocs()
	turns := 0
	for b.Loop() {
		o, err := k.Open(ctx, benchAccess)
		if err != nil {
			b.Fatal(err)
		}
		who := benchAccess
		who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
		if _, err := k.ListTools(ctx, who); err != nil {
			b.Fatal(err)
		}
		if err := k.Close(ctx, who, o.LeaseID); err != nil {
			b.Fatal(err)
		}
		turns++
	}
	b.ReportMetric(float64(counted.CatalogCalls())/float64(turns), "catalog-calls/turn")
}
