package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/config"
)

// The audit stream's shape: replicas, max bytes and the duplicate window,
// with their defaults and bounds.
func TestAuditStreamFields(t *testing.T) {
	c, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Audit; a.Replicas != 1 || a.MaxBytes != 0 || time.Duration(a.DuplicateWindow) != 2*time.Minute {
		t.Errorf("defaults: replicas %d, max_bytes %d, duplicate_window %s", a.Replicas, a.MaxBytes, time.Duration(a.DuplicateWindow))
	}
	c, err = config.Parse([]byte("audit: {replicas: 3, max_bytes: 10737418240, duplicate_window: 10m, max_age: 2160h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Audit; a.Replicas != 3 || a.MaxBytes != 10<<30 || time.Duration(a.DuplicateWindow) != 10*time.Minute {
		t.Errorf("parsed: replicas %d, max_bytes %d, duplicate_window %s", a.Replicas, a.MaxBytes, time.Duration(a.DuplicateWindow))
	}
	for y, want := range map[string]string{
		"audit: {replicas: 6}\n":                          "audit.replicas 6 must be between 1 and 5",
		"audit: {replicas: -1}\n":                         "audit.replicas -1 must be between 1 and 5",
		"audit: {max_bytes: -1}\n":                        "audit.max_bytes must not be negative",
		"audit: {duplicate_window: 500ms}\n":              "audit.duplicate_window 500ms must be at least 1s",
		"audit: {duplicate_window: -1m}\n":                "audit.duplicate_window -1m0s must be at least 1s",
		"audit: {duplicate_window: 2h, max_age: 1h}\n":    "at most audit.max_age",
		"audit: {replicas: 3, duplicate_window: 1m}\n":    "",
		"audit: {duplicate_window: 1h, max_age: 1h}\n":    "",
		"audit: {replicas: 5, max_bytes: 0, max_age: 1h}": "",
	} {
		_, err := config.Parse([]byte(y))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", y, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", y, err, want)
		}
	}
}
