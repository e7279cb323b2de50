package mcpfront

import "net/http"

// SDKHandler is f's handler without the fast path.
func SDKHandler(f *Front) http.Handler { return f.sdkHandler }

// FastServed is how many requests f's fast path answered.
func FastServed(f *Front) int64 { return f.fastServed.Load() }

// HoldForwardSlots takes every slot for forwarded requests on f, as if
// that many were being served; release gives them back.
func HoldForwardSlots(f *Front) (release func()) {
	n := cap(f.fwdSlots)
	for range n {
		f.fwdSlots <- struct{}{}
	}
	return func() {
		for range n {
			<-f.fwdSlots
		}
	}
}

// VerifiedTokens is how many tokens f remembers as verified.
func VerifiedTokens(f *Front) int {
	f.vmu.RLock()
	defer f.vmu.RUnlock()
	return len(f.verified)
}
