//go:build !unix

package node

// fileLimit is unknown off Unix: the connection cap is the configured one.
func fileLimit() uint64 { return 0 }
