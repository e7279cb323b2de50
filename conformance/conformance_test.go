package conformance_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/conformance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	tab := conformance.RunTable(t, []conformance.Column{conformance.InProcess})
	t.Cleanup(func() { tab.Print(os.Stdout) })
}
