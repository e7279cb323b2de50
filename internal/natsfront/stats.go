package natsfront

import (
	"maps"
	"sync"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// endpointStats are one endpoint's real figures: requests answered,
// errors by reason code and processing time from arrival to the reply
// sent. They are served as the endpoint's data in `$SRV.STATS` (`nats
// micro stats sharedos`), because micro's own counters stop when the
// handler hands the request to a worker. Each endpoint has its own lock,
// so endpoints do not contend. Safe for concurrent use.
type endpointStats struct {
	mu sync.Mutex
	f  endpointFigures
}

type endpointFigures struct {
	Requests          int64            `json:"requests"`
	Errors            int64            `json:"errors"`
	ErrorsByCode      map[string]int64 `json:"errors_by_code,omitempty"`
	ProcessingTime    time.Duration    `json:"processing_time"`
	AverageProcessing time.Duration    `json:"average_processing_time"`
	LastError         string           `json:"last_error,omitempty"`
}

func (s *endpointStats) observe(code reason.Code, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.f
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

// snapshot is a copy of the figures.
func (s *endpointStats) snapshot() endpointFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.f
	c.ErrorsByCode = maps.Clone(s.f.ErrorsByCode)
	return c
}
