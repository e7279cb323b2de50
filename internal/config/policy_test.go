package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/config"
)

func TestPolicySectionDefaultsAndValidation(t *testing.T) {
	c, err := config.Parse([]byte("audit: {replicas: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Policy; p.Bucket != "SHAREDOS_POLICY" || p.Replicas != 3 || time.Duration(p.MaxStaleness) != 30*time.Second || p.Source != config.PolicyFromFile {
		t.Fatalf("defaults %+v", p)
	}
	for yaml, want := range map[string]string{
		"policy: {bucket: a.b}":                   "policy.bucket",
		"policy: {replicas: 7}":                   "policy.replicas",
		"policy: {max_staleness: 10ms}":           "policy.max_staleness",
		"policy: {source: both}":                  "policy.source",
		"policy: {source: store}":                 "",
		"policy: {max_staleness: 1m}":             "",
		"policy: {bucket: POLICY_2, replicas: 1}": "",
	} {
		_, err := config.Parse([]byte(yaml + "\n"))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}
