package mcpfront

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// modernRevision is the first protocol revision with ttlMs and cacheScope.
const modernRevision = "2026-07-28"

// rewrite adjusts two things the SDK cannot be told, in the JSON answers
// of the stateless handler:
//   - capabilities.tools.listChanged is sent as false, not omitted
//     (initialize and server/discover): the turn pins its catalogue, and
//     the promise is on the wire;
//   - a client on a revision before 2026-07-28 does not get ttlMs and
//     cacheScope (its revision does not define them).
//
// Only answers that can carry either are decoded.
func rewrite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &bufferedWriter{header: w.Header()}
		next.ServeHTTP(bw, r)
		body := bw.buf.Bytes()
		if bw.status == 0 {
			bw.status = http.StatusOK
		}
		if bw.status == http.StatusOK {
			if out, ok := adjust(body, r.Header.Get("MCP-Protocol-Version")); ok {
				body = out
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			}
		}
		w.WriteHeader(bw.status)
		_, _ = w.Write(body)
	})
}

// adjust is body as rewrite answers it, and true, when it changed it.
// Only a body that can carry what it adjusts is decoded.
func adjust(body []byte, version string) ([]byte, bool) {
	if !bytes.Contains(body, []byte(`"capabilities"`)) && !bytes.Contains(body, []byte(`"ttlMs"`)) {
		return nil, false
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || msg["result"] == nil {
		return nil, false
	}
	var res map[string]json.RawMessage
	if json.Unmarshal(msg["result"], &res) != nil {
		return nil, false
	}
	changed := false
	if caps, ok := res["capabilities"]; ok {
		var c map[string]json.RawMessage
		if json.Unmarshal(caps, &c) == nil && c["tools"] != nil {
			var tools map[string]any
			if json.Unmarshal(c["tools"], &tools) == nil {
				tools["listChanged"] = false
				c["tools"], _ = json.Marshal(tools)
				res["capabilities"], _ = json.Marshal(c)
				changed = true
			}
		}
	}
	if v, ok := res["protocolVersion"]; ok {
		_ = json.Unmarshal(v, &version)
	}
	if version < modernRevision {
		for _, k := range []string{"ttlMs", "cacheScope"} {
			if _, ok := res[k]; ok {
				delete(res, k)
				changed = true
			}
		}
	}
	if !changed {
		return nil, false
	}
	msg["result"], _ = json.Marshal(res)
	out, err := json.Marshal(msg)
	return out, err == nil
}

// bufferedWriter holds an answer until the handler returns. (The handler
// answers with JSON, JSONResponse being set: nothing is streamed.)
type bufferedWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.buf.Write(p)
}
