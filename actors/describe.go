package actors

import (
	"context"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

// TurnInfo is what an open turn holds, as a front needs it to bind a
// credential to the turn (the MCP front's execution tokens).
type TurnInfo struct {
	TurnID string
	// CatalogHash is the hash of the catalogue the turn holds.
	CatalogHash string
	// Tenant, Principal, CredentialProfile and Attributes are the turn's
	// authority as opened.
	Tenant, Principal, CredentialProfile string
	Attributes                           map[string]string
	// Steps and StepCeiling: allowed calls so far, and the bound.
	Steps, StepCeiling int
}

// describeTurn asks a turn for its TurnInfo (answered *TurnInfo).
type describeTurn struct{ access authority.AccessContext }

// Describe resolves the turn's catalogue if it is not held yet and says
// which catalogue the turn holds. It shows no tools, so it records nothing
// of its own (a resolution it starts is recorded as for any operation).
// Like every operation on an open turn it needs the turn's lease; it never
// runs as a turn of one operation.
func (k *Kernel) Describe(ctx context.Context, access authority.AccessContext) (TurnInfo, error) {
	if access.TurnID == "" {
		return TurnInfo{}, reason.New(reason.InvalidRequest, "describe names an open turn")
	}
	res, err := k.turnOp(ctx, access, func(a authority.AccessContext, _ time.Time) any { return &describeTurn{access: a} })
	if err != nil {
		return TurnInfo{}, err
	}
	return *res.(*TurnInfo), nil
}
