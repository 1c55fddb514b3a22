package registration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestKubeletLearnsTheDriverAndItsEndpointFromTheRegistrationSocket(t *testing.T) {
	defer goleak.VerifyNone(t)
	var conn *grpc.ClientConn
	// A short dir: a socket path holds at most 107 bytes.
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := New("s3.csi.scality.com", "/var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock", dir, logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	conn, err = grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := registerapi.NewRegistrationClient(conn)
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != registerapi.CSIPlugin || info.GetName() != "s3.csi.scality.com" || info.GetEndpoint() == "" {
		t.Fatalf("info = %v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if !s.Registered() {
		t.Fatal("registration not recorded")
	}
	_ = conn.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
