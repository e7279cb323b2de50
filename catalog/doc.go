// Package catalog is the held tool catalogue of a turn.
//
// Providers return Definitions: what a tool is called on its provider, what
// it does, what arguments it takes, what capability it requires and how the
// resource it touches is derived from its arguments. Normalize turns a
// Definition into a Tool: the contract in canonical form (RFC 8785 JSON,
// so key order and whitespace never matter), its input schema compiled,
// its requirement template parsed, and a Revision — the SHA-256 of the
// canonical contract — that names exactly the contract the model was shown.
// The namespace defaults to the provider id.
//
// A Registry is the immutable set of Tools a turn holds, with model-facing
// aliases (unique, provider-safe names) and their reverse mapping to the
// server-scoped identity (provider, name). Its Hash is the turn's
// catalogHash. Nothing in a Registry changes after Build; the turn decides
// every list and call against it while authority stays live.
//
// # Discovery limits
//
// Untrusted content — a provider's schemas, a model's arguments — is bounded
// before it is decoded, and decoded strictly as I-JSON (RFC 7493): no
// object with the same key twice at any depth, no invalid UTF-8, no
// unpaired surrogate escape. Arguments failing that are refused
// (ErrArgumentsDuplicateKey, ErrArgumentsEncoding): the node forwards the
// bytes it authorized, so they must mean the same to every reader.
//
// A definition is refused whole, never truncated, by the first check it
// fails; each refusal wraps ErrInvalidDefinition and one sentinel naming
// the check: names (ErrName: empty, over MaxNameBytes, not UTF-8, space,
// control character or '/'), the description (ErrDescription: over
// MaxDescriptionBytes after trimming, not UTF-8), the capability, the
// requirement template (its placeholders must be top-level input
// properties), annotations (a JSON object), and each schema:
//
//   - ErrSchemaTooLarge, ErrSchemaTooDeep: over MaxSchemaBytes or nested
//     deeper than MaxSchemaDepth, checked while decoding;
//   - ErrSchemaMalformed: missing, not I-JSON, or not a JSON object;
//   - ErrSchemaNotObject: an input schema whose top-level "type" is not
//     "object";
//   - ErrSchemaDialect: a "$schema" anywhere other than JSON Schema 2020-12;
//   - ErrSchemaUnsupported: $anchor, $dynamicAnchor, $dynamicRef, a $ref to
//     an anchor, or $id below the root;
//   - ErrSchemaRef: a $ref that is not a JSON pointer into the document
//     ("#" or "#/…"), or that points at nothing or at a non-schema;
//   - ErrSchemaRefCycle: any cycle through $refs. Recursive schemas are not
//     supported — even one through "properties" that a finite instance
//     would bottom out of;
//   - ErrSchemaNodes: more than MaxSchemaNodes subschemas, counting every
//     schema under every applicator (properties, patternProperties,
//     additionalProperties, items, prefixItems, contains, allOf, anyOf,
//     oneOf, not, if, then, else, dependentSchemas, $defs, …) and each $ref
//     as the whole subschema it points at — what one evaluation may visit,
//     so shared definitions cannot multiply it unseen;
//   - ErrSchemaProperties: more than MaxSchemaProperties "properties"
//     entries in all;
//   - ErrSchemaRequired: a name in "required" or "dependentRequired" that no
//     "properties" declares for that object — in the same subschema or one
//     applying in place with it (allOf, anyOf, oneOf, not, if, then, else,
//     dependentSchemas, $ref), whether or not "properties" is present;
//   - ErrSchemaCompile: anything else the validator refuses.
//
// Schemas may only reference themselves: nothing is ever fetched.
package catalog
