package actors

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
)

// TurnView is what an operator is shown of an open turn (the console):
// its authority as opened, the catalogue it holds and its steps.
// Inspecting a turn is not an operation of the turn: it needs no lease,
// records nothing, starts no resolution and does not count as activity,
// so an inspected turn still idles out.
type TurnView struct {
	TurnInfo
	// Opener is the bus identity that opened the turn.
	Opener string
	// Resolved is false until the turn first needed its catalogue (then
	// CatalogHash and Tools are empty).
	Resolved bool
	// Closing: the turn is closing or finished and lingers.
	Closing bool
	// Leases held, calls in flight, namespaces enabled.
	Leases, InFlight int
	Namespaces       []string
	// Tools is the held catalogue, in identity order.
	Tools []HeldTool
	// Degraded are the providers whose catalogue was incomplete.
	Degraded []ProviderStatus
}

// HeldTool is one tool of a held catalogue.
type HeldTool struct {
	Alias       string
	Identity    catalog.Identity
	Namespace   string
	Revision    string
	Description string
}

// inspectTurn asks a turn for its *TurnView; turn actors answer it in any
// phase, ahead of their activity count.
type inspectTurn struct{}

// listTurns asks the directory for its named open turns (answered
// []turnRef): those of the tenants tenant admits, at most max.
type listTurns struct {
	tenant func(string) bool
	max    int
}

type turnRef struct {
	id  string
	pid *actor.PID
}

// MaxTurnViews bounds what one Turns call returns.
const MaxTurnViews = 1000

// Turns returns the named turns open on this node whose tenant admits
// (nil: every tenant), at most max (at most MaxTurnViews), ordered by
// tenant then turn id. Turns of one operation are not listed. A turn that
// closes while it is being read is left out.
func (k *Kernel) Turns(ctx context.Context, tenant func(string) bool, max int) ([]TurnView, error) {
	if tenant == nil {
		tenant = func(string) bool { return true }
	}
	if max <= 0 || max > MaxTurnViews {
		max = MaxTurnViews
	}
	res, err := k.request(ctx, k.dir, &listTurns{tenant: tenant, max: max})
	if err != nil {
		return nil, err
	}
	refs := res.([]turnRef)
	out := make([]TurnView, 0, len(refs))
	for _, r := range refs {
		v, err := k.inspect(ctx, r.pid)
		if errors.Is(err, actor.ErrDeadLetter) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if v.TurnID != "" { // not started yet
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b TurnView) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.TurnID, b.TurnID)
	})
	return out, nil
}

// Inspect returns the view of the named turn open on this node, or
// turn_not_found.
func (k *Kernel) Inspect(ctx context.Context, turnID string) (TurnView, error) {
	if !validID(turnID) {
		return TurnView{}, reason.New(reason.TurnNotFound, "no turn %q", turnID)
	}
	v, err := k.inspect(ctx, actor.NewPID(k.system.Address(), directoryName+"/"+turnID))
	if errors.Is(err, actor.ErrDeadLetter) || err == nil && v.TurnID == "" {
		return TurnView{}, reason.New(reason.TurnNotFound, "no open turn %s on node %s", turnID, k.sh.opts.Node)
	}
	return v, err
}

func (k *Kernel) inspect(ctx context.Context, pid *actor.PID) (TurnView, error) {
	res, err := k.request(ctx, pid, &inspectTurn{})
	if err != nil {
		return TurnView{}, err
	}
	return *res.(*TurnView), nil
}

// list answers listTurns.
func (d *directory) list(msg *listTurns) []turnRef {
	var out []turnRef
	for id, l := range d.turns {
		if len(out) >= msg.max {
			break
		}
		if l.oneOp || !msg.tenant(tenantOfKey(l.principal)) {
			continue
		}
		out = append(out, turnRef{id: id, pid: l.pid})
	}
	return out
}

// tenantOfKey is the tenant of a principalKey.
func tenantOfKey(key string) string {
	n, rest, ok := strings.Cut(key, ":")
	if !ok {
		return ""
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) {
		return ""
	}
	return rest[:l]
}

// inspect answers inspectTurn from the turn's state as it is.
func (a *turnActor) inspect(ctx actor.Context) {
	v := &TurnView{}
	if a.m != nil {
		acc := a.m.Access()
		v.TurnInfo = TurnInfo{TurnID: a.turnID, Tenant: acc.Tenant, Principal: acc.Principal,
			CredentialProfile: acc.CredentialProfile, Attributes: acc.Attributes, Steps: a.m.Steps(), StepCeiling: a.sh.opts.StepCeiling}
		v.Opener, v.Closing, v.Leases, v.InFlight, v.Namespaces = a.opener, a.m.Closed(), len(a.leases), a.m.InFlight(), a.m.Namespaces()
		if reg := a.m.Registry(); reg != nil {
			v.Resolved, v.CatalogHash = true, reg.Hash()
			v.Tools = make([]HeldTool, reg.Len())
			for i := range reg.Len() {
				t, alias := reg.At(i)
				v.Tools[i] = HeldTool{Alias: alias, Identity: t.Identity, Namespace: t.Namespace, Revision: t.Revision, Description: t.Description}
			}
			v.Degraded = degraded(a.m.Degraded())
		}
	}
	ctx.Respond(v)
}
