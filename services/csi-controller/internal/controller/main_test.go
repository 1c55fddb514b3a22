package controller_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: notifiers stop with their context,
// and S3 connections are closed when their test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
