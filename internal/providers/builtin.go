package providers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// Builtins returns the handlers static tools in cluster.yaml may name, each
// set with its own state. They do real work so a demo turn shows something:
//
//	notes.put, notes.get, notes.search — a small note store per tenant and
//	  resource (the resource the kernel authorized, so grants scope the data);
//	text.stats — word, line and character counts and the most frequent words;
//	hash.sha256 — the SHA-256 of a text;
//	echo — the arguments back.
func Builtins() map[string]Handler {
	n := &noteStore{notes: map[string]map[string]string{}}
	return map[string]Handler{
		"notes.put":    n.put,
		"notes.get":    n.get,
		"notes.search": n.search,
		"text.stats":   textStats,
		"hash.sha256":  hashSHA256,
		"echo":         EchoHandler,
	}
}

func decodeArgs(call Call, v any) error {
	dec := json.NewDecoder(bytes.NewReader(call.Arguments))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding arguments: %w", err)
	}
	return nil
}

func structured(text string, v any) (Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Result{}, err
	}
	return Result{Text: text, Structured: b}, nil
}

type noteStore struct {
	mu    sync.Mutex
	notes map[string]map[string]string // tenant + "\x00" + resource -> title -> body
}

func (n *noteStore) bucket(call Call) string { return call.Access.Tenant + "\x00" + call.Resource }

func (n *noteStore) put(_ context.Context, call Call) (Result, error) {
	var a struct{ Title, Body string }
	if err := decodeArgs(call, &a); err != nil {
		return Result{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.notes[n.bucket(call)]
	if b == nil {
		b = map[string]string{}
		n.notes[n.bucket(call)] = b
	}
	_, existed := b[a.Title]
	b[a.Title] = a.Body
	return structured(fmt.Sprintf("saved %q in %s", a.Title, call.Resource),
		map[string]any{"title": a.Title, "replaced": existed, "notes": len(b)})
}

func (n *noteStore) get(_ context.Context, call Call) (Result, error) {
	var a struct{ Title string }
	if err := decodeArgs(call, &a); err != nil {
		return Result{}, err
	}
	n.mu.Lock()
	body, ok := n.notes[n.bucket(call)][a.Title]
	n.mu.Unlock()
	if !ok {
		return Result{Text: fmt.Sprintf("no note %q in %s", a.Title, call.Resource), IsError: true}, nil
	}
	return structured(body, map[string]any{"title": a.Title, "body": body})
}

func (n *noteStore) search(_ context.Context, call Call) (Result, error) {
	var a struct{ Query string }
	if err := decodeArgs(call, &a); err != nil {
		return Result{}, err
	}
	q := strings.ToLower(a.Query)
	n.mu.Lock()
	var hits []string
	for title, body := range n.notes[n.bucket(call)] {
		if strings.Contains(strings.ToLower(title), q) || strings.Contains(strings.ToLower(body), q) {
			hits = append(hits, title)
		}
	}
	n.mu.Unlock()
	slices.Sort(hits)
	return structured(fmt.Sprintf("%d notes match %q", len(hits), a.Query), map[string]any{"titles": hits})
}

func textStats(_ context.Context, call Call) (Result, error) {
	var a struct{ Text string }
	if err := decodeArgs(call, &a); err != nil {
		return Result{}, err
	}
	words := strings.FieldsFunc(strings.ToLower(a.Text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' })
	freq := map[string]int{}
	for _, w := range words {
		freq[w]++
	}
	type wc struct {
		Word  string `json:"word"`
		Count int    `json:"count"`
	}
	top := make([]wc, 0, len(freq))
	for w, c := range freq {
		top = append(top, wc{w, c})
	}
	slices.SortFunc(top, func(x, y wc) int {
		if x.Count != y.Count {
			return y.Count - x.Count
		}
		return strings.Compare(x.Word, y.Word)
	})
	if len(top) > 5 {
		top = top[:5]
	}
	lines := 0
	if a.Text != "" {
		lines = strings.Count(a.Text, "\n") + 1
	}
	chars := len([]rune(a.Text))
	return structured(fmt.Sprintf("%d words, %d lines, %d characters", len(words), lines, chars),
		map[string]any{"words": len(words), "lines": lines, "characters": chars, "top": top})
}

func hashSHA256(_ context.Context, call Call) (Result, error) {
	var a struct{ Text string }
	if err := decodeArgs(call, &a); err != nil {
		return Result{}, err
	}
	sum := sha256.Sum256([]byte(a.Text))
	h := hex.EncodeToString(sum[:])
	return structured(h, map[string]any{"sha256": h})
}
