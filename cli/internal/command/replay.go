package command

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/s3csi/s3csi/shared/events"

	"github.com/s3csi/s3csi/cli/internal/audit"
	"github.com/s3csi/s3csi/cli/internal/replay"
)

type replayOptions struct {
	sel    audit.Selection
	target replay.Target
}

func newReplayCommand(g *global) *cobra.Command {
	o := &replayOptions{target: replay.Target{Prefix: events.ReplaySubjectPrefix}}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Republish a selected range of events under another subject prefix, for tests and rehearsals",
		Long: "replay republishes the selected valid events stored in S3CSI_EVENTS, in order and byte for byte, on the " +
			"same subjects with s3csi.events replaced by --to-prefix, with the event id as Nats-Msg-Id and the " +
			"header " + replay.HeaderReplayOf + " naming the sequence copied. Invalid messages are skipped and listed.\n\n" +
			"By default they go under " + events.ReplaySubjectPrefix + " into the stream " + events.ReplayStreamName +
			" (created when missing, kept 24 hours), which no service reads; the chart's NATS user \"replay\" may do " +
			"exactly that. Another prefix needs --to-stream, the stream that stores it. The live prefix " +
			events.SubjectPrefix + " makes the services act on the replayed events: it needs --live, and a NATS " +
			"user allowed to publish there (the chart defines none). Replayed into " + events.StreamName +
			", an event still inside the stream's duplicate window (2 minutes) is dropped as a duplicate.",
		Example: `  # Rehearse the last hour of one node, off the live subjects (as the replay user)
  kubectl s3csi replay --node worker-1 --since 1h --to-prefix s3csi.replay.rehearsal-1 \
    --nats-user replay --nats-password-file replay.pw

  # Into a test NATS's live subjects (the services there act on them)
  kubectl s3csi replay --from-seq 120 --until-seq 180 --to-prefix s3csi.events --live --nats-url nats://127.0.0.1:14222`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplay(cmd.Context(), g, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	addSelectionFlags(fs, &o.sel)
	fs.StringVar(&o.target.Prefix, "to-prefix", o.target.Prefix, "subject prefix that replaces s3csi.events")
	fs.StringVar(&o.target.Stream, "to-stream", "", "stream that must store the replayed events (default "+
		events.ReplayStreamName+" under "+events.ReplaySubjectPrefix+", "+events.StreamName+" with --live)")
	fs.BoolVar(&o.target.Live, "live", false, "allow --to-prefix "+events.SubjectPrefix+": the services act on the replayed events")
	return cmd
}

func runReplay(ctx context.Context, g *global, o *replayOptions, stdout, stderr io.Writer) error {
	o.sel.Namespace = g.namespace()
	if err := o.sel.Validate(); err != nil {
		return usageError{err}
	}
	if err := o.target.Validate(); err != nil {
		return usageError{err}
	}
	conn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := conn.Guard(ctx)
	defer cancel()
	res, err := replay.Run(ctx, conn.JS, o.sel, o.target, func(seq uint64, reason string) {
		_, _ = fmt.Fprintf(stderr, "skipped invalid message %d: %s\n", seq, reason)
	})
	var stopped *replay.StoppedError
	switch {
	case errors.As(err, &stopped):
		return fmt.Errorf("replay stopped at sequence %d after %d events (publish to %s: %w); resume with --from-seq %d",
			stopped.Seq, res.Published+res.Duplicates, stopped.Subject, conn.Explain(stopped.Err), stopped.Seq)
	case err != nil:
		return conn.Explain(err)
	}
	_, err = fmt.Fprintf(stdout, "replayed %d events (sequences %d to %d) into %s on %s.>: %d stored, %d already there, %d invalid skipped\n",
		res.Published+res.Duplicates, res.First, res.Last, o.target.Stream, o.target.Prefix, res.Published, res.Duplicates, res.Invalid)
	return err
}
