// Package contract classifies how a tool's contract changed between the
// revision an operator last accepted and the one its provider offers now,
// and decides what a turn may hold while the change waits for review.
// It does no I/O: the baselines are kept by a Store (Memory here; the
// node's is in the policy store, beside the policy bucket).
//
// # Classes
//
// Classify compares two normalized contracts (Contract, as catalog.Tool
// holds them) field by field: the title and description (model-facing
// text), the input schema — widened, narrowed, changed otherwise, or only
// its descriptive keywords — the output schema, the annotations (with the
// hints whose change claims less safety), and the capability, requirement
// and namespace. A tool with no accepted contract is New; one no longer
// offered is Removed.
//
// Schemas are compared structurally, never by bytes (CompareSchemas): a
// schema accepts the intersection of what its keywords accept, so
// comparing keyword by keyword — the type sets, enum and const, required,
// properties against additionalProperties name by name, numeric and
// length bounds, pattern, format, items, uniqueItems, multipleOf — gives
// a sound verdict: Wider only when every value valid before is valid now,
// Narrower only when every value valid now was valid before. Anything it
// does not understand (anyOf, $ref into a part that changed, if/then,
// unevaluated keywords, …) that differs makes the schema Changed, never a
// guess. Swapping the two contracts gives the inverse classes (New and
// Removed, Widened and Narrowed swap; the rest stay).
//
// # Descriptions are external content
//
// A description is text a server wrote for a model. Visible writes the
// characters a reader cannot see or that reorder what they see (Hidden)
// as ⟦U+XXXX⟧, and Diff uses it for every text it prints, so a reviewer
// sees what the model would read. FindHidden says where a contract's
// model-facing text carries them, for a provider whose policy refuses
// such tools. Nothing in a description or an annotation changes a
// decision here: the class of a change says what changed, the provider's
// policy (Policy) says what happens.
//
// # Baselines and holding
//
// Gate keeps, for every (tenant, provider, tool), the contract revision
// last accepted (a Record, in a Store with revision compare-and-set, so
// resolutions on several nodes cannot lose each other's updates). At each
// catalogue resolution a tool whose revision is not the accepted one is
// classified, and its provider's Policy decides: DriftAdopt accepts the
// new revision (recorded, the baseline advanced), DriftHold leaves the
// tool out of the turn's catalogue and records the revision pending
// review, until Accept. A new tool of a holding provider waits too,
// unless FirstUse is FirstUseTrust.
package contract
