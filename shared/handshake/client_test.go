package handshake_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/handshake"
)

func TestSendGivesUpWhenNoMounterListens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := handshake.Send(ctx, filepath.Join(t.TempDir(), "mount.sock"), os.Stdin, &handshake.Request{Bucket: "b", MaxRead: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}
