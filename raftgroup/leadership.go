package raftgroup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Role is this node's Raft role as published in a Leadership value.
type Role uint8

// Roles. The zero value is RoleFollower, what a node is until it hears of
// or wins an election.
const (
	RoleFollower Role = iota
	RoleCandidate
	RoleLeader
	// RoleShutdown is the final role: the node has stopped.
	RoleShutdown
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleCandidate:
		return "candidate"
	case RoleLeader:
		return "leader"
	case RoleShutdown:
		return "shutdown"
	}
	return "unknown"
}

// Leadership is one published state of this node's view of leadership. It
// is an immutable value: every transition (a leader becomes known, this
// node's term is established, leadership is lost, the leader's gossip
// metadata arrives, the node stops) publishes a new one and closes the
// previous value's Changed.
//
// A watcher loops: read Group.Leadership, act on it, wait on Changed (and its
// own ctx). Values may be coalesced (a watcher that is slow sees only the
// latest), but never reordered.
type Leadership struct {
	// Role is this node's role.
	Role Role
	// Term is the Raft term read when the value was published; it is the
	// leader's term when LeaderID is set. A candidate's repeated rounds are
	// not transitions and do not republish it.
	Term uint64
	// LeaderID is the leader this node knows of, "" if none. It is never
	// this node's id unless Role is RoleLeader.
	LeaderID string
	// LeaderRaftAddr is the leader's Raft address.
	LeaderRaftAddr string
	// LeaderGRPCAddr is the gRPC address the leader advertises in gossip
	// for its peers: where calls are forwarded. Empty until its metadata
	// is known (see LeaderKnown) or if it advertises none.
	LeaderGRPCAddr string
	// LeaderClientAddr is where clients are sent (redirects): the
	// leader's --advertise-grpc-addr, else LeaderGRPCAddr.
	LeaderClientAddr string
	// Established is true only while Role is RoleLeader and this term's
	// Barrier has completed: the local state then holds every entry
	// committed before the term, so the node may answer reads and run
	// leader-only work.
	Established bool
	// Changed is closed when a newer value is available. The final value
	// (RoleShutdown) has a Changed that is never closed.
	Changed <-chan struct{}

	// leaderMeta: the leader's gossip metadata is known (so LeaderGRPCAddr
	// is what it advertises, even if empty).
	leaderMeta bool
}

// LeaderKnown reports whether a leader and its gossip metadata are known:
// a caller can then route to LeaderGRPCAddr.
func (l Leadership) LeaderKnown() bool { return l.LeaderID != "" && l.leaderMeta }

// same reports whether l and o publish the same state (Changed aside).
func (l Leadership) same(o Leadership) bool {
	l.Changed, o.Changed = nil, nil
	return l == o
}

// leadership publishes this node's Leadership values and runs the leader
// term: on gaining leadership, a Barrier, then the leader-only services
// until leadership is lost or the node stops. It also keeps the leader's
// record of peers failing heartbeats (for Status), which arrives on the
// same Raft observer.
type leadership struct {
	self       string
	selfGRPC   string
	selfClient string // selfGRPC unless another client address is advertised
	r          *raft.Raft
	log        *slog.Logger
	// apiAddrs returns where a node's API is (its gossip metadata).
	apiAddrs func(id string) (grpc, client string, ok bool)
	// peerChanges, if set, returns a channel closed at the next change
	// of what apiAddrs answers: the value is recomputed then.
	peerChanges func() <-chan struct{}
	// services run during every established term, each until ctx ends.
	services []func(ctx context.Context)
	// hook, if set (tests), sees every published value in order.
	hook func(Leadership)
	// peersChanged, if set, is called when the leader starts or stops
	// replicating to a server (a configuration change).
	peersChanged func()

	obsCh    chan raft.Observation
	observer *raft.Observer
	loopDone chan struct{} // closed when the term loop has ended

	mu       sync.Mutex
	cur      Leadership
	changed  chan struct{}
	estTerm  uint64 // the term whose Barrier completed; 0 if none
	final    bool
	hbFailed map[string]hbFailure // leader's view: peers failing heartbeats
	// staleAfter: a failure Raft has not reported again for this long is
	// over (hbFailure). now is time.Now (tests set it).
	staleAfter time.Duration
	now        func() time.Time
	// hbClearedAt is when hbFailed was last cleared because another node
	// (or none) became leader. A heartbeat goroutine of an earlier term
	// can report a failure after that (its RPC was still in flight);
	// its LastContact is from before then, and it must not mark the peer
	// failing in a later term, which would never report it resumed.
	hbClearedAt time.Time
}

func newLeadership(self, selfGRPC, selfClient string, r *raft.Raft, log *slog.Logger, apiAddrs func(string) (string, string, bool), hook func(Leadership)) *leadership {
	l := &leadership{
		self: self, selfGRPC: selfGRPC, selfClient: selfClient, r: r, log: log, apiAddrs: apiAddrs, hook: hook,
		// Raft drops observations when this is full; the loop only
		// recomputes from Raft's live state, so a dropped one is repaired
		// by the next, but a large buffer keeps that rare.
		obsCh:      make(chan raft.Observation, 256),
		changed:    make(chan struct{}),
		hbFailed:   map[string]hbFailure{},
		staleAfter: failureStaleAfter(DefaultHeartbeatTimeout),
		now:        time.Now,
	}
	l.cur.Changed = l.changed
	return l
}

// get returns the current value.
func (l *leadership) get() Leadership {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// refresh recomputes the value from Raft's live state and publishes it if
// anything changed.
func (l *leadership) refresh() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.final {
		return
	}
	v := Leadership{Term: l.r.CurrentTerm()}
	switch l.r.State() {
	case raft.Leader:
		v.Role = RoleLeader
	case raft.Candidate:
		v.Role = RoleCandidate
	case raft.Shutdown:
		v.Role = RoleShutdown
	}
	addr, id := l.r.LeaderWithID()
	if id != "" && (string(id) != l.self || v.Role == RoleLeader) {
		v.LeaderID, v.LeaderRaftAddr = string(id), string(addr)
		if v.LeaderID == l.self {
			v.LeaderGRPCAddr, v.LeaderClientAddr, v.leaderMeta = l.selfGRPC, l.selfClient, true
		} else if grpc, client, ok := l.apiAddrs(v.LeaderID); ok {
			v.LeaderGRPCAddr, v.LeaderClientAddr, v.leaderMeta = grpc, client, true
		}
	}
	v.Established = v.Role == RoleLeader && v.LeaderID == l.self && l.estTerm != 0 && l.estTerm == v.Term
	l.publishLocked(v)
}

func (l *leadership) publishLocked(v Leadership) {
	if v.same(l.cur) {
		return
	}
	next := make(chan struct{})
	v.Changed = next
	l.cur = v
	close(l.changed)
	l.changed = next
	if l.hook != nil {
		l.hook(v)
	}
}

// setEstablished records that term's Barrier completed.
func (l *leadership) setEstablished(term uint64) {
	// Publish "leader, not yet established" first if the observation of
	// the election has not been handled yet: watchers see the leader
	// known before they see it established.
	l.refresh()
	l.mu.Lock()
	l.estTerm = term
	l.mu.Unlock()
	l.refresh()
}

func (l *leadership) clearEstablished() {
	l.mu.Lock()
	l.estTerm = 0
	l.mu.Unlock()
	l.refresh()
}

// close publishes the final value. Raft has stopped; the value never
// changes again, and its Changed is never closed.
func (l *leadership) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.final {
		return
	}
	l.publishLocked(Leadership{Role: RoleShutdown, Term: l.cur.Term})
	l.final = true
}

// hbFailure is one peer's failing heartbeats: since its last contact
// when first reported, and when Raft last reported it.
type hbFailure struct{ since, reported time.Time }

// failureStaleAfter is how long a failure stands without being reported
// again. Raft reports a failing peer at every failed heartbeat, which
// takes at most the transport's timeout (a peer that accepts and never
// answers) plus a backoff capped at half the heartbeat timeout, then
// waits up to a tenth of it for the next: a failure not reported again
// within that and some slack is over, whether or not its one "resumed"
// reached us. That "resumed" is not enough alone: a heartbeat goroutine
// of an earlier term that fails late never sends one (it ends), and Raft
// drops observations while this loop is slow.
func failureStaleAfter(heartbeat time.Duration) time.Duration {
	return transportTimeout + 2*heartbeat + 2*time.Second
}

// failedHeartbeats returns the peers the leader sees failing heartbeats,
// with since when; a failure not reported again within staleAfter is
// over (failureStaleAfter) and forgotten here.
func (l *leadership) failedHeartbeats() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out := make(map[string]time.Time, len(l.hbFailed))
	for id, f := range l.hbFailed {
		if now.Sub(f.reported) > l.staleAfter {
			delete(l.hbFailed, id)
			continue
		}
		out[id] = f.since
	}
	return out
}

// leaderChanged forgets every failing peer at a change of leader, this
// node included: a term starts with every peer's heartbeats afresh, and
// a failure kept from before would never be reported resumed. Losing
// leadership also marks the moment before which reports are stale.
func (l *leadership) leaderChanged(leader string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.hbFailed)
	if leader != l.self {
		l.hbClearedAt = time.Now()
	}
}

// noteHeartbeatFailure records that the leader fails to heartbeat peer,
// unless the report comes from a term this node has since lost: raft
// starts each term's replication with LastContact = now, so a report whose
// LastContact is older than the last loss of leadership is stale.
//
// A report that arrives while this node is not leading is stale too: its
// goroutine belongs to a lost term, and its LastContact may be after the
// loss (raft's old replication goroutines run on, and may touch it,
// until their RPCs time out).
func (l *leadership) noteHeartbeatFailure(peer string, lastContact time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lastContact.Before(l.hbClearedAt) || l.cur.Role != RoleLeader {
		return
	}
	f, ok := l.hbFailed[peer]
	if !ok {
		f.since = lastContact
	}
	f.reported = l.now()
	l.hbFailed[peer] = f
}

// start registers the Raft observer and starts the observation and term
// loops under ctx; the observation loop is counted in wg, the term loop
// closes loopDone.
func (l *leadership) start(ctx context.Context, wg *sync.WaitGroup) {
	l.observer = raft.NewObserver(l.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState, raft.PeerObservation,
			raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	l.r.RegisterObserver(l.observer)
	l.refresh() // the state before the observer was registered
	wg.Add(1)
	go l.observeLoop(ctx, wg)
	l.loopDone = make(chan struct{})
	go l.termLoop(ctx)
}

// stopObserving deregisters the observer (after Raft has shut down).
func (l *leadership) stopObserving() {
	if l.observer != nil {
		l.r.DeregisterObserver(l.observer)
	}
}

// observeLoop consumes Raft observations: role and leader changes (a new
// value) and the leader's heartbeat failures (for Status).
func (l *leadership) observeLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	var peers <-chan struct{} // nil: never
	if l.peerChanges != nil {
		peers = l.peerChanges()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-peers:
			// The leader's metadata may have arrived or changed. The
			// next channel is taken first, so no change is missed.
			peers = l.peerChanges()
			l.refresh()
		case o := <-l.obsCh:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				l.log.Info("leader changed", "leader", string(d.LeaderID), "leader_raft_addr", string(d.LeaderAddr))
				l.leaderChanged(string(d.LeaderID))
				l.refresh()
			case raft.RaftState:
				l.refresh()
			case raft.PeerObservation:
				// A peer removed, or added (again: a node removed for
				// repair comes back under its id), has its replication
				// stopped or started afresh: a failure noted by the old
				// one would never see its Resumed, and the node would
				// show unreachable for good.
				l.mu.Lock()
				delete(l.hbFailed, string(d.Peer.ID))
				l.mu.Unlock()
				if l.peersChanged != nil {
					l.peersChanged()
				}
			case raft.FailedHeartbeatObservation:
				l.noteHeartbeatFailure(string(d.PeerID), d.LastContact)
			case raft.ResumedHeartbeatObservation:
				l.mu.Lock()
				delete(l.hbFailed, string(d.PeerID))
				l.mu.Unlock()
			}
		}
	}
}

// leaderTerm is one stretch of leadership: the services run under ctx until
// it is cancelled.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// termLoop follows raft's LeaderCh. LeaderCh keeps only the latest value,
// so a true may hide a false before it: every true therefore ends the
// running term (if any) and starts a fresh one.
func (l *leadership) termLoop(ctx context.Context) {
	defer close(l.loopDone)
	var term *leaderTerm
	stop := func() {
		if term != nil {
			term.cancel()
			<-term.done
			term = nil
		}
		l.clearEstablished()
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case isLeader := <-l.r.LeaderCh():
			stop()
			if isLeader {
				term = l.startTerm(ctx)
			}
		}
	}
}

func (l *leadership) startTerm(parent context.Context) *leaderTerm {
	ctx, cancel := context.WithCancel(parent)
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		term, ok := l.establish(ctx)
		if !ok {
			return
		}
		l.setEstablished(term)
		var wg sync.WaitGroup
		for _, run := range l.services {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(ctx)
			}()
		}
		wg.Wait()
	}()
	return t
}

// establish issues a Barrier so that everything committed by earlier
// leaders is applied before the term counts as established (LeaderCh fires
// before the new leader's no-op commits). It retries transient failures
// while still leader and returns the term the Barrier was issued in.
func (l *leadership) establish(ctx context.Context) (uint64, bool) {
	for {
		// Read before the Barrier: if the term moved on meanwhile, the
		// value published for the newer term is not established by it.
		term := l.r.CurrentTerm()
		// The future resolves on commit, loss of leadership or shutdown;
		// waiting on it directly keeps no goroutine behind.
		err := l.r.Barrier(0).Error()
		if err == nil {
			l.log.Info("gained leadership", "term", term)
			return term, true
		}
		if ctx.Err() != nil || l.r.State() != raft.Leader ||
			errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			l.log.Info("barrier on gaining leadership failed; not leading", "err", err)
			return 0, false
		}
		l.log.Warn("barrier on gaining leadership failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
