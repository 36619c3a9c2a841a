//go:build raftqfault

package transport_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestReadsThroughADeposedLeader: a leader cut off from its peers that
// still believes it leads (its lease is long, as a paused process's
// effectively is until it runs again) answers no read from its old
// state once the others elected a new leader and took a write: GetQueue,
// ListQueues, Peek and ListConsumers each see the write or are refused.
// Before reads confirmed leadership, the cut-off node answered all four
// from its state without the write. With the stale header it does, on
// purpose; mended, it serves reads that see the write.
func TestReadsThroughADeposedLeader(t *testing.T) {
	const long = time.Minute
	c := startInproc(t, inprocOpts{nodes: 3, nodeConfig: func(id string, cc *cluster.Config) {
		if id == "n1" {
			// n1 as leader steps down only a minute after it last heard
			// from a quorum. Its followers hear from it every
			// CommitTimeout (raft's replication loop), whatever its
			// heartbeat timeout.
			cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = long, long, long
		}
	}})
	old := c.ByID("n1")
	if l := c.Leader(); l != old {
		ctx := tctx(t, 20*time.Second)
		if _, err := l.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: old.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if l := c.WaitStable(20 * time.Second); l != old {
		t.Fatalf("%s leads, want %s", l.ID, old.ID)
	}
	mustCreate(t, old, "q", nil)
	mustCreate(t, old, "c", nil)
	c.Synced()

	old.Faults().CutRaftNetwork(true)
	t.Cleanup(func() { old.Faults().CutRaftNetwork(false) })
	var nl *testcluster.Node
	waitUntil(t, 30*time.Second, "a new leader among the others", func() error {
		for _, n := range c.Nodes {
			if n != old && n.ClusterNode().Group().LeaderReady() {
				nl = n
				return nil
			}
		}
		return errors.New("none of n2, n3 leads yet")
	})
	// The write: a message, a queue and a consumer, through the new leader.
	mustEnqueue(t, nl, "q", []byte("after the cut"))
	mustCreate(t, nl, "fresh", nil)
	lctx, stopLease := context.WithCancel(context.Background())
	defer stopLease()
	if _, err := nl.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "c", ConsumerName: "new-term"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the consumer to register on the new leader", func() error {
		r, err := nl.Broker.ListConsumers(tctx(t, 5*time.Second), &raftqv1.ListConsumersRequest{Queue: "c"})
		if err != nil || len(r.GetConsumers()) != 1 {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	if l := old.ClusterNode().Group().Leadership(); !old.ClusterNode().Group().IsLeader() || !l.Established {
		t.Fatalf("%s no longer believes it leads (%+v): the reads below would not test a deposed leader", old.ID, l)
	}

	reads := []struct {
		name string
		// read calls the old leader and says whether the answer shows
		// the write (an error return is a refusal).
		read func(ctx context.Context) (sees bool, answer any, err error)
	}{
		{"GetQueue", func(ctx context.Context) (bool, any, error) {
			r, err := old.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "q"})
			return r.GetQueue().GetStats().GetReady() == 1, r, err
		}},
		{"ListQueues", func(ctx context.Context) (bool, any, error) {
			r, err := old.Broker.ListQueues(ctx, &raftqv1.ListQueuesRequest{})
			return slices.ContainsFunc(r.GetQueues(), func(q *raftqv1.QueueInfo) bool { return q.GetName() == "fresh" }), r, err
		}},
		{"Peek", func(ctx context.Context) (bool, any, error) {
			r, err := old.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "q"})
			return len(r.GetMessages()) == 1, r, err
		}},
		{"ListConsumers", func(ctx context.Context) (bool, any, error) {
			r, err := old.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "c"})
			return len(r.GetConsumers()) == 1, r, err
		}},
	}
	var wg sync.WaitGroup
	for _, rd := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			sees, answer, err := rd.read(ctx)
			switch code := status.Code(err); {
			case err == nil && !sees:
				t.Errorf("%s through the deposed leader answered from its old state: %v", rd.name, answer)
			case err != nil && code != codes.DeadlineExceeded && code != codes.Unavailable:
				t.Errorf("%s through the deposed leader: %v, want the write, a redirect or a timeout", rd.name, err)
			}
		}()
	}
	wg.Wait()

	// Asked for a stale read, it answers from its own state.
	sctx := metadata.AppendToOutgoingContext(tctx(t, 5*time.Second), "raftq-read-consistency", "stale")
	r, err := old.Broker.GetQueue(sctx, &raftqv1.GetQueueRequest{Name: "q"})
	if err != nil || r.GetQueue().GetStats().GetReady() != 0 {
		t.Fatalf("stale GetQueue on the cut-off node: %v %v, want its own state (nothing ready)", r, err)
	}

	old.Faults().CutRaftNetwork(false)
	waitUntil(t, 30*time.Second, "the mended node to read the write", func() error {
		r, err := old.Broker.GetQueue(tctx(t, 5*time.Second), &raftqv1.GetQueueRequest{Name: "q"})
		if err != nil {
			return err
		}
		if got := r.GetQueue().GetStats().GetReady(); got != 1 {
			return fmt.Errorf("ready %d, want 1", got)
		}
		return nil
	})
}

// TestReadThroughAResumedLeader: a leader whose process stops (its Raft
// network held: nothing it sends leaves, nothing it receives is read)
// right after it sent its followers a heartbeat and they answered, is
// deposed while it is stopped, and the new leader takes a write. When it
// resumes, its followers' answers to that heartbeat, given in the old
// term before the election, are the first thing it reads; a read that
// arrived in the same instant must not be confirmed by them. raft's
// VerifyLeader counted them (a soak run's pause-read fault, seed
// 623300411983, answered a value older than an acknowledged write), so
// reads now confirm with a barrier of the leader's term, which only a
// quorum still in that term can commit.
func TestReadThroughAResumedLeader(t *testing.T) {
	const long = time.Minute
	c := startInproc(t, inprocOpts{nodes: 3, nodeConfig: func(id string, cc *cluster.Config) {
		if id == "n1" {
			cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = long, long, long
		}
	}})
	old := c.ByID("n1")
	if l := c.Leader(); l != old {
		ctx := tctx(t, 20*time.Second)
		if _, err := l.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: old.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if l := c.WaitStable(20 * time.Second); l != old {
		t.Fatalf("%s leads, want %s", l.ID, old.ID)
	}
	mustCreate(t, old, "q", nil)
	c.Synced()

	// Stop it just after its followers answered a heartbeat: the hold
	// keeps their answers unread.
	old.Faults().HoldRaftReads()
	t.Cleanup(func() { old.Faults().HoldRaftNetwork(false) })
	old.Faults().ForceHeartbeats()
	waitUntil(t, 10*time.Second, "the followers' answers held on the stopped leader", func() error {
		if n := old.Faults().HeldRaftReads(); n < 2 {
			return fmt.Errorf("%d answers held", n)
		}
		return nil
	})
	old.Faults().HoldRaftNetwork(true) // and now nothing it sends leaves
	var nl *testcluster.Node
	waitUntil(t, 30*time.Second, "a new leader among the others", func() error {
		for _, n := range c.Nodes {
			if n != old && n.ClusterNode().Group().LeaderReady() {
				nl = n
				return nil
			}
		}
		return errors.New("none of n2, n3 leads yet")
	})
	mustEnqueue(t, nl, "q", []byte("while the old leader was stopped"))
	if l := old.ClusterNode().Group().Leadership(); !old.ClusterNode().Group().IsLeader() || !l.Established {
		t.Fatalf("%s no longer believes it leads (%+v): the read below would not test a deposed leader", old.ID, l)
	}

	// The read arrives as the process resumes: it asks for confirmation
	// before the held answers are read.
	before := old.Faults().ReadConfirmations()
	type answer struct {
		r   *raftqv1.GetQueueResponse
		err error
	}
	got := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := old.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "q"})
		got <- answer{r, err}
	}()
	waitUntil(t, 10*time.Second, "the read to ask for confirmation", func() error {
		if old.Faults().ReadConfirmations() == before {
			return errors.New("not yet")
		}
		return nil
	})
	old.Faults().SettleRaftLoop()
	// It reads its followers' answers first: what the new leader sends
	// it stays held until the read is answered.
	old.Faults().ReleaseDialledRaft()

	a := <-got
	old.Faults().HoldRaftNetwork(false)
	switch code := status.Code(a.err); {
	case a.err == nil && a.r.GetQueue().GetStats().GetReady() != 1:
		t.Fatalf("GetQueue through the resumed, deposed leader answered from its old state: %v", a.r)
	case a.err != nil && code != codes.DeadlineExceeded && code != codes.Unavailable:
		t.Fatalf("GetQueue through the resumed, deposed leader: %v, want the write, a redirect or a timeout", a.err)
	}
}
