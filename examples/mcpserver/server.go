// Package mcpserver is an example MCP server that does real work: a
// shared scratchpad of notes (put, get, list, delete) and a text
// analyser (word, line and character counts and the most frequent
// words). It is built with the official MCP SDK and serves over stdio or
// streamable HTTP (cmd/mcp-example-server), or in process over the SDK's
// in-memory transport (a node's `transport: memory`, the sample
// cluster.yaml).
//
// Its tools are annotated the way MCP intends — get, list and analyze
// read-only; put additive and idempotent; delete destructive — and its
// tools/list answers carry ttlMs (60s) and cacheScope "public" on
// 2026-07-28 sessions.
package mcpserver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TTLMs is how long the server says its tool list stays fresh.
const TTLMs = 60000

// Limits of the scratchpad: a note's title and body, and how many notes.
const (
	maxTitle = 200
	maxBody  = 64 << 10
	maxNotes = 10000
	maxText  = 1 << 20
)

// New returns a server with its own empty scratchpad. The server may be
// connected to many sessions; they share the notes.
func New() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sharedos-scratchpad", Version: "1.0.0"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs, c.CacheScope = TTLMs, "public"
		},
	})
	pad := &pad{notes: map[string]note{}}
	yes, no := true, false
	mcp.AddTool(s, &mcp.Tool{Name: "put", Title: "Save a note",
		Description: "Save a note (title and body) in the shared scratchpad; replaces a note with the same title.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true}}, pad.put)
	mcp.AddTool(s, &mcp.Tool{Name: "get", Title: "Read a note", Description: "Read the note with this title.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, pad.get)
	mcp.AddTool(s, &mcp.Tool{Name: "list", Title: "List notes", Description: "List the notes' titles and sizes, in title order.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, pad.list)
	mcp.AddTool(s, &mcp.Tool{Name: "delete", Title: "Delete a note", Description: "Delete the note with this title.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true}}, pad.delete)
	mcp.AddTool(s, &mcp.Tool{Name: "analyze", Title: "Analyze text",
		Description: "Count the words, lines and characters of a text (or of a note, by title) and list its most frequent words.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, pad.analyze)
	return s
}

type note struct{ body string }

type pad struct {
	mu    sync.Mutex
	notes map[string]note
}

// PutIn is put's input.
type PutIn struct {
	Title string `json:"title" jsonschema:"the note's title"`
	Body  string `json:"body" jsonschema:"the note's text"`
}

// PutOut is put's output.
type PutOut struct {
	Title    string `json:"title"`
	Replaced bool   `json:"replaced"`
	Notes    int    `json:"notes"`
}

func failed(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (p *pad) put(_ context.Context, _ *mcp.CallToolRequest, in PutIn) (*mcp.CallToolResult, PutOut, error) {
	switch {
	case in.Title == "" || len(in.Title) > maxTitle:
		return failed("a title is 1 to %d bytes", maxTitle), PutOut{}, nil
	case len(in.Body) > maxBody:
		return failed("a body is at most %d bytes", maxBody), PutOut{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, replaced := p.notes[in.Title]
	if !replaced && len(p.notes) >= maxNotes {
		return failed("the scratchpad is full (%d notes)", maxNotes), PutOut{}, nil
	}
	p.notes[in.Title] = note{body: in.Body}
	return nil, PutOut{Title: in.Title, Replaced: replaced, Notes: len(p.notes)}, nil
}

// TitleIn names a note.
type TitleIn struct {
	Title string `json:"title" jsonschema:"the note's title"`
}

// GetOut is get's output.
type GetOut struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

func (p *pad) get(_ context.Context, _ *mcp.CallToolRequest, in TitleIn) (*mcp.CallToolResult, GetOut, error) {
	p.mu.Lock()
	n, ok := p.notes[in.Title]
	p.mu.Unlock()
	if !ok {
		return failed("no note titled %q", in.Title), GetOut{}, nil
	}
	return nil, GetOut{Title: in.Title, Body: n.body}, nil
}

// ListIn is list's (empty) input.
type ListIn struct{}

// Entry is one listed note.
type Entry struct {
	Title string `json:"title"`
	Bytes int    `json:"bytes"`
}

// ListOut is list's output.
type ListOut struct {
	Notes []Entry `json:"notes"`
}

func (p *pad) list(_ context.Context, _ *mcp.CallToolRequest, _ ListIn) (*mcp.CallToolResult, ListOut, error) {
	p.mu.Lock()
	out := ListOut{Notes: make([]Entry, 0, len(p.notes))}
	for t, n := range p.notes {
		out.Notes = append(out.Notes, Entry{Title: t, Bytes: len(n.body)})
	}
	p.mu.Unlock()
	slices.SortFunc(out.Notes, func(a, b Entry) int { return strings.Compare(a.Title, b.Title) })
	return nil, out, nil
}

// DeleteOut is delete's output.
type DeleteOut struct {
	Deleted bool `json:"deleted"`
}

func (p *pad) delete(_ context.Context, _ *mcp.CallToolRequest, in TitleIn) (*mcp.CallToolResult, DeleteOut, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.notes[in.Title]
	delete(p.notes, in.Title)
	return nil, DeleteOut{Deleted: ok}, nil
}

// AnalyzeIn is analyze's input: a text, or the title of a note.
type AnalyzeIn struct {
	Text  string `json:"text,omitempty" jsonschema:"the text to analyze"`
	Title string `json:"title,omitempty" jsonschema:"analyze this note instead"`
	Top   int    `json:"top,omitempty" jsonschema:"how many frequent words (default 5, at most 50)"`
}

// Count is a word and how often it occurs.
type Count struct {
	Word  string `json:"word"`
	Count int    `json:"count"`
}

// AnalyzeOut is analyze's output.
type AnalyzeOut struct {
	Words      int     `json:"words"`
	Lines      int     `json:"lines"`
	Characters int     `json:"characters"`
	Top        []Count `json:"top"`
}

func (p *pad) analyze(_ context.Context, _ *mcp.CallToolRequest, in AnalyzeIn) (*mcp.CallToolResult, AnalyzeOut, error) {
	text := in.Text
	if in.Title != "" {
		p.mu.Lock()
		n, ok := p.notes[in.Title]
		p.mu.Unlock()
		if !ok {
			return failed("no note titled %q", in.Title), AnalyzeOut{}, nil
		}
		text = n.body
	}
	if len(text) > maxText {
		return failed("a text is at most %d bytes", maxText), AnalyzeOut{}, nil
	}
	top := in.Top
	if top <= 0 {
		top = 5
	}
	top = min(top, 50)
	out := Analyze(text, top)
	return nil, out, nil
}

// Analyze counts text's words (letters and digits, case-folded), lines
// and characters, and returns its top most frequent words (ties in word
// order).
func Analyze(text string, top int) AnalyzeOut {
	out := AnalyzeOut{Characters: utf8.RuneCountInString(text), Top: []Count{}}
	if text != "" {
		out.Lines = strings.Count(text, "\n") + 1
		if strings.HasSuffix(text, "\n") {
			out.Lines--
		}
	}
	counts := map[string]int{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		counts[strings.ToLower(w)]++
		out.Words++
	}
	for w, c := range counts {
		out.Top = append(out.Top, Count{Word: w, Count: c})
	}
	slices.SortFunc(out.Top, func(a, b Count) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Word, b.Word))
	})
	out.Top = out.Top[:min(top, len(out.Top))]
	return out
}
