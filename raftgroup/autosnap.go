package raftgroup

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Automatic snapshots are raftq's decision, not hashicorp/raft's timer
// (cluster/DESIGN.md, "Automatic snapshots"). raft checks
// SnapshotThreshold only when a timer of one to two SnapshotIntervals
// fires, and starts that timer afresh in every process: a node restarted
// more often than that (a crash loop, the soak's faults) never snapshots,
// and its log grows without bound. snapshotWatch snapshots when the log
// past the newest snapshot reaches the threshold: at start-up (after the
// restore, once the FSM has applied the log it came back with) and as
// entries are appended, at most one at a time, off the apply path, and
// spaced by what they cost: after the last snapshot this process wrote,
// the watch waits snapshotCostFactor times as long as its last snapshot
// took (at least snapshotMinGap, at most SnapshotInterval), so snapshots
// take at most about a tenth of the node's time, a cheap state is
// snapshotted about every threshold entries, and a restarted node
// snapshots at once.

const (
	// raftSnapshotThreshold is the threshold raft itself is given: one its
	// timer never finds reached (raft uses SnapshotThreshold for nothing
	// else), so that snapshotWatch is the only automatic trigger and two
	// never run back to back.
	raftSnapshotThreshold = math.MaxUint64
	// snapshotRecheck is how soon the watch looks again when the log is
	// past the threshold but the FSM is still applying it (a restarted
	// node catching up), or raft refused because a configuration entry is
	// not yet applied.
	snapshotRecheck = time.Second
	// snapshotCostFactor and snapshotMinGap space automatic snapshots by
	// their cost: after a snapshot that took d, the next waits
	// max(snapshotMinGap, snapshotCostFactor×d), capped at the
	// SnapshotInterval (so at most a tenth of the time goes to
	// snapshots, until a snapshot takes longer than a tenth of the
	// interval).
	snapshotCostFactor = 9
	snapshotMinGap     = time.Second
)

// snapshotWatch decides when this node snapshots and asks raft to.
type snapshotWatch struct {
	threshold uint64
	interval  time.Duration
	log       *slog.Logger

	// newest is the index of the newest snapshot in the store: written
	// here (by this watch, Group.Snapshot or raft) or installed from a
	// leader.
	newest atomic.Uint64
	// stored is the index of the last entry appended to the log.
	stored atomic.Uint64
	// start is when the watch was made; lastAt is when this process last
	// wrote a snapshot, as time since start (0: none yet).
	start  time.Time
	lastAt atomic.Int64
	// took is how long the watch's last snapshot took (0: none yet);
	// only the loop uses it.
	took time.Duration
	// wake is signalled when an append takes the log to the threshold.
	wake chan struct{}
	// failed counts the watch's snapshots that failed.
	failed atomic.Uint64
}

func newSnapshotWatch(threshold uint64, interval time.Duration, log *slog.Logger) *snapshotWatch {
	return &snapshotWatch{threshold: threshold, interval: interval, log: log, start: time.Now(), wake: make(chan struct{}, 1)}
}

// entriesPast is how far a is past b, 0 if it is not.
func entriesPast(a, b uint64) uint64 {
	if a <= b {
		return 0
	}
	return a - b
}

// appended records that the log now ends at last, and wakes the watch if
// that is the threshold past the newest snapshot. It runs on raft's
// append path, so it only compares and signals.
func (w *snapshotWatch) appended(last uint64) {
	w.stored.Store(last)
	if entriesPast(last, w.newest.Load()) >= w.threshold {
		notify(w.wake)
	}
}

// snapshotted records a snapshot at index that this process wrote to the
// store.
func (w *snapshotWatch) snapshotted(index uint64) {
	w.found(index)
	w.lastAt.Store(max(int64(time.Since(w.start)), 1))
}

// found records a snapshot at index in the store (found at start-up, or
// written).
func (w *snapshotWatch) found(index uint64) {
	for {
		cur := w.newest.Load()
		if index <= cur || w.newest.CompareAndSwap(cur, index) {
			return
		}
	}
}

// entriesSince is how many applied entries the newest snapshot does not
// cover.
func (w *snapshotWatch) entriesSince(applied uint64) uint64 {
	return entriesPast(applied, w.newest.Load())
}

// snapshotDecision is what the watch does now, and when to look again if
// not now (0: at the next append that reaches the threshold).
type snapshotDecision struct {
	now   bool
	again time.Duration
}

// gap is how long the watch waits after a snapshot before the next one,
// given that its last took took (0: none measured yet).
func snapshotGap(took, interval time.Duration) time.Duration {
	return min(interval, max(snapshotMinGap, snapshotCostFactor*took))
}

// decide is the policy: snapshot once the FSM has applied threshold
// entries past the newest snapshot, unless it still has threshold or more
// entries of the log to apply (a restarted node catching up: snapshot
// after, to cover them all), and no sooner than gap after this process's
// last snapshot (sinceLast < 0: none yet).
func decide(applied, stored, newest, threshold uint64, sinceLast, gap time.Duration) snapshotDecision {
	if entriesPast(applied, newest) < threshold {
		if entriesPast(stored, newest) >= threshold {
			return snapshotDecision{again: snapshotRecheck} // appended, not yet applied
		}
		return snapshotDecision{}
	}
	if entriesPast(stored, applied) >= threshold {
		return snapshotDecision{again: snapshotRecheck}
	}
	if sinceLast >= 0 && sinceLast < gap {
		return snapshotDecision{again: gap - sinceLast}
	}
	return snapshotDecision{now: true}
}

// run is the watch's loop, until ctx ends. It checks once at start (the
// log the node came back with) and then whenever an append reaches the
// threshold, or a wait it set has ended (while one is set, appends are
// not looked at: they keep signalling).
func (w *snapshotWatch) run(ctx context.Context, r *raft.Raft) {
	var wait <-chan time.Time
	for check := true; ; check = false {
		switch {
		case check:
		case wait != nil:
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			wait = nil
			drain(w.wake)
		default:
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
		}
		sinceLast := time.Duration(-1)
		if at := w.lastAt.Load(); at > 0 {
			sinceLast = time.Since(w.start) - time.Duration(at)
		}
		applied := r.AppliedIndex()
		d := decide(applied, w.stored.Load(), w.newest.Load(), w.threshold, sinceLast, snapshotGap(w.took, w.interval))
		if d.now {
			d.again = w.take(ctx, r, applied)
		}
		if d.again > 0 {
			wait = time.After(d.again)
		}
	}
}

// take asks raft for a snapshot and waits for it; it returns how soon to
// look again if the snapshot was not written (0: when appends say so).
func (w *snapshotWatch) take(ctx context.Context, r *raft.Raft, applied uint64) time.Duration {
	newest := w.newest.Load()
	start := time.Now()
	w.log.Info("taking a snapshot: the log is past the snapshot threshold",
		"applied", applied, "newest_snapshot", newest, "entries_since", entriesPast(applied, newest), "threshold", w.threshold)
	// raft answers when the snapshot is written and the log compacted,
	// or with ErrRaftShutdown once it stops (the node's shutdown stops
	// raft after cancelling ctx, and only then waits for this loop).
	err := r.Snapshot().Error()
	switch {
	case err == nil:
		w.took = time.Since(start)
		w.log.Info("snapshot taken", "newest_snapshot", w.newest.Load(), "took", w.took.Round(time.Millisecond),
			"next_after", snapshotGap(w.took, w.interval).Round(time.Millisecond))
		return 0
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return 0
	case ctx.Err() != nil || errors.Is(err, raft.ErrRaftShutdown):
		return 0
	case strings.Contains(err.Error(), "wait until the configuration entry"):
		// A configuration change is committed but not yet applied here.
		w.log.Debug("snapshot deferred", "err", err)
		return snapshotRecheck
	default:
		w.failed.Add(1)
		w.log.Error("snapshot failed; the Raft log is not compacted until one succeeds (nothing acknowledged is lost); trying again after the snapshot interval",
			"applied", applied, "newest_snapshot", newest, "interval", w.interval, "err", err)
		return w.interval
	}
}

// drain empties a notification channel.
func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
