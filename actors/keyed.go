package actors

import (
	"crypto/sha256"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/reason"
)

// Keyed calls: a call that carries a request id (messages.InvokeRequest.
// RequestID, chosen by the client) is executed at most once per lease of a
// named turn. A client that lost its answer — its bus connection moved to
// another server while the reply was in flight, or its attempt timed out —
// sends the same request again and gets the first execution's answer: a
// retry that arrives while the call runs waits for it; one that arrives
// after gets the answer the turn kept. A retry records nothing and spends
// no step: it is the same call, decided once at its own instant.
//
// What a turn keeps is bounded: the answers of its last
// maxKeptAnswers keyed calls (at most maxKeptAnswerBytes of results), and
// the ids of its last maxKeptRequestIDs. A retry of a call whose answer was
// let go is refused invalid_request with the call's id (its outcome is in
// the audit trail) rather than run again; a request id the turn no longer
// knows at all is a new call.
const (
	maxKeptAnswers     = 64
	maxKeptAnswerBytes = 4 << 20
	maxKeptRequestIDs  = 4096
	// maxRetryWaiters bounds the retries waiting on one call in flight
	// (beyond it the oldest is let go).
	maxRetryWaiters = 16
	// MaxRequestIDBytes bounds a request id.
	MaxRequestIDBytes = 128
)

// keyedCall is what a turn knows of one keyed call.
type keyedCall struct {
	fingerprint [sha256.Size]byte // of alias and arguments
	callID      string
	waiters     []*actor.PID // retries that arrived while it ran
	done        bool
	answer      any // *CallResult or *CallError once answered; nil when let go
	// earlier and receipt are what the first answer waited for; a retry
	// waits for the same (turnActor.reply).
	earlier []audit.Receipt
	receipt audit.Receipt
	size    int
}

// keyedCalls is a turn's memory of its keyed calls, in completion order.
type keyedCalls struct {
	byKey map[string]*keyedCall
	order []string // done keys, oldest first
	held  int      // order[held:] still hold their answers
	bytes int      // result bytes of the answers held
}

func callFingerprint(alias string, args []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(alias))
	h.Write([]byte{0})
	h.Write(args)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// requestKey scopes a request id to the lease that sent it: another
// lease's id, even an equal one, is another request.
func requestKey(lease, id string) string { return lease + "\x00" + id }

// replay answers a keyed call the turn has seen: it reports false when the
// key is new (the caller decides the call as usual).
func (a *turnActor) replay(ctx actor.Context, sender *actor.PID, key string, fp [sha256.Size]byte) bool {
	if a.keyed == nil {
		return false
	}
	kc, ok := a.keyed.byKey[key]
	if !ok {
		return false
	}
	switch {
	case kc.fingerprint != fp:
		ctx.Send(sender, reason.New(reason.InvalidRequest, "request id already names call %s, with another tool or other arguments", kc.callID))
	case !kc.done:
		if len(kc.waiters) >= maxRetryWaiters {
			// The oldest retry's caller has sent newer ones since: it is
			// told to wait for those, and makes room.
			ctx.Send(kc.waiters[0], reason.New(reason.Overloaded, "call %s has %d newer retries waiting for it", kc.callID, len(kc.waiters)))
			kc.waiters = append(kc.waiters[:0], kc.waiters[1:]...)
		}
		kc.waiters = append(kc.waiters, sender)
	case kc.answer != nil:
		a.reply(ctx, sender, kc.answer, kc.earlier, kc.receipt)
	default:
		ctx.Send(sender, &CallError{Err: reason.New(reason.InvalidRequest,
			"request id was answered as call %s and the turn no longer holds the answer; its outcome is in the audit trail", kc.callID),
			CallID: kc.callID, Dispatch: DispatchUnknown})
	}
	return true
}

// keyedStarted remembers a keyed call the turn has just allowed.
func (a *turnActor) keyedStarted(key string, fp [sha256.Size]byte, callID string) {
	if a.keyed == nil { // most turns never see a request id: nothing held
		a.keyed = &keyedCalls{byKey: map[string]*keyedCall{}}
	}
	a.keyed.byKey[key] = &keyedCall{fingerprint: fp, callID: callID}
}

// keyedDone records a keyed call's answer, answers the retries that waited
// for it, and lets go of what is beyond the bounds.
func (a *turnActor) keyedDone(ctx actor.Context, key string, answer any, earlier []audit.Receipt, receipt audit.Receipt) {
	if a.keyed == nil {
		return
	}
	kc := a.keyed.byKey[key]
	if kc == nil {
		return
	}
	for _, w := range kc.waiters {
		a.reply(ctx, w, answer, earlier, receipt)
	}
	kc.waiters, kc.done, kc.answer, kc.earlier, kc.receipt = nil, true, answer, earlier, receipt
	if r, ok := answer.(*CallResult); ok {
		kc.size = r.Result.Size()
	}
	k := a.keyed
	k.order = append(k.order, key)
	k.bytes += kc.size
	for len(k.order)-k.held > maxKeptAnswers || (k.bytes > maxKeptAnswerBytes && k.held < len(k.order)) {
		old := k.byKey[k.order[k.held]]
		k.bytes -= old.size
		old.answer, old.earlier, old.receipt, old.size = nil, nil, nil, 0
		k.held++
	}
	if drop := len(k.order) - maxKeptRequestIDs; drop > 0 {
		for _, key := range k.order[:drop] {
			delete(k.byKey, key)
		}
		k.order = append(k.order[:0], k.order[drop:]...)
		k.held = max(k.held-drop, 0)
	}
}

// keyedStopped answers the retries of a call the stopping turn ended.
func (a *turnActor) keyedStopped(ctx actor.Context, key string, answer any) {
	if a.keyed == nil {
		return
	}
	if kc := a.keyed.byKey[key]; kc != nil {
		for _, w := range kc.waiters {
			ctx.Send(w, answer)
		}
		kc.waiters = nil
	}
}
