package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/cli/internal/audit"
)

// podLookupTimeout bounds the API server lookup of --pod.
const podLookupTimeout = 5 * time.Second

type eventsOptions struct {
	sel    audit.Selection
	output string
	follow bool
}

func newEventsCommand(g *global) *cobra.Command {
	o := &eventsOptions{output: audit.OutputTable}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the mount history from the event stream; --pod answers why a pod is stuck",
		Long: "events prints the events stored in the S3CSI_EVENTS stream, in stream order, as a table (default), " +
			"JSON (one object per line) or YAML.\n\n" +
			"With --pod it shows that pod's mount path (workload.scheduled, attachment.assigned, volume.published, ...) " +
			"and the events of its Mountpoint Pods, with the wait before each step (+WAIT), then says per volume " +
			"how far the mount got and what to look at next.\n\n" +
			"A message of the stream that is not a valid event (malformed, oversized, unknown type, wrong subject) " +
			"is shown as INVALID with its sequence and skipped; --pod and --pv cannot match such a message, so it " +
			"is shown whenever its subject is selected. --node leaves out the events about no node " +
			"(volume.created, volume.deleted).",
		Example: `  # Why is my pod stuck?
  kubectl s3csi events --pod default/web-0

  # The last hour of one node, and follow
  kubectl s3csi events --node worker-1 --since 1h -f

  # Every mount failure of one volume, as JSON
  kubectl s3csi events --pv pvc-3f1c --type mount.failed -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEvents(cmd.Context(), g, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	addSelectionFlags(fs, &o.sel)
	fs.StringVarP(&o.output, "output", "o", o.output, "output format: table, json or yaml")
	fs.BoolVarP(&o.follow, "follow", "f", false, "keep printing the events stored later, until interrupted")
	return cmd
}

func runEvents(ctx context.Context, g *global, o *eventsOptions, stdout, stderr io.Writer) error {
	o.sel.Namespace = g.namespace()
	if err := audit.ValidateOutput(o.output); err != nil {
		return usageError{err}
	}
	if err := o.sel.Validate(); err != nil {
		return usageError{err}
	}
	var pod *audit.PodTracker
	if o.sel.Pod != "" {
		ref, _ := audit.ParsePod(o.sel.Pod, o.sel.Namespace) // validated above
		pod = audit.NewPodTracker(ref, g.lookupPodUID(ctx, ref, stderr))
	}
	conn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := conn.Guard(ctx)
	defer cancel()
	view := &audit.View{Sel: o.sel, Pod: pod, Out: audit.NewPrinter(stdout, o.output, pod != nil)}
	caughtUp := func() error {
		if pod == nil || o.output != audit.OutputTable {
			return nil
		}
		_, err := fmt.Fprintln(stdout)
		for _, line := range pod.Diagnose(time.Now(), g.mountpointNamespace) {
			if err == nil {
				_, err = fmt.Fprintln(stdout, line)
			}
		}
		return err
	}
	if err := view.Read(ctx, conn.JS, time.Now(), o.follow, caughtUp); err != nil {
		return conn.Explain(err)
	}
	return nil
}

// lookupPodUID asks the API server for the UID of a pod named by namespace/name, so that its
// events are found even when its workload.scheduled event is out of the range. It is a help,
// not a need: without a reachable API server the pod is found by the names on the bus.
func (g *global) lookupPodUID(ctx context.Context, ref audit.PodRef, stderr io.Writer) string {
	if ref.Name == "" {
		return ""
	}
	c, err := g.kubeClient()
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, podLookupTimeout)
		defer cancel()
		var p corev1.Pod
		if err = c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &p); err == nil {
			return string(p.UID)
		}
	}
	_, _ = fmt.Fprintf(stderr, "note: pod %s not read from the API server (%s); finding it by the names on the bus\n",
		ref, oneLine(err))
	return ""
}
