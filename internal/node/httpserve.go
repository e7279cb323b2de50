package node

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sharedos/sharedos/internal/config"
)

// The node's HTTP listener (/metrics, /status, /healthz, /readyz, /mcp)
// and what bounds it. A connection holds one of at most MaxConnections
// slots from accept to close; the ones beyond wait in the kernel's listen
// backlog, holding no descriptor of this process. Its header must arrive
// within ReadHeaderTimeout and be at most MaxHeaderBytes, its whole
// request within ReadTimeout, its answer be written within WriteTimeout
// (the MCP front moves both deadlines to the request's own timeout once
// the body is read: mcpfront.Front.Handler), and an idle keep-alive
// connection is closed after IdleTimeout. The slots are at most half the
// process's descriptor limit (RLIMIT_NOFILE), so whatever the HTTP port
// is sent, the other half stays for the embedded NATS server's clients
// and routes, JetStream's files and the providers.

// Defaults of the HTTP listener's bounds (node.http_* in cluster.yaml).
const (
	DefaultHTTPReadHeaderTimeout = 5 * time.Second
	DefaultHTTPReadTimeout       = 30 * time.Second
	DefaultHTTPWriteTimeout      = 30 * time.Second
	DefaultHTTPIdleTimeout       = 60 * time.Second
	DefaultHTTPMaxHeaderBytes    = 64 << 10
	DefaultHTTPMaxConnections    = 4096
)

// httpBounds are the listener's bounds: cfg's, zero fields defaulted.
type httpBounds struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes, maxConns      int
}

func httpBoundsOf(n config.Node) httpBounds {
	or := func(v config.Duration, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return time.Duration(v)
	}
	orInt := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	return httpBounds{
		readHeader:     or(n.HTTPReadHeaderTimeout, DefaultHTTPReadHeaderTimeout),
		read:           or(n.HTTPReadTimeout, DefaultHTTPReadTimeout),
		write:          or(n.HTTPWriteTimeout, DefaultHTTPWriteTimeout),
		idle:           or(n.HTTPIdleTimeout, DefaultHTTPIdleTimeout),
		maxHeaderBytes: orInt(n.HTTPMaxHeaderBytes, DefaultHTTPMaxHeaderBytes),
		maxConns:       orInt(n.HTTPMaxConnections, DefaultHTTPMaxConnections),
	}
}

// server is the listener's http.Server over h.
func (b httpBounds) server(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: b.readHeader, ReadTimeout: b.read, WriteTimeout: b.write, IdleTimeout: b.idle,
		MaxHeaderBytes: b.maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// connSlots is the connection cap given a descriptor limit (0: unknown):
// the configured cap, at most half the limit.
func connSlots(configured int, limit uint64) int {
	if limit > 0 && uint64(configured) > limit/2 {
		return max(int(limit/2), 1)
	}
	return configured
}

// limitListener accepts while fewer than cap(slots) of its connections
// are open; Accept waits for a slot before it takes a connection from
// the backlog.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// slotConn gives its slot back when closed (once).
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
