package command

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/s3csi/s3csi/shared/events"

	"github.com/s3csi/s3csi/cli/internal/audit"
	"github.com/s3csi/s3csi/cli/internal/status"
)

type statusOptions struct {
	node   string
	output string
}

func newStatusCommand(g *global) *cobra.Command {
	o := &statusOptions{output: audit.OutputTable}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show per node the Mountpoint Pods, their attachments and workloads, and mount health",
		Long: "status reads the API server (not NATS): every MountpointS3PodAttachment, the Mountpoint Pods in the " +
			"Mountpoint namespace and the pods of each node, and prints one row per workload of each Mountpoint Pod.\n\n" +
			"HEALTH is ok, mounting (the workload waits for its volume), idle (no workload), unmounting " +
			"(needs-unmount), workload-gone (recorded but no such pod on the node), workload-ended, " +
			"mountpoint-pod-missing, mountpoint-pod-pending, mountpoint-pod-failing or orphan-mountpoint-pod " +
			"(no attachment records it).",
		Example: `  kubectl s3csi status
  kubectl s3csi status --node worker-1 -o yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), g, o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.node, "node", "", "only this node")
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "output format: table, json or yaml")
	return cmd
}

func runStatus(ctx context.Context, g *global, o *statusOptions, stdout io.Writer) error {
	if err := audit.ValidateOutput(o.output); err != nil {
		return usageError{err}
	}
	if o.node != "" && !events.ValidNode(o.node) {
		return usageError{errNode(o.node)}
	}
	c, err := g.kubeClient()
	if err != nil {
		return err
	}
	nodes, err := status.Collect(ctx, c, status.Options{Node: o.node, MountpointNamespace: g.mountpointNamespace})
	if err != nil {
		return err
	}
	return status.Print(stdout, o.output, nodes)
}

func errNode(node string) error {
	return fmt.Errorf("--node %q is not a node name", node)
}
