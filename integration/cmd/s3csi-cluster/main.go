// Command s3csi-cluster starts and stops the single-node Kubernetes cluster the demo and the e2e
// suite run on (package integration/cluster).
//
//	s3csi-cluster up           start it, or reuse the running one; loads the cluster's own images
//	s3csi-cluster load-images  import changed cluster image tarballs (not the product's)
//	s3csi-cluster push         push bin/release/images and the chart to the cluster's registry
//	s3csi-cluster registry ADDR DIR  serve the registry (the cluster's daemon)
//	s3csi-cluster status       exit 0 when it runs and its API server is ready
//	s3csi-cluster down         stop it and restore the host
//	s3csi-cluster install      install the chart from the registry (or upgrade it) against the cluster's S3
//	s3csi-cluster make-bucket B [KEY TEXT]  create bucket B on the cluster's S3 server, with an object
//	s3csi-cluster env          print the shell variables to use it (KUBECONFIG, PATH, S3)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/s3csi/s3csi/integration/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3csi-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: s3csi-cluster up|down|status|load-images|push|install|make-bucket NAME|env")
	}
	if args[0] == "registry" {
		if len(args) != 3 {
			return errors.New("usage: s3csi-cluster registry ADDR DIR")
		}
		return cluster.ServeRegistry(ctx, args[1], args[2], cluster.RegistryAuthFromEnv())
	}
	cfg, err := cluster.FromEnvironment()
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	switch args[0] {
	case "up":
		return cfg.Up(ctx, logf)
	case "down":
		return cfg.Down(logf)
	case "load-images":
		return cfg.LoadImages(logf)
	case "push":
		return cfg.Push(ctx, logf)

	case "status":
		if err := cfg.Healthy(ctx); err != nil {
			return fmt.Errorf("not running: %w", err)
		}
		fmt.Fprintln(os.Stdout, "running")
		return nil
	case "install":
		return cfg.InstallChart(ctx, logf, args[1:]...)
	case "make-bucket":
		switch len(args) {
		case 2:
			return cfg.MakeBucket(ctx, args[1], "", "")
		case 4:
			return cfg.MakeBucket(ctx, args[1], args[2], args[3])
		}
		return errors.New("usage: s3csi-cluster make-bucket NAME [KEY TEXT]")
	case "env":
		fmt.Fprintf(os.Stdout, "export KUBECONFIG=%s\nexport PATH=%s:$PATH\nexport S3CSI_S3_ENDPOINT=%s\nexport S3CSI_S3_CA_BUNDLE=%s\nexport S3CSI_S3_DATA_DIR=%s\n",
			cfg.Kubeconfig(), cfg.KubeBinDir, cfg.S3Endpoint(), cfg.S3CAFile(), cfg.S3DataDir())
		return nil
	}
	return fmt.Errorf("unknown command %q: want up, down, status, load-images, install, make-bucket or env", args[0])
}
