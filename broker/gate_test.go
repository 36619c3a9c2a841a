package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func TestPendingGate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		steps []int64 // >0 acquire, <0 release
		want  []bool  // per acquire step: admitted
	}{
		{"an empty gate admits any size", 10, []int64{100}, []bool{true}},
		{"up to the limit", 10, []int64{4, 6}, []bool{true, true}},
		{"past the limit", 10, []int64{4, 7}, []bool{true, false}},
		{"a release makes room", 10, []int64{4, 7, -4, 7}, []bool{true, false, true}},
		{"one large request at a time", 10, []int64{100, 1, -100, 1}, []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &pendingGate{limit: tc.limit}
			var got []bool
			for _, n := range tc.steps {
				if n < 0 {
					g.release(-n)
					continue
				}
				err := g.acquire(n)
				if err != nil && !errors.Is(err, ErrOverloaded) {
					t.Fatalf("acquire: %v", err)
				}
				got = append(got, err == nil)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("acquire %d admitted=%v, want %v (all: %v)", i, got[i], tc.want[i], got)
				}
			}
		})
	}
}

// The coalescer releases what a request holds once it is done with it,
// also for a caller that gave up while the entry was still in flight, and
// for requests dropped when the node stops: the gate returns to zero.
func TestCoalescerReleasesGate(t *testing.T) {
	unblock := make(chan struct{})
	proposed := make(chan struct{}, 16)
	propose := func(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
		proposed <- struct{}{}
		select {
		case <-unblock:
			return &fsm.ItemsResult{Items: make([]error, len(cmd.GetAck().GetRefs()))}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := newCoalescer(1, 512, 1<<20, propose, buildAck, sizeAck)
	g := &pendingGate{limit: 100}
	const size = 60
	c.release = func(ackReq) { g.release(size) }

	// The first request is proposed and held; its caller gives up.
	if err := g.acquire(size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.submit(ctx, ackReq{{MessageId: 1}})
		gaveUp <- err
	}()
	<-proposed
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller that gave up: %v", err)
	}
	// Its bytes are still held: the entry is in flight.
	if err := g.acquire(size); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("second request while the first is in flight: %v, want ErrOverloaded", err)
	}
	if got := g.used.Load(); got != size {
		t.Fatalf("gate holds %d, want %d", got, size)
	}
	close(unblock)
	deadline := time.Now().Add(10 * time.Second)
	for g.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gate still holds %d after the entry committed", g.used.Load())
		}
		time.Sleep(time.Millisecond)
	}
	c.close()
	// After stop, a submit is refused and its bytes released at once.
	if err := g.acquire(size); err != nil {
		t.Fatal(err)
	}
	if _, err := c.submit(context.Background(), ackReq{{MessageId: 2}}); !errors.Is(err, ErrStopping) {
		t.Fatalf("submit after stop: %v", err)
	}
	if got := g.used.Load(); got != 0 {
		t.Fatalf("gate holds %d after a refused submit", got)
	}
}
