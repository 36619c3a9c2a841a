package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
)

// addStaleFlag gives a read command --stale (docs/api.md, Read
// consistency) and returns a function that applies it to the call's ctx.
func addStaleFlag(cmd *cobra.Command) func(context.Context) context.Context {
	stale := cmd.Flags().Bool("stale", false,
		"answer from the addressed node's own state without confirming leadership (cheaper; may miss recent writes)")
	return func(ctx context.Context) context.Context {
		if *stale {
			return client.StaleRead(ctx)
		}
		return ctx
	}
}
