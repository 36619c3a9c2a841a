package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// errOdd is the fake state machine's per-item answer to an odd message id.
var errOdd = errors.New("odd id")

// ackProposer is a fake Propose for the ack coalescer: it records each
// entry's refs and answers each item by its id (odd ids fail), after
// holding the first entry until release is closed.
type ackProposer struct {
	mu       sync.Mutex
	entries  [][]uint64
	first    chan struct{} // closed once the first entry is proposed
	release  chan struct{}
	fail     error // a whole-command failure of every entry after the first
	proposed int
}

func newAckProposer() *ackProposer {
	return &ackProposer{first: make(chan struct{}), release: make(chan struct{})}
}

func (p *ackProposer) propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	var ids []uint64
	for _, r := range cmd.GetAck().GetRefs() {
		ids = append(ids, r.MessageId)
	}
	p.mu.Lock()
	p.entries = append(p.entries, ids)
	p.proposed++
	n := p.proposed
	p.mu.Unlock()
	if n == 1 {
		close(p.first)
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	} else if p.fail != nil {
		return &fsm.Done{Err: p.fail}, nil
	}
	items := make([]error, len(ids))
	for i, id := range ids {
		if id%2 == 1 {
			items[i] = fmt.Errorf("%w: %d", errOdd, id)
		}
	}
	return &fsm.ItemsResult{Items: items}, nil
}

// TestCoalescerAnswersEachCallerItsOwnResult: calls that arrive while the
// entries in flight are at the limit share the next entry, and each caller
// is answered only once it committed, with its own items: a failed item
// fails only its own call's item, never a neighbour's call. A failure of
// the whole command fails every call in it.
func TestCoalescerAnswersEachCallerItsOwnResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail error
	}{
		{"per-item results", nil},
		{"a whole-command failure", errors.New("not applied")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newAckProposer()
			p.fail = tc.fail
			c := newCoalescer(1, 512, 1<<20, p.propose, buildAck, sizeAck)
			defer c.close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			// The first call's entry is held in flight ...
			firstDone := make(chan error, 1)
			go func() {
				_, err := c.submit(ctx, ackReq{{MessageId: 100}})
				firstDone <- err
			}()
			<-p.first
			// ... so these calls, of 1 to 3 refs each, queue behind it.
			const calls = 8
			type answer struct {
				out batchOutcome
				err error
			}
			answers := make([]chan answer, calls)
			refs := make([]ackReq, calls)
			next := uint64(1)
			for i := range calls {
				for range 1 + i%3 {
					refs[i] = append(refs[i], &fsmv1.Ref{Queue: "q", MessageId: next})
					next++
				}
				answers[i] = make(chan answer, 1)
				go func() {
					out, err := c.submit(ctx, refs[i])
					answers[i] <- answer{out, err}
				}()
			}
			// None is answered before its entry commits.
			waitFor(t, func() bool { return c.queuedLen() == calls })
			for i := range calls {
				select {
				case a := <-answers[i]:
					t.Fatalf("call %d answered before its entry committed: %+v", i, a)
				default:
				}
			}
			close(p.release)
			if err := <-firstDone; err != nil {
				t.Fatalf("first call: %v", err)
			}
			for i := range calls {
				a := <-answers[i]
				if tc.fail != nil {
					if !errors.Is(a.err, tc.fail) {
						t.Fatalf("call %d: %v, want the command's failure", i, a.err)
					}
					continue
				}
				if a.err != nil {
					t.Fatalf("call %d: %v", i, a.err)
				}
				items := a.out.res.(*fsm.ItemsResult).Items[a.out.offset : a.out.offset+len(refs[i])]
				for j, r := range refs[i] {
					if odd := r.MessageId%2 == 1; odd != errors.Is(items[j], errOdd) {
						t.Fatalf("call %d item %d (id %d): %v", i, j, r.MessageId, items[j])
					}
				}
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.entries) != 2 || len(p.entries[1]) != int(next-1) {
				t.Fatalf("entries %v: want the first alone, then all %d queued refs in one", p.entries, next-1)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkCoalescerSubmit is the coalescer's own cost per call: many
// concurrent one-ref acks through a fake Propose that answers at once
// (no Raft, no fsync), so that what is measured is the hand-off, the
// batching and the answer.
func BenchmarkCoalescerSubmit(b *testing.B) {
	var entries atomic.Int64
	propose := func(_ context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
		entries.Add(1)
		return &fsm.ItemsResult{Items: make([]error, len(cmd.GetAck().GetRefs()))}, nil
	}
	c := newCoalescer(coalesceInFlight, coalesceItems, coalesceBytes, propose, buildAck, sizeAck)
	defer c.close()
	b.SetParallelism(128) // × GOMAXPROCS callers, like many unary calls
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.submit(ctx, ackReq{{Queue: "q", MessageId: 1}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(entries.Load())/float64(b.N), "entries/op")
}

// TestCoalescerCloseAnswersQueued: close waits for the entry in flight,
// whose caller gets its result, and answers the requests queued behind it
// with ErrStopping (never proposed: safe to retry elsewhere); nothing is
// proposed after close began.
func TestCoalescerCloseAnswersQueued(t *testing.T) {
	p := newAckProposer()
	c := newCoalescer(1, 512, 1<<20, p.propose, buildAck, sizeAck)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.submit(ctx, ackReq{{MessageId: 2}})
		firstDone <- err
	}()
	<-p.first
	const queued = 3
	answers := make(chan error, queued)
	for i := range queued {
		go func() {
			_, err := c.submit(ctx, ackReq{{MessageId: uint64(10 + 2*i)}})
			answers <- err
		}()
	}
	waitFor(t, func() bool { return c.queuedLen() == queued })
	closed := make(chan struct{})
	go func() {
		c.close()
		close(closed)
	}()
	// close cannot return while the first entry is held in flight.
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.stopped
	})
	select {
	case <-closed:
		t.Fatal("close returned while an entry was in flight")
	default:
	}
	close(p.release)
	<-closed
	if err := <-firstDone; err != nil {
		t.Fatalf("the entry in flight: %v, want its result", err)
	}
	for range queued {
		if err := <-answers; !errors.Is(err, ErrStopping) {
			t.Fatalf("queued request: %v, want ErrStopping", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.entries) != 1 {
		t.Fatalf("entries proposed: %v, want only the first", p.entries)
	}
}
