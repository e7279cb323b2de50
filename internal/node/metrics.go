package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// metrics are the node's Prometheus instruments, on their own registry.
type metrics struct {
	reg           *prometheus.Registry
	requests      *prometheus.CounterVec
	requestTime   *prometheus.HistogramVec
	calls         *prometheus.CounterVec
	callTime      prometheus.Histogram
	resolutions   *prometheus.CounterVec
	turnsOpened   prometheus.Counter
	turnsClosed   *prometheus.CounterVec
	auditLag      prometheus.Histogram
	auditFailures prometheus.Counter
}

// newMetrics builds the instruments. The latency histograms' buckets reach
// past the configured timeouts (see timeBuckets): a call can last up to
// callTimeout, a request up to resolveTimeout+callTimeout.
func newMetrics(openTurns func() float64, resolveTimeout, callTimeout time.Duration) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedos_requests_total", Help: "Requests on the NATS front by operation and outcome code (\"ok\" for success).",
		}, []string{"op", "code"}),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sharedos_request_duration_seconds", Help: "Time from receiving a request to replying, by operation.",
			Buckets: timeBuckets(20e-6, resolveTimeout+callTimeout),
		}, []string{"op"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedos_calls_total", Help: "Tool calls by outcome (ok, tool_error, failed, denied) and reason code.",
		}, []string{"outcome", "reason"}),
		callTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sharedos_call_duration_seconds", Help: "Execution time of allowed calls, from decision to completion.",
			Buckets: timeBuckets(20e-6, callTimeout),
		}),
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedos_provider_resolutions_total", Help: "Provider catalogue resolutions by provider and status (ok, partial, failed) and reason.",
		}, []string{"provider", "status", "reason"}),
		turnsOpened: prometheus.NewCounter(prometheus.CounterOpts{Name: "sharedos_turns_opened_total", Help: "Turns opened (one-operation turns included)."}),
		turnsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedos_turns_closed_total", Help: "Turns closed by reason (released, idle, shutdown, one_operation).",
		}, []string{"reason"}),
		auditLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sharedos_audit_publish_seconds", Help: "Time from emitting an audit event to the stream's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sharedos_audit_publish_failures_total", Help: "Audit events the stream did not acknowledge."}),
	}
	m.reg.MustRegister(m.requests, m.requestTime, m.calls, m.callTime, m.resolutions, m.turnsOpened, m.turnsClosed, m.auditLag, m.auditFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sharedos_open_turns", Help: "Turns open on this node."}, openTurns),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// timeBuckets are latency buckets from first (seconds) doubling up to the
// timeout, then the timeout itself and twice it: what ran into its timeout
// is told apart (le=timeout) from what finished just before, and an overrun
// still lands in a finite bucket.
func timeBuckets(first float64, timeout time.Duration) []float64 {
	top := timeout.Seconds()
	if top <= first {
		return []float64{first, 2 * first}
	}
	var b []float64
	for v := first; v < top; v *= 2 {
		b = append(b, v)
	}
	return append(b, top, 2*top)
}

// observeRequest is the front's Observe: op, the reason code the reply
// carried (reason.Of of the kernel's error: "" for success) and latency.
// A caller's deadline that passed is deadline_exceeded, not internal; the
// label is the code as given.
func (m *metrics) observeRequest(op messages.Op, code reason.Code, d time.Duration) {
	c := string(code)
	if c == "" {
		c = "ok"
	}
	m.requests.WithLabelValues(string(op), c).Inc()
	m.requestTime.WithLabelValues(string(op)).Observe(d.Seconds())
}

func (m *metrics) observePublish(d time.Duration, err error) {
	if err != nil {
		m.auditFailures.Inc()
		return
	}
	m.auditLag.Observe(d.Seconds())
}

// observingSink counts what the audit trail says happened, then hands the
// record on: calls by outcome and reason, resolutions by provider status,
// turns. The trail is the one source of truth for both.
type observingSink struct {
	next audit.Sink
	m    *metrics
}

func (s observingSink) Emit(rec *audit.Record) audit.Receipt {
	ev := rec.Event
	switch ev.Type {
	case audit.TurnOpened:
		s.m.turnsOpened.Inc()
	case audit.TurnClosed:
		s.m.turnsClosed.WithLabelValues(ev.Close.Reason).Inc()
	case audit.CatalogResolved:
		for _, p := range ev.Catalog.Providers {
			s.m.resolutions.WithLabelValues(p.Provider, p.Status, p.Reason).Inc()
		}
	case audit.ToolInvoked:
		if ev.Call.Decision == "deny" {
			s.m.calls.WithLabelValues("denied", ev.Call.Reason).Inc()
		}
	case audit.ToolCompleted:
		s.m.calls.WithLabelValues(ev.Call.Outcome, ev.Call.Reason).Inc()
		s.m.callTime.Observe(float64(ev.Call.Duration) / 1e6)
	}
	return s.next.Emit(rec)
}

// openTurnsGauge asks the kernel at scrape time.
func openTurnsGauge(count func(context.Context) (int, error)) func() float64 {
	return func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n, err := count(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	}
}
