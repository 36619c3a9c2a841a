package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/spf13/cobra"
)

// newMessageCmd is `raftq message show QUEUE ID`: one message's story.
func newMessageCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "message",
		Short: "Look at one message",
	}
	show := &cobra.Command{
		Use:   "show QUEUE ID",
		Short: "Show a message's state, attempts and life events",
		Long: `Show one message of QUEUE (or one from QUEUE in its dead-letter queue, or one
acked within the last 5 minutes): where it is, its last attempts (who held
it, how and why each ended), its last error and what happened to it, oldest
first. --json prints the GetMessage response.`,
		Example: "  raftq message show jobs 0000000000600000",
		Args:    cobra.ExactArgs(2),
	}
	read := addStaleFlag(show)
	show.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		r, err := c.GetMessage(read(ctx), args[0], args[1])
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, r)
		}
		d := r.GetMessage()
		at := func(ms int64) string {
			if ms == 0 {
				return "-"
			}
			return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
		}
		fmt.Fprintf(a.out, "message %s of %s: %s, attempt %d\n", d.GetId(), d.GetQueue(), r.GetState(), d.GetAttempt())
		if d.GetOriginQueue() != "" {
			fmt.Fprintf(a.out, "dead-lettered from %s: %s\n", d.GetOriginQueue(), d.GetDeadLetterReason())
		}
		if d.GetLastError() != "" {
			fmt.Fprintf(a.out, "last error: %s\n", d.GetLastError())
		}
		if len(d.GetHistory()) > 0 {
			fmt.Fprintln(a.out)
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ATTEMPT\tCONSUMER\tLEASED\tENDED\tOUTCOME\tREASON")
			for _, at0 := range d.GetHistory() {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", at0.GetAttempt(), at0.GetConsumer(), at(at0.GetLeasedAtMs()), at(at0.GetEndedAtMs()), at0.GetOutcome(), at0.GetReason())
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		fmt.Fprintln(a.out)
		tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tEVENT\tDETAIL")
		for _, e := range r.GetEvents() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", at(e.GetAtMs()), e.GetKind(), e.GetDetail())
		}
		return tw.Flush()
	})
	cmd.AddCommand(show)
	return cmd
}
