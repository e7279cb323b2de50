package calendar_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sharedos/sharedos/examples/calendar"
	"github.com/sharedos/sharedos/provider"
)

func TestCalendarTools(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tools, err := calendar.Provider(func() time.Time { return now }).Tools(context.Background(), provider.Access{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]provider.Handler{}
	for _, tl := range tools {
		byName[tl.Definition.Name] = tl.Handler
	}
	call := func(name, args string) provider.Result {
		t.Helper()
		r, err := byName[name](context.Background(), provider.Call{Tool: name, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct{ tool, args, want string }{
		{"between", `{"from":"2026-11-30","to":"2026-12-24"}`, "24 days (18 business days)"},
		{"between", `{"from":"2026-12-24","to":"2026-11-30"}`, "-24 days (-18 business days)"},
		{"add", `{"date":"2024-01-31","months":1}`, "2024-02-29 (Thursday)"},
		{"add", `{"date":"2024-02-29","years":1}`, "2025-02-28 (Friday)"},
		{"add", `{"date":"2026-03-31","months":-1,"days":1}`, "2026-03-01 (Sunday)"},
		{"add", `{"date":"2026-11-30","days":25}`, "2026-12-25 (Friday)"},
		{"convert", `{"time":"now","zone":"Asia/Tokyo"}`, "Monday 2026-11-30 21:00:00 JST"},
		{"convert", `{"time":"2026-07-01T12:00:00Z","zone":"Europe/Paris"}`, "Wednesday 2026-07-01 14:00:00 CEST"},
	}
	for _, c := range cases {
		if r := call(c.tool, c.args); r.Text != c.want || r.IsError {
			t.Errorf("%s %s = %q (error %v), want %q", c.tool, c.args, r.Text, r.IsError, c.want)
		}
	}
	if r := call("convert", `{"time":"now","zone":"Mars/Olympus"}`); !r.IsError {
		t.Error("unknown zone accepted")
	}
	if r := call("between", `{"from":"30/11/2026","to":"2026-12-24"}`); !r.IsError {
		t.Error("bad date accepted")
	}
}
