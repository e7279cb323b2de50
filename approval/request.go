package approval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// Request is what an approver is asked to approve: one call, exactly.
type Request struct {
	// ID names the request (and the approval it becomes): "apr-" and the
	// turn's incarnation and call id, unique across the cluster.
	ID string `json:"id"`
	// Tenant, Principal and CredentialProfile are the call's; Caller is
	// the bus identity that made it.
	Tenant            string `json:"tenant"`
	Principal         string `json:"principal"`
	CredentialProfile string `json:"credential_profile,omitempty"`
	Caller            string `json:"caller,omitempty"`
	// Turn and CallID are the turn and the refused call it was asked for.
	Turn   string `json:"turn"`
	CallID string `json:"call"`
	// The tool: its identity, the alias the turn shows it as, the
	// revision of its contract, the turn's catalogue hash.
	Provider    string `json:"provider"`
	Tool        string `json:"tool"`
	Alias       string `json:"alias"`
	Revision    string `json:"revision"`
	CatalogHash string `json:"catalog_hash"`
	// Arguments are the call's argument bytes, exactly as sent;
	// ArgsHash their SHA-256 (hex), as tool.invoked records it.
	// (Bytes, base64 in JSON: a JSON encoder would compact them.)
	Arguments []byte `json:"arguments"`
	ArgsHash  string `json:"args_hash"`
	// Rule is the rule that names the call; SeparateDuties is its.
	Rule           string    `json:"rule"`
	SeparateDuties bool      `json:"separate_duties,omitempty"`
	RequestedAt    time.Time `json:"requested_at"`
	ExpiresAt      time.Time `json:"expires_at"`
}

// Status is where a request is in its life.
type Status string

// The statuses. A request is pending until an approver decides it;
// approved until a call uses it (then used); denied for good.
const (
	Pending  Status = "pending"
	Approved Status = "approved"
	Denied   Status = "denied"
	Used     Status = "used"
)

// State is a request as stored: the request, its decision and its use.
type State struct {
	Request
	Status Status `json:"status"`
	// DecidedBy (the approver's bus identity), DecidedAt and Reason are
	// the decision's. Recorded says its approval.decided event is stored:
	// an approval is in force only once it is.
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	Recorded  bool      `json:"recorded,omitempty"`
	// UsedBy is the call id that used the approval, UsedAt when.
	UsedBy string    `json:"used_by,omitempty"`
	UsedAt time.Time `json:"used_at,omitzero"`
}

// Expired reports whether st can no longer be decided or used at now.
func (st State) Expired(now time.Time) bool { return !now.Before(st.ExpiresAt) }

// ArgsHash is the SHA-256 (hex) of argument bytes.
func ArgsHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Call is the call an approval is presented with.
type Call struct {
	Tenant, Principal, Turn  string
	Provider, Tool, Revision string
	CatalogHash              string
	Arguments                []byte
}

// Check decides whether st lets call run at now: approved (and its
// decision recorded), unexpired, unused, and for exactly this call — its
// tenant, principal, turn, tool identity and revision, catalogue and
// argument bytes. A pending request is approval_required (the same
// request, still waiting); a denied one approval_denied; anything else
// that does not fit approval_invalid.
func Check(st State, c Call, now time.Time) *reason.Error {
	switch {
	case st.Tenant != c.Tenant || st.Principal != c.Principal || st.Turn != c.Turn:
		return reason.New(reason.ApprovalInvalid, "approval %s is for another turn", st.ID)
	case st.Provider != c.Provider || st.Tool != c.Tool:
		return reason.New(reason.ApprovalInvalid, "approval %s is for tool %s/%s, not %s/%s", st.ID, st.Provider, st.Tool, c.Provider, c.Tool)
	case st.Revision != c.Revision:
		return reason.New(reason.ApprovalInvalid, "approval %s is for revision %s of %s/%s; the turn holds %s", st.ID, short(st.Revision), st.Provider, st.Tool, short(c.Revision))
	case st.CatalogHash != c.CatalogHash:
		return reason.New(reason.ApprovalInvalid, "approval %s is for catalogue %s; the turn holds %s", st.ID, short(st.CatalogHash), short(c.CatalogHash))
	case !bytes.Equal(st.Arguments, c.Arguments) || st.ArgsHash != ArgsHash(c.Arguments):
		return reason.New(reason.ApprovalInvalid, "approval %s is for other arguments (sha256 %s, not %s)", st.ID, short(st.ArgsHash), short(ArgsHash(c.Arguments)))
	case st.Status == Used:
		return reason.New(reason.ApprovalInvalid, "approval %s was used by call %s", st.ID, st.UsedBy)
	case st.Status == Denied:
		return reason.New(reason.ApprovalDenied, "%s denied approval %s: %s", st.DecidedBy, st.ID, st.Reason)
	case st.Expired(now):
		return reason.New(reason.ApprovalInvalid, "approval %s expired at %s", st.ID, st.ExpiresAt.UTC().Format(time.RFC3339))
	case st.Status == Pending || st.Status == Approved && !st.Recorded:
		return reason.New(reason.ApprovalRequired, "approval %s is waiting for an approver (until %s)", st.ID, st.ExpiresAt.UTC().Format(time.RFC3339))
	case st.Status != Approved:
		return reason.New(reason.ApprovalInvalid, "approval %s is %q", st.ID, st.Status)
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Errors a Store returns.
var (
	// ErrNotFound: no request has that id (never made, or expired and
	// dropped by the store).
	ErrNotFound = errors.New("approval: no such request")
	// ErrConflict: the request changed since the revision the caller
	// read (someone else decided or used it first).
	ErrConflict = errors.New("approval: the request changed since it was read")
	// ErrExists: a request with that id is already stored.
	ErrExists = errors.New("approval: request already stored")
)

// Store keeps requests durably where every node of the cluster reads them.
// Implementations are safe for concurrent use.
type Store interface {
	// Put stores a new pending request (ErrExists if its id is taken) and
	// announces it to the tenant's approvers.
	Put(ctx context.Context, r Request) error
	// Get returns a request's current state and its revision
	// (ErrNotFound).
	Get(ctx context.Context, tenant, id string) (State, uint64, error)
	// Use marks an approved request used by callID at at, only if it is
	// still at revision rev (ErrConflict otherwise): the compare-and-set
	// that lets one call, on one node, run on one approval.
	Use(ctx context.Context, tenant, id string, rev uint64, callID string, at time.Time) error
}

// Decision is an approver's answer to a request.
type Decision struct {
	Approve bool
	// By is the approver's bus identity; Principals the principals it
	// names as its own ("tenant/principal"), which separation of duties
	// excludes from approving their own calls.
	By         string
	Principals []string
	Reason     string
	At         time.Time
}

// Decide applies d to st: the decided state, or why d cannot be applied —
// st no longer pending (approval_invalid), expired (approval_invalid), or
// an approver separation of duties excludes (approval_forbidden).
func Decide(st State, d Decision) (State, *reason.Error) {
	if st.Status != Pending {
		if st.Status == Approved && !st.Recorded && st.DecidedBy == d.By && d.Approve {
			return st, nil // a retry of a decision whose record failed
		}
		return st, reason.New(reason.ApprovalInvalid, "approval %s is already %s", st.ID, st.Status)
	}
	if st.Expired(d.At) {
		return st, reason.New(reason.ApprovalInvalid, "approval %s expired at %s", st.ID, st.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if st.SeparateDuties {
		for _, p := range d.Principals {
			if p == st.Tenant+"/"+st.Principal {
				return st, reason.New(reason.ApprovalForbidden, "rule %s separates duties: %s is principal %s and cannot decide its own call", st.Rule, d.By, p)
			}
		}
	}
	if len(d.Reason) > MaxReasonBytes {
		return st, reason.New(reason.InvalidRequest, "a reason is at most %d bytes", MaxReasonBytes)
	}
	st.Status, st.DecidedBy, st.DecidedAt, st.Reason, st.Recorded = Denied, d.By, d.At.UTC(), d.Reason, false
	if d.Approve {
		st.Status = Approved
	}
	return st, nil
}

// MaxReasonBytes bounds a decision's reason.
const MaxReasonBytes = 4096

// Validate checks a stored state read from outside the process.
func (st State) Validate() error {
	switch st.Status {
	case Pending, Approved, Denied, Used:
	default:
		return fmt.Errorf("approval: %s: status %q", st.ID, st.Status)
	}
	if st.ID == "" || st.Tenant == "" || st.Turn == "" || st.ArgsHash != ArgsHash(st.Arguments) {
		return fmt.Errorf("approval: %s: incomplete or inconsistent request", st.ID)
	}
	return nil
}
