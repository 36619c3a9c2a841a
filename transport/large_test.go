package transport_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/protobuf/proto"
)

// defaultRecvLimit is what a grpc-go client accepts by default.
const defaultRecvLimit = 4 << 20

// TestLargeMessages delivers messages of every size a queue accepts: the
// SDK with its defaults takes any of them, a plain gRPC client with default
// options any under 4 MiB, and no reconnect burns an attempt (issue 11,
// item 1, "Large messages").
func TestLargeMessages(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	mb := bytes.Repeat([]byte("a"), 1_000_000)
	six := [][]byte{mb, mb, mb, mb, mb, mb, []byte("small")}

	step("six 1 MB messages through the SDK", func(t *testing.T) {
		mustCreate(t, l, "mid", nil)
		mustEnqueue(t, l, "mid", six...)
		got := consumeSDK(t, l.Addrs.GRPC, "mid", len(six))
		checkFirstAttempts(t, got, len(six))
		checkNoneDeadLettered(t, l, "mid")
	})

	step("six 1 MB messages through a plain client", func(t *testing.T) {
		mustCreate(t, l, "mid-plain", nil)
		mustEnqueue(t, l, "mid-plain", six...)
		ctx := tctx(t, 30*time.Second)
		s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "mid-plain", Limit: int64(len(six))})
		if err != nil {
			t.Fatal(err)
		}
		got := recvN(t, s, len(six))
		checkFirstAttempts(t, got, len(six))
		ackAll(t, l, "mid-plain", got)
		checkNoneDeadLettered(t, l, "mid-plain")
	})

	step("max_batch_bytes caps every response", func(t *testing.T) {
		mustCreate(t, l, "capped", nil)
		for _, max := range []int64{1_500_000, 100} {
			mustEnqueue(t, l, "capped", six...)
			s, err := l.Broker.Lease(tctx(t, 30*time.Second), &raftqv1.LeaseRequest{Queue: "capped", Limit: int64(len(six)), MaxBatchBytes: max})
			if err != nil {
				t.Fatal(err)
			}
			var got []*raftqv1.Delivery
			for len(got) < len(six) {
				r, err := s.Recv()
				if err != nil {
					t.Fatalf("max %d: after %d deliveries: %v", max, len(got), err)
				}
				if n := proto.Size(r); n > int(max) && len(r.Messages) != 1 {
					t.Fatalf("max %d: a response of %d messages takes %d bytes", max, len(r.Messages), n)
				}
				got = append(got, r.Messages...)
			}
			checkFirstAttempts(t, got, len(six))
			ackAll(t, l, "capped", got)
		}
	})

	step("3.9 MB messages through a plain client", func(t *testing.T) {
		big := bytes.Repeat([]byte("b"), 3_900_000)
		mustCreate(t, l, "big", &raftqv1.QueueConfig{MaxMessageBytes: 4 << 20})
		mustEnqueue(t, l, "big", big, big, []byte("small"))
		// Peek: at least one message, never more than a default client takes.
		p, err := l.Broker.Peek(tctx(t, 10*time.Second), &raftqv1.PeekRequest{Queue: "big"})
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if len(p.Messages) == 0 || !bytes.Equal(p.Messages[0].Payload, big) {
			t.Fatalf("Peek returned %d messages, want the 3.9 MB one first", len(p.Messages))
		}
		if n := proto.Size(p); n > defaultRecvLimit {
			t.Fatalf("PeekResponse is %d bytes", n)
		}
		s, err := l.Broker.Lease(tctx(t, 30*time.Second), &raftqv1.LeaseRequest{Queue: "big", Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		got := recvN(t, s, 3)
		checkFirstAttempts(t, got, 3)
		ackAll(t, l, "big", got)
	})

	step("the largest message a queue holds through the SDK", func(t *testing.T) {
		mustCreate(t, l, "huge", &raftqv1.QueueConfig{MaxMessageBytes: fsm.MaxMessageBytesCap})
		m := largestMessage()
		if _, err := l.Broker.Enqueue(tctx(t, 30*time.Second), &raftqv1.EnqueueRequest{Queue: "huge", Messages: []*raftqv1.EnqueueMessage{m}}); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.Addrs.GRPC})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		p, err := cl.Peek(tctx(t, 30*time.Second), "huge", 0, false)
		if err != nil || len(p) != 1 || !bytes.Equal(p[0].Payload, m.Payload) {
			t.Fatalf("SDK Peek: %d messages, %v", len(p), err)
		}
		got := consumeSDK(t, l.Addrs.GRPC, "huge", 1)
		checkFirstAttempts(t, got, 1)
		if !bytes.Equal(got[0].Payload, m.Payload) || len(got[0].Headers) != len(m.Headers) {
			t.Fatal("the delivery differs from the message enqueued")
		}
		checkNoneDeadLettered(t, l, "huge")
	})
}

// largestMessage is a message at every per-message limit a queue allows.
func largestMessage() *raftqv1.EnqueueMessage {
	m := &raftqv1.EnqueueMessage{
		Payload:     bytes.Repeat([]byte("h"), fsm.MaxMessageBytesCap),
		Headers:     map[string]string{},
		FairnessKey: strings.Repeat("f", fsm.MaxKeyLen),
		DedupId:     strings.Repeat("d", fsm.MaxDedupIDLen),
	}
	for i := range fsm.MaxThrottleKeys {
		m.ThrottleKeys = append(m.ThrottleKeys, strings.Repeat(string(rune('a'+i)), fsm.MaxKeyLen))
	}
	// MaxHeaders headers whose keys and values fill MaxHeaderBytes.
	per := fsm.MaxHeaderBytes / fsm.MaxHeaders
	for i := range fsm.MaxHeaders {
		k := fmt.Sprintf("h%02d-", i)
		m.Headers[k] = strings.Repeat("v", per-len(k))
	}
	return m
}

// consumeSDK runs an SDK consumer with default settings until it has
// handled n deliveries, and returns them.
func consumeSDK(t *testing.T, addr, queue string, n int) []*raftqv1.Delivery {
	t.Helper()
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		got  []*raftqv1.Delivery
		done = make(chan struct{})
	)
	con := client.NewConsumer(cl, queue, func(_ context.Context, d *raftqv1.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d)
		if len(got) == n {
			close(done)
		}
		return nil
	}, client.ConsumerOptions{Limit: int64(n)})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- con.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		k := len(got)
		mu.Unlock()
		cancel()
		<-ran
		t.Fatalf("the SDK consumer handled %d of %d deliveries in 60s", k, n)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

func checkFirstAttempts(t *testing.T, ds []*raftqv1.Delivery, n int) {
	t.Helper()
	if len(ds) != n {
		t.Fatalf("%d deliveries, want %d", len(ds), n)
	}
	for _, d := range ds {
		if d.Attempt != 1 {
			t.Fatalf("message %s delivered at attempt %d, want 1: earlier attempts were burned", d.Id, d.Attempt)
		}
	}
}

func ackAll(t *testing.T, n *testcluster.Node, queue string, ds []*raftqv1.Delivery) {
	t.Helper()
	r, err := n.Broker.Ack(tctx(t, 10*time.Second), &raftqv1.AckRequest{Queue: queue, Acks: refsOf(ds)})
	if err != nil {
		t.Fatalf("Ack: %v", err)
	}
	for i, res := range r.Results {
		if !res.Ok {
			t.Fatalf("ack %d: %s", i, res.Error)
		}
	}
}

// checkNoneDeadLettered waits for queue to drain (the consumer's acks
// settle asynchronously) and checks its dead-letter queue stayed empty.
func checkNoneDeadLettered(t *testing.T, n *testcluster.Node, queue string) {
	t.Helper()
	waitUntil(t, 20*time.Second, queue+" to drain", func() error {
		st := queueInfo(t, n, queue).Stats
		if st.Ready+st.InFlight+st.Delayed != 0 {
			return fmt.Errorf("stats %v", st)
		}
		return nil
	})
	if st := queueInfo(t, n, queue+fsm.DLQSuffix).Stats; st.Ready+st.DeadLettered != 0 {
		t.Fatalf("%s%s holds messages: %v", queue, fsm.DLQSuffix, st)
	}
}
