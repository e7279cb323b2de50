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
// # Aliases
//
// An alias matches ^[A-Za-z0-9_-]{1,64}$ (a valid MCP tool name, and what
// most model APIs accept). sanitize(s) replaces every byte of s outside
// that set with '_'. A tool's preferred alias is sanitize(namespace + "_" +
// name) — unless it is longer than 64 bytes or ends in "__" followed by 20
// lowercase hex digits (optionally then "_" and digits), a shape reserved
// for hashed aliases. A tool takes its preferred alias when no other tool
// in the registry has the same preferred alias. Otherwise — a claimed
// preferred alias (every claimant, not all but one), an overlong one or a
// reserved-shape one — it takes the hashed alias
// sanitize(provider + "_" + name) cut to 42 bytes, then "__" and the first
// 20 hex digits of SHA-256 over its identity (provider, name). So a tool's
// alias is a function of its own (provider, name, namespace) and of one
// bit about the rest of the set: whether another tool claims the same
// preferred alias. Which other providers answered changes nothing else.
// The one exception needs two hashed tools whose identities share those 80
// bits: then each takes its hashed alias (base cut shorter to fit) with
// "_" and its rank among them in identity order appended. Assignment is
// total — the three shapes cannot produce each other's strings, so Build
// never fails on aliases — and Registry.Lookup and Registry.Alias are
// exact inverses. Build refuses only the same identity twice.
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
