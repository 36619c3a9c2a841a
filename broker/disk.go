package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/diskguard"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"

	"github.com/raftq/raftq/raftgroup"
)

// diskWatch is the group's disk guard: the loop that measures the data
// dir and publishes it in gossip, the admission of writes that add data
// (admit) and the wording of an append that met a full disk (noSpace).
// Its own type, given at construction the node's gossip it publishes to
// and reads (SetDiskLow, VoterDisks), so the group's type keeps none of
// its steps.
type diskWatch struct {
	guard *diskguard.Guard
	log   *slog.Logger
	id    string // this node's
	dir   string // the data dir measured
	// publish and voters are the cluster node's (SetDiskLow,
	// VoterDisks).
	publish func(low bool)
	voters  func() cluster.VoterDisks

	cancel context.CancelFunc
	done   chan struct{}
}

// startDisk builds the disk guard and runs its loop until stop: every
// interval (0 = 1s) it measures the data dir's free space and, when the
// node crosses its limit either way, logs it and publishes it in gossip
// (cluster.Node.SetDiskLow), where the leader reads it (admit). reserve
// is the room kept for the next snapshot and wal segment.
func startDisk(cfg diskguard.Config, interval time.Duration, log *slog.Logger, publish func(bool), voters func() cluster.VoterDisks) *diskWatch {
	d := &diskWatch{guard: diskguard.New(cfg), log: log, id: cfg.Node, dir: cfg.Dir, publish: publish, voters: voters}
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan struct{})
	go func() {
		defer close(d.done)
		d.guard.Run(ctx, interval, func(r diskguard.Reading) {
			if r.Low {
				d.log.Warn("data dir disk space low: writes that add data (enqueue, create queue) are refused until space is freed; reads, acks and nacks still work",
					"dir", d.dir, "free", diskguard.Human(r.Free), "keep_free", diskguard.Human(r.Limit),
					"min_free_disk_bytes", d.guard.MinFree(), "snapshot_and_log_reserve", diskguard.Human(r.Reserve))
			} else {
				d.log.Info("data dir disk space is back above its limit: writes are accepted again",
					"dir", d.dir, "free", diskguard.Human(r.Free), "keep_free", diskguard.Human(r.Limit))
			}
			d.publish(r.Low)
		})
	}()
	return d
}

// stop ends the loop and waits for it.
func (d *diskWatch) stop() {
	d.cancel()
	<-d.done
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

// admit answers nil if a write that adds data may be proposed: this
// node (the leader, which stores every entry first) has room, and so does
// a quorum of voters as their gossip says, since an entry only commits
// once a quorum has stored it. Otherwise an error wrapping
// diskguard.ErrNoSpace naming the nodes.
func (d *diskWatch) admit() error {
	if err := d.guard.Check(); err != nil {
		return err
	}
	// This node was measured just now: its own gossip flag may be a
	// second old.
	v := d.voters()
	v.Low = slices.DeleteFunc(v.Low, func(id string) bool { return id == d.id })
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
func (d *diskWatch) noSpace(err error) error {
	if !errors.Is(err, raftgroup.ErrNoSpace) {
		return err
	}
	return fmt.Errorf("%w on node %s: appending to the Raft log in its data dir %s failed, nothing was applied: %w",
		diskguard.ErrNoSpace, d.id, d.dir, err)
}
