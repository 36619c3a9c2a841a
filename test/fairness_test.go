package test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestFairnessAndThrottles checks, through the real server, that weighted
// fairness keys share deliveries by weight over a short window (API.md,
// Fairness: DRR with a quantum of 1 message per weight unit), that a
// throttle rule holds its key to the rule's rate without holding back
// unthrottled messages, and that GetQueue(include_keys) reports both.
func TestFairnessAndThrottles(t *testing.T) {
	n, c := startSingle(t)
	ctx := ctxT(t)
	raw := raftqv1.NewBrokerClient(rawConn(t, n))

	t.Run("weighted shares", func(t *testing.T) {
		const perKey = 600
		weights := map[string]uint32{"a": 1, "b": 2, "c": 3}
		if _, err := c.CreateQueue(ctx, "fair", &raftqv1.QueueConfig{VisibilityTimeoutMs: 120_000}); err != nil {
			t.Fatal(err)
		}
		for start := 0; start < perKey; start += 300 {
			for _, k := range []string{"a", "b", "c"} {
				var batch []*raftqv1.EnqueueMessage
				for i := start; i < start+300; i++ {
					batch = append(batch, &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprintf("%s-%d", k, i)), FairnessKey: k, Weight: weights[k]})
				}
				if _, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "fair", Messages: batch}); err != nil {
					t.Fatal(err)
				}
			}
		}

		qi, err := c.GetQueue(ctx, "fair", true)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*raftqv1.FairnessKeyStats{}
		for _, k := range qi.FairnessKeys {
			got[k.Key] = k
		}
		for k, w := range weights {
			if s := got[k]; s == nil || s.Weight != w || s.Pending != perKey {
				t.Fatalf("key %s: stats %v, want weight %d and %d pending (all keys: %v)", k, s, w, perKey, qi.FairnessKeys)
			}
		}
		if len(qi.FairnessKeys) != 3 || len(qi.ThrottleKeys) != 0 {
			t.Fatalf("GetQueue keys = %v / %v, want a, b, c and no throttles", qi.FairnessKeys, qi.ThrottleKeys)
		}

		// One consumer with little credit, acking as it goes.
		const window = perKey
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s := openLease(t, sctx, n, "fair", 4)
		count := map[string]int{}
		next := map[string]int{} // FIFO within a key
		total := 0
		for total < window {
			r, err := s.Recv()
			if err != nil {
				t.Fatalf("after %d deliveries: %v", total, err)
			}
			var refs []*raftqv1.LeaseRef
			for _, d := range r.Messages {
				refs = append(refs, refOf(d))
				if total >= window {
					continue
				}
				total++
				k, idx, _ := strings.Cut(string(d.Payload), "-")
				if d.FairnessKey != k || d.Weight != weights[k] {
					t.Fatalf("delivery %q has key %q weight %d", d.Payload, d.FairnessKey, d.Weight)
				}
				if i, _ := strconv.Atoi(idx); i != next[k] {
					t.Fatalf("key %s delivered %d, want %d (FIFO within a key)", k, i, next[k])
				}
				next[k]++
				count[k]++
			}
			res, err := raw.Ack(ctx, &raftqv1.AckRequest{Queue: "fair", Acks: refs})
			if err != nil {
				t.Fatal(err)
			}
			for _, ir := range res.Results {
				if !ir.Ok {
					t.Fatalf("ack: %v", ir)
				}
			}
		}
		cancel()
		const tolerance = 0.03 // of the window
		for k, w := range weights {
			share, want := float64(count[k])/window, float64(w)/6
			if math.Abs(share-want) > tolerance {
				t.Errorf("key %s (weight %d): %d of %d deliveries = %.3f, want %.3f ± %.2f (counts %v)", k, w, count[k], window, share, want, tolerance, count)
			}
		}
		t.Logf("first %d deliveries by key: %v", window, count)
	})

	// Throttled and unthrottled messages in fairness keys of their own, and
	// interleaved in one key (the default key "", where most traffic goes).
	for _, layout := range []struct {
		name       string
		queue      string
		tKey, uKey string
	}{
		{"own fairness keys", "thr-keys", "throttled", "free"},
		{"one fairness key", "thr-shared", "", ""},
	} {
		t.Run("throttle, "+layout.name, func(t *testing.T) {
			testThrottle(t, ctx, n, c, raw, layout.queue, layout.tKey, layout.uKey)
		})
	}
}

// testThrottle enqueues 200 messages with throttle key "t" (rule: 20/s,
// burst 5) interleaved with 200 without, in fairness keys tKey and uKey,
// and consumes with one stream for at least 1.5 s: the throttled ones must
// stay within the rule, and the unthrottled ones must not wait for them.
func testThrottle(t *testing.T, ctx context.Context, n *harness.Node, c *client.Client, raw raftqv1.BrokerClient, queue, tKey, uKey string) {
	const (
		rate  = 20.0
		burst = 5
		each  = 200 // throttled and unthrottled messages
	)
	if _, err := c.CreateQueue(ctx, queue, &raftqv1.QueueConfig{VisibilityTimeoutMs: 120_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateQueue(ctx, queue, &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"t": {RatePerSec: rate, Burst: burst}}}, "throttles"); err != nil {
		t.Fatal(err)
	}
	var batch []*raftqv1.EnqueueMessage
	for i := range 2 * each {
		m := &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprint(i)), FairnessKey: uKey}
		if i%2 == 0 {
			m.ThrottleKeys, m.FairnessKey = []string{"t"}, tKey
		}
		batch = append(batch, m)
	}
	if _, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: queue, Messages: batch}); err != nil {
		t.Fatal(err)
	}
	checkKeyStats := func(all bool) {
		t.Helper()
		qi, err := c.GetQueue(ctx, queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(qi.ThrottleKeys) != 1 {
			t.Fatalf("throttle keys = %v, want one for t", qi.ThrottleKeys)
		}
		tk := qi.ThrottleKeys[0]
		if tk.Key != "t" || tk.RatePerSec != rate || tk.Burst != burst || tk.Tokens < 0 || tk.Tokens > burst {
			t.Fatalf("throttle key stats %v, want t at %v/s burst %d with 0..%d tokens", tk, rate, burst, burst)
		}
		keys := map[string]bool{tKey: true, uKey: true}
		if len(qi.FairnessKeys) > len(keys) || all && len(qi.FairnessKeys) != len(keys) {
			t.Fatalf("fairness keys = %v, want %d", qi.FairnessKeys, len(keys))
		}
		for _, k := range qi.FairnessKeys {
			if !keys[k.Key] || k.Weight != 1 {
				t.Fatalf("fairness key stats %v, want one of %v with weight 1", k, keys)
			}
		}
	}
	checkKeyStats(true)

	start := time.Now() // before the bucket can exist: the bound below is loose, never tight
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := openLease(t, sctx, n, queue, 8)
	nT, nU, tAtLastU := 0, 0, -1
	var lastU time.Duration
	for nU < each || time.Since(start) < 1500*time.Millisecond {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d throttled and %d unthrottled deliveries: %v", nT, nU, err)
		}
		el := time.Since(start).Seconds()
		var refs []*raftqv1.LeaseRef
		for _, d := range r.Messages {
			refs = append(refs, refOf(d))
			if len(d.ThrottleKeys) == 1 && d.ThrottleKeys[0] == "t" {
				nT++
				// The rule allows burst + rate*elapsed; 1.5x and +2 absorb
				// clock granularity. An upper bound only: no speed floor.
				if limit := burst + rate*el*1.5 + 2; float64(nT) > limit {
					t.Fatalf("%d throttled deliveries after %.2fs, the rule allows at most ~%.0f", nT, el, limit)
				}
			} else {
				nU++
				if nU == each {
					tAtLastU, lastU = nT, time.Since(start)
				}
			}
		}
		if _, err := raw.Ack(ctx, &raftqv1.AckRequest{Queue: queue, Acks: refs}); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	cancel()
	t.Logf("%.2fs: %d unthrottled (all by %.2fs, with %d throttled), %d throttled (%.1f/s)",
		el.Seconds(), nU, lastU.Seconds(), tAtLastU, nT, float64(nT)/el.Seconds())
	// Unthrottled messages go at the consumer's pace (here ~100 ms for
	// all). Had the throttled ones held them back, they would have come out
	// about one for one, so that the last unthrottled delivery came with
	// (nearly) as many throttled ones. Allow up to half of them, which the
	// rule alone allows only after 4.75 s: this fails only if the consumer
	// got fewer than ~40 unthrottled messages a second.
	if tAtLastU < 0 || tAtLastU > each/2 {
		t.Fatalf("the %d unthrottled messages were held back by the throttle: the last came after %.2fs, with %d throttled ones",
			each, lastU.Seconds(), tAtLastU)
	}
	checkKeyStats(false)
}
