// Package providers holds the implementations of the kernel's tool port
// (package toolport): static tools from cluster.yaml, remote providers on
// the bus, and a programmable in-memory provider for tests.
package providers

import (
	"fmt"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/toolport"
)

// The port and its types are toolport's; these names keep the
// implementations here (and their callers) reading as they did.
type (
	ContextToolProvider = toolport.ContextToolProvider
	Catalog             = toolport.Catalog
	Freshness           = toolport.Freshness
	Call                = toolport.Call
	Result              = toolport.Result
	Content             = toolport.Content
)

// Classify maps a provider error to its reason code (toolport.Classify).
func Classify(err error) reason.Code { return toolport.Classify(err) }

// ClassifiedError returns err as a *reason.Error with its class
// (toolport.ClassifiedError).
func ClassifiedError(provider string, err error) *reason.Error {
	return toolport.ClassifiedError(provider, err)
}

// revisionOf normalizes d to learn its revision.
func revisionOf(provider string, d catalog.Definition) (string, error) {
	t, err := catalog.Normalize(provider, d, catalog.Limits{})
	if err != nil {
		return "", fmt.Errorf("provider %s: %w", provider, err)
	}
	return t.Revision, nil
}
