package natsfront

import (
	"sync"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// endpointStats are each endpoint's real figures: requests answered,
// errors by reason code and processing time from arrival to the reply
// sent. They are served as each endpoint's data in `$SRV.STATS` (`nats
// micro stats sharedos`), because micro's own counters stop when the
// handler hands the request to a worker. Safe for concurrent use.
type endpointStats struct {
	mu sync.Mutex
	m  map[string]*endpointFigures
}

type endpointFigures struct {
	Requests          int64            `json:"requests"`
	Errors            int64            `json:"errors"`
	ErrorsByCode      map[string]int64 `json:"errors_by_code,omitempty"`
	ProcessingTime    time.Duration    `json:"processing_time"`
	AverageProcessing time.Duration    `json:"average_processing_time"`
	LastError         string           `json:"last_error,omitempty"`
}

func newEndpointStats() *endpointStats { return &endpointStats{m: map[string]*endpointFigures{}} }

func (s *endpointStats) add(name string) {
	s.mu.Lock()
	s.m[name] = &endpointFigures{}
	s.mu.Unlock()
}

func (s *endpointStats) observe(name string, code reason.Code, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.m[name]
	if f == nil {
		return
	}
	f.Requests++
	f.ProcessingTime += d
	f.AverageProcessing = f.ProcessingTime / time.Duration(f.Requests)
	if code != "" {
		f.Errors++
		if f.ErrorsByCode == nil {
			f.ErrorsByCode = map[string]int64{}
		}
		f.ErrorsByCode[string(code)]++
		f.LastError = string(code)
	}
}

// snapshot is a copy of one endpoint's figures.
func (s *endpointStats) snapshot(name string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.m[name]
	if f == nil {
		return nil
	}
	c := *f
	if f.ErrorsByCode != nil {
		c.ErrorsByCode = make(map[string]int64, len(f.ErrorsByCode))
		for k, v := range f.ErrorsByCode {
			c.ErrorsByCode[k] = v
		}
	}
	return c
}
