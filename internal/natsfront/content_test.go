package natsfront_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
)

// A result's typed content blocks reach the Go client over NATS as the
// provider returned them, with its structured content.
func TestContentBlocksReachTheGoClient(t *testing.T) {
	size := int64(3)
	blocks := []messages.Content{
		{Type: messages.ContentText, Text: "two", Annotations: []byte(`{"audience":["user"]}`)},
		{Type: messages.ContentImage, Data: []byte("\x89PNG\x00\x01"), MIMEType: "image/png", Meta: []byte(`{"k":"v"}`)},
		{Type: messages.ContentAudio, Data: []byte("RIFF\x00"), MIMEType: "audio/wav"},
		{Type: messages.ContentResourceLink, URI: "file:///a", Name: "a", Size: &size},
		{Type: messages.ContentResource, Resource: &messages.Resource{URI: "file:///b", MIMEType: "application/octet-stream", Blob: []byte{0, 0xff}}},
	}
	_, nc := natstest.Start(t, false)
	f := conformance.NewFixture(t)
	kopts := f.Options()
	kopts.Providers = []providers.ContextToolProvider{providers.NewMemory("notion", providers.MemoryTool{
		Definition: conformance.SearchDef("notion.search"),
		Handler: func(context.Context, providers.Call) (providers.Result, error) {
			return providers.Result{Content: blocks, Structured: []byte(`{"pages":2}`)}, nil
		},
	}), f.Notes}
	serve(t, nc, kopts, natsfront.Options{})
	turn, err := client.New(nc, nil).Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := turn.Invoke(ctx(t), "notion_search", []byte(`{"workspace":"acme","query":"q"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Content, blocks) || string(rep.Structured) != `{"pages":2}` || rep.Text != "" {
		t.Fatalf("reply content %+v structured %s text %q", rep.Content, rep.Structured, rep.Text)
	}
}
