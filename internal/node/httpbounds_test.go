package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/providers"
)

// httpAddr is the host:port of n's HTTP listener.
func httpAddr(t *testing.T, mcpURL string) string {
	t.Helper()
	u, err := url.Parse(mcpURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// closedByServer reads c until it ends: nil when the server closed it
// (EOF or a reset), an error when wait passed first (it stayed open).
func closedByServer(c net.Conn, wait time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("still open after %v", wait)
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			return nil
		default:
			return err
		}
	}
}

// Attack: a client holds many idle connections to the HTTP port, many
// more than the process has descriptors for. The listener takes at most
// half the descriptor limit (the rest of the connections wait in the
// listen backlog, holding none of the node's), so the embedded NATS
// server still takes a client, and a turn opened over it is served.
// The connections are dialled by a child process (this test binary,
// TestHTTPIdleDialer), so the node's descriptors are the only ones here.
func TestIdleHTTPConnectionsLeaveNATSServed(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip("no RLIMIT_NOFILE:", err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	low := lim
	low.Cur = uint64(len(open)) + 640
	if low.Cur > lim.Cur {
		t.Skipf("the descriptor limit %d is already below %d", lim.Cur, low.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NOFILE:", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })

	cfg := sampleConfig(t, t.TempDir())
	// Connections stay until the test ends: no header or idle timeout
	// closes them first.
	cfg.Node.HTTPReadHeaderTimeout = config.Duration(time.Hour)
	cfg.Node.HTTPIdleTimeout = config.Duration(time.Hour)
	n := start(t, cfg)
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })

	const conns = 2000 // beyond the limit, within the backlog (somaxconn)
	dialer := exec.Command(os.Args[0], "-test.run=^TestHTTPIdleDialer$")
	dialer.Env = append(os.Environ(), "SHAREDOS_IDLE_DIAL="+httpAddr(t, n.MCPURL()), "SHAREDOS_IDLE_CONNS="+strconv.Itoa(conns))
	stdin, _ := dialer.StdinPipe()
	stdout, _ := dialer.StdoutPipe()
	dialer.Stderr = os.Stderr
	if err := dialer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = dialer.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "dialled ") {
		t.Fatalf("dialer: %q %v", line, err)
	}
	if d, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "dialled "))); uint64(d) <= low.Cur {
		t.Fatalf("the dialer holds %d connections, not beyond the limit %d", d, low.Cur)
	}

	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatalf("a NATS client beside %d idle HTTP connections: %v", conns, err)
	}
	defer nc.Close()
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Invoke(ctx(t), "notes_put", []byte(`{"space":"acme","title":"t","body":"b"}`)); err != nil {
		t.Fatalf("a call beside %d idle HTTP connections: %v", conns, err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPIdleDialer is TestIdleHTTPConnectionsLeaveNATSServed's child:
// it dials SHAREDOS_IDLE_CONNS connections to SHAREDOS_IDLE_DIAL, sends
// nothing, says how many it holds and holds them until its stdin closes.
func TestHTTPIdleDialer(t *testing.T) {
	addr := os.Getenv("SHAREDOS_IDLE_DIAL")
	if addr == "" {
		t.Skip("the child of TestIdleHTTPConnectionsLeaveNATSServed")
	}
	want, _ := strconv.Atoi(os.Getenv("SHAREDOS_IDLE_CONNS"))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range want {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	fmt.Printf("dialled %d\n", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// Attack: a keep-alive connection left idle after its request is closed
// by the node once node.http_idle_timeout passes.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Node.HTTPIdleTimeout = config.Duration(200 * time.Millisecond)
	n, _ := startConnected(t, cfg)
	c, err := net.Dial("tcp", httpAddr(t, n.MCPURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("healthz: %+v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if err := closedByServer(c, 20*time.Second); err != nil {
		t.Fatalf("an idle keep-alive connection: %v", err)
	}
}

// Attack: a request to /mcp whose body is trickled a byte at a time is
// cut off at node.http_read_timeout: the connection is closed while the
// client is still sending.
func TestTrickledBodyIsCutOff(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Node.HTTPReadTimeout = config.Duration(300 * time.Millisecond)
	n, nc := startConnected(t, cfg)
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", httpAddr(t, n.MCPURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	head := "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + tok.Token +
		"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(body)-1; i++ { // never the last byte
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	if err := closedByServer(c, 20*time.Second); err != nil {
		t.Fatalf("a trickled body: %v", err)
	}
}

// A call on /mcp that takes longer than the listener's read and write
// timeouts is answered: once its body is read the request's deadlines are
// the MCP front's own.
func TestLongMCPCallOutlivesTheListenersTimeouts(t *testing.T) {
	slow := providers.NewMemory("slow", providers.MemoryTool{
		Definition: catalog.Definition{Name: "pause", Namespace: "text", Description: "Answers after a second.",
			Capability: "text.pause", Requirement: "text/pause", InputSchema: []byte(`{"type":"object"}`)},
		Handler: func(ctx context.Context, _ providers.Call) (providers.Result, error) {
			select {
			case <-time.After(time.Second):
				return providers.Result{Text: "done"}, nil
			case <-ctx.Done():
				return providers.Result{}, ctx.Err()
			}
		},
	})
	cfg := sampleConfig(t, t.TempDir())
	cfg.Node.HTTPReadTimeout = config.Duration(200 * time.Millisecond)
	cfg.Node.HTTPWriteTimeout = config.Duration(200 * time.Millisecond)
	_, nc := startConnected(t, cfg, slow)
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "sandbox", Version: "1"}, nil).Connect(ctx(t),
		&mcp.StreamableClientTransport{Endpoint: tok.URL, HTTPClient: &http.Client{Transport: bearerRT{tok.Token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: "text_pause", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("a call longer than the listener's timeouts: %+v %v", res, err)
	}
}
