package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/peers"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// DefaultReplicaCheckInterval is how often the leader checks, unasked,
// that every replica holds the same state.
const DefaultReplicaCheckInterval = time.Minute

// replicaAskTimeout bounds asking one node for its digest or telling it
// it diverged.
const replicaAskTimeout = 5 * time.Second

// Divergence is what a node knows of its own state having diverged.
type Divergence struct {
	Index             uint64 // the checkpoint at which it was found
	Digest, Reference string // this node's digest there, and the replicas'
	LeaderID          string // who found it
	Since             time.Time
}

// Diverged reports whether this node learnt that its state differs from
// the replicas' (and so serves no reads from it, and leads no term).
func (o Operator) Diverged() bool { return o.b.diverged.Load() != nil }

// MarkDiverged records that this node's state differs from the
// replicas': its digest at the checkpoint index is digest, theirs
// reference, as leaderID found. Only the first mark is kept.
func (o Operator) MarkDiverged(index uint64, digest, reference, leaderID string) {
	d := &Divergence{Index: index, Digest: digest, Reference: reference, LeaderID: leaderID, Since: time.Now()}
	if o.b.diverged.CompareAndSwap(nil, d) {
		o.b.log.Error("this node's state diverged from the replicas': serving no reads from it until it is repaired",
			"checkpoint", index, "digest", digest, "replicas_digest", reference, "reported_by", leaderID)
	}
}

// errDiverged: this node's state diverged, so it must not lead.
var errDiverged = errors.New("this node's state diverged from the replicas'")

// replicaCheck is the replica check, a leader duty (leader.go): its own
// type, given at construction what it reads (the state's digests, this
// node's divergence, the member list) and what it may do (append a
// Checkpoint through the group, mark this node diverged, hand leadership
// over, remove a node, ask the others through the peer pool), so the
// group's type keeps none of its steps. It shares what it knows of the
// nodes it repairs (repairs) with Operator.RemoveCorrupt, under one lock.
type replicaCheck struct {
	log      *slog.Logger
	id       string        // this node's
	interval time.Duration // Config.ReplicaCheckInterval; negative = never
	peers    *peers.Pool   // nil: the check is off (no way to ask the others)
	checks   fsm.Integrity
	own      *atomic.Pointer[Divergence] // this node's divergence (Broker.diverged)
	repairs  *repairs
	// checkpoint and mark are the group's (Operator.Checkpoint,
	// Operator.MarkDiverged), handOver its Raft group's
	// TransferLeadership; status and remove are the cluster node's
	// (Status, RemoveNode).
	checkpoint func(ctx context.Context) (uint64, error)
	mark       func(index uint64, digest, reference, leaderID string)
	handOver   func(ctx context.Context, id string) (string, error)
	status     func() cluster.Status
	remove     func(ctx context.Context, id string, force bool) error
}

// duty is the leader duty that checks the replicas every interval
// (check). A node that knows its own
// state diverged does not start it: its term is then not established and
// it hands leadership over (leader.go), so a bad state never leads.
func (rc *replicaCheck) duty() duty {
	return duty{name: "replica check", start: func(ctx context.Context, term uint64) (func(), error) {
		if d := rc.own.Load(); d != nil {
			return nil, fmt.Errorf("%w at checkpoint %d (reported by %s)", errDiverged, d.Index, d.LeaderID)
		}
		interval := rc.interval
		if interval < 0 || rc.peers == nil {
			return func() {}, nil // off, or no way to ask the others
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if err := rc.check(ctx); err != nil && ctx.Err() == nil {
					rc.log.Warn("replica check did not complete; the next one tries again", "err", err)
				}
			}
		}()
		return func() { <-done }, nil
	}}
}

// replicaAnswer is one node's digest at a checkpoint.
type replicaAnswer struct {
	id, addr, digest string
	voter            bool
}

// check appends a Checkpoint (every replica freezes its state at
// that index), asks every node for its digest there, as cluster verify
// does, and reports each node whose digest differs from the one most
// replicas hold (on a tie, this leader's): it tells the node, which stops
// serving reads, and counts it (Divergences). If this leader is the one
// that differs, it hands leadership over so the others find it.
func (rc *replicaCheck) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*replicaAskTimeout)
	defer cancel()
	idx, err := rc.checkpoint(ctx)
	if err != nil {
		return err
	}
	own, err := rc.checks.DigestAt(idx)
	if err != nil {
		return err
	}
	self := rc.id
	answers := []replicaAnswer{{id: self, digest: own, voter: true}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range rc.status().Nodes {
		if n.ID == self || n.GRPCAddr == "" {
			continue
		}
		conn, err := rc.peers.Get(n.ID, n.GRPCAddr)
		if err != nil {
			continue
		}
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
			defer cancel()
			nd, err := raftqv1.NewClusterClient(conn).LocalDigest(actx, &raftqv1.LocalDigestRequest{Index: idx})
			if err != nil || nd.GetDigest() == "" {
				return // a node that cannot answer is judged at the next check
			}
			mu.Lock()
			answers = append(answers, replicaAnswer{id: n.ID, addr: n.GRPCAddr, digest: nd.GetDigest(), voter: n.Suffrage == "voter"})
			mu.Unlock()
		})
	}
	wg.Wait()
	ref := referenceDigest(answers, own)
	if own != ref {
		rc.repairs.diverged(self)
		rc.log.Error("replica check: this leader's state differs from the other replicas'; handing leadership over so they repair it",
			"checkpoint", idx, "digest", own, "replicas_digest", ref)
		rc.mark(idx, own, ref, self)
		_, err := rc.handOver(ctx, "")
		return err
	}
	for _, a := range answers {
		if a.digest == ref {
			continue
		}
		rc.repairs.diverged(a.id)
		rc.log.Error("replica check: a replica's state differs from the leader's at a checkpoint; it stops serving reads until repaired",
			"node", a.id, "voter", a.voter, "checkpoint", idx, "digest", a.digest, "leader_digest", ref)
		conn, err := rc.peers.Get(a.id, a.addr)
		if err != nil {
			continue
		}
		client := raftqv1.NewClusterClient(conn)
		report := &raftqv1.ReportDivergenceRequest{Index: idx, Digest: ref, LeaderId: self}
		actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
		resp, err := client.ReportDivergence(actx, report)
		cancel()
		if err != nil || !resp.GetDiverged() {
			rc.log.Warn("replica check: the diverged node did not confirm; the next check tries again", "node", a.id, "err", err)
			continue
		}
		rc.repair(ctx, a, answers, ref, client, report)
	}
	return nil
}

// repair repairs a node that confirmed its state diverged: the
// leader removes it from the configuration, then tells it so; the node
// sets its Raft state aside and starts again with none, joins as a new
// member (the reconciler adds it back as a nonvoter and promotes it once
// caught up) and receives the leader's snapshot and log. Never below
// quorum, and one voter at a time: see repairAllowed.
func (rc *replicaCheck) repair(ctx context.Context, bad replicaAnswer, answers []replicaAnswer, ref string, client raftqv1.ClusterClient, report *raftqv1.ReportDivergenceRequest) {
	rc.repairs.mu.Lock()
	defer rc.repairs.mu.Unlock()
	voters, agreeing := 0, 0
	var back []string
	nodes := rc.status().Nodes
	for _, n := range nodes {
		switch n.Suffrage {
		case "voter":
			voters++
		case "nonvoter":
			back = append(back, n.ID+" (catching up as a nonvoter)")
		}
	}
	back = append(back, rc.repairs.notBackLocked(rc.log, nodes, true)...)
	slices.Sort(back)
	for _, a := range answers {
		if a.voter && a.digest == ref {
			agreeing++
		}
	}
	if ok, why := repairAllowed(voters, agreeing, bad.voter, back); !ok {
		rc.log.Warn("replica repair deferred: "+why, "node", bad.id, "voters", voters, "agreeing_voters", agreeing, "not_back", back)
		return
	}
	rc.log.Warn("replica repair: removing the diverged node so that it rejoins with the leader's state", "node", bad.id, "voters", voters, "agreeing_voters", agreeing)
	// force: the node is coming back, so the --bootstrap-expect floor
	// (meant for nodes that are gone) does not apply; quorum was checked.
	if err := rc.remove(ctx, bad.id, true); err != nil {
		rc.log.Warn("replica repair: could not remove the diverged node; the next check tries again", "node", bad.id, "err", err)
		return
	}
	rc.repairs.removed[bad.id] = time.Now()
	report.Removed = true
	actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	defer cancel()
	if _, err := client.ReportDivergence(actx, report); err != nil {
		// It stays out of the configuration (gossip keeps it out until
		// its process restarts), and a restart sets nothing aside: an
		// operator must wipe it. Say so loudly.
		rc.log.Error("replica repair: removed the diverged node but could not tell it to set its state aside; restart it with an empty data dir", "node", bad.id, "err", err)
	}
}

// repairs is what this leader knows of the nodes it repairs: those it
// removed (for a diverged or a corrupt state) until they are back in the
// configuration, and the counts for metrics.
type repairs struct {
	mu sync.Mutex
	// removed: nodes removed for repair, since when (the replica check
	// and RemoveCorrupt).
	removed map[string]time.Time
	// divergences counts, by node, the replica checks led here that found
	// its digest differing; corrupt the nodes removed for a corrupt state.
	divergences map[string]uint64
	corrupt     uint64
}

func newRepairs() *repairs {
	return &repairs{removed: map[string]time.Time{}, divergences: map[string]uint64{}}
}

func (r *repairs) diverged(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.divergences[id]++
}

// notBackLocked forgets the removed nodes that are back in the
// configuration (nodes) or were waited for longer than repairRejoinWait,
// and names the others. loud logs a node given up on. r.mu is held.
func (r *repairs) notBackLocked(log *slog.Logger, nodes []cluster.NodeStatus, loud bool) []string {
	var back []string
	for id, since := range r.removed {
		switch {
		case slices.ContainsFunc(nodes, func(n cluster.NodeStatus) bool { return n.ID == id }):
			delete(r.removed, id) // back in the configuration
		case time.Since(since) > repairRejoinWait:
			if loud {
				log.Error("replica repair: a node removed for repair has not rejoined; repairing other voters again", "node", id, "removed", since)
			}
			delete(r.removed, id)
		default:
			back = append(back, id+" (removed for repair, not rejoined yet)")
		}
	}
	return back
}

// ErrSelfCorrupt: a leader was asked to remove itself for a corrupt
// state.
var ErrSelfCorrupt = errors.New("a leader does not remove itself: a node with corrupt state takes no part in Raft, so it cannot lead")

// RemoveCorrupt removes node id, whose Raft state is corrupt, from the
// configuration so that it can be rebuilt from its peers (on the leader;
// the API routes the request here). Removal follows the replica repair's
// quorum rule (repairAllowed): the voters left that are healthy must be a
// majority of the voters left, and one voter at a time. It returns why
// the removal was deferred ("" when the node was removed, or is not in
// the configuration). With a majority corrupt nothing is removed, and the
// cluster, without a quorum, serves nothing.
func (o Operator) RemoveCorrupt(ctx context.Context, id, reason string) (deferred string, err error) {
	if id == o.b.id {
		return "", ErrSelfCorrupt
	}
	nodes := o.b.rt.Status().Nodes
	var bad *cluster.NodeStatus
	voters, healthy := 0, 0
	var back []string
	for i, n := range nodes {
		switch n.Suffrage {
		case "voter":
			voters++
		case "nonvoter":
			if n.ID != id {
				back = append(back, n.ID+" (catching up as a nonvoter)")
			}
		}
		if n.ID == id {
			bad = &nodes[i]
		} else if n.Suffrage == "voter" && n.Healthy {
			healthy++
		}
	}
	if bad == nil {
		return "", nil
	}
	o.b.repairs.mu.Lock()
	defer o.b.repairs.mu.Unlock()
	back = append(back, o.b.repairs.notBackLocked(o.b.log, nodes, false)...)
	slices.Sort(back)
	if ok, why := repairAllowed(voters, healthy, bad.Suffrage == "voter", back); !ok {
		o.b.log.Warn("corrupt node repair deferred: "+why, "node", id, "voters", voters, "healthy_voters", healthy, "not_back", back, "corruption", reason)
		return why, nil
	}
	o.b.log.Warn("corrupt node repair: removing the node so that it rejoins with the leader's state", "node", id, "voters", voters, "healthy_voters", healthy, "corruption", reason)
	// force: the node is coming back, so the --bootstrap-expect floor
	// does not apply; quorum was checked.
	if err := o.b.rt.RemoveNode(ctx, id, true); err != nil {
		return "", err
	}
	o.b.repairs.removed[id] = time.Now()
	o.b.repairs.corrupt++
	return "", nil
}

// repairRejoinWait is how long a node removed for repair may take to
// rejoin before the leader stops waiting for it to repair other voters.
const repairRejoinWait = 10 * time.Minute

// repairAllowed is the quorum rule for repairing a diverged node: removing
// it must leave the voters whose state agrees with the replicas' a
// majority of the voters that remain, so the cluster keeps committing
// while the node is away. A non-voter can always go. With 3 voters and
// one diverged, the other 2 are a majority of the 2 that remain; with a
// second voter down or diverged too, 1 of 2 is not, and the repair waits.
//
// And one voter at a time: while notBack names a node that an earlier
// repair (or a join) has yet to bring back as a voter, no voter is
// removed. Without it, a second diverged voter of 3 found while the
// first is away (2 voters, 1 agreeing: a majority of the 1 that would
// remain) would leave the cluster committing on the leader alone.
func repairAllowed(voters, agreeingVoters int, isVoter bool, notBack []string) (bool, string) {
	if !isVoter {
		return true, ""
	}
	remaining := voters - 1
	if need := remaining/2 + 1; agreeingVoters < need {
		return false, "removing it would leave fewer healthy voters than a quorum of those remaining"
	}
	if len(notBack) > 0 {
		return false, "another node is not back as a voter yet: " + strings.Join(notBack, ", ")
	}
	return true, ""
}

// referenceDigest is the digest most answers hold; on a tie, the
// leader's (own), so one node of two is not blamed for the leader's state.
func referenceDigest(answers []replicaAnswer, own string) string {
	count := map[string]int{}
	for _, a := range answers {
		count[a.digest]++
	}
	ref := own
	for _, a := range answers { // in answer order; ties keep the leader's
		if count[a.digest] > count[ref] {
			ref = a.digest
		}
	}
	return ref
}
