package audit

import (
	"errors"
	"fmt"
)

// MaxTenantBytes bounds a tenant's name.
const MaxTenantBytes = 128

// ErrInvalidTenant is wrapped by CheckTenant's errors.
var ErrInvalidTenant = errors.New("audit: invalid tenant")

// CheckTenant reports whether tenant can be a tenant: one to
// MaxTenantBytes characters of [A-Za-z0-9_-], so that it is one subject
// token used as it is (TenantToken(tenant) == tenant) in every audit
// subject and in every permission rendered for it. No name is reserved:
// each audit subject has a fixed kind token before the tenant (Subject),
// so seg, checkpoint or live alias nothing.
//
// Every place a tenant is configured calls it, and so does the kernel for
// the tenant a request names (refused invalid_request).
func CheckTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: the tenant is empty", ErrInvalidTenant)
	case len(tenant) > MaxTenantBytes:
		return fmt.Errorf("%w: tenant of %d bytes, more than %d", ErrInvalidTenant, len(tenant), MaxTenantBytes)
	case !PlainToken(tenant):
		return fmt.Errorf("%w: tenant %q must be made of A-Z, a-z, 0-9, '_' and '-'", ErrInvalidTenant, tenant)
	}
	return nil
}
