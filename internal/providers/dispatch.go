package providers

import "errors"

// ErrNotDispatched marks an Invoke error whose call never reached the
// place the tool runs: nothing was written to a connection that had
// completed its handshake (an MCP server whose restart failed during
// initialize, a remote provider with no instance, a pinned contract that
// no longer matches, a signing failure). The kernel reports such a call
// not dispatched — safe to retry — and every other Invoke error
// dispatched: it may have run.
var ErrNotDispatched = errors.New("the call was not dispatched")

// NotDispatched returns err marked ErrNotDispatched (nil for nil); err's
// own chain (a reason code) is kept for errors.Is and errors.As.
func NotDispatched(err error) error {
	if err == nil || errors.Is(err, ErrNotDispatched) {
		return err
	}
	return notDispatched{err}
}

type notDispatched struct{ err error }

func (e notDispatched) Error() string   { return e.err.Error() }
func (e notDispatched) Unwrap() []error { return []error{e.err, ErrNotDispatched} }
