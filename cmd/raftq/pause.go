package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newQueuePauseCmd(a *app) *cobra.Command {
	var key string
	var d time.Duration
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Stop new deliveries of a queue, or of one fairness key (--key)",
		Long: "Stop new deliveries of a queue, or with --key of one of its fairness keys\n" +
			"(one the queue has not seen yet too). Enqueues are accepted, leases already\n" +
			"out run to completion and other keys keep flowing. With --for the pause ends\n" +
			"by itself; without it, it lasts until `raftq queue resume`. A new pause\n" +
			"replaces the old one's end.",
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&key, "key", "", "pause only this fairness key")
	cmd.Flags().DurationVar(&d, "for", 0, "end the pause by itself after this long (e.g. 10m; 0 = until resumed)")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		if d < 0 || d%time.Millisecond != 0 {
			return fmt.Errorf("--for must be a whole number of milliseconds, 0 or more (got %s)", d)
		}
		q, err := c.PauseQueue(ctx, args[0], key, d)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.PauseQueueResponse{Queue: q})
		}
		what := "queue " + args[0]
		if key != "" {
			what = fmt.Sprintf("fairness key %s of queue %s", key, args[0])
		}
		until := "until resumed"
		if d > 0 {
			until = "for " + d.String()
		}
		_, err = fmt.Fprintf(a.out, "paused %s %s\n", what, until)
		return err
	})
	return cmd
}

func newQueueResumeCmd(a *app) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "End the pause of a queue, or of one fairness key (--key)",
		Long: "End the pause of a queue (keys paused on their own stay paused), or with\n" +
			"--key of one fairness key. Resuming what is not paused is OK.",
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&key, "key", "", "resume only this fairness key")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		q, err := c.ResumeQueue(ctx, args[0], key)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.ResumeQueueResponse{Queue: q})
		}
		what := "queue " + args[0]
		if key != "" {
			what = fmt.Sprintf("fairness key %s of queue %s", key, args[0])
		}
		_, err = fmt.Fprintf(a.out, "resumed %s\n", what)
		return err
	})
	return cmd
}

// formatPause says how long a pause lasts: "until resumed" or its end.
func formatPause(untilMs int64) string {
	if untilMs == 0 {
		return "until resumed"
	}
	return "until " + time.UnixMilli(untilMs).UTC().Format(time.RFC3339)
}
