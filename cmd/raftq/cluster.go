package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newClusterCmd(a *app) *cobra.Command {
	cmd := group("cluster", "Inspect and manage cluster membership, leadership and replicas")
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the leader and every node as the node at --addr sees them",
		Args:  cobra.NoArgs,
		RunE: a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
			st, err := c.ClusterStatus(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, st)
			}
			return printStatus(a.out, st)
		}),
	}
	var force bool
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a node from the Raft configuration",
		Long: "Remove a node from the Raft configuration. A removal that would leave fewer\n" +
			"voters than the cluster's --bootstrap-expect is refused unless --force is given.",
		Args: cobra.ExactArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			if err := c.RemoveNode(ctx, args[0], force); err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, &raftqv1.RemoveNodeResponse{})
			}
			_, err := fmt.Fprintf(a.out, "removed node %s\n", args[0])
			return err
		}),
	}
	remove.Flags().BoolVar(&force, "force", false, "remove a voter even if fewer voters than --bootstrap-expect remain")
	var leaveForce bool
	leave := &cobra.Command{
		Use:   "leave",
		Short: "Make the node at --addr leave the cluster and stop",
		Long: "Make the node at --addr (exactly one address) leave the cluster: it hands\n" +
			"leadership over if it leads, is removed from the voters, and stops. A node\n" +
			"stopped with SIGTERM (docker stop, Ctrl-C) stays a voter instead and takes\n" +
			"its place again when it restarts. A leave that would leave fewer voters than\n" +
			"the cluster's --bootstrap-expect is refused unless --force is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if seeds := a.seeds(cmd); len(seeds) != 1 {
				return fmt.Errorf("cluster leave acts on the node at --addr: give exactly one address, not %q", strings.Join(seeds, ","))
			}
			return a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
				id, err := c.Leave(ctx, leaveForce)
				if err != nil {
					return err
				}
				if a.json {
					return printJSON(a.out, &raftqv1.LeaveResponse{Id: id})
				}
				_, err = fmt.Fprintf(a.out, "node %s left the cluster and is stopping\n", id)
				return err
			})(cmd, args)
		},
	}
	leave.Flags().BoolVar(&leaveForce, "force", false, "leave even if fewer voters than --bootstrap-expect remain")
	var transferGroup string
	transfer := &cobra.Command{
		Use:   "transfer-leadership [ID]",
		Short: "Hand leadership to node ID, or to any other voter",
		Args:  cobra.MaximumNArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			to := ""
			if len(args) == 1 {
				to = args[0]
			}
			leader, err := c.TransferGroupLeadership(ctx, transferGroup, to)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, &raftqv1.TransferLeadershipResponse{NewLeaderId: leader})
			}
			_, err = fmt.Fprintf(a.out, "leader is now %s\n", leader)
			return err
		}),
	}
	transfer.Flags().StringVar(&transferGroup, "group", "", `the Raft group whose leadership moves: "" (the queues' data group) or "meta" (identities, settings, placement)`)
	snapshot := &cobra.Command{
		Use:   "snapshot",
		Short: "Make the node at --addr take a Raft snapshot",
		Args:  cobra.NoArgs,
		RunE: a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
			idx, err := c.Snapshot(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, &raftqv1.SnapshotResponse{Index: idx})
			}
			_, err = fmt.Fprintf(a.out, "snapshot at index %d\n", idx)
			return err
		}),
	}
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Compare the replicas' state digests; exits non-zero if they differ",
		Args:  cobra.NoArgs,
		RunE: a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
			v, err := c.Verify(ctx)
			if err != nil {
				return err
			}
			if a.json {
				err = printJSON(a.out, v)
			} else {
				err = printVerify(a.out, v)
			}
			if err != nil {
				return err
			}
			if !v.GetConsistent() {
				if ids := v.GetInconsistentIds(); len(ids) > 0 {
					return fmt.Errorf("replicas are not consistent: %s did not answer or differ", strings.Join(ids, ", "))
				}
				return errors.New("replicas are not consistent")
			}
			return nil
		}),
	}
	set := &cobra.Command{
		Use:   "set max-queued-bytes|max-queues|groups|replicas N",
		Short: "Change a replicated cluster setting",
		Long: "Change a replicated cluster setting (needs the admin role).\n" +
			"max-queued-bytes (every voter at log version 9) bounds what the whole cluster\n" +
			"holds (messages, dedup entries and recent outcomes, as stats.bytes counts\n" +
			"them); lowering it below what is held refuses new enqueues only.\n" +
			"max-queues (every voter at log version 12; 10000 until changed) bounds how\n" +
			"many queues the cluster holds, dead-letter queues included; lowering it\n" +
			"below the count refuses new queues only. 0 means unlimited for both.\n" +
			"groups (1 to 256; 1 by default, the data group alone) is how many data\n" +
			"groups the cluster keeps (every voter at log version 21, the meta group);\n" +
			"lowering it removes only groups no queue is placed on.\n" +
			"replicas (odd, 1 to 7; 3 by default) is each data group's voters, never\n" +
			"more than the nodes: groups grow to it as nodes join.",
		Args: cobra.ExactArgs(2),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			n, err := strconv.ParseInt(args[1], 10, 64)
			req := &raftqv1.SetClusterSettingsRequest{}
			switch args[0] {
			case "max-queued-bytes":
				if err != nil || n < 0 {
					return fmt.Errorf("max-queued-bytes must be a whole number of bytes, 0 or more (0 = unlimited), not %q", args[1])
				}
				req.MaxQueuedBytes = &n
			case "max-queues":
				if err != nil || n < 0 {
					return fmt.Errorf("max-queues must be a whole number of queues, 0 or more (0 = unlimited), not %q", args[1])
				}
				req.MaxQueues = &n
			case "groups":
				// The server checks the range (1..256); this only
				// refuses what is not a count at all.
				if err != nil || n < 0 || n > math.MaxUint32 {
					return fmt.Errorf("groups must be a whole number of data groups, 1 to 256, not %q", args[1])
				}
				v := uint32(n)
				req.Groups = &v
			case "replicas":
				if err != nil || n < 0 || n > math.MaxUint32 {
					return fmt.Errorf("replicas must be a whole, odd number of voters per data group, 1 to 7, not %q", args[1])
				}
				v := uint32(n)
				req.Replicas = &v
			default:
				return fmt.Errorf("unknown setting %q: the settings are max-queued-bytes, max-queues, groups and replicas", args[0])
			}
			st, err := c.ChangeClusterSettings(ctx, req)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, st)
			}
			switch {
			case req.MaxQueues != nil:
				_, err = fmt.Fprintf(a.out, "max-queues is now %d\n", st.GetMaxQueues())
			case req.Groups != nil:
				_, err = fmt.Fprintf(a.out, "groups is now %d\n", st.GetGroups())
			case req.Replicas != nil:
				_, err = fmt.Fprintf(a.out, "replicas is now %d\n", st.GetReplicas())
			default:
				_, err = fmt.Fprintf(a.out, "max-queued-bytes is now %d (%s)\n", st.GetMaxQueuedBytes(), fsm.HumanBytes(st.GetMaxQueuedBytes()))
			}
			return err
		}),
	}
	cmd.AddCommand(status, remove, leave, transfer, snapshot, verify, set, newRecoverCmd(a))
	return cmd
}
