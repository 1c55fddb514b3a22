package command

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every connection, follow and
// server a test starts must be gone once it ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
