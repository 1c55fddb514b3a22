package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // as t.Fatalf ends the test's goroutine
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}

	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				panic(p)
			}
		}()
		Eventually(r, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if !strings.Contains(r.failed, "waiting for never") {
		t.Fatalf("failure = %q, want one naming what was awaited", r.failed)
	}
}
