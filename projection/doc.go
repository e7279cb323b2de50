// Package projection is the catalogue as a model sees it: a turn's
// visible held tools translated into one model API's tool format — a
// profile — with model-facing names, a content hash, and token costs.
//
// Project takes the tools a listing shows, in listing order (Listed: the
// held catalog.Tool and the turn's alias), a Profile, and Options, and
// returns a Projection: the emitted tools, each as RFC 8785 canonical
// JSON in the profile's shape; the listing (the JSON array of them) and
// its SHA-256, the projection_hash; the token count per tool and in all;
// and what was left out — tools the profile cannot represent, with a
// machine-readable reason per keyword and JSON pointer, and tools left
// out for the token budget. Search ranks the same tools by BM25 and
// projects the top k.
//
// # Never weaken
//
// A tool is emitted only if its schema, in the profile's form, accepts
// nothing the held schema refuses. Profiles whose schema field takes JSON
// Schema (openai, anthropic, gemini-jsonschema, mcp) get the held
// schema byte for byte. The subset profiles (openai-strict,
// anthropic-strict, gemini) translate keyword by keyword from a table:
// each keyword is kept, translated without changing the accepted set
// (const to a one-value enum, ["T","null"] to nullable, a $ref inlined),
// dropped only if it is a pure annotation (title, examples, default, …),
// or refused. A keyword not in the table is refused, so nothing unknown
// is ever dropped. The one narrowing made — the model may send less — is
// the one the strict profiles document: additionalProperties false added
// to an object that names its properties and says nothing of others.
// format is treated as an assertion: a validator may check it.
//
// # Names
//
// Each emitted tool has an alias valid under the profile's name rules,
// unique in the projection and a function of the listing alone;
// Projection.Lookup maps it back to the (provider, name) identity. Where
// the turn's alias already obeys the profile's rules, it is the alias.
//
// # Tokens
//
// OpenAI profiles count exactly with tiktoken (o200k_base by default,
// cl100k_base on request) from ranks embedded in the binary: nothing is
// downloaded or read from disk. Other profiles use EstimateTokens, whose
// error against o200k_base is measured in the tests. A Cache keeps each
// tool's bytes and count by (revision, profile, alias, method).
//
// The package is pure: no I/O, no goroutines, no clock. Its only
// process-wide state is the tokenizer, loaded once on first use.
package projection
