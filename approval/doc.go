// Package approval is what a human must decide before a call runs: the
// rules that name calls needing approval, the request an approval answers,
// and the check that an approval presented with a call is for exactly that
// call. It has no I/O: the kernel asks a Store (the JetStream bucket in a
// node, Memory in tests) and decides with the plain functions here.
//
// A Rule matches calls by tenant and, optionally, capability pattern,
// provider, tool name and annotations. Annotations are hints a provider
// writes about its own tools; a rule may match on them only when it names
// the provider whose annotations it trusts, so no tool can talk its way
// out of a rule by describing itself differently.
//
// An approval is bound to one call: the turn, the tool's identity and
// revision, the catalogue hash and the exact argument bytes the call was
// refused with. Check accepts it only for that call, only while it is
// approved, unexpired and unused; Store.Use consumes it at the revision the
// kernel read (compare-and-set), so two nodes — or two concurrent calls —
// cannot both run on one approval.
package approval
