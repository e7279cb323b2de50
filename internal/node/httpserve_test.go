package node

import (
	"net"
	"testing"
	"time"
)

// The connection cap is the configured one, at most half the descriptor
// limit (unknown: the configured one).
func TestConnSlotsLeaveHalfTheDescriptors(t *testing.T) {
	for _, c := range []struct {
		configured int
		limit      uint64
		want       int
	}{{4096, 0, 4096}, {4096, 1 << 20, 4096}, {4096, 1024, 512}, {4096, 8193, 4096}, {10, 1, 1}} {
		if got := connSlots(c.configured, c.limit); got != c.want {
			t.Errorf("connSlots(%d, %d) = %d, want %d", c.configured, c.limit, got, c.want)
		}
	}
}

// A limit listener of two takes a third connection only once one of the
// two closes; a closed listener's Accept returns.
func TestLimitListenerTakesNoMoreThanItsSlots(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case c := <-accepted:
		t.Fatalf("a third connection taken while two are open: %v", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
	_ = first.Close()
	third := <-accepted
	if third == nil {
		t.Fatal("the listener stopped")
	}
	_ = second.Close()
	_ = third.Close()
	_ = ln.Close()
	for range accepted {
	}
}
