package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/testenv"
)

func TestNATSRestartKeepsURLAndStore(t *testing.T) {
	n := testenv.StartNATS(t)
	url := n.URL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("before")); err != nil {
		t.Fatalf("publish: %v", err)
	}

	n.Restart(t)
	if n.URL() != url {
		t.Errorf("URL changed from %s to %s", url, n.URL())
	}
	// The same connection reconnects and the stored message survived.
	stream, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("look up stream after restart: %v", err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, "t.a")
	if err != nil {
		t.Fatalf("read stored message after restart: %v", err)
	}
	if string(msg.Data) != "before" {
		t.Errorf("stored message %q, want %q", msg.Data, "before")
	}
	if nc.Stats().Reconnects != 1 {
		t.Errorf("reconnects %d, want 1", nc.Stats().Reconnects)
	}

	n.Stop()
	n.Stop() // idempotent; the cleanup calls it again too
	if n.Server() != nil {
		t.Error("Server() is not nil after Stop")
	}
}
