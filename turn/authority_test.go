package turn

import (
	"fmt"
	"testing"

	"github.com/sharedos/sharedos/authority"
)

// sameAuthority must agree with comparing turn authority keys, which is
// what it replaces on every operation.
func TestSameAuthorityIsKeyEquality(t *testing.T) {
	base := authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "p", TurnID: "n.t",
		EnabledNamespaces: []string{"notes"}, Attributes: map[string]string{"plan": "pro"}}
	variants := []func(a *authority.AccessContext){
		func(a *authority.AccessContext) {},
		func(a *authority.AccessContext) { a.Tenant = "globex" },
		func(a *authority.AccessContext) { a.Principal = "bob" },
		func(a *authority.AccessContext) { a.CredentialProfile = "" },
		func(a *authority.AccessContext) { a.TurnID = "n.u" },
		func(a *authority.AccessContext) { a.EnabledNamespaces = nil },          // not part of the key
		func(a *authority.AccessContext) { a.Attributes = nil },                 // one attribute fewer
		func(a *authority.AccessContext) { a.Attributes = map[string]string{} }, // as nil
		func(a *authority.AccessContext) { a.Attributes = map[string]string{"plan": "free"} },
		func(a *authority.AccessContext) { a.Attributes = map[string]string{"plan": "pro", "x": ""} },
		func(a *authority.AccessContext) { a.Tenant, a.Principal = "acmeada", "" },
	}
	for i, vi := range variants {
		for j, vj := range variants {
			a, b := base, base
			a.Attributes, b.Attributes = clone(base.Attributes), clone(base.Attributes)
			vi(&a)
			vj(&b)
			want := authority.TurnAuthorityKey(a) == authority.TurnAuthorityKey(b)
			if got := sameAuthority(a, b); got != want {
				t.Errorf("variants %d, %d: sameAuthority %v, keys equal %v (%s / %s)", i, j, got, want, fmt.Sprint(a), fmt.Sprint(b))
			}
		}
	}
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
