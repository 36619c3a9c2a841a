package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// forEachEnqueuePath runs f against a broker without EnqueueStream (the
// client falls back to unary Enqueue) and one with it: the retry and
// redirect behaviour a caller sees must be the same on both.
func forEachEnqueuePath(t *testing.T, f func(t *testing.T, streams bool)) {
	t.Helper()
	for _, streams := range []bool{false, true} {
		name := "unary"
		if streams {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) { f(t, streams) })
	}
}

// echoDedupIDs answers each message with its dedup id as the message id,
// so a caller can tell its own answer from another caller's.
func echoDedupIDs(req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
	resp := &raftqv1.EnqueueResponse{}
	for _, m := range req.GetMessages() {
		resp.MessageIds = append(resp.MessageIds, "id-"+m.GetDedupId())
	}
	return resp, nil
}

func TestEnqueueStreamCarriesConcurrentCalls(t *testing.T) {
	f := &fakeBroker{name: "A", rec: newRecorder(), streams: true, enqueue: echoDedupIDs}
	c := dial(t, serve(t, f))
	const calls = 200
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dedup := fmt.Sprintf("m%d", i)
			ids, err := c.Enqueue(ctx, "q", &raftqv1.EnqueueMessage{Payload: []byte("x"), DedupId: dedup})
			switch {
			case err != nil:
				errs <- err
			case len(ids) != 1 || ids[0] != "id-"+dedup:
				errs <- fmt.Errorf("call %d got ids %v, want [id-%s]", i, ids, dedup)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := f.opened.Load(); n != 1 {
		t.Fatalf("%d EnqueueStreams opened for %d calls, want 1", n, calls)
	}
	served, _ := f.rec.snapshot()
	if n := count(served, "Enqueue"); n != calls {
		t.Fatalf("broker served %d enqueues, want %d", n, calls)
	}
}

func TestEnqueueStreamBrokenAfterCommitRetriesWithSameDedupID(t *testing.T) {
	for _, endOK := range []bool{false, true} {
		name := "ends UNAVAILABLE"
		if endOK {
			name = "ends OK"
		}
		t.Run(name, func(t *testing.T) { testBrokenAfterCommit(t, endOK) })
	}
}

func testBrokenAfterCommit(t *testing.T, endOK bool) {
	var first atomic.Bool
	f := &fakeBroker{name: "A", rec: newRecorder(), streams: true, enqueue: echoDedupIDs, breakOK: endOK,
		// The first request is served, then the stream ends before the
		// answer leaves: the caller cannot know it committed.
		breakAfter: func(int) bool { return first.CompareAndSwap(false, true) }}
	c := dial(t, serve(t, f))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, err := c.EnqueuePayloads(ctx, "q", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	calls := f.rec.wait(t, "two attempts", func(cs []call) bool { return count(cs, "Enqueue") == 2 })
	var dedups []string
	for _, cl := range calls {
		dedups = append(dedups, cl.req.(*raftqv1.EnqueueRequest).Messages[0].DedupId)
	}
	if dedups[0] == "" || dedups[0] != dedups[1] || ids[0] != "id-"+dedups[0] {
		t.Fatalf("attempts carried dedup ids %v and the call returned %v: want one id, kept across the retry", dedups, ids)
	}
	if n := f.opened.Load(); n != 2 {
		t.Fatalf("%d EnqueueStreams opened, want 2 (the broken one and its replacement)", n)
	}
}

func TestEnqueueFallsBackToUnaryOnce(t *testing.T) {
	f := &fakeBroker{name: "A", rec: newRecorder(), enqueue: echoDedupIDs}
	c := dial(t, serve(t, f))
	for i := range 3 {
		ids, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
		if err != nil || len(ids) != 1 || !strings.HasPrefix(ids[0], "id-") {
			t.Fatalf("call %d: ids %v, err %v", i, ids, err)
		}
	}
	// Asked once, answered Unimplemented: the client stops asking.
	if n := f.opened.Load(); n != 1 {
		t.Fatalf("%d EnqueueStreams attempted, want 1", n)
	}
}

func TestUnaryEnqueueOption(t *testing.T) {
	f := &fakeBroker{name: "A", rec: newRecorder(), streams: true, enqueue: echoDedupIDs}
	addr := serve(t, f)
	c, err := Dial(context.Background(), []string{addr}, WithUnaryEnqueue(), WithRetryPolicy(fastRetry()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.EnqueuePayloads(context.Background(), "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := f.opened.Load(); n != 0 {
		t.Fatalf("%d EnqueueStreams opened with WithUnaryEnqueue, want 0", n)
	}
}

func TestEnqueueStreamClosedClient(t *testing.T) {
	release := make(chan struct{})
	f := &fakeBroker{name: "A", rec: newRecorder(), streams: true, enqueue: func(req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
		<-release
		return echoDedupIDs(req)
	}}
	defer close(release)
	c := dial(t, serve(t, f))
	errc := make(chan error, 1)
	go func() {
		_, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
		errc <- err
	}()
	f.rec.wait(t, "the call to reach the broker", func(cs []call) bool { return count(cs, "Enqueue") == 1 })
	c.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("call in flight at Close returned %v, want ErrClosed", err)
	}
}
