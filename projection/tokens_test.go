package projection_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"

	"github.com/sharedos/sharedos/projection"
)

// tiktokenCache is where tiktoken's default loader would cache a
// download; TestMain points it at an empty directory and sends any HTTP
// through a proxy that does not exist, so a download fails the run
// (TestNoDownload) instead of happening.
var tiktokenCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "projection-tiktoken-")
	if err != nil {
		panic(err)
	}
	tiktokenCache = dir
	os.Setenv("TIKTOKEN_CACHE_DIR", dir)
	os.Setenv("DATA_GYM_CACHE_DIR", dir)
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		os.Setenv(v, "http://127.0.0.1:9")
	}
	os.Unsetenv("NO_PROXY")
	os.Unsetenv("no_proxy")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestKnownTokenCounts checks the counts against published values:
// "hello world" is [15339, 1917] in cl100k_base (tiktoken's own test
// suite, tests/test_encoding.py test_simple) and [24912, 2375] in
// o200k_base (checked with this library and OpenAI's tokenizer), and
// "tiktoken is great!" is 6 tokens in cl100k_base (OpenAI cookbook, "How
// to count tokens with tiktoken").
func TestKnownTokenCounts(t *testing.T) {
	for _, c := range []struct {
		encoding, text string
		ids            []int
		n              int
	}{
		{projection.EncodingCL100k, "hello world", []int{15339, 1917}, 2},
		{projection.EncodingO200k, "hello world", []int{24912, 2375}, 2},
		{projection.EncodingCL100k, "tiktoken is great!", nil, 6},
	} {
		n, err := projection.CountTokens(c.encoding, c.text)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.n {
			t.Errorf("%s %q: %d tokens, want %d", c.encoding, c.text, n, c.n)
		}
		if c.ids != nil {
			// The offline loader is in place once CountTokens ran.
			tk, err := tiktoken.GetEncoding(c.encoding)
			if err != nil {
				t.Fatal(err)
			}
			if ids := tk.EncodeOrdinary(c.text); !slices.Equal(ids, c.ids) {
				t.Errorf("%s %q: ids %v, want %v", c.encoding, c.text, ids, c.ids)
			}
		}
	}
	if _, err := projection.CountTokens("p50k_base", "x"); err == nil {
		t.Error("an encoding the package does not offer was accepted")
	}
}

// TestNoDownload: counting in both encodings downloaded nothing and
// cached nothing — the BPE ranks come from the embedded offline loader.
func TestNoDownload(t *testing.T) {
	for _, enc := range []string{projection.EncodingO200k, projection.EncodingCL100k} {
		if _, err := projection.CountTokens(enc, "no download"); err != nil {
			t.Fatalf("%s: %v (a download would fail here: the proxy does not exist)", enc, err)
		}
	}
	entries, err := os.ReadDir(tiktokenCache)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("tiktoken cached %d files in %s", len(entries), tiktokenCache)
	}
}

// TestProjectionTokens: a projection's counts are the exact counts of
// each tool's bytes in the chosen encoding for OpenAI profiles, the
// estimate for the others, and the listing's count is their sum.
func TestProjectionTokens(t *testing.T) {
	listed := fixture(t)
	for _, p := range projection.Profiles() {
		for _, enc := range []string{"", projection.EncodingCL100k} {
			proj, err := projection.Project(listed, p, projection.Options{Encoding: enc})
			if err != nil {
				t.Fatal(err)
			}
			sum := 0
			for _, tool := range proj.Tools {
				want := projection.EstimateTokens(tool.JSON)
				if p == projection.OpenAI || p == projection.OpenAIStrict {
					e := enc
					if e == "" {
						e = projection.EncodingO200k
					}
					if proj.TokenMethod != e {
						t.Fatalf("%s: method %s", p, proj.TokenMethod)
					}
					want, _ = projection.CountTokens(e, string(tool.JSON))
				} else if proj.TokenMethod != projection.MethodEstimate {
					t.Fatalf("%s: method %s", p, proj.TokenMethod)
				}
				if tool.Tokens != want || want == 0 {
					t.Errorf("%s/%s: %d tokens, want %d", p, tool.Alias, tool.Tokens, want)
				}
				sum += tool.Tokens
			}
			if proj.Tokens != sum {
				t.Errorf("%s: listing %d tokens, tools sum to %d", p, proj.Tokens, sum)
			}
		}
	}
	if _, err := projection.Project(listed, projection.OpenAI, projection.Options{Encoding: "gpt2"}); err == nil {
		t.Error("unknown encoding accepted")
	}
}

// estimateSample is every tool of every profile's projection of listed:
// the bytes the estimate is used on.
func estimateSample(t testing.TB, listed []projection.Listed) [][]byte {
	var sample [][]byte
	for _, p := range projection.Profiles() {
		proj, err := projection.Project(listed, p, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range proj.Tools {
			sample = append(sample, tool.JSON)
		}
	}
	return sample
}

// TestEstimateError measures EstimateTokens against the exact o200k_base
// count, per tool, on the fixture and on the synthetic catalogue: the
// mean absolute error, the worst single tool, and the error of the sum.
// The figures in docs/model-facing.md are this test's log
// (go test -run TestEstimateError -v ./projection).
func TestEstimateError(t *testing.T) {
	for _, c := range []struct {
		name   string
		listed []projection.Listed
	}{{"fixture", fixture(t)}, {"synthetic", synthetic(t, 200)}} {
		sample := estimateSample(t, c.listed)
		var sumAbs, worst float64
		totalEst, totalExact := 0, 0
		for _, b := range sample {
			exact, _ := projection.CountTokens(projection.EncodingO200k, string(b))
			est := projection.EstimateTokens(b)
			rel := math.Abs(float64(est-exact)) / float64(exact)
			sumAbs += rel
			worst = max(worst, rel)
			totalEst += est
			totalExact += exact
		}
		mean := sumAbs / float64(len(sample))
		total := float64(totalEst-totalExact) / float64(totalExact)
		t.Logf("%s: estimate vs o200k_base over %d tools: mean |error| %.1f%%, worst %.1f%%, sum %+.1f%% (%d vs %d tokens)",
			c.name, len(sample), 100*mean, 100*worst, 100*total, totalEst, totalExact)
		if mean > 0.10 || math.Abs(total) > 0.10 {
			t.Errorf("%s: estimate error too large: mean %.1f%%, sum %+.1f%%", c.name, 100*mean, 100*total)
		}
	}
}

// synthetic is a catalogue of n distinct tools in the shapes providers
// send: a few typed, described parameters, enums, nested objects.
func synthetic(t testing.TB, n int) []projection.Listed {
	t.Helper()
	verbs := []string{"list", "get", "create", "update", "delete", "search", "export", "sync"}
	things := []string{"issues", "pages", "contacts", "invoices", "files", "events", "tickets", "repos", "users", "orders"}
	var defs []def
	for i := range n {
		v, th := verbs[i%len(verbs)], things[(i/len(verbs))%len(things)]
		props := map[string]any{
			"workspace": map[string]any{"type": "string", "description": "The workspace that holds the " + th + "."},
			"limit":     map[string]any{"type": "integer", "minimum": 1, "maximum": 100, "description": "How many " + th + " to return at most."},
			"order":     map[string]any{"type": "string", "enum": []string{"asc", "desc"}},
			"filter": map[string]any{"type": "object", "properties": map[string]any{
				"since": map[string]any{"type": "string", "format": "date-time"},
				"tag":   map[string]any{"type": "string"},
			}, "required": []string{"since", "tag"}, "additionalProperties": false},
		}
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props,
			"required": []string{"workspace", "limit", "order", "filter"}, "additionalProperties": false})
		defs = append(defs, def{provider: fmt.Sprintf("svc%02d", i/80), name: fmt.Sprintf("%s_%s_%d", v, th, i),
			description: fmt.Sprintf("%s %s in a workspace. Returns up to limit %s, newest first; use filter to narrow by tag or date. Tool number %d.",
				strings.ToUpper(v[:1])+v[1:], th, th, i),
			annotations: `{"readOnlyHint":true}`, schema: string(schema)})
	}
	saved := fixtureDefs
	fixtureDefs = defs
	defer func() { fixtureDefs = saved }()
	listed := fixture(t)
	// fixture appends the hand-built recursive tool; keep only the
	// synthetic ones.
	out := listed[:0]
	for _, l := range listed {
		if l.Tool.Identity.Provider != "trees" {
			out = append(out, l)
		}
	}
	return out
}

func TestSyntheticIsDistinct(t *testing.T) {
	s := synthetic(t, 500)
	if len(s) != 500 {
		t.Fatalf("%d tools", len(s))
	}
	if !strings.HasPrefix(filepath.Base(s[0].Alias), "svc00_") {
		t.Fatalf("alias %q", s[0].Alias)
	}
}

// TestListingTokensVsSum: a listing's Tokens is the sum of its tools'
// standalone counts; the exact count of the joined listing differs from
// it only at the joins (the brackets and commas, and BPE merges across a
// boundary) — at most two tokens a tool. The log gives the figure in
// docs/model-facing.md.
func TestListingTokensVsSum(t *testing.T) {
	for _, listed := range [][]projection.Listed{fixture(t), synthetic(t, 200)} {
		for _, p := range []projection.Profile{projection.OpenAI, projection.OpenAIStrict} {
			proj, _ := projection.Project(listed, p, projection.Options{})
			exact, _ := projection.CountTokens(projection.EncodingO200k, string(proj.Listing))
			diff := exact - proj.Tokens
			t.Logf("%s, %d tools: listing %d tokens, sum of tools %d (%+d)", p, len(proj.Tools), exact, proj.Tokens, diff)
			if diff < -2*len(proj.Tools) || diff > 2*len(proj.Tools)+2 {
				t.Errorf("%s: listing %d tokens, sum %d", p, exact, proj.Tokens)
			}
		}
	}
}
