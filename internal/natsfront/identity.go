package natsfront

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/ratelimit"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// requestInfoHeader is the header nats-server writes on a request that
// crosses a service import, naming the requester's account. The server
// replaces whatever a client put there (server/client.go,
// processServiceImport), so it is the bus's word, not the caller's.
const requestInfoHeader = "Nats-Request-Info"

// maxRequestInfo bounds the header before it is decoded.
const maxRequestInfo = 8 << 10

// callerKey carries the request's caller in its context.
type callerKey struct{}

// caller is who sent a request, as the bus says.
type caller struct {
	id *identity.Identity // nil: the front does not authenticate
	// refusal, if set, is why the request may not be served at all.
	refusal error
}

// callerOf establishes the caller of r. Without Options.Identities the
// front does not authenticate (in-process embedders and tests): the
// caller is nobody in particular and the access fields are taken as sent.
func (f *Front) callerOf(r micro.Request) caller {
	ids := f.ids.Load()
	if ids == nil {
		return caller{}
	}
	info := r.Headers().Get(requestInfoHeader)
	if info == "" {
		// Only a service import stamps the header: a request without it
		// was published inside the nodes' own account, where only nodes
		// may publish to the turn subjects (their permissions say so).
		if !f.opts.TrustUnstamped {
			return caller{refusal: reason.New(reason.TenantForbidden, "the request did not come through an authenticated runtime identity")}
		}
		return caller{id: &nodeCaller}
	}
	if len(info) > maxRequestInfo {
		return caller{refusal: reason.New(reason.TenantForbidden, "the request's identity header is %d bytes", len(info))}
	}
	var ci struct {
		Account string `json:"acc"`
	}
	if err := json.Unmarshal([]byte(info), &ci); err != nil || ci.Account == "" {
		return caller{refusal: reason.New(reason.TenantForbidden, "the request's identity header names no account")}
	}
	id, ok := ids.Lookup(ci.Account)
	if !ok || id.Role != identity.Runtime {
		return caller{refusal: reason.New(reason.TenantForbidden, "bus identity %q is not a runtime of this node", ci.Account)}
	}
	return caller{id: id}
}

// SetIdentities makes the front judge callers against ids from the next
// request on (the policy's identities changed). A front serving without
// identities (Options.Identities nil) keeps doing so: ids nil is ignored.
// Safe for concurrent use with the requests it serves.
func (f *Front) SetIdentities(ids *identity.Set) {
	if ids != nil && f.ids.Load() != nil {
		f.ids.Store(ids)
	}
}

// nodeCaller is a request from inside the nodes' account.
var nodeCaller = identity.Identity{Name: "node", Role: identity.Node}

// accessFor turns a request's wire access into the kernel's access
// context for the caller in ctx — the only way a handler gets one. In
// order: a request the bus did not attribute is refused; a malformed or
// oversized access is invalid_request (it is malformed, not forbidden,
// whoever sent it); a caller that may not act for its tenant and
// principal is refused tenant_forbidden, and one naming a credential
// profile its identity is narrowed away from credential_forbidden, both
// recorded in the named tenant's trail. The context is bound to the
// caller (its leases are its own). The instant is left zero: the kernel
// stamps every operation with its own clock.
func (f *Front) accessFor(ctx context.Context, a messages.Access) (authority.AccessContext, error) {
	ac := a.Context(time.Time{})
	c, _ := ctx.Value(callerKey{}).(caller)
	if c.refusal != nil {
		return authority.AccessContext{}, c.refusal
	}
	if err := actors.CheckAccess(ac); err != nil {
		return authority.AccessContext{}, err
	}
	if c.id == nil {
		return ac, nil
	}
	ac.Caller = c.id.Name
	if !c.id.Permits(a.Tenant, a.Principal) && !f.opts.NoTenantBinding {
		f.forbidden.Add(1)
		f.recordRefusal(ctx, ac, c.id, reason.TenantForbidden)
		return authority.AccessContext{}, reason.New(reason.TenantForbidden, "identity %s may not act for %s/%s", c.id.Name, a.Tenant, a.Principal)
	}
	if !c.id.PermitsCredential(a.Tenant, a.Credential) {
		f.forbidden.Add(1)
		f.recordRefusal(ctx, ac, c.id, reason.CredentialForbidden)
		return authority.AccessContext{}, reason.New(reason.CredentialForbidden, "identity %s may not act with credential profile %s/%s", c.id.Name, a.Tenant, a.Credential)
	}
	return ac, nil
}

// recordRefusal audits a refusal in the named tenant's trail
// (Kernel.RecordRefusal, which records a bounded summary), within the
// identity's refusal rate: an identity that keeps trying cannot flood any
// tenant's audit; past its rate the refusals are only counted and logged.
func (f *Front) recordRefusal(ctx context.Context, ac authority.AccessContext, id *identity.Identity, code reason.Code) {
	log := f.opts.Logger.With("identity", id.Name, "tenant", ac.Tenant, "principal", ac.Principal, "code", string(code))
	if f.refusals.Take(id.Name, time.Now()) > 0 {
		f.unrecorded.Add(1)
		log.Debug("natsfront: refused (not recorded: over the identity's refusal rate)")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, refusalRecordTimeout)
	defer cancel()
	if err := f.k.RecordRefusal(rctx, ac, code); err != nil {
		log.Warn("natsfront: refused; recording the refusal failed", "err", err)
		return
	}
	log.Warn("natsfront: refused (recorded in the tenant's audit)")
}

// refusalRecordTimeout bounds the wait for a refusal's record.
const refusalRecordTimeout = 5 * time.Second

// DefaultRefusalRate is how many refusals of one identity a second (and
// at once) the front records in tenants' trails by default.
var DefaultRefusalRate = ratelimit.Limit{Rate: 1, Burst: 20}

// identityRates are the runtime identities' open and call limiters, by
// identity name (none: no limit). Read-only once built.
type identityRates struct {
	opens, calls map[string]*ratelimit.Limiter
}

// limiters builds m's limiters, keeping prev's limiter (and so its
// spent bucket) for each identity whose limit is unchanged.
func limiters(m map[string]ratelimit.Limit, prev map[string]*ratelimit.Limiter) map[string]*ratelimit.Limiter {
	out := make(map[string]*ratelimit.Limiter, len(m))
	for name, l := range m {
		if old := prev[name]; old != nil && old.Limit() == l {
			out[name] = old
		} else if lim := ratelimit.New(l); lim != nil {
			out[name] = lim
		}
	}
	return out
}

// SetRates makes the identities' open and call rates those given, from
// each identity's next request on (the policy's identities changed). An
// identity whose limit is unchanged keeps its bucket as spent; one whose
// limit changed starts a full bucket of the new limit; one left out has
// no limit. Safe for concurrent use with the requests the front serves;
// calls of SetRates itself are the caller's to serialize.
func (f *Front) SetRates(open, call map[string]ratelimit.Limit) {
	prev := f.rates.Load()
	f.rates.Store(&identityRates{opens: limiters(open, prev.opens), calls: limiters(call, prev.calls)})
}

// rateCheck spends a token of the caller's open or call rate (one bucket
// per identity: the limiter is the identity's own).
func (f *Front) rateCheck(ctx context.Context, lims map[string]*ratelimit.Limiter, what string) error {
	c, _ := ctx.Value(callerKey{}).(caller)
	if c.id == nil {
		return nil
	}
	lim := lims[c.id.Name]
	if lim == nil {
		return nil
	}
	if wait := lim.Take(c.id.Name, time.Now()); wait > 0 {
		return &reason.Error{Code: reason.RateLimited, Message: "identity " + c.id.Name + " is over its " + what + " rate", RetryAfter: wait}
	}
	return nil
}

// Forbidden is how many requests were refused tenant_forbidden or
// credential_forbidden.
func (f *Front) Forbidden() int64 { return f.forbidden.Load() }

// UnrecordedRefusals is how many of those were not recorded in a
// tenant's trail, their identity being over its refusal rate.
func (f *Front) UnrecordedRefusals() int64 { return f.unrecorded.Load() }
