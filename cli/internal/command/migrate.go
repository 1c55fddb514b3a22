package command

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/s3csi/s3csi/cli/internal/migrate"
)

func newMigrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Switch between the Scality CSI Driver for S3 and s3csi with live mounts kept",
		Long: "migrate holds the steps a switch between the Scality CSI Driver for S3 and s3csi needs beyond Helm; " +
			"docs/migrating-from-scality.md is the runbook.",
		Args: noArgs,
	}
	keep := &cobra.Command{
		Use:   "keep-namespaces",
		Short: "Helm post-renderer: add helm.sh/resource-policy: keep to every Namespace of a release",
		Long: "keep-namespaces reads a release's manifests on standard input and writes them to standard output, " +
			"every Namespace with the annotation helm.sh/resource-policy: keep and every other manifest unchanged. " +
			"Helm keeps a resource through an uninstall only when the release's recorded manifest says so, so " +
			"upgrade the Scality driver's release once through it (same chart, same values), then uninstall it: " +
			"its Mountpoint Pods' namespace, and the live mounts its pods serve, stay for s3csi to take over.",
		Example: `  helm upgrade scality-mountpoint-s3-csi-driver <the chart it runs> --version <its version> -n kube-system \
    --reuse-values --set cleanupCRDOnUninstall=false \
    --post-renderer kubectl-s3csi --post-renderer-args migrate --post-renderer-args keep-namespaces`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := migrate.KeepNamespaces(cmd.InOrStdin(), cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("the manifests hold no Namespace: is this the release that renders the Mountpoint namespace?")
			}
			return nil
		},
	}
	cmd.AddCommand(keep)
	return cmd
}
