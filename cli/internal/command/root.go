// Package command is kubectl s3csi: its commands (events, status, replay, migrate), their flags and
// how each error becomes one line and an exit code.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/cli/internal/audit"
	"github.com/s3csi/s3csi/cli/internal/bus"
)

// Exit codes of Run.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// usageError is an error in the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// global holds the flags every command has.
type global struct {
	// nats is how to reach NATS: --nats-url and the authentication flags the services have.
	nats bus.Options
	// kube is the standard kubeconfig flags (--kubeconfig, --context, -n, ...).
	kube *genericclioptions.ConfigFlags
	// mountpointNamespace is where Mountpoint Pods run.
	mountpointNamespace string
}

// Run runs kubectl-s3csi with args (without the program name) and returns its exit code. ctx
// ends a follow (exit 0).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &global{
		nats:                bus.Options{URL: envOr("NATS_URL", bus.DefaultURL), Auth: servicecmd.NATSAuthFromEnv()},
		kube:                genericclioptions.NewConfigFlags(true),
		mountpointNamespace: envOr("MOUNTPOINT_NAMESPACE", mppod.DefaultNamespace),
	}
	root := &cobra.Command{
		Use:   "kubectl-s3csi",
		Short: "Audit and inspect the s3csi CSI driver: its event bus and its mounts",
		Long: "kubectl s3csi reads the s3csi audit trail (the events of the S3CSI_EVENTS NATS JetStream stream) " +
			"and what the API server holds about s3csi mounts.\n\n" +
			"NATS: port-forward the chart's NATS and read as the audit user, whose password is the key \"audit\" " +
			"of the Secret s3csi-nats-auth. The flags --nats-* (and the variables NATS_URL, NATS_USER, " +
			"NATS_PASSWORD_FILE, NATS_TLS_*) are those of the s3csi services.",
		Example: `  kubectl -n s3csi port-forward svc/s3csi-nats 4222 &
  kubectl -n s3csi get secret s3csi-nats-auth -o jsonpath='{.data.audit}' | base64 -d > audit.pw
  export NATS_USER=audit NATS_PASSWORD_FILE=$PWD/audit.pw
  kubectl s3csi events --pod default/web-0
  kubectl s3csi status`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl s3csi"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.nats.URL, "nats-url", g.nats.URL, "NATS server URLs, comma separated (env NATS_URL)")
	servicecmd.AddNATSAuthFlags(pf, &g.nats.Auth)
	g.kube.AddFlags(pf)
	pf.StringVar(&g.mountpointNamespace, "mountpoint-namespace", g.mountpointNamespace,
		"namespace of the Mountpoint Pods (env MOUNTPOINT_NAMESPACE)")
	// The commands take ctx from cmd.Context(), which root.SetContext set.
	root.AddCommand(newEventsCommand(g), newStatusCommand(g), newReplayCommand(g), newMigrateCommand()) //nolint:contextcheck // see above

	err := root.Execute()
	switch {
	case err == nil, errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return ExitOK
	case errors.As(err, new(usageError)):
		_, _ = fmt.Fprintf(stderr, "error: %s\nRun 'kubectl s3csi --help' for usage.\n", oneLine(err))
		return ExitUsage
	}
	_, _ = fmt.Fprintf(stderr, "error: %s\n", oneLine(err))
	return ExitFailure
}

// validateNATS checks the NATS flags as the services do.
func (g *global) validateNATS() error {
	errs := servicecmd.ValidateNATSAuth(g.nats.Auth)
	if err := events.ValidateURLs(g.nats.URL); err != nil {
		errs = append(errs, fmt.Errorf("--nats-url: %w", err))
	}
	return errors.Join(errs...)
}

// connect validates the NATS flags and connects.
func (g *global) connect(ctx context.Context) (*bus.Conn, error) {
	if err := g.validateNATS(); err != nil {
		return nil, usageError{err}
	}
	return bus.Connect(ctx, g.nats)
}

// kubeClient is a client of the API server of the kubeconfig flags.
func (g *global) kubeClient() (client.Client, error) {
	cfg, err := g.kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create API client: %w", err)
	}
	return c, nil
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (g *global) namespace() string {
	if ns, _, err := g.kube.ToRawKubeConfigLoader().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// addSelectionFlags registers the flags that select events (events and replay share them).
func addSelectionFlags(fs *pflag.FlagSet, s *audit.Selection) {
	fs.StringVar(&s.Node, "node", "", "only the events about this node")
	fs.StringVar(&s.Pod, "pod", "", "only the mount path of this pod: namespace/name, name (in -n) or UID, and its Mountpoint Pods' events")
	fs.StringVar(&s.PV, "pv", "", "only the events about this PersistentVolume")
	fs.StringSliceVar(&s.Types, "type", nil, "only these event types, e.g. mount.failed,attachment.assigned (repeatable)")
	fs.DurationVar(&s.Since, "since", 0, "only the events stored in the last duration, e.g. 1h")
	fs.Uint64Var(&s.FromSeq, "from-seq", 0, "first stream sequence")
	fs.Uint64Var(&s.UntilSeq, "until-seq", 0, "last stream sequence")
}

// noArgs refuses arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// oneLine keeps an error on one line: joined errors are separated by "; ".
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
