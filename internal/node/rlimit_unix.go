//go:build unix

package node

import "syscall"

// fileLimit is the process's descriptor limit, the soft RLIMIT_NOFILE as
// it is now (0: unknown). The Go runtime raises the soft limit to the
// hard one when the process starts; a process that lowered it since keeps
// its choice, and the connection cap follows it.
func fileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}
