package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
)

// completionTimeout bounds the call a shell makes while the user presses
// Tab: a missing broker must not hang the prompt.
const completionTimeout = 2 * time.Second

// completeQueue completes the first argument of a command that names a
// queue, from the queues of the cluster at --addr (nothing when it cannot
// be reached).
func (a *app) completeQueue(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	opts := append(a.clientOptions(cmd), client.WithLogger(slog.New(slog.DiscardHandler)), client.WithFailFast())
	c, err := client.Dial(ctx, a.seeds(cmd), opts...)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	defer c.Close()
	qs, err := c.ListQueues(ctx, toComplete)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var names []string
	for _, q := range qs {
		if strings.HasPrefix(q.GetName(), toComplete) {
			names = append(names, q.GetName())
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// withQueueCompletion sets completeQueue on every command of cmds that
// takes a queue name first.
func (a *app) withQueueCompletion(cmds ...*cobra.Command) {
	for _, c := range cmds {
		c.ValidArgsFunction = a.completeQueue
	}
}
