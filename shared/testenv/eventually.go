package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 20 ms until it holds, failing the test with what after timeout.
// Call it from the test's goroutine only (it calls t.Fatalf).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
