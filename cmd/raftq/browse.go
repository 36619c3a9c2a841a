package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newPeekCmd(a *app) *cobra.Command {
	var lim int32
	var dlq bool
	cmd := &cobra.Command{
		Use:   "peek QUEUE",
		Short: "Show ready messages in delivery order without leasing them",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().Int32Var(&lim, "limit", 10, "most messages to show (at most 1000)")
	cmd.Flags().BoolVar(&dlq, "dlq", false, "show the queue's dead-letter queue instead")
	read := addStaleFlag(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		ds, err := c.Peek(read(ctx), args[0], lim, dlq)
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
	cmd := &cobra.Command{
		Use:   "redrive QUEUE",
		Short: "Move messages that came from QUEUE back from its dead-letter queue",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().Int64Var(&lim, "limit", 0, "most messages to move (0 = all)")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		n, err := c.Redrive(ctx, args[0], lim)
		if err != nil {
			return err
		}
		if n == 0 {
			if err := notADLQ(ctx, c, args[0]); err != nil {
				return err
			}
		}
		if a.json {
			return printJSON(a.out, &raftqv1.RedriveResponse{Moved: n})
		}
		_, err = fmt.Fprintf(a.out, "moved %s back to %s\n", plural(n, "message"), args[0])
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
