package reason_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sharedos/sharedos/reason"
)

func TestErrorsIsMatchesByCode(t *testing.T) {
	sentinels := map[reason.Code]error{
		reason.UnknownTool: reason.ErrUnknownTool, reason.NamespaceDisabled: reason.ErrNamespaceDisabled,
		reason.NotDiscoverable: reason.ErrNotDiscoverable, reason.InvalidArguments: reason.ErrInvalidArguments,
		reason.NoMatchingGrant: reason.ErrNoMatchingGrant, reason.StepCeilingExceeded: reason.ErrStepCeilingExceeded,
		reason.TurnClosed: reason.ErrTurnClosed, reason.TurnNotFound: reason.ErrTurnNotFound,
		reason.ProviderUnavailable: reason.ErrProviderUnavailable, reason.ProviderTimeout: reason.ErrProviderTimeout,
		reason.ProviderError: reason.ErrProviderError, reason.CapabilityChanged: reason.ErrCapabilityChanged,
		reason.Overloaded: reason.ErrOverloaded, reason.InvalidRequest: reason.ErrInvalidRequest,
		reason.NodeUnavailable: reason.ErrNodeUnavailable, reason.AuditUnavailable: reason.ErrAuditUnavailable,
		reason.DeadlineExceeded: reason.ErrDeadlineExceeded, reason.ResultTooLarge: reason.ErrResultTooLarge,
		reason.RateLimited: reason.ErrRateLimited, reason.TenantForbidden: reason.ErrTenantForbidden,
		reason.CredentialForbidden: reason.ErrCredentialForbidden,
		reason.ApprovalRequired:    reason.ErrApprovalRequired,
		reason.ApprovalDenied:      reason.ErrApprovalDenied,
		reason.ApprovalInvalid:     reason.ErrApprovalInvalid,
		reason.ApprovalForbidden:   reason.ErrApprovalForbidden,
		reason.PolicyStale:         reason.ErrPolicyStale,
		reason.PolicyForbidden:     reason.ErrPolicyForbidden,
		reason.PolicyConflict:      reason.ErrPolicyConflict,
		reason.PolicyNotFound:      reason.ErrPolicyNotFound,
		reason.AuthRequired:        reason.ErrAuthRequired,
		reason.InsufficientScope:   reason.ErrInsufficientScope,
		reason.PendingReview:       reason.ErrPendingReview,
		reason.HiddenText:          reason.ErrHiddenText,
		reason.Internal:            reason.ErrInternal,
	}
	if len(sentinels) != len(reason.Codes()) {
		t.Fatalf("%d sentinels for %d codes", len(sentinels), len(reason.Codes()))
	}
	for _, code := range reason.Codes() {
		err := fmt.Errorf("calling tool: %w", reason.New(code, "detail %d", 1))
		for other, sentinel := range sentinels {
			if got, want := errors.Is(err, sentinel), other == code; got != want {
				t.Errorf("errors.Is(%s, %s) = %v, want %v", code, other, got, want)
			}
		}
		if got := reason.Of(err); got != code {
			t.Errorf("Of(%s) = %s", code, got)
		}
		if !code.Known() {
			t.Errorf("%s not Known", code)
		}
	}
	if reason.Of(errors.New("plain")) != reason.Internal || reason.Of(nil) != "" {
		t.Error("Of must map foreign errors to internal and nil to empty")
	}
	if reason.Code("made_up").Known() {
		t.Error("made-up code reported known")
	}
}
