package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newConsumersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consumers QUEUE",
		Short: "List the consumers reading a queue (name, address, flow counters)",
		Args:  cobra.ExactArgs(1),
	}
	read := addStaleFlag(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		cs, err := c.ListConsumers(read(ctx), args[0])
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.ListConsumersResponse{Consumers: cs})
		}
		return printConsumerTable(a.out, cs, time.Now())
	})
	return cmd
}

// printConsumerTable prints one row per consumer; CONNECTED is how long
// ago it registered, as of now.
func printConsumerTable(w io.Writer, cs []*raftqv1.ConsumerInfo, now time.Time) error {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tADDRESS\tIDENTITY\tCONNECTED\tIN FLIGHT\tDELIVERED\tACKED\tCREDIT")
	for _, c := range cs {
		since := now.Sub(time.UnixMilli(c.GetConnectedSinceMs())).Truncate(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%d\t%d\t%d\t%d\n",
			orDash(c.GetName()), orDash(c.GetAddress()), orDash(c.GetIdentity()), max(since, 0),
			c.GetInFlight(), c.GetDelivered(), c.GetAcked(), c.GetCredit())
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
