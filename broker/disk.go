package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/diskguard"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"

	"github.com/raftq/raftq/raftgroup"
)

// startDisk builds the disk guard and runs its loop until Close: every
// DiskCheckInterval it measures the data dir's free space and, when the
// node crosses its limit either way, logs it and publishes it in gossip
// (cluster.Node.SetDiskLow), where the leader reads it (admitGrowth).
func (b *Broker) startDisk() {
	b.disk = diskguard.New(diskguard.Config{
		Node:    b.id,
		Dir:     b.cfg.Cluster.DataDir,
		MinFree: b.cfg.MinFreeDisk,
		// Room for the next snapshot, and for the next wal segment.
		Reserve: func() uint64 { return uint64(max(b.group.NewestSnapshotBytes(), 0) + b.group.LogReserveBytes()) },
	})
	interval := b.cfg.DiskCheckInterval
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopDisk, b.diskDone = cancel, make(chan struct{})
	go func() {
		defer close(b.diskDone)
		b.disk.Run(ctx, interval, func(r diskguard.Reading) {
			if r.Low {
				b.log.Warn("data dir disk space low: writes that add data (enqueue, create queue) are refused until space is freed; reads, acks and nacks still work",
					"dir", b.cfg.Cluster.DataDir, "free", diskguard.Human(r.Free), "keep_free", diskguard.Human(r.Limit),
					"min_free_disk_bytes", b.disk.MinFree(), "snapshot_and_log_reserve", diskguard.Human(r.Reserve))
			} else {
				b.log.Info("data dir disk space is back above its limit: writes are accepted again",
					"dir", b.cfg.Cluster.DataDir, "free", diskguard.Human(r.Free), "keep_free", diskguard.Human(r.Limit))
			}
			b.node.SetDiskLow(r.Low)
		})
	}()
}

// growsState reports whether cmd adds data to the state: the writes a
// node short of disk refuses. Everything else (settling, leasing, expiry,
// deleting, purging, configuration) goes ahead, so that consumers can
// drain a queue, and snapshots shrink, while the disk is low.
func growsState(cmd *fsmv1.Command) bool {
	switch cmd.GetOp().(type) {
	case *fsmv1.Command_Enqueue, *fsmv1.Command_CreateQueue:
		return true
	}
	return false
}

// admitGrowth answers nil if a write that adds data may be proposed: this
// node (the leader, which stores every entry first) has room, and so does
// a quorum of voters as their gossip says, since an entry only commits
// once a quorum has stored it. Otherwise an error wrapping
// diskguard.ErrNoSpace naming the nodes.
func (b *Broker) admitGrowth() error {
	if err := b.disk.Check(); err != nil {
		return err
	}
	// This node was measured just now: its own gossip flag may be a
	// second old.
	v := b.node.VoterDisks()
	v.Low = slices.DeleteFunc(v.Low, func(id string) bool { return id == b.id })
	if !v.CanStore() {
		return fmt.Errorf("%w: voters %s report their data dir's disk low, so fewer than a quorum of the %d voters can store new entries; writes that add data are refused until space is freed there, reads, acks and nacks still work",
			diskguard.ErrNoSpace, strings.Join(v.Low, ", "), v.Voters)
	}
	return nil
}

// noSpace names the disk in an append that failed for lack of space
// (the guard's margin was not enough: one huge entry, or space taken by
// something else). Raft answered before the entry reached any log, so
// nothing was applied; the leader steps down and is elected again, and
// the guard refuses what would grow the state further.
func (b *Broker) noSpace(err error) error {
	if !errors.Is(err, raftgroup.ErrNoSpace) {
		return err
	}
	return fmt.Errorf("%w on node %s: appending to the Raft log in its data dir %s failed, nothing was applied: %w",
		diskguard.ErrNoSpace, b.id, b.cfg.Cluster.DataDir, err)
}
