package natsserver

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Routes authenticate: two servers sharing the route secret form a
// cluster (a message crosses it); a server with another secret that
// routes to them is refused — the listener logs the violation — and
// never joins.
func TestRoutesAuthenticate(t *testing.T) {
	ports := []int{freePort(t), freePort(t), freePort(t)}
	route := func(i int) string { return fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]) }
	h := newRecordingHandler(slog.LevelInfo)
	a := startT(t, Options{ServerName: "a", Logger: slog.New(h),
		Cluster: Cluster{Name: "c", Port: ports[0], Routes: []string{route(1)}, Username: "r", Password: "the-secret"}})
	b := startT(t, Options{ServerName: "b",
		Cluster: Cluster{Name: "c", Port: ports[1], Routes: []string{route(0)}, Username: "r", Password: "the-secret"}})
	deadline := time.Now().Add(30 * time.Second)
	wait := func(what string) {
		if time.Now().After(deadline) {
			t.Fatalf("%s after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for a.Routes() == 0 || b.Routes() == 0 {
		wait("no route between a and b")
	}
	na, err := a.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer na.Close()
	nb, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	sub, err := nb.SubscribeSync("across")
	if err != nil {
		t.Fatal(err)
	}
	for { // interest crosses the route shortly after the subscription
		if err := na.Publish("across", []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
			if string(m.Data) != "hi" {
				t.Fatalf("got %q", m.Data)
			}
			break
		}
		wait("no message across the route")
	}

	before := a.Routes() // route pooling: several connections to b
	intruder := startT(t, Options{ServerName: "intruder",
		Cluster: Cluster{Name: "c", Port: ports[2], Routes: []string{route(0)}, Username: "r", Password: "a-guess"}})
	for !h.has("authentication error") {
		wait("no authentication error logged for the intruder's route")
	}
	// The intruder registers its solicited route on a's INFO, before a
	// refuses its CONNECT, and retries for ever: its count is 1 for a
	// moment on each try. The listener never registers it.
	for intruder.Routes() != 0 {
		wait("the intruder's refused route never dropped")
	}
	rz, err := a.ns.Routez(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Routes() != before || len(rz.Routes) != before {
		t.Fatalf("a has %d routes, want its %d to b", a.Routes(), before)
	}
	for _, r := range rz.Routes {
		if r.RemoteName != "b" {
			t.Fatalf("a routes to %q; only b shares the secret", r.RemoteName)
		}
	}
}

// has reports whether a record's message contains s (case-insensitive).
func (h *recordingHandler) has(s string) bool {
	for _, r := range h.records() {
		if strings.Contains(strings.ToLower(r.Message), s) {
			return true
		}
	}
	return false
}
