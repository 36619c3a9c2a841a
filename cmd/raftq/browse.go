package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// dlqFlags are the filters peek and redrive share (log version 14).
type dlqFlags struct {
	key, reason string
	olderThan   time.Duration
}

func (f *dlqFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.key, "key", "", "only messages of this fairness key")
	cmd.Flags().StringVar(&f.reason, "reason", "", "only messages whose dead-letter reason (or last error) contains this text")
	cmd.Flags().DurationVar(&f.olderThan, "older-than", 0, "only messages dead-lettered at least this long ago, e.g. 1h")
}

func (f *dlqFlags) set() bool { return f.key != "" || f.reason != "" || f.olderThan != 0 }

func newPeekCmd(a *app) *cobra.Command {
	var lim int32
	var dlq bool
	var after string
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "peek QUEUE",
		Short: "Show ready messages in delivery order without leasing them",
		Long: `Show ready messages in delivery order without leasing them, or with --dlq
the messages of QUEUE in its dead-letter queue. With --key, --reason,
--older-than or --after they come in id order: page with --after set to the
last id shown.`,
		Example: "  raftq peek jobs --dlq --key tenant-a --reason timeout --older-than 1h",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().Int32Var(&lim, "limit", 10, "most messages to show (at most 1000)")
	cmd.Flags().BoolVar(&dlq, "dlq", false, "show the queue's dead-letter queue instead")
	cmd.Flags().StringVar(&after, "after", "", "only messages with a greater id than this one (paging)")
	f.add(cmd)
	read := addStaleFlag(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		var ds []*raftqv1.Delivery
		var err error
		if f.set() || after != "" {
			older, merr := msOf("older-than", f.olderThan)
			if merr != nil {
				return merr
			}
			if older > 0 && !dlq {
				return fmt.Errorf("--older-than counts from when a message was dead-lettered: it needs --dlq")
			}
			ds, err = c.PeekWith(read(ctx), &raftqv1.PeekRequest{Queue: args[0], Limit: lim, DeadLetter: dlq,
				FairnessKey: f.key, ReasonContains: f.reason, OlderThanMs: older, AfterId: after})
		} else {
			ds, err = c.Peek(read(ctx), args[0], lim, dlq)
		}
		if err != nil {
			return err
		}
		if !a.json {
			return printDeliveryTable(a.out, ds, dlq)
		}
		for _, d := range ds {
			if err := printJSON(a.out, d); err != nil {
				return err
			}
		}
		return nil
	})
	return cmd
}

func newRedriveCmd(a *app) *cobra.Command {
	var lim int64
	var dry bool
	var rate float64
	var ids []string
	var cancelJob string
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "redrive QUEUE",
		Short: "Move messages that came from QUEUE back from its dead-letter queue",
		Long: `Move messages that came from QUEUE back from its dead-letter queue: all of
them, or those --key, --reason, --older-than and --ids select. --dry-run
counts them and moves nothing. --rate moves at most that many a second: the
redrive becomes a job the cluster runs (raftq queue get QUEUE shows it) and
that carries on after a failover; the command returns at once with the
count it will move. --cancel JOB stops such a job (what it moved stays).`,
		Example: `  raftq redrive jobs --dry-run --reason timeout
  raftq redrive jobs --key tenant-a --older-than 1h --rate 100
  raftq redrive jobs --ids 0000000000100000,0000000000100001
  raftq redrive jobs --cancel 0000000000a00000`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().Int64Var(&lim, "limit", 0, "most messages to move (0 = all)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "count what would move; move nothing")
	cmd.Flags().Float64Var(&rate, "rate", 0, "move at most this many messages per second (0 = all at once)")
	cmd.Flags().StringSliceVar(&ids, "ids", nil, "exactly these message ids (comma-separated); ids not in the dead-letter queue are skipped")
	cmd.Flags().StringVar(&cancelJob, "cancel", "", "cancel this rate-limited redrive job (raftq queue get lists them)")
	f.add(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		older, err := msOf("older-than", f.olderThan)
		if err != nil {
			return err
		}
		if rate < 0 {
			return fmt.Errorf("--rate must not be negative (got %v)", rate)
		}
		var n int64
		var job string
		if cancelJob != "" {
			resp, err := c.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: args[0], CancelJob: cancelJob})
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, resp)
			}
			_, err = fmt.Fprintf(a.out, "cancelled redrive job %s of %s; it had moved %s\n", cancelJob, args[0], plural(resp.GetMoved(), "message"))
			return err
		}
		if f.set() || dry || rate != 0 || len(ids) > 0 {
			resp, err := c.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: args[0], Limit: lim, FairnessKey: f.key, ReasonContains: f.reason,
				OlderThanMs: older, DryRun: dry, RatePerSec: rate, MessageIds: ids})
			if err != nil {
				return err
			}
			n, job = resp.GetMoved(), resp.GetJobId()
		} else if n, err = c.Redrive(ctx, args[0], lim); err != nil {
			return err
		}
		if n == 0 && !f.set() && len(ids) == 0 {
			if err := notADLQ(ctx, c, args[0]); err != nil {
				return err
			}
		}
		if a.json {
			return printJSON(a.out, &raftqv1.RedriveResponse{Moved: n, JobId: job})
		}
		switch {
		case dry:
			_, err = fmt.Fprintf(a.out, "would move %s back to %s (dry run: nothing moved)\n", plural(n, "message"), args[0])
		case job != "":
			_, err = fmt.Fprintf(a.out, "moving %s back to %s at %v a second (job %s; raftq queue get %s shows it)\n", plural(n, "message"), args[0], rate, job, args[0])
		default:
			_, err = fmt.Fprintf(a.out, "moved %s back to %s\n", plural(n, "message"), args[0])
		}
		return err
	})
	return cmd
}

// notADLQ explains a redrive that moved nothing because it named a
// dead-letter queue: redrive names the queue the messages came from, so
// `redrive jobs.dlq` moves what jobs.dlq's own DLQ holds (nothing, as a
// rule). Best effort: a caller who may not browse the queue gets the plain
// answer.
func notADLQ(ctx context.Context, c *client.Client, name string) error {
	q, err := c.GetQueue(ctx, name, false)
	if err != nil || !q.GetIsDeadLetterQueue() {
		return nil
	}
	try := "raftq redrive QUEUE, naming a queue whose dead-letter queue it is"
	if qs, err := c.ListQueues(ctx, ""); err == nil {
		if of := deadLetterOrigins(qs)[name]; len(of) > 0 {
			cmds := make([]string, len(of))
			for i, o := range of {
				cmds[i] = "raftq redrive " + o
			}
			try = strings.Join(cmds, " or ")
		}
	}
	return fmt.Errorf("%s is a dead-letter queue, and redrive names the queue its messages came from: moved nothing. Try %s", name, try)
}
