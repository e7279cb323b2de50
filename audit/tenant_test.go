package audit

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTenant(t *testing.T) {
	for _, ok := range []string{"acme", "Acme_Corp-2", "seg", "checkpoint", "live", strings.Repeat("a", MaxTenantBytes)} {
		if err := CheckTenant(ok); err != nil {
			t.Errorf("CheckTenant(%q): %v", ok, err)
		}
		if TenantToken(ok) != ok {
			t.Errorf("a valid tenant %q is not its own token", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "~612e62", "ü", "acme\n", strings.Repeat("a", MaxTenantBytes+1)} {
		if err := CheckTenant(bad); !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("CheckTenant(%q) = %v, want ErrInvalidTenant", bad, err)
		}
	}
}
