// Command s3csi-devstack brings up the components s3csi runs against, on this machine: a
// kube-apiserver and etcd with the s3csi CRDs, NATS JetStream with the S3CSI_EVENTS stream, and a
// versitygw S3 server with a bucket. It prints how to reach each and runs until interrupted.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3csi-devstack:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "s3csi-devstack-")
	if err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	defer os.RemoveAll(dir)

	api, err := testenv.StartAPIServerE()
	if err != nil {
		return err
	}
	defer stopAll(&err, api.Stop)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		return err
	}

	bus, err := testenv.StartNATSE(filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer bus.Stop()
	if err := ensureStream(ctx, bus.URL()); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s3, err := testenv.StartS3E(startCtx, dir)
	if err != nil {
		return err
	}
	defer stopAll(&err, s3.Stop)

	// The S3 credentials are random and local to this run; they go to a 0600 file, not the screen.
	envFile := filepath.Join(dir, "env")
	env := fmt.Sprintf("export KUBECONFIG=%s\nexport NATS_URL=%s\nexport AWS_ENDPOINT_URL=%s\n"+
		"export AWS_REGION=%s\nexport AWS_ACCESS_KEY_ID=%s\nexport AWS_SECRET_ACCESS_KEY=%s\nexport S3CSI_BUCKET=%s\n",
		kubeconfig, bus.URL(), s3.Endpoint, s3.Region, s3.AccessKey, s3.SecretKey, s3.Bucket)
	if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
		return fmt.Errorf("write env file: %w", err)
	}

	fmt.Fprintf(out, `s3csi local stack is up.
  Kubernetes API  %s   (kubeconfig %s; try: kubectl get s3pa)
  NATS JetStream  %s   (stream %s)
  S3 (versitygw)  %s   (bucket %s; objects are files under %s)
Load everything into a shell with:  source %s
Press Ctrl-C to stop; all state is removed.
`, api.Config.Host, kubeconfig, bus.URL(), events.StreamName, s3.Endpoint, s3.Bucket, s3.Dir, envFile)
	<-ctx.Done()
	return nil
}

func ensureStream(ctx context.Context, url string) error {
	nc, err := events.Connect(ctx, url, "s3csi-devstack", logr.Discard())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream: %w", err)
	}
	_, err = events.EnsureStream(ctx, js, events.StreamConfig{})
	return err
}

func stopAll(err *error, stop func() error) {
	if stopErr := stop(); stopErr != nil && *err == nil {
		*err = stopErr
	}
}
