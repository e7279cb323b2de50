package catalog

import (
	"errors"
	"fmt"
)

// ErrInvalidDefinition is wrapped by every Normalize refusal.
var ErrInvalidDefinition = errors.New("catalog: invalid definition")

// ErrInvalidArguments is wrapped by every ParseArguments refusal, together
// with one of the ErrArguments* sentinels naming the check.
var ErrInvalidArguments = errors.New("catalog: invalid arguments")

func argumentsKind(what string) error { return fmt.Errorf("%w: %s", ErrInvalidArguments, what) }

// Why a call's arguments were refused.
var (
	ErrArgumentsTooLarge     = argumentsKind("too large")     // over MaxArgumentBytes
	ErrArgumentsTooDeep      = argumentsKind("too deep")      // nesting over MaxArgumentDepth
	ErrArgumentsMalformed    = argumentsKind("malformed")     // not JSON, or not a JSON object
	ErrArgumentsDuplicateKey = argumentsKind("duplicate key") // an object with the same key twice, at any depth (RFC 7493)
	ErrArgumentsEncoding     = argumentsKind("encoding")      // invalid UTF-8 or an unpaired surrogate escape
	ErrArgumentsSchema       = argumentsKind("schema")        // refused by the tool's input schema
)
