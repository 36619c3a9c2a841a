package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultReplicaCheckInterval is how often the leader checks, unasked,
// that every replica holds the same state.
const defaultReplicaCheckInterval = time.Minute

// replicaAskTimeout bounds asking one node for its digest or telling it
// it diverged.
const replicaAskTimeout = 5 * time.Second

// divergence is what a node knows of its own state having diverged.
type divergence struct {
	index             uint64 // the checkpoint at which it was found
	digest, reference string // this node's digest there, and the replicas'
	leaderID          string
	since             time.Time
}

// Diverged reports whether this node learnt that its state differs from
// the replicas' (and so serves no reads from it).
func (s *Server) Diverged() bool { return s.diverged.Load() != nil }

// replicaLoop follows this node's leadership: while it is the established
// leader it checks the replicas every interval (checkReplicas); a node
// that knows its own state diverged hands leadership over as soon as it
// gains it, so a bad state never serves. It returns when ctx ends or the
// node shuts down.
func (s *Server) replicaLoop(ctx context.Context, interval time.Duration) {
	defer close(s.replicaDone)
	for {
		l := s.node.Leadership()
		if l.Role == cluster.RoleShutdown {
			return
		}
		if l.Role == cluster.RoleLeader && l.Established {
			if s.Diverged() {
				s.log.Error("this node's state diverged from the replicas': handing leadership over")
				tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := s.node.TransferLeadership(tctx, ""); err != nil {
					s.log.Error("could not hand leadership over", "err", err)
				}
				cancel()
			} else if interval > 0 {
				s.leadReplicaChecks(ctx, l, interval)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Changed:
		}
	}
}

// leadReplicaChecks checks the replicas every interval until this
// leadership value changes.
func (s *Server) leadReplicaChecks(ctx context.Context, l cluster.Leadership, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Changed:
			return
		case <-t.C:
			if err := s.checkReplicas(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("replica check did not complete; the next one tries again", "err", err)
			}
		}
	}
}

// replicaAnswer is one node's digest at a checkpoint.
type replicaAnswer struct {
	id, addr, digest string
	voter            bool
}

// checkReplicas appends a Checkpoint (every replica freezes its state at
// that index), asks every node for its digest there, as cluster verify
// does, and reports each node whose digest differs from the one most
// replicas hold (on a tie, this leader's): it tells the node, which stops
// serving reads, and counts raftq_replica_divergence_total. If this
// leader is the one that differs, it hands leadership over so the others
// find it.
func (s *Server) checkReplicas(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*replicaAskTimeout)
	defer cancel()
	idx, err := s.b.Queues().Checkpoint(ctx)
	if err != nil {
		return err
	}
	own, err := s.state.DigestAt(idx)
	if err != nil {
		return err
	}
	self := s.b.ID()
	answers := []replicaAnswer{{id: self, digest: own, voter: true}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range s.node.Status().Nodes {
		if n.ID == self || n.GRPCAddr == "" {
			continue
		}
		conn, err := s.peers.Get(n.ID, n.GRPCAddr)
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
		s.divergences.WithLabelValues(self).Inc()
		s.log.Error("replica check: this leader's state differs from the other replicas'; handing leadership over so they repair it",
			"checkpoint", idx, "digest", own, "replicas_digest", ref)
		s.markDiverged(idx, own, ref, self)
		_, err := s.node.TransferLeadership(ctx, "")
		return err
	}
	for _, a := range answers {
		if a.digest == ref {
			continue
		}
		s.divergences.WithLabelValues(a.id).Inc()
		s.log.Error("replica check: a replica's state differs from the leader's at a checkpoint; it stops serving reads until repaired",
			"node", a.id, "voter", a.voter, "checkpoint", idx, "digest", a.digest, "leader_digest", ref)
		conn, err := s.peers.Get(a.id, a.addr)
		if err != nil {
			continue
		}
		client := raftqv1.NewClusterClient(conn)
		report := &raftqv1.ReportDivergenceRequest{Index: idx, Digest: ref, LeaderId: self}
		actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
		resp, err := client.ReportDivergence(actx, report)
		cancel()
		if err != nil || !resp.GetDiverged() {
			s.log.Warn("replica check: the diverged node did not confirm; the next check tries again", "node", a.id, "err", err)
			continue
		}
		s.repairReplica(ctx, a, answers, ref, client, report)
	}
	return nil
}

// repairReplica repairs a node that confirmed its state diverged: the
// leader removes it from the configuration, then tells it so; the node
// sets its Raft state aside and starts again with none, joins as a new
// member (the reconciler adds it back as a nonvoter and promotes it once
// caught up) and receives the leader's snapshot and log. Never below
// quorum, and one voter at a time: see repairAllowed.
func (s *Server) repairReplica(ctx context.Context, bad replicaAnswer, answers []replicaAnswer, ref string, client raftqv1.ClusterClient, report *raftqv1.ReportDivergenceRequest) {
	s.repairsMu.Lock()
	defer s.repairsMu.Unlock()
	voters, agreeing := 0, 0
	var back []string
	inConf := map[string]string{}
	for _, n := range s.node.Status().Nodes {
		inConf[n.ID] = n.Suffrage
		switch n.Suffrage {
		case "voter":
			voters++
		case "nonvoter":
			back = append(back, n.ID+" (catching up as a nonvoter)")
		}
	}
	for id, since := range s.repairs {
		switch {
		case inConf[id] != "":
			delete(s.repairs, id) // back in the configuration
		case time.Since(since) > repairRejoinWait:
			s.log.Error("replica repair: a node removed for repair has not rejoined; repairing other voters again", "node", id, "removed", since)
			delete(s.repairs, id)
		default:
			back = append(back, id+" (removed for repair, not rejoined yet)")
		}
	}
	slices.Sort(back)
	for _, a := range answers {
		if a.voter && a.digest == ref {
			agreeing++
		}
	}
	if ok, why := repairAllowed(voters, agreeing, bad.voter, back); !ok {
		s.log.Warn("replica repair deferred: "+why, "node", bad.id, "voters", voters, "agreeing_voters", agreeing, "not_back", back)
		return
	}
	s.log.Warn("replica repair: removing the diverged node so that it rejoins with the leader's state", "node", bad.id, "voters", voters, "agreeing_voters", agreeing)
	// force: the node is coming back, so the --bootstrap-expect floor
	// (meant for nodes that are gone) does not apply; quorum was checked.
	if err := s.node.RemoveNode(ctx, bad.id, true); err != nil {
		s.log.Warn("replica repair: could not remove the diverged node; the next check tries again", "node", bad.id, "err", err)
		return
	}
	s.repairs[bad.id] = time.Now()
	report.Removed = true
	actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	defer cancel()
	if _, err := client.ReportDivergence(actx, report); err != nil {
		// It stays out of the configuration (gossip keeps it out until
		// its process restarts), and a restart sets nothing aside: an
		// operator must wipe it. Say so loudly.
		s.log.Error("replica repair: removed the diverged node but could not tell it to set its state aside; restart it with an empty data dir", "node", bad.id, "err", err)
	}
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

// RepairRestart is closed when this node, whose state diverged, has been
// removed from the configuration and has asked for its Raft state to be
// set aside: the caller stops the node (without leaving) and starts it
// again on the same data dir, which then joins with no state.
func (s *Server) RepairRestart() <-chan struct{} { return s.restart }

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

// markDiverged records that this node's state differs from the replicas'.
func (s *Server) markDiverged(index uint64, digest, reference, leaderID string) {
	d := &divergence{index: index, digest: digest, reference: reference, leaderID: leaderID, since: time.Now()}
	if s.diverged.CompareAndSwap(nil, d) {
		s.log.Error("this node's state diverged from the replicas': serving no reads from it until it is repaired",
			"checkpoint", index, "digest", digest, "replicas_digest", reference, "reported_by", leaderID)
	}
}

// ReportDivergence is the leader telling this node that its digest at a
// checkpoint differed. The node trusts no one's word for it: it asks the
// leader it knows for the leader's own digest at that checkpoint, and
// stops serving reads only if that is the reported digest and its own
// differs. (A leader whose state is the odd one out judges itself in
// checkReplicas and never reports others.)
func (c *clusterService) ReportDivergence(ctx context.Context, req *raftqv1.ReportDivergenceRequest) (*raftqv1.ReportDivergenceResponse, error) {
	if req.GetIndex() == 0 || req.GetDigest() == "" {
		return nil, invalid("index and digest are required")
	}
	d, err := c.digestAt(ctx, req.Index)
	if err != nil {
		return nil, err
	}
	if d == req.Digest {
		return &raftqv1.ReportDivergenceResponse{Digest: d}, nil
	}
	route, err := c.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if route.Local {
		return nil, status.Error(codes.FailedPrecondition, "this node leads: it compares its own digest with the replicas' itself")
	}
	conn, err := c.s.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return nil, toStatus(err)
	}
	lctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	ld, err := raftqv1.NewClusterClient(conn).LocalDigest(lctx, &raftqv1.LocalDigestRequest{Index: req.Index})
	cancel()
	if err != nil {
		return nil, err
	}
	if ld.GetDigest() != req.Digest {
		return nil, status.Errorf(codes.FailedPrecondition, "the leader's digest at %d is not the reported one", req.Index)
	}
	c.s.markDiverged(req.Index, d, req.Digest, req.GetLeaderId())
	if req.GetRemoved() {
		reason := fmt.Sprintf("state diverged at checkpoint %d (digest %s, the replicas' %s); removed by %s for repair", req.Index, d, req.Digest, req.GetLeaderId())
		if err := cluster.RequestWipe(c.s.b.DataDir(), reason); err != nil {
			return nil, err
		}
		c.s.log.Warn("removed for repair: restarting with this node's Raft state set aside", "leader", req.GetLeaderId())
		c.s.restartOnce.Do(func() { close(c.s.restart) })
	}
	return &raftqv1.ReportDivergenceResponse{Diverged: true, Digest: d}, nil
}

// maxRecountQueues bounds one RecountQueues request: every replica
// recounts the named queues inside Apply.
const maxRecountQueues = 1024

// RecountQueues is a node whose counter audit found drift asking this
// leader (the interceptor forwards it here) to commit RecountQueues.
func (c *clusterService) RecountQueues(ctx context.Context, req *raftqv1.RecountQueuesRequest) (*raftqv1.RecountQueuesResponse, error) {
	if n := len(req.GetQueues()); n > maxRecountQueues {
		return nil, invalid("%d queues; at most %d a request", n, maxRecountQueues)
	}
	for _, q := range req.GetQueues() {
		if q == "" {
			return nil, invalid("a queue name is empty")
		}
	}
	c.s.log.Warn("counter audit: a node found queues whose counters disagree with their messages; recounting them on every replica",
		"reported_by", req.GetReportedBy(), "queues", req.GetQueues())
	res, err := c.s.b.RecountQueues(ctx, req.GetQueues())
	if errors.Is(err, broker.ErrRecountUnsupported) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, err
	}
	c.s.log.Info("counter audit: recount committed", "queues", req.GetQueues(), "repaired_here", len(res.Repairs), "byte_total_repaired_here", res.TotalBytesRepaired)
	return &raftqv1.RecountQueuesResponse{}, nil
}
