package broker

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Propose stamps cmd with the node's clock, commits it through Raft and
// returns the state machine's result. It is the one way commands reach
// the log: the scheduler, the coalescers and the admin operations all
// come through here, so time is stamped in exactly one place. The leader
// applies a private copy decoded from the entry's own bytes
// (fsm.Proposals.Encode, here in the caller's goroutine, off the state
// lock), never cmd itself: what the caller does with cmd afterwards cannot
// reach the state, and the leader applies what followers decode.
//
// Every entry is proposed under the replicated cluster version, the newest
// log version every voter understands, so a node running an older build
// during a rolling upgrade applies it by the same rules as this one. Only
// SetClusterVersion names its own (higher) version (version.go).
func (b *Broker) Propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	cmd.NowMs = b.clock.Now().UnixMilli()
	if v := b.reads.ClusterVersion(); v > 1 && cmd.Version == 0 {
		cmd.Version = v
	}
	if growsState(cmd) {
		if err := b.disk.admit(); err != nil {
			return nil, err
		}
	}
	if err := drawLeaseTokens(cmd); err != nil {
		return nil, err
	}
	data, forget, err := b.proposals.Encode(cmd)
	if err != nil {
		return nil, err
	}
	defer forget()
	out, err := b.group.Apply(ctx, data)
	if err != nil {
		return nil, b.disk.noSpace(err)
	}
	res, ok := out.(fsm.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected apply response %T", out)
	}
	return res, nil
}

// proposeAck is the ack coalescer's proposer: the entry goes to the log
// through Propose, like every command; with Config.CarryGrants (from log
// version 10) the scheduler first fills it with the grants of the credit
// its acks free (scheduler.CarryAck) and is told the entry's outcome
// (Ride.Settle), which answers the acks' own result.
func (b *Broker) proposeAck(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	ride := b.sched.CarryAck(cmd)
	res, err := b.Propose(ctx, cmd)
	return ride.Settle(res, err)
}

// apply proposes cmd and returns its typed result, with a whole-command
// failure (nothing changed) as the error.
func apply[T fsm.Result](ctx context.Context, b *Broker, cmd *fsmv1.Command) (T, error) {
	return fsm.As[T](b.Propose(ctx, cmd))
}
