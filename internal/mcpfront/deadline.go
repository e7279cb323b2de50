package mcpfront

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// answerTime is what a request's deadlines leave, past RequestTimeout,
// for writing its answer.
const answerTime = 10 * time.Second

// deadlines moves the connection's read and write deadlines to the
// request's own bound (RequestTimeout, and answerTime to write the
// answer) once its body has been read to its end: a call may
// legitimately take longer than the listener's timeouts
// (http.Server.ReadTimeout, WriteTimeout), and a read deadline passing
// while the handler works would cancel the request's context. Until then
// the listener's deadlines hold, so a trickled body is cut off at its
// read timeout. Every handler that does a request's work (the kernel's)
// reads its body to the end first; one that answers without reading it
// (a refusal) is quick.
func (f *Front) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		move := func() {
			end := time.Now().Add(f.opts.RequestTimeout + answerTime)
			// (Not every ResponseWriter has deadlines: then there are
			// none to move.)
			_ = rc.SetReadDeadline(end)
			_ = rc.SetWriteDeadline(end)
		}
		if r.Body == nil || r.Body == http.NoBody {
			move()
		} else {
			r.Body = &endOfBody{ReadCloser: r.Body, end: move}
		}
		next.ServeHTTP(w, r)
	})
}

// endOfBody calls end once, when its body reads to io.EOF.
type endOfBody struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (b *endOfBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.end)
	}
	return n, err
}
