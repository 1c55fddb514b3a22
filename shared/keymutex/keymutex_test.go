package keymutex_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/keymutex"
)

func TestOneHolderPerKeyAndOtherKeysFree(t *testing.T) {
	var m keymutex.Mutex
	unlockA := m.Lock("a")
	done := make(chan struct{})
	go func() {
		m.Lock("b")() // another key: not blocked
		m.Lock("a")()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a second holder of key a got the lock while the first held it")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	<-done
}

func TestKeysAreForgottenOnceNobodyHoldsOrWaits(t *testing.T) {
	var m keymutex.Mutex
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { m.Lock("c")() })
	}
	wg.Wait()
	if n := m.Len(); n != 0 {
		t.Fatalf("%d keys left after every holder unlocked, want 0", n)
	}
}

func TestLockContextGivesUpAndLeavesNothingBehind(t *testing.T) {
	var m keymutex.Mutex
	unlock := m.Lock("v")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.LockContext(ctx, "v"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockContext on a held key = %v, want DeadlineExceeded", err)
	}
	unlock()
	if n := m.Len(); n != 0 {
		t.Fatalf("%d keys left after a canceled wait and an unlock, want 0", n)
	}
	unlock2, err := m.LockContext(context.Background(), "v")
	if err != nil {
		t.Fatalf("LockContext on a free key = %v", err)
	}
	unlock2()
}
