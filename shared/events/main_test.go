package events_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every consumer, iterator,
// connection and embedded server a test starts must be gone once the test has stopped it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
