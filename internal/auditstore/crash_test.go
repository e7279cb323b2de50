package auditstore

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// crashChildEnv names the store directory of TestCrashChild, the process
// TestKillUnderLoad kills.
const crashChildEnv = "SHAREDOS_AUDIT_CRASH_STORE"

// A node process — embedded server with sync_always, and the group-commit
// writer in acked mode under 64 concurrent emitters — is killed with
// SIGKILL while it writes. Restarted on the same store, the stream holds
// every record whose receipt completed before the kill (0 acked records
// lost), and the trail verifies.
func TestKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const killAfter = 3000
	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "acked ")
		if !ok {
			continue
		}
		acked[id] = true
		if len(acked) == killAfter && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before %d acks (%d): %v", killAfter, len(acked), err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}

	_, nc := natstest.StartWithOptions(t, natsserver.Options{JetStream: true, StoreDir: dir, SyncAlways: true})
	var all [][]byte
	stored := map[string]bool{}
	if err := ReadAll(ctxT(t, 30*time.Second), nc, TailOptions{}, func(data []byte, ev *audit.Event) error {
		if ev == nil {
			return fmt.Errorf("undecodable record %q", data)
		}
		all = append(all, data)
		stored[ev.ID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for id := range acked {
		if !stored[id] {
			lost++
		}
	}
	t.Logf("killed after %d acked records: %d stored, %d acked lost", len(acked), len(stored), lost)
	if lost != 0 {
		t.Fatalf("%d acked records lost", lost)
	}
	if rep := audit.Verify(all, true); !rep.OK() {
		t.Fatalf("Verify after the kill: %v", rep.Violations)
	}
}

// TestCrashChild is the process TestKillUnderLoad kills; it runs only
// there. It writes until it is killed, printing "acked <event id>" for
// each record whose receipt completed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestKillUnderLoad")
	}
	srv, err := natsserver.Start(natsserver.Options{JetStream: true, StoreDir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, JetStreamOptions{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	for w := range 64 {
		go func() {
			for i := 0; ; i++ {
				for _, r := range buildTurn(t, "acme", fmt.Sprintf("n1.k%d.%d", w, i), 20) {
					if err := audit.Wait(t.Context(), sink.Emit(r)); err != nil {
						fmt.Fprintln(os.Stderr, "receipt:", err)
						return
					}
					mu.Lock()
					fmt.Fprintf(os.Stdout, "acked %s\n", r.Event.ID)
					mu.Unlock()
				}
			}
		}()
	}
	select {} // until killed
}
