package audit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

func randomString(r *rand.Rand) string {
	pool := []string{"", "a", "acme", "n1.abc-0", "notion_search", "<script>&amp;", "quote\"back\\slash", "tab\t\nnl", "ünïcødé", "\u2028sep", "\x01ctl", "\xffbad"}
	return pool[r.IntN(len(pool))]
}

func randomEvent(r *rand.Rand) *Event {
	rs := func() string { return randomString(r) }
	strs := func() []string {
		if r.IntN(3) == 0 {
			return nil
		}
		out := make([]string, r.IntN(3))
		for i := range out {
			out[i] = rs()
		}
		return out
	}
	ev := &Event{
		ID: rs(), Type: Type(rs()), Time: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC(), Node: rs(),
		Tenant: rs(), Principal: rs(), CredentialProfile: rs(), TurnID: rs(), OneOperation: r.IntN(2) == 0, Transport: rs(),
		Seq: r.Uint64N(1 << 40), PrevHash: rs(), CatalogHash: rs(), Namespaces: strs(), Listed: strs(),
	}
	if r.IntN(2) == 0 {
		ev.Catalog = &Catalog{}
		if r.IntN(3) > 0 {
			ev.Catalog.Tools = []Tool{{Alias: rs(), Provider: rs(), Name: rs(), Namespace: rs(), Revision: rs()}}
		}
		if r.IntN(3) > 0 {
			ev.Catalog.Providers = []ProviderStatus{{Provider: rs(), Status: rs(), Reason: rs(), Error: rs(), Tools: r.IntN(5), Refused: strs(), DurationMicros: r.Int64N(1e6),
				PendingReview: strs()}}
			for range r.IntN(3) {
				ev.Catalog.Providers[0].Drift = append(ev.Catalog.Providers[0].Drift, ContractDrift{Tool: rs(), Revision: rs(), Decision: rs(), Classes: strs(), Accepted: rs()})
			}
		}
	}
	if r.IntN(2) == 0 {
		ev.Call = &Call{ID: rs(), Alias: rs(), Provider: rs(), Name: rs(), Revision: rs(), Step: r.IntN(3), Decision: rs(),
			Reason: rs(), Resource: rs(), Grant: rs(), ArgsHash: rs(), Outcome: rs(), Duration: r.Int64N(3), ResultLen: r.IntN(3), Approval: rs()}
	}
	if r.IntN(2) == 0 {
		ev.Close = &Close{Reason: rs(), Steps: r.IntN(3), Events: r.Uint64N(3)}
	}
	if r.IntN(2) == 0 {
		ev.Lease = &Lease{IDHash: rs(), Holders: r.IntN(3)}
	}
	if r.IntN(2) == 0 {
		ev.Projection = &Projection{Profile: rs(), Hash: rs(), Names: strs(), Tokens: r.IntN(3), TokenMethod: rs(), QueryHash: rs(), K: r.IntN(3) - 1}
		for range r.IntN(3) {
			ev.Projection.LeftOut = append(ev.Projection.LeftOut, LeftOut{Alias: rs(), Why: rs()})
		}
	}
	if r.IntN(2) == 0 {
		ev.Policy = &PolicyChange{Key: rs(), Op: rs(), PrevRevision: r.Uint64N(3), Revision: r.Uint64N(1 << 40), PrevHash: rs(), Hash: rs(), By: rs()}
	}
	if r.IntN(2) == 0 {
		ev.Contract = &ContractReview{Tenant: rs(), Provider: rs(), Tool: rs(), Decision: rs(), Revision: rs(), Previous: rs(), Classes: strs(), By: rs(), Why: rs()}
	}
	if r.IntN(2) == 0 {
		ev.Approval = &Approval{ID: rs(), Rule: rs(), Tenant: rs(), Principal: rs(), Turn: rs(), CallID: rs(), Provider: rs(), Name: rs(),
			Revision: rs(), ArgsHash: rs(), ExpiresAt: time.Unix(r.Int64N(1<<32), r.Int64N(1e9)).UTC(), Decision: rs(), By: rs(), Reason: rs()}
	}
	return ev
}

func TestEncoderMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 20000 {
		ev := randomEvent(r)
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got := appendEvent(nil, ev)
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestEncodeRefusesUnencodableTime(t *testing.T) {
	if _, err := Encode(&Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("year 10000 encoded")
	}
}

func BenchmarkEncode(b *testing.B) {
	ev := &Event{ID: "abcdefghijklmnopqrst-12", Type: ToolInvoked, Time: time.Now().UTC(), Node: "n1", Tenant: "acme", Principal: "ada",
		TurnID: "n1.abcdefghijklmnopqrst", Seq: 12, PrevHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		CatalogHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Namespaces: []string{"notion", "notes"},
		Call: &Call{ID: "c12", Alias: "notion_search", Provider: "notion", Name: "search", Revision: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Step: 3, Decision: "allow", Resource: "notion/workspace/acme/search", Grant: "g1", ArgsHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = Encode(ev)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := json.Marshal(ev)
			_ = HashData(d)
		}
	})
}
