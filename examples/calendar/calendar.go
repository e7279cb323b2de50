// Package calendar is an example SharedOS provider that does real work:
// time-zone conversion and date arithmetic, with the IANA time-zone
// database embedded (time/tzdata), so it needs nothing from the host.
//
// It is served over NATS with the provider SDK, either inside a node
// (providers[].host: calendar in cluster.yaml) or as its own process
// (cmd/calendar-provider).
package calendar

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	_ "time/tzdata" // the zone database travels with the binary

	"github.com/sharedos/sharedos/provider"
)

// Provider returns the calendar provider. now is its clock (nil: time.Now).
func Provider(now func() time.Time) provider.Provider {
	if now == nil {
		now = time.Now
	}
	c := &cal{now: now}
	tools := []provider.Tool{
		{Definition: def("convert", "Convert an instant (RFC 3339, or \"now\") to another IANA time zone.",
			`{"type":"object","properties":{"time":{"type":"string","maxLength":64},"zone":{"type":"string","minLength":1,"maxLength":64}},"required":["time","zone"],"additionalProperties":false}`),
			Handler: c.convert},
		{Definition: def("between", "Days, weeks and business days (Monday to Friday) from one date (YYYY-MM-DD) to another.",
			`{"type":"object","properties":{"from":{"type":"string","format":"date"},"to":{"type":"string","format":"date"}},"required":["from","to"],"additionalProperties":false}`),
			Handler: c.between},
		{Definition: def("add", "Add years, months and days to a date (YYYY-MM-DD); months clamp to the end of the month. Returns the date and its weekday.",
			`{"type":"object","properties":{"date":{"type":"string","format":"date"},"years":{"type":"integer","minimum":-1000,"maximum":1000},"months":{"type":"integer","minimum":-12000,"maximum":12000},"days":{"type":"integer","minimum":-366000,"maximum":366000}},"required":["date"],"additionalProperties":false}`),
			Handler: c.add},
	}
	return provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) { return tools, nil })
}

func def(name, description, schema string) provider.Definition {
	return provider.Definition{
		Name: name, Namespace: "calendar", Description: description, InputSchema: json.RawMessage(schema),
		Annotations: json.RawMessage(`{"readOnlyHint":true,"idempotentHint":true}`),
		Capability:  "calendar." + name, Requirement: "calendar/" + name,
	}
}

type cal struct{ now func() time.Time }

func result(text string, v any) (provider.Result, error) {
	b, err := json.Marshal(v)
	return provider.Result{Text: text, Structured: b}, err
}

func failed(format string, args ...any) (provider.Result, error) {
	return provider.Result{Text: fmt.Sprintf(format, args...), IsError: true}, nil
}

func (c *cal) convert(_ context.Context, call provider.Call) (provider.Result, error) {
	var a struct{ Time, Zone string }
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return provider.Result{}, err
	}
	t := c.now()
	if a.Time != "now" {
		var err error
		if t, err = time.Parse(time.RFC3339, a.Time); err != nil {
			return failed("time %q is not RFC 3339 or \"now\"", a.Time)
		}
	}
	loc, err := time.LoadLocation(a.Zone)
	if err != nil {
		return failed("unknown time zone %q", a.Zone)
	}
	lt := t.In(loc)
	abbr, offset := lt.Zone()
	return result(lt.Format("Monday 2006-01-02 15:04:05 MST"), map[string]any{
		"time": lt.Format(time.RFC3339), "zone": a.Zone, "abbreviation": abbr, "utc_offset_seconds": offset, "weekday": lt.Weekday().String(),
	})
}

func (c *cal) between(_ context.Context, call provider.Call) (provider.Result, error) {
	var a struct{ From, To string }
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return provider.Result{}, err
	}
	from, err1 := time.Parse(time.DateOnly, a.From)
	to, err2 := time.Parse(time.DateOnly, a.To)
	if err1 != nil || err2 != nil {
		return failed("dates must be YYYY-MM-DD")
	}
	days := int(to.Sub(from).Hours() / 24)
	lo, hi := from, to
	if days < 0 {
		lo, hi = to, from
	}
	business := 0
	for d := lo; d.Before(hi); d = d.AddDate(0, 0, 1) {
		if wd := d.Weekday(); wd != time.Saturday && wd != time.Sunday {
			business++
		}
		if business > 400000 {
			break
		}
	}
	if days < 0 {
		business = -business
	}
	return result(fmt.Sprintf("%d days (%d business days)", days, business), map[string]any{
		"days": days, "weeks": float64(days) / 7, "business_days": business,
	})
}

// addMonths adds months, clamping to the last day of the target month
// (January 31 plus one month is the end of February, not March 2).
func addMonths(d time.Time, months int) time.Time {
	first := time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, months, 0)
	last := first.AddDate(0, 1, -1).Day()
	return time.Date(first.Year(), first.Month(), min(d.Day(), last), 0, 0, 0, 0, time.UTC)
}

func (c *cal) add(_ context.Context, call provider.Call) (provider.Result, error) {
	var a struct {
		Date                string
		Years, Months, Days int
	}
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return provider.Result{}, err
	}
	d, err := time.Parse(time.DateOnly, a.Date)
	if err != nil {
		return failed("date must be YYYY-MM-DD")
	}
	r := addMonths(d, a.Years*12+a.Months).AddDate(0, 0, a.Days)
	return result(fmt.Sprintf("%s (%s)", r.Format(time.DateOnly), r.Weekday()), map[string]any{
		"date": r.Format(time.DateOnly), "weekday": r.Weekday().String(),
	})
}
