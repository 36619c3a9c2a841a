package broker

import (
	"context"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Operator is the data group's operator duties: what an operator (or the
// Cluster API on an operator's behalf) asks of the group as a whole
// rather than of a queue or a message. Checkpoints and backups
// (backup.go), the cluster settings (settings.go), counter recounts
// (audit.go), and what this node knows of its own divergence and the
// removal of a corrupt node (replica.go). A part of Broker
// (Broker.Operator), apart from the message path, so that each type has
// one job.
type Operator struct{ b *Broker }

// Operator returns the group's operator duties.
func (b *Broker) Operator() Operator { return Operator{b: b} }

// Checkpoint proposes a Checkpoint entry and returns its index: every
// replica records its state digest there.
func (o Operator) Checkpoint(ctx context.Context) (uint64, error) {
	res, err := apply[*fsm.CheckpointResult](ctx, o.b, &fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}})
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}
