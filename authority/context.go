package authority

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// AccessContext is the who, when and what-for of one operation.
type AccessContext struct {
	Tenant    string
	Principal string
	// CredentialProfile is a stable identifier of the credentials the
	// principal acts with (for example "acme-github-work"). Never a secret:
	// it is part of cache and lease keys and appears in audit events.
	CredentialProfile string
	// TurnID names the turn the operation belongs to; empty means the
	// operation is a turn of its own.
	TurnID string
	// Now is the operation's instant. Grants are evaluated at it.
	Now time.Time
	// EnabledNamespaces are the tool namespaces this operation may see and call.
	EnabledNamespaces []string
	// Attributes are extra facts providers may vary their catalogue on
	// (for example "plan": "enterprise"). Part of the authority key.
	Attributes map[string]string
	// LeaseID is the caller's lease on the turn named by TurnID: every
	// operation on an open turn must hold one. A capability, not an
	// authority fact: not part of the authority key, never recorded and
	// never passed to providers or authority sources.
	LeaseID string
	// Caller is the bus identity that sent the operation, as the bus
	// established it (docs/security.md); "" when the front does not
	// authenticate (in-process use, tests). A lease is bound to the
	// caller that took it: an operation from another caller is refused as
	// if the lease did not exist. Not part of the authority key.
	Caller string
	// Transport names the front the operation came through ("mcp"); it is
	// recorded on the operation's audit events. Not an authority fact: not
	// part of the authority key.
	Transport string
}

// TurnAuthorityKey returns the key under which a turn's authority and
// catalogue lease is held.
//
// It covers the tenant, principal, credential profile, turn id and
// attributes, and deliberately excludes Now and EnabledNamespaces:
//   - excluding Now is what makes "the catalogue this turn was resolved for"
//     a statement about the turn rather than about an instant;
//   - excluding EnabledNamespaces is possible because what the lease holds
//     is the unfiltered registry; namespaces are applied per operation.
//
// Two contexts that differ only in Now or EnabledNamespaces therefore share
// a lease; any other difference gives a different key. The key is a hex
// SHA-256 over a length-prefixed encoding, so no choice of field values can
// make two different contexts collide by concatenation.
func TurnAuthorityKey(ctx AccessContext) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		l := uint64(len(s))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("sharedos.turn-authority.v1")
	field(ctx.Tenant)
	field(ctx.Principal)
	field(ctx.CredentialProfile)
	field(ctx.TurnID)
	keys := make([]string, 0, len(ctx.Attributes))
	for k := range ctx.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	field(fmt.Sprint(len(keys))) // the attribute count closes the fixed fields
	for _, k := range keys {
		field(k)
		field(ctx.Attributes[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
