package harness

import (
	"math"
	"slices"
)

// Medians folds several rounds of the same scenarios (each round in the
// same order) into one result per scenario: every figure is the median of
// its rounds, ratios to floors included (each taken within its round, so
// drift between rounds does not enter them). Errors add up, and the
// catalogue calls per turn are the rounds' value farthest from 1, so a
// broken promise in any round shows. One round is returned as it is.
func Medians(rounds [][]Result) []Result {
	if len(rounds) == 0 {
		return nil
	}
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := make([]Result, len(rounds[0]))
	for i := range out {
		rs := make([]Result, 0, len(rounds))
		for _, round := range rounds {
			if i < len(round) && round[i].Scenario == rounds[0][i].Scenario {
				rs = append(rs, round[i])
			}
		}
		out[i] = medianOf(rs)
	}
	return out
}

func medianOf(rs []Result) Result {
	m := rs[0]
	med := func(f func(r *Result) float64) float64 {
		v := make([]float64, len(rs))
		for i := range rs {
			v[i] = f(&rs[i])
		}
		slices.Sort(v)
		if n := len(v); n%2 == 1 {
			return v[n/2]
		} else {
			return (v[n/2-1] + v[n/2]) / 2
		}
	}
	lat := func(get func(r *Result) *Latency) Latency {
		return Latency{
			Count: get(&rs[0]).Count,
			Mean:  med(func(r *Result) float64 { return get(r).Mean }),
			P50:   med(func(r *Result) float64 { return get(r).P50 }),
			P90:   med(func(r *Result) float64 { return get(r).P90 }),
			P99:   med(func(r *Result) float64 { return get(r).P99 }),
			P999:  med(func(r *Result) float64 { return get(r).P999 }),
			Max:   med(func(r *Result) float64 { return get(r).Max }),
		}
	}
	m.Latency = lat(func(r *Result) *Latency { return &r.Latency })
	m.TurnOpen = lat(func(r *Result) *Latency { return &r.TurnOpen })
	m.TurnClose = lat(func(r *Result) *Latency { return &r.TurnClose })
	m.Throughput = med(func(r *Result) float64 { return r.Throughput })
	m.ElapsedSeconds = med(func(r *Result) float64 { return r.ElapsedSeconds })
	m.CPUPerCallMicros = med(func(r *Result) float64 { return r.CPUPerCallMicros })
	m.AllocsPerCall = med(func(r *Result) float64 { return r.AllocsPerCall })
	m.AllocBytesPerCall = med(func(r *Result) float64 { return r.AllocBytesPerCall })
	m.PeakRSSBytes = int64(med(func(r *Result) float64 { return float64(r.PeakRSSBytes) }))
	m.Errors = 0
	for _, r := range rs {
		m.Errors += r.Errors
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
		if r.CatalogCallsPerTurn != nil && (m.CatalogCallsPerTurn == nil || math.Abs(*r.CatalogCallsPerTurn-1) > math.Abs(*m.CatalogCallsPerTurn-1)) {
			v := *r.CatalogCallsPerTurn
			m.CatalogCallsPerTurn = &v
		}
	}
	if m.ResolveShare != nil {
		v := med(func(r *Result) float64 {
			if r.ResolveShare == nil {
				return 0
			}
			return *r.ResolveShare
		})
		m.ResolveShare = &v
	}
	if m.VsFloor != nil {
		ratio := func(get func(v *Ratio) float64) float64 {
			return med(func(r *Result) float64 {
				if r.VsFloor == nil {
					return math.NaN()
				}
				return get(r.VsFloor)
			})
		}
		m.VsFloor = &Ratio{
			Floor:      m.VsFloor.Floor,
			P50:        ratio(func(v *Ratio) float64 { return v.P50 }),
			P99:        ratio(func(v *Ratio) float64 { return v.P99 }),
			Throughput: ratio(func(v *Ratio) float64 { return v.Throughput }),
		}
	}
	m.latency = nil
	return m
}
