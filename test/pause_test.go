package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReadsAfterALeaderPause: SIGSTOP the leader past the election
// timeout, write through the new leader, SIGCONT, and read through the
// old one at once (the reads are sent while it is still stopped, so they
// are the first thing it serves): each read sees the write or is refused
// or redirected, never answered from the old leader's state. The old
// leader resumes believing it leads; only confirming leadership per read
// keeps it from answering (transport/DESIGN.md, Reads confirm
// leadership).
func TestReadsAfterALeaderPause(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, _ := startCluster(t, 3)
	ctx := ctxT(t)
	old := leaderOf(t, nodes)
	oc := raftqv1.NewBrokerClient(rawConn(t, old))
	if _, err := oc.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	// The connection to the old leader is up before it stops.
	if _, err := oc.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "p"}); err != nil {
		t.Fatal(err)
	}

	if err := old.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Resume() })
	var others []*harness.Node
	for _, n := range nodes {
		if n != old {
			others = append(others, n)
		}
	}
	var nl *harness.Node
	harness.Eventually(t, 60*time.Second, func() error {
		for _, n := range others {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := statusOf(sctx, t, n)
			cancel()
			if err == nil && st.LeaderId != "" && st.LeaderId != old.ID {
				for _, m := range others {
					if m.ID == st.LeaderId {
						nl = m
						return nil
					}
				}
			}
		}
		return fmt.Errorf("no new leader among %s, %s yet", others[0].ID, others[1].ID)
	})
	nc := raftqv1.NewBrokerClient(rawConn(t, nl))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := nc.Enqueue(wctx, &raftqv1.EnqueueRequest{Queue: "p", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("written while the old leader was stopped")}}})
	cancel()
	if err != nil {
		t.Fatalf("enqueue through the new leader %s: %v", nl.ID, err)
	}

	// Reads to the stopped node wait in its socket until it runs again.
	const reads = 24
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for i := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			var sees bool
			var answer any
			var err error
			switch i % 3 {
			case 0:
				r, e := oc.GetQueue(rctx, &raftqv1.GetQueueRequest{Name: "p"})
				sees, answer, err = r.GetQueue().GetStats().GetReady() == 1, r, e
			case 1:
				r, e := oc.Peek(rctx, &raftqv1.PeekRequest{Queue: "p"})
				sees, answer, err = len(r.GetMessages()) == 1, r, e
			case 2:
				r, e := oc.ListQueues(rctx, &raftqv1.ListQueuesRequest{Prefix: "p"})
				ready := int64(-1)
				for _, q := range r.GetQueues() {
					if q.GetName() == "p" {
						ready = q.GetStats().GetReady()
					}
				}
				sees, answer, err = ready == 1, r, e
			}
			switch code := status.Code(err); {
			case err == nil && !sees:
				errs <- fmt.Errorf("read %d answered from the paused leader's old state: %v", i, answer)
			case err != nil && code != codes.Unavailable && code != codes.DeadlineExceeded:
				errs <- fmt.Errorf("read %d: %w, want the write or a redirect", i, err)
			}
		}()
	}
	if err := old.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
}
