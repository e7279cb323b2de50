package projection

import (
	"math"
	"slices"
	"strings"
	"unicode"
)

// BM25 parameters: the usual k1 and b.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// maxQueryTerms bounds the terms of a query that are scored.
const maxQueryTerms = 64

// Search ranks the given tools — the turn's visible held tools, nothing
// else: it cannot reach a tool outside them — by BM25 over each tool's
// name, title and description, and projects the top k (all matches when
// k <= 0) in profile's form, best first. Ties are broken by listing order.
// A tool matching no query term is not returned. Pure like Project: no
// network, no model; opts apply to the projection of the result (a budget
// cuts the ranking's tail).
func Search(tools []Listed, query string, k int, profile Profile, opts Options) (Projection, error) {
	if !profile.Valid() {
		return Project(nil, profile, opts)
	}
	terms := terms(query)
	if len(terms) > maxQueryTerms {
		terms = terms[:maxQueryTerms]
	}
	slices.Sort(terms)
	terms = slices.Compact(terms)
	docs := make([][]string, len(tools))
	total := 0
	df := make(map[string]int, len(terms))
	for i, l := range tools {
		docs[i] = document(l)
		total += len(docs[i])
		seen := map[string]bool{}
		for _, w := range docs[i] {
			if !seen[w] && slices.Contains(terms, w) {
				seen[w] = true
				df[w]++
			}
		}
	}
	avg := 1.0
	if len(tools) > 0 && total > 0 {
		avg = float64(total) / float64(len(tools))
	}
	type hit struct {
		i     int
		score float64
	}
	var hits []hit
	n := float64(len(tools))
	for i, d := range docs {
		tf := map[string]int{}
		for _, w := range d {
			tf[w]++
		}
		score := 0.0
		for _, q := range terms {
			f := float64(tf[q])
			if f == 0 {
				continue
			}
			idf := math.Log(1 + (n-float64(df[q])+0.5)/(float64(df[q])+0.5))
			score += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(len(d))/avg))
		}
		if score > 0 {
			hits = append(hits, hit{i, score})
		}
	}
	slices.SortStableFunc(hits, func(a, b hit) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.i - b.i
	})
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	ranked := make([]Listed, len(hits))
	for j, h := range hits {
		ranked[j] = tools[h.i]
	}
	return Project(ranked, profile, opts)
}

// document is a tool's searchable terms: its alias, provider-scoped name,
// title and description. The names count twice: a query naming a tool
// should find it before tools that only mention the word.
func document(l Listed) []string {
	t := l.Tool
	names := terms(l.Alias + " " + t.Identity.Name + " " + toolTitle(t))
	d := append(names, names...)
	return append(d, terms(t.Description)...)
}

// terms splits text into lower-case words: runs of letters and digits,
// also split at lower-to-upper case changes (camelCase) — so snake_case,
// kebab-case and camelCase names yield their words.
func terms(s string) []string {
	var out []string
	var cur []rune
	var prev rune
	emit := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				emit()
			}
			cur = append(cur, r)
		default:
			emit()
		}
		prev = r
	}
	emit()
	return out
}
