package broker

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/scheduler"
)

// skewedClock reads the wall clock moved by a fixed offset, so a test can
// tell its readings from anyone else's.
type skewedClock struct{ offset time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.offset) }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// startOne starts a single-node broker on loopback and waits until it is
// the established leader.
func startOne(t testing.TB, clock Clock) *Broker {
	t.Helper()
	return startOneWith(t, func(c *Config) { c.Clock = clock })
}

// startOneWith is startOne with the config adjusted by set.
func startOneWith(t testing.TB, set func(*Config)) *Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, adv, err := raftmux.Listen(ctx, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	port, err := raftmux.New(ln, adv, raftmux.Config{Legacy: GroupID})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		RaftPort: port,
		Cluster: cluster.Config{
			NodeID:             "n1",
			DataDir:            filepath.Join(t.TempDir(), "n1"),
			GossipBind:         "127.0.0.1:0",
			GRPCAdvertise:      "127.0.0.1:1",
			HeartbeatTimeout:   500 * time.Millisecond,
			ElectionTimeout:    500 * time.Millisecond,
			LeaderLeaseTimeout: 250 * time.Millisecond,
		},
		Logger: quietLogger(),
	}
	set(&cfg)
	b, err := New(ctx, cfg)
	if err != nil {
		port.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		port.Close() // the host closes it after the data group
	})
	r, err := b.Route(ctx, 15*time.Second)
	if err != nil || !r.Local {
		t.Fatalf("route of a single node: %+v, %v; want local", r, err)
	}
	return b
}

// Every command is stamped from the one injected clock: an enqueued
// message carries the clock's time, not the wall clock's.
func TestCommandsStampedFromInjectedClock(t *testing.T) {
	const offset = 3 * time.Hour
	b := startOne(t, skewedClock{offset: offset})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Queues().CreateQueue(ctx, "q", &raftqv1.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(offset).UnixMilli()
	if _, err := b.Enqueue(ctx, "q", []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(offset).UnixMilli()
	ds, err := b.Queues().Peek("q", 1, false)
	if err != nil || len(ds) != 1 {
		t.Fatalf("peek: %v, %d messages", err, len(ds))
	}
	if got := ds[0].EnqueuedMs; got < before || got > after {
		t.Fatalf("enqueued_at_ms %d, want the injected clock's reading in [%d, %d]", got, before, after)
	}
}

// The broker's operations go through the coalescers and the scheduler
// end to end on one node: enqueue, lease, ack.
func TestOperationsEndToEnd(t *testing.T) {
	b := startOne(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := b.Queues().CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Queues().CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{}); !errors.Is(err, fsm.ErrQueueExists) {
		t.Fatalf("second create: %v, want ErrQueueExists", err)
	}
	ids, err := b.Enqueue(ctx, "jobs", []*raftqv1.EnqueueMessage{{Payload: []byte("a")}, {Payload: []byte("b")}})
	if err != nil || len(ids) != 2 {
		t.Fatalf("enqueue: %v %v", ids, err)
	}
	c, err := b.Lease(ctx, scheduler.ConsumerRequest{Queue: "jobs", MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var refs []LeaseRef
	for len(refs) < 2 {
		if d, ok := c.TakeOne(); ok {
			refs = append(refs, LeaseRef{Queue: "jobs", MessageID: d.ID, Token: d.LeaseToken})
			continue
		}
		select {
		case <-c.Ready():
		case <-ctx.Done():
			t.Fatalf("only %d of 2 deliveries", len(refs))
		}
	}
	results, err := b.Ack(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range results {
		if e != nil {
			t.Fatalf("ack %d: %v", i, e)
		}
	}
	qi, err := b.Queues().GetQueue("jobs", false)
	if err != nil {
		t.Fatal(err)
	}
	if s := qi.Stats; s.Ready != 0 || s.InFlight != 0 || s.AckedTotal != 2 || qi.Consumers != 1 {
		t.Fatalf("stats after acking both: %+v, %d consumers", s, qi.Consumers)
	}
	if _, err := b.Enqueue(ctx, "nope", []*raftqv1.EnqueueMessage{{Payload: []byte("a")}}); !errors.Is(err, fsm.ErrQueueNotFound) {
		t.Fatalf("enqueue to a missing queue: %v", err)
	}
}

// steppedClock is a wall clock an operator can step while the node runs,
// over the real monotonic clock, which no one can set.
type steppedClock struct {
	start time.Time
	step  atomic.Int64 // ns added to the wall reading
}

func newSteppedClock() *steppedClock { return &steppedClock{start: time.Now()} }

func (c *steppedClock) Now() time.Time         { return time.Now().Round(0).Add(time.Duration(c.step.Load())) }
func (c *steppedClock) Elapsed() time.Duration { return time.Since(c.start) }

// TestWallClockStepsMoveNothing: a wall clock stepped while the node leads
// moves no command's time (issue 11, leftover of item 4): stepped back an
// hour, the state's clock used to stand still for that hour (a 300 ms
// delay waited an hour); stepped forward, that hour counted as elapsed
// (an hour's delay ended at once).
func TestWallClockStepsMoveNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  time.Duration
		delay time.Duration // of a message enqueued after the step
	}{
		{"back an hour", -time.Hour, 300 * time.Millisecond},
		{"forward an hour", time.Hour, 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newSteppedClock()
			b := startOne(t, clock)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if _, err := b.Queues().CreateQueue(ctx, "q", &raftqv1.QueueConfig{}); err != nil {
				t.Fatal(err)
			}
			enqueue := func(delay time.Duration) {
				t.Helper()
				if _, err := b.Enqueue(ctx, "q", []*raftqv1.EnqueueMessage{{Payload: []byte("x"), DelayMs: delay.Milliseconds()}}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.step > 0 {
				enqueue(tc.delay) // before the step
			}
			enqueue(0) // an entry of this term before the step: one ready
			clock.step.Store(int64(tc.step))
			if tc.step < 0 {
				enqueue(tc.delay)
				// The delay passes on the monotonic clock.
				deadline := time.Now().Add(10 * time.Second)
				for {
					ds, err := b.Queues().Peek("q", 10, false)
					if err != nil {
						t.Fatal(err)
					}
					if len(ds) == 2 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("a %v delay is still running 10 s after a wall-clock step of %v", tc.delay, tc.step)
					}
					select {
					case <-ctx.Done():
						t.Fatal(ctx.Err())
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			enqueue(0) // an entry after the step: time passes by it
			ds, err := b.Queues().Peek("q", 10, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != 2 {
				t.Fatalf("%d ready after a wall-clock step of %v; want the 2 undelayed ones (a %v delay is not over)", len(ds), tc.step, tc.delay)
			}
		})
	}
}
