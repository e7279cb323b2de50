// Package otlprecv is a small OTLP/HTTP trace receiver on loopback: it
// decodes ExportTraceServiceRequest protobuf bodies (real OTLP, as any
// exporter sends them) and keeps the spans, for tests and the bench's
// in-process collector.
package otlprecv

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// MaxBody bounds one export request's body.
const MaxBody = 16 << 20

// Span is one received span, flattened.
type Span struct {
	Service                   string // the resource's service.name
	TraceID, SpanID, ParentID string // hex; ParentID "" for a root
	Name                      string
	Kind                      string // "server", "client", "internal", …
	Attrs                     map[string]string
	StatusError               bool
}

// Receiver is a running receiver. Safe for concurrent use.
type Receiver struct {
	srv  *http.Server
	ln   net.Listener
	keep bool

	mu    sync.Mutex
	spans []Span
	count int
	wake  chan struct{}
}

// Start listens on a loopback port. keep false counts spans without
// keeping them (the bench).
func Start(keep bool) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{ln: ln, keep: keep, wake: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	r.srv = &http.Server{Handler: mux}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Endpoint is the receiver's host:port.
func (r *Receiver) Endpoint() string { return r.ln.Addr().String() }

// Close stops the receiver.
func (r *Receiver) Close() error { return r.srv.Close() }

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "protobuf only", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxBody+1))
	if err != nil || len(body) > MaxBody {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	var ex coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &ex); err != nil {
		http.Error(w, fmt.Sprintf("decoding: %v", err), http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range ex.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				n++
				if !r.keep {
					continue
				}
				got = append(got, Span{
					Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: kind(int32(s.GetKind())),
					Attrs: attrs(s.GetAttributes()), StatusError: s.GetStatus().GetCode() == 2,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.count += n
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
	resp, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count is how many spans were received.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Changed is closed at the next export received.
func (r *Receiver) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wake
}

func kind(k int32) string {
	switch k {
	case 1:
		return "internal"
	case 2:
		return "server"
	case 3:
		return "client"
	case 4:
		return "producer"
	case 5:
		return "consumer"
	}
	return "unspecified"
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
