package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// MetaState is what the data group reads of the meta group's local
// replica (meta.FSM): from the handover the cluster settings live there.
type MetaState interface {
	Seeded() bool
	Settings() meta.Settings
	Group(id string) (*meta.Group, bool)
	Changed() <-chan struct{}
}

// metaFollower is a leader duty of the data group (leader.go): once the
// cluster has handed its settings over to the meta group
// (fsm.HandoverVersion), it proposes into this group's log what its apply
// rules read of them — its max_queued_bytes share and max_queues — marked
// from_meta, whenever meta's differ from what this log last applied. So
// this log, replayed alone, applies exactly what it did, whatever meta did
// meanwhile: meta's later changes reach it only as later entries.
type metaFollower struct {
	log     *slog.Logger
	group   string // this group's id in meta
	meta    MetaState
	reads   fsm.Reader
	propose func(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error)
	// interval paces a retry, and the check when meta does not change.
	interval time.Duration
}

func (m *metaFollower) run(ctx context.Context, _ uint64) {
	if m.meta == nil {
		return
	}
	for {
		wait := m.interval
		if err := m.step(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("could not follow the meta group's settings; retrying", "err", err)
			wait = 4 * m.interval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.meta.Changed():
		case <-t.C:
		}
		t.Stop()
	}
}

func (m *metaFollower) step(ctx context.Context) error {
	if m.reads.ClusterVersion() < fsm.HandoverVersion || !m.meta.Seeded() {
		return nil
	}
	g, ok := m.meta.Group(m.group)
	if !ok {
		return nil
	}
	share, maxQueues := g.Share, m.meta.Settings().MaxQueues
	_, have := m.reads.Held()
	if have.MaxQueuedBytes == share && have.MaxQueues == maxQueues {
		return nil
	}
	cmd := &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{
		MaxQueuedBytes: &share, MaxQueues: &maxQueues, FromMeta: true}}}
	if _, err := fsm.As[*fsm.Done](m.propose(ctx, cmd)); err != nil {
		return err
	}
	m.log.Info("cluster settings followed from the meta group", "max_queued_bytes", share, "max_queues", maxQueues)
	return nil
}
