package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// group is a run of messages enqueued together; its messages are named
// label0, label1, ... in enqueue order.
type group struct {
	label    string
	n        int
	key      string
	weight   uint32
	prio     int32
	throttle []string
}

// call is one pickQueue call of a case; the cursors and buckets carry over
// from the previous call.
type call struct {
	at      time.Duration // since the buckets' origin
	budget  int
	credit  []int    // per consumer (seqs 1, 2, ...); nil = one consumer with credit budget
	rrLast  uint64   // if set, the round-robin cursor before the call
	pending []string // messages in unhandled grants (besides those picked by earlier calls)
	want    []string // picked messages, in order
	wantTo  []int    // if set, the consumer of each pick
	wake    time.Duration
}

// pickState builds a queue holding groups and names its messages.
func pickState(t *testing.T, cfg *fsmv1.QueueConfig, groups []group) (*fsm.FSM, map[uint64]string) {
	t.Helper()
	f := fsm.New(fsm.Options{Logger: discard})
	idx := uint64(0)
	apply := func(cmd *fsmv1.Command) fsm.Result {
		idx++
		res := f.ApplyCommand(idx, cmd)
		if res.Failure() != nil {
			t.Fatal(res.Failure())
		}
		return res
	}
	apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q", Config: cfg}}})
	names := map[uint64]string{}
	for _, g := range groups {
		msgs := make([]*fsmv1.EnqueueMessage, g.n)
		for i := range msgs {
			msgs[i] = &fsmv1.EnqueueMessage{FairnessKey: g.key, Weight: g.weight, Priority: g.prio, ThrottleKeys: g.throttle}
		}
		res, err := fsm.As[*fsm.EnqueueResult](apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Batches[0].Err != nil {
			t.Fatal(res.Batches[0].Err)
		}
		for i, id := range res.Batches[0].IDs {
			names[id] = fmt.Sprintf("%s%d", g.label, i)
		}
	}
	return f, names
}

func seqs(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// TestPickQueue exercises the pure picking function directly: strict
// priority, DRR over fairness keys by weight in activation order, FIFO
// within a key, throttle buckets and round-robin over consumers with credit.
func TestPickQueue(t *testing.T) {
	abc := []group{
		{label: "a", n: 10, key: "a", weight: 1},
		{label: "b", n: 10, key: "b", weight: 2},
		{label: "c", n: 10, key: "c", weight: 3},
	}
	for _, tc := range []struct {
		name   string
		cfg    *fsmv1.QueueConfig
		groups []group
		calls  []call
	}{
		{
			name:   "drr by weight in activation order",
			groups: abc,
			calls: []call{{budget: 12, want: []string{
				"a0", "b0", "b1", "c0", "c1", "c2",
				"a1", "b2", "b3", "c3", "c4", "c5",
			}}},
		},
		{
			name:   "drr quantum multiplies weight",
			cfg:    &fsmv1.QueueConfig{FairnessQuantum: 2},
			groups: abc[:2],
			calls:  []call{{budget: 9, want: []string{"a0", "a1", "b0", "b1", "b2", "b3", "a2", "a3", "b4"}}},
		},
		{
			name:   "drr resumes mid-turn on the next call",
			groups: abc,
			calls: []call{
				{budget: 2, want: []string{"a0", "b0"}},
				{budget: 3, want: []string{"b1", "c0", "c1"}},
				{budget: 2, want: []string{"c2", "a1"}},
			},
		},
		{
			name: "drr: a key that empties forfeits its turn",
			groups: []group{
				{label: "a", n: 1, key: "a", weight: 5},
				{label: "b", n: 10, key: "b", weight: 1},
			},
			calls: []call{{budget: 4, want: []string{"a0", "b0", "b1", "b2"}}},
		},
		{
			name:   "one key is plain FIFO",
			groups: []group{{label: "m", n: 5, key: "k", weight: 3}},
			calls: []call{
				{budget: 4, want: []string{"m0", "m1", "m2", "m3"}},
				{budget: 4, want: []string{"m4"}},
			},
		},
		{
			name:   "pending messages are never picked; an all-pending key forfeits",
			groups: abc,
			calls: []call{{budget: 6, pending: []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0"},
				want: []string{"b1", "b2", "c0", "c1", "c2", "b3"}}},
		},
		{
			name: "strict priority, FIFO within",
			groups: []group{
				{label: "lo", n: 3, prio: 0},
				{label: "hi", n: 2, prio: 5},
				{label: "neg", n: 1, prio: -1},
				{label: "mid", n: 2, prio: 1},
			},
			calls: []call{{budget: 10, want: []string{"hi0", "hi1", "mid0", "mid1", "lo0", "lo1", "lo2", "neg0"}}},
		},
		{
			name: "a priority all pending falls through",
			groups: []group{
				{label: "lo", n: 2, prio: 0},
				{label: "hi", n: 2, prio: 5},
			},
			calls: []call{{budget: 1, pending: []string{"hi0", "hi1"}, want: []string{"lo0"}}},
		},
		{
			name:   "throttle: burst, then a token per interval",
			cfg:    throttles("t", 10.0, 2),
			groups: []group{{label: "m", n: 10, throttle: []string{"t"}}},
			calls: []call{
				{budget: 10, want: []string{"m0", "m1"}, wake: 100 * time.Millisecond},
				{at: 99 * time.Millisecond, budget: 10, want: nil, wake: 100 * time.Millisecond},
				{at: 100 * time.Millisecond, budget: 10, want: []string{"m2"}, wake: 200 * time.Millisecond},
				// Idle long enough to refill: the burst again, then one interval.
				{at: 350 * time.Millisecond, budget: 10, want: []string{"m3", "m4"}, wake: 450 * time.Millisecond},
			},
		},
		{
			name: "throttled messages do not hold back other keys or later messages",
			cfg:  throttles("slow", 1.0, 1),
			groups: []group{
				{label: "s", n: 3, key: "k", throttle: []string{"slow"}},
				{label: "f", n: 2, key: "k", throttle: []string{"unruled"}},
				{label: "o", n: 2, key: "other"},
			},
			calls: []call{{budget: 10, want: []string{"s0", "o0", "f0", "o1", "f1"}, wake: time.Second}},
		},
		{
			// Issue 11, item 3: the walk used to give up after 1,024
			// throttled messages of one key.
			name: "an unthrottled message behind 2,000 throttled ones of its key goes at once",
			cfg:  throttles("slow", 1.0, 1),
			groups: []group{
				{label: "s", n: 2000, key: "k", throttle: []string{"slow"}},
				{label: "f", n: 1, key: "k"},
			},
			calls: []call{{budget: 10, want: []string{"s0", "f0"}, wake: time.Second}},
		},
		{
			name: "a wholly throttled key is passed by until its token, then served in FIFO order",
			cfg:  throttles("a", 1.0, 1, "b", 2.0, 1),
			groups: []group{
				{label: "a", n: 3, key: "k", throttle: []string{"a"}},
				{label: "b", n: 3, key: "k", throttle: []string{"b"}},
				{label: "o", n: 1, key: "other"},
			},
			calls: []call{
				{budget: 10, want: []string{"a0", "o0", "b0"}, wake: 500 * time.Millisecond},
				{at: 100 * time.Millisecond, budget: 10, want: nil, wake: 500 * time.Millisecond},
				{at: 500 * time.Millisecond, budget: 10, want: []string{"b1"}, wake: time.Second},
				{at: time.Second, budget: 10, want: []string{"a1", "b2"}, wake: 2 * time.Second},
			},
		},
		{
			name: "a message needs a token of every throttle key",
			cfg:  throttles("a", 100.0, 3, "b", 1.0, 1),
			groups: []group{
				{label: "ab", n: 3, key: "ab", throttle: []string{"a", "b"}},
				{label: "a", n: 3, key: "a", throttle: []string{"a", "a"}},
			},
			calls: []call{
				{budget: 10, want: []string{"ab0", "a0", "a1"}, wake: 10 * time.Millisecond},
				{at: 10 * time.Millisecond, budget: 10, want: []string{"a2"}, wake: time.Second},
			},
		},
		{
			name:   "round-robin over consumers with credit",
			groups: []group{{label: "m", n: 10}},
			calls: []call{
				{budget: 10, credit: []int{1, 0, 3}, want: []string{"m0", "m1", "m2", "m3"}, wantTo: []int{0, 2, 2, 2}},
				{budget: 3, credit: []int{2, 2, 2}, want: []string{"m4", "m5", "m6"}, wantTo: []int{0, 1, 2}},
				{budget: 2, credit: []int{2, 2, 2}, want: []string{"m7", "m8"}, wantTo: []int{0, 1}},
			},
		},
		{
			name:   "round-robin resumes after the last consumer granted",
			groups: []group{{label: "m", n: 10}},
			calls: []call{
				{budget: 4, credit: []int{5, 5, 5}, rrLast: 2, want: []string{"m0", "m1", "m2", "m3"}, wantTo: []int{2, 0, 1, 2}},
			},
		},
		{
			name:   "budget is bounded by total credit",
			groups: []group{{label: "m", n: 10}},
			calls:  []call{{budget: 10, credit: []int{1, 2}, want: []string{"m0", "m1", "m2"}, wantTo: []int{0, 1, 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, names := pickState(t, tc.cfg, tc.groups)
			byName := map[string]uint64{}
			for id, n := range names {
				byName[n] = id
			}
			var (
				cur cursors
				bk  buckets
				sc  pickScratch
			)
			granted := map[uint64]struct{}{} // picked by earlier calls: pending, as the pipeline marks them
			for ci, c := range tc.calls {
				credit := c.credit
				if credit == nil {
					credit = []int{c.budget}
				}
				in := pickInput{NowNs: float64(c.at), Budget: c.budget, Seqs: seqs(len(credit)), Credit: slices.Clone(credit), Pending: maps.Clone(granted)}
				for _, n := range c.pending {
					in.Pending[byName[n]] = struct{}{}
				}
				if c.rrLast != 0 {
					cur.rrLast = c.rrLast
				}
				var res pickResult
				f.Reader().Read(func(v fsm.View) {
					qv, _ := v.Queue("q")
					res = pickQueue(qv, in, &cur, &bk, &sc)
				})
				var got []string
				var to []int
				for _, p := range res.Picks {
					granted[p.ID] = struct{}{}
					got = append(got, names[p.ID])
					to = append(to, p.Consumer)
				}
				if !slices.Equal(got, c.want) {
					t.Fatalf("call %d: picked %v, want %v", ci, got, c.want)
				}
				if c.wantTo != nil && !slices.Equal(to, c.wantTo) {
					t.Fatalf("call %d: consumers %v, want %v", ci, to, c.wantTo)
				}
				if !slices.Equal(in.Credit, credit) {
					t.Fatalf("call %d: credit changed to %v", ci, in.Credit)
				}
				switch {
				case c.wake == 0 && res.Wake:
					t.Fatalf("call %d: wake at %v, want none", ci, time.Duration(res.WakeNs))
				case c.wake != 0 && (!res.Wake || time.Duration(res.WakeNs) != c.wake):
					t.Fatalf("call %d: wake %v at %v, want %v", ci, res.Wake, time.Duration(res.WakeNs), c.wake)
				}
			}
		})
	}
}

// TestPickQueueRuleChange: a changed throttle rule keeps the bucket's level
// (clamped to the new burst); a removed rule drops its bucket.
func TestPickQueueRuleChange(t *testing.T) {
	f, names := pickState(t, throttles("t", 1.0, 1), []group{{label: "m", n: 10, throttle: []string{"t"}}})
	var (
		cur cursors
		bk  buckets
		sc  pickScratch
	)
	granted := map[uint64]struct{}{}
	pickAt := func(at time.Duration, cfg *fsmv1.QueueConfig) []string {
		var got []string
		f.Reader().Read(func(v fsm.View) {
			qv, _ := v.Queue("q")
			var view QueueView = qv
			if cfg != nil {
				view = configured{qv, cfg}
			}
			for _, p := range pickQueue(view, pickInput{NowNs: float64(at), Budget: 100, Seqs: seqs(1), Credit: []int{100}, Pending: maps.Clone(granted)}, &cur, &bk, &sc).Picks {
				granted[p.ID] = struct{}{}
				got = append(got, names[p.ID])
			}
		})
		return got
	}
	if got := pickAt(0, nil); !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("first: %v", got)
	}
	faster := throttles("t", 1000.0, 50)
	if got := pickAt(0, faster); len(got) != 0 {
		t.Fatalf("the bucket should keep its empty level: %v", got)
	}
	if got := pickAt(3*time.Millisecond, faster); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("at the new rate: %v", got)
	}
	if got := pickAt(3*time.Millisecond, &fsmv1.QueueConfig{}); len(got) != 6 || len(bk.m) != 0 {
		t.Fatalf("rule removed: picked %v, buckets %v", got, bk.m)
	}
}

// configured is a QueueView with another config (an UpdateQueue).
type configured struct {
	fsm.QueueView
	cfg *fsmv1.QueueConfig
}

func (c configured) Config() *fsmv1.QueueConfig { return c.cfg }

// stepCounter is a QueueView that counts the messages picking steps over.
type stepCounter struct {
	QueueView
	steps *int
}

func (c stepCounter) NextReady(prio int32, key string, after uint64) (fsm.ReadyMessage, bool) {
	*c.steps++
	return c.QueueView.NextReady(prio, key, after)
}

func (c stepCounter) NextInGroup(prio int32, key, group string, after uint64) (fsm.ReadyMessage, bool) {
	*c.steps++
	return c.QueueView.NextInGroup(prio, key, group, after)
}

// TestThrottledBacklogCostsNothing: picking over fairness keys whose
// messages are all throttled steps over each key's throttle groups once,
// not over their backlog (issue 11, item 3: a pass stepped over up to
// 1,024 messages per key, holding the state's read lock, at every token
// and every applied change); and once a key is found wholly throttled,
// later calls pass it by without stepping at all until its token is due.
func TestThrottledBacklogCostsNothing(t *testing.T) {
	const keys, perKey = 50, 200
	var groups []group
	cfg := &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{}}
	for k := range keys {
		tk := fmt.Sprint("t", k)
		cfg.Throttles[tk] = &fsmv1.ThrottleRule{RatePerSec: 1, Burst: 1}
		groups = append(groups, group{label: fmt.Sprint("k", k, "-"), n: perKey, key: fmt.Sprint("k", k), throttle: []string{tk}})
	}
	f, _ := pickState(t, cfg, groups)
	var (
		cur cursors
		bk  buckets
		sc  pickScratch
	)
	granted := map[uint64]struct{}{}
	pickAt := func(at time.Duration) (picked, steps int, res pickResult) {
		f.Reader().Read(func(v fsm.View) {
			qv, _ := v.Queue("q")
			res = pickQueue(stepCounter{qv, &steps}, pickInput{NowNs: float64(at), Budget: 1 << 20, Seqs: seqs(1), Credit: []int{1 << 20}, Pending: maps.Clone(granted)}, &cur, &bk, &sc)
		})
		for _, p := range res.Picks {
			granted[p.ID] = struct{}{}
		}
		return len(res.Picks), steps, res
	}
	// Each key's one token goes; finding the rest throttled costs a few
	// steps per key (its head, the next; later also the pending head of
	// the grant before), nothing per message behind.
	const most = 4 * keys
	if n, steps, _ := pickAt(0); n != keys || steps > most {
		t.Fatalf("first call: %d picks in %d steps; want %d picks in at most %d steps", n, steps, keys, most)
	}
	n, steps, res := pickAt(500 * time.Millisecond)
	if n != 0 || steps != 0 || !res.Wake || time.Duration(res.WakeNs) != time.Second {
		t.Fatalf("before the tokens: %d picks, %d steps, wake %v at %v; want nothing picked, no step, a wake at 1s", n, steps, res.Wake, time.Duration(res.WakeNs))
	}
	if n, steps, _ := pickAt(time.Second); n != keys || steps > most {
		t.Fatalf("at the tokens: %d picks in %d steps; want %d in at most %d", n, steps, keys, most)
	}
}
