//go:build e2e

// Package e2e runs s3csi on the real single-node cluster (integration/cluster): kubelet calls the
// node-agent, the chart is installed with Helm, the images are the ones `make images` built.
// Run it with `make e2e`, which starts the cluster first; it fails, never skips, when the cluster
// is not running.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"

	"github.com/s3csi/s3csi/integration/cluster"
)

var (
	cfg cluster.Config
	k8s client.Client
)

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func setup() error {
	var err error
	if cfg, err = cluster.FromEnvironment(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if err := cfg.Healthy(ctx); err != nil {
		return fmt.Errorf("the cluster is not running (start it with `make cluster-up`): %w", err)
	}
	if err := cfg.InstallChart(ctx, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return err
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig())
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// Above client-go's default of 5 per second, so that creating a hundred pods at once
	// (BenchmarkPodsOnVolumesAtOnce) measures the cluster, not the test's own throttle.
	rest.QPS, rest.Burst = 200, 400
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return err
	}
	k8s, err = client.New(rest, client.Options{Scheme: scheme})
	return err
}
