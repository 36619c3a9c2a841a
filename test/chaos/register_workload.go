//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// registerField is the config field used as each queue's register.
const registerField = "max_message_bytes"

// Registers drives the config register workload: one client per node,
// each calling that node only (a follower forwards to the leader), one
// call at a time, one attempt per call, so every recorded answer is the
// answer to that call.
type Registers struct {
	c      *Cluster
	rec    *Recorder
	queues []string
	init   map[string]int64
	next   atomic.Int64 // the last value written; every write sets a new one
}

// NewRegisters reads each queue's register as it is before the run.
func NewRegisters(ctx context.Context, c *Cluster, rec *Recorder, queues []string) (*Registers, error) {
	r := &Registers{c: c, rec: rec, queues: queues, init: map[string]int64{}}
	r.next.Store(1 << 20)
	for _, q := range queues {
		var qi *raftqv1.QueueInfo
		err := harness.WaitFor(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			cc, err := c.Conn(c.Nodes[0].GRPC)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			resp, err := raftqv1.NewBrokerClient(cc).GetQueue(cctx, &raftqv1.GetQueueRequest{Name: q})
			qi = resp.GetQueue()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("register of %s: %w", q, err)
		}
		r.init[q] = qi.GetConfig().GetMaxMessageBytes()
		r.next.Store(max(r.next.Load(), r.init[q]))
	}
	return r, nil
}

// Run calls node i's register until ctx ends: reads twice as often as
// writes, a few per second.
func (r *Registers) Run(ctx context.Context, i int, rng *rand.Rand) {
	defer r.c.guard()
	n := r.c.Nodes[i]
	for ctx.Err() == nil {
		q := r.queues[rng.IntN(len(r.queues))]
		op := RegisterOp{Client: i, Node: n.ID, Queue: q, Kind: RegRead, Init: r.init[q]}
		if rng.IntN(3) == 0 {
			op.Kind, op.Value = RegWrite, r.next.Add(1)
		}
		r.call(ctx, n, &op)
		r.rec.Register(op)
		pause := time.Duration(50+rng.IntN(150)) * time.Millisecond
		if op.Outcome != OK {
			pause = 500 * time.Millisecond // a node that does not answer is asked less
		}
		_ = harness.Sleep(ctx, pause)
	}
}

func (r *Registers) call(ctx context.Context, n *Node, op *RegisterOp) {
	op.Start = time.Now()
	defer func() { op.End = time.Now() }()
	cc, err := r.c.Conn(n.GRPC)
	if err != nil {
		op.Outcome, op.Err = Failed, err.Error() // nothing was sent
		return
	}
	// The workload's stop does not cut a call short: its answer counts.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	bc := raftqv1.NewBrokerClient(cc)
	if op.Kind == RegWrite {
		_, err = bc.UpdateQueue(cctx, &raftqv1.UpdateQueueRequest{Name: op.Queue,
			Config: &raftqv1.QueueConfig{MaxMessageBytes: op.Value}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{registerField}}})
	} else {
		var resp *raftqv1.GetQueueResponse
		resp, err = bc.GetQueue(cctx, &raftqv1.GetQueueRequest{Name: op.Queue})
		op.Value = resp.GetQueue().GetConfig().GetMaxMessageBytes()
	}
	op.Outcome, _ = classify(err)
	if err != nil {
		op.Err = err.Error()
	}
}
