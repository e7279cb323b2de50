package catalog

import (
	"errors"
	"fmt"
)

// ErrInvalidDefinition is wrapped by every Normalize and Build refusal.
// Each refusal also wraps exactly one of the Err* sentinels below that
// names the check that refused it, so a caller (or a test) can tell which
// limit it hit: errors.Is(err, ErrSchemaNodes).
var ErrInvalidDefinition = errors.New("catalog: invalid definition")

// ErrInvalidArguments is wrapped by every ParseArguments refusal, together
// with one of the ErrArguments* sentinels naming the check.
var ErrInvalidArguments = errors.New("catalog: invalid arguments")

func definitionKind(what string) error { return fmt.Errorf("%w: %s", ErrInvalidDefinition, what) }
func argumentsKind(what string) error  { return fmt.Errorf("%w: %s", ErrInvalidArguments, what) }

// Why a definition was refused.
var (
	ErrName        = definitionKind("name")        // provider, name or namespace: empty, over MaxNameBytes, not UTF-8, or a space, control character or '/'
	ErrDescription = definitionKind("description") // over MaxDescriptionBytes or not UTF-8
	ErrCapability  = definitionKind("capability")  // not a dotted name (no wildcard)
	ErrRequirement = definitionKind("requirement") // empty, malformed, or a placeholder that is not a top-level input property
	ErrAnnotations = definitionKind("annotations") // not a JSON object, or over the schema byte/depth limits

	ErrSchemaMalformed   = definitionKind("schema malformed")   // missing, not I-JSON (syntax, duplicate keys, bad UTF-8) or not an object
	ErrSchemaTooLarge    = definitionKind("schema too large")   // over MaxSchemaBytes
	ErrSchemaTooDeep     = definitionKind("schema too deep")    // JSON nesting over MaxSchemaDepth
	ErrSchemaDialect     = definitionKind("schema dialect")     // a $schema other than JSON Schema 2020-12
	ErrSchemaNotObject   = definitionKind("schema not object")  // an input schema whose top-level type is not "object"
	ErrSchemaNodes       = definitionKind("schema nodes")       // more than MaxSchemaNodes subschemas, each $ref counted as what it points at
	ErrSchemaProperties  = definitionKind("schema properties")  // more than MaxSchemaProperties "properties" entries
	ErrSchemaRef         = definitionKind("schema ref")         // a $ref that leaves the document or points at nothing
	ErrSchemaRefCycle    = definitionKind("schema ref cycle")   // a cycle of $refs (recursive schemas are not supported)
	ErrSchemaRequired    = definitionKind("schema required")    // a required name no "properties" of that object declares
	ErrSchemaUnsupported = definitionKind("schema unsupported") // $dynamicRef, $dynamicAnchor, $anchor, or $id below the root
	ErrSchemaCompile     = definitionKind("schema compile")     // refused by the validator's compiler
	ErrDuplicateIdentity = definitionKind("duplicate identity") // Build: the same (provider, name) twice
)

// Why a call's arguments were refused.
var (
	ErrArgumentsTooLarge     = argumentsKind("too large")     // over MaxArgumentBytes
	ErrArgumentsTooDeep      = argumentsKind("too deep")      // nesting over MaxArgumentDepth
	ErrArgumentsMalformed    = argumentsKind("malformed")     // not JSON, or not a JSON object
	ErrArgumentsDuplicateKey = argumentsKind("duplicate key") // an object with the same key twice, at any depth (RFC 7493)
	ErrArgumentsEncoding     = argumentsKind("encoding")      // invalid UTF-8 or an unpaired surrogate escape
	ErrArgumentsSchema       = argumentsKind("schema")        // refused by the tool's input schema
)
