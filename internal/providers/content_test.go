package providers_test

import (
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
)

// A provider process's content blocks are checked before their JSON is
// decoded: known types, a resource block's resource, JSON objects (icons
// an array) nested at most 32 deep.
func TestCheckContent(t *testing.T) {
	ok := []providers.Content{
		{Type: messages.ContentText, Text: "a", Annotations: []byte(`{"audience":["user"]}`), Meta: []byte(` {"k":{"s":"{[\"}"}} `)},
		{Type: messages.ContentImage, Data: []byte{1}, MIMEType: "image/png"},
		{Type: messages.ContentResourceLink, URI: "file:///a", Icons: []byte(`[{"src":"x"}]`)},
		{Type: messages.ContentResource, Resource: &messages.Resource{URI: "file:///b", Meta: []byte(`{}`)}},
		{Type: messages.ContentText, Meta: []byte(strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32))},
	}
	if err := providers.CheckContent(ok); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]providers.Content{
		"unknown type":      {Type: "video"},
		"resource missing":  {Type: messages.ContentResource},
		"meta an array":     {Type: messages.ContentText, Meta: []byte(`[1]`)},
		"icons an object":   {Type: messages.ContentResourceLink, Icons: []byte(`{"src":"x"}`)},
		"annotations bad":   {Type: messages.ContentText, Annotations: []byte(`{"a":`)},
		"too deep":          {Type: messages.ContentText, Meta: []byte(strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33))},
		"resource meta bad": {Type: messages.ContentResource, Resource: &messages.Resource{URI: "u", Meta: []byte(`"x"`)}},
	} {
		if err := providers.CheckContent([]providers.Content{c}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
