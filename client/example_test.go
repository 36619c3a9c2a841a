package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm/state"
	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"

	"github.com/raftq/raftq/raftgroup"
)

// The examples run, and their output is checked, against a real
// single-node broker started in this process: built by the same
// composition root as `raftq serve` (host.New), on loopback ports and a
// temporary data dir (internal/testcluster).

// startBroker starts a single-node broker and returns its gRPC address and
// a function that stops it and removes its data. In real use the address
// is that of any node of a running cluster (`raftq serve` listens on
// 127.0.0.1:7400), and more than one can be given as seeds.
func startBroker() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "raftq-example-")
	if err != nil {
		log.Fatal(err)
	}
	at, err := testcluster.FreeAddrs()
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler) // audit lines and all
	cfg := testcluster.Config("example", dir, at, 1, nil, quiet)
	cfg.Node.ReplicaCheckInterval = -1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	// Ready when this node leads a term it has established (what
	// /readyz waits for).
	if _, err := h.Broker().Node().Group().WaitLeadership(ctx, func(l raftgroup.Leadership) bool { return l.Established }); err != nil {
		log.Fatal(err)
	}
	return h.GRPCAddr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			log.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Fatal(err)
		}
	}
}

// Create a queue, enqueue messages and look at them without leasing.
func Example() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	q, err := c.CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{VisibilityTimeoutMs: 30_000, MaxDeliveries: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created", q.GetName(), "with dead-letter queue", q.GetConfig().GetDeadLetterQueue())

	if _, err := c.EnqueuePayloads(ctx, "jobs", []byte("resize image 1"), []byte("resize image 2")); err != nil {
		log.Fatal(err)
	}
	// One message with options: a higher priority goes first.
	if _, err := c.Enqueue(ctx, "jobs", &raftqv1.EnqueueMessage{Payload: []byte("urgent"), Priority: 9}); err != nil {
		log.Fatal(err)
	}

	info, err := c.GetQueue(ctx, "jobs", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready:", info.GetStats().GetReady())

	next, err := c.Peek(ctx, "jobs", 10, false)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range next {
		fmt.Printf("%s (priority %d)\n", d.GetPayload(), d.GetPriority())
	}
	// Output:
	// created jobs with dead-letter queue jobs.dlq
	// ready: 3
	// urgent (priority 9)
	// resize image 1 (priority 0)
	// resize image 2 (priority 0)
}

// A retried enqueue creates no duplicate: Enqueue gives each message a
// dedup id before the first attempt, and the same id again within the
// queue's dedup window returns the first message's id.
func ExampleClient_Enqueue() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "orders", nil); err != nil {
		log.Fatal(err)
	}

	msg := &raftqv1.EnqueueMessage{
		Payload:     []byte(`{"order": 17}`),
		Headers:     map[string]string{"content-type": "application/json"},
		FairnessKey: "tenant-a", // shares delivery fairly with other keys
		DedupId:     "order-17",
	}
	first, err := c.Enqueue(ctx, "orders", msg)
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.Enqueue(ctx, "orders", msg)
	if err != nil {
		log.Fatal(err)
	}
	info, err := c.GetQueue(ctx, "orders", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same id:", first[0] == again[0])
	fmt.Println("ready:", info.GetStats().GetReady())
	// Output:
	// same id: true
	// ready: 1
}

// A consumer leases messages and runs a handler on each: returning nil
// acks the message, an error nacks it (it is redelivered, up to the
// queue's max deliveries), client.DeadLetter(err) sends it to the
// dead-letter queue at once.
func ExampleNewConsumer() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "emails", nil); err != nil {
		log.Fatal(err)
	}
	if _, err := c.EnqueuePayloads(ctx, "emails", []byte("welcome alice"), []byte("not an email"), []byte("welcome bob")); err != nil {
		log.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int32
	handler := func(ctx context.Context, d *raftqv1.Delivery) error {
		defer func() {
			if handled.Add(1) == 3 {
				cancel() // this example stops after three messages
			}
		}()
		if string(d.GetPayload()) == "not an email" {
			return client.DeadLetter(errors.New("malformed"))
		}
		fmt.Printf("sent %q\n", d.GetPayload())
		return nil
	}
	// One at a time, so the example prints in delivery order.
	con := client.NewConsumer(c, "emails", handler, client.ConsumerOptions{MaxInFlight: 1, Limit: 3})
	if err := con.Run(runCtx); err != nil { // returns once its acks are sent
		log.Fatal(err)
	}

	info, err := c.GetQueue(ctx, "emails", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acked:", info.GetStats().GetAckedTotal(), "dead-lettered:", info.GetStats().GetDeadLettered())
	dead, err := c.Peek(ctx, "emails", 10, true)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("in %s.dlq: %q from %s, %s\n", d.GetOriginQueue(), d.GetPayload(), d.GetOriginQueue(), d.GetDeadLetterReason())
	}
	// Output:
	// sent "welcome alice"
	// sent "welcome bob"
	// acked: 2 dead-lettered: 1
	// in emails.dlq: "not an email" from emails, nack: malformed
}

// Messages in a dead-letter queue go back to the queue they came from
// with Redrive, for instance once the bug that failed them is fixed.
func ExampleClient_Redrive() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "jobs", nil); err != nil {
		log.Fatal(err)
	}
	if _, err := c.EnqueuePayloads(ctx, "jobs", []byte("job 1")); err != nil {
		log.Fatal(err)
	}
	// Fail it into the dead-letter queue: lease it, then nack it there.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	con := client.NewConsumer(c, "jobs", func(context.Context, *raftqv1.Delivery) error {
		cancel()
		return client.DeadLetter(errors.New("dependency down"))
	}, client.ConsumerOptions{Limit: 1})
	if err := con.Run(runCtx); err != nil {
		log.Fatal(err)
	}

	moved, err := c.Redrive(ctx, "jobs", 0) // 0: all of them
	if err != nil {
		log.Fatal(err)
	}
	info, err := c.GetQueue(ctx, "jobs", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("moved back:", moved, "ready:", info.GetStats().GetReady())
	// Output:
	// moved back: 1 ready: 1
}

// The limits Enqueue checks before sending are the broker's own.
func TestLimitsAreTheBrokers(t *testing.T) {
	if client.MaxPayloadBytes != state.MaxMessageBytesCap {
		t.Errorf("client.MaxPayloadBytes = %d, the largest max_message_bytes a queue may set is %d", client.MaxPayloadBytes, state.MaxMessageBytesCap)
	}
	if client.MaxRequestBytes != transport.MaxRequestBytes {
		t.Errorf("client.MaxRequestBytes = %d, a node reads requests up to %d", client.MaxRequestBytes, transport.MaxRequestBytes)
	}
}
