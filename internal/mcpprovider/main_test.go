package mcpprovider_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine outlives its provider: every test closes what it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
