package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// errNackFlag is the handler error that makes --nack nack every delivery.
var errNackFlag = errors.New("nacked by raftq consume --nack")

// minConsumeLease is the shortest --visibility-timeout consume takes. The
// broker accepts any lease from 1ms, but consume prints a message and then
// acks it over the network: a lease shorter than that round trip expires
// first, the ack is refused and the message comes again.
const minConsumeLease = time.Second

type consumeFlags struct {
	count       int
	nack        bool
	deadLetter  bool
	nackDelay   time.Duration
	maxInFlight int
	idle        time.Duration
	name        string
	visibility  time.Duration
}

func newConsumeCmd(a *app) *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume QUEUE",
		Short: "Print deliveries from a queue and ack them",
		Long: "Lease messages from QUEUE, print each one and ack it (or nack it with\n" +
			"--nack). Runs until interrupted, --count deliveries, or --timeout of idleness.\n" +
			"With --json each delivery is one line of JSON.",
		Args: cobra.ExactArgs(1),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.count, "count", 0, "stop after this many deliveries (0 = no limit)")
	fs.BoolVar(&f.nack, "nack", false, "nack deliveries instead of acking them")
	fs.DurationVar(&f.nackDelay, "nack-delay", 0, "with --nack: redelivery delay")
	fs.BoolVar(&f.deadLetter, "dead-letter", false, "with --nack: move each delivery to the dead-letter queue at once instead of redelivering it")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 64, "unacked deliveries the broker may push at once")
	fs.DurationVar(&f.idle, "timeout", 0, "stop after no delivery for this long (0 = never)")
	fs.StringVar(&f.name, "name", "", "consumer name shown by raftq consumers (default host-pid)")
	fs.DurationVar(&f.visibility, "visibility-timeout", 0, "lease length, at least "+minConsumeLease.String()+" (0 = the queue's)")

	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case f.count < 0:
			return fmt.Errorf("--count must not be negative (got %d)", f.count)
		case f.maxInFlight < 1:
			return fmt.Errorf("--max-in-flight must be at least 1 (got %d)", f.maxInFlight)
		case f.idle < 0:
			return fmt.Errorf("--timeout must not be negative (got %s)", f.idle)
		}
		if f.deadLetter && !f.nack {
			return errors.New("--dead-letter goes with --nack")
		}
		if _, err := msOf("visibility-timeout", f.visibility); err != nil {
			return err
		}
		if f.visibility > 0 && f.visibility < minConsumeLease {
			return fmt.Errorf("--visibility-timeout %s is shorter than %s, the shortest lease raftq consume takes: the lease would run out before the ack arrives (0 takes the queue's)", f.visibility, minConsumeLease)
		}
		if _, err := msOf("nack-delay", f.nackDelay); err != nil {
			return err
		}
		c, err := a.dial(cmd)
		if err != nil {
			return err
		}
		defer c.Close()
		return a.consume(cmd.Context(), c, args[0], f)
	}
	return cmd
}

func (a *app) consume(ctx context.Context, c *client.Client, queue string, f consumeFlags) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	idle := newIdleTimer(f.idle, stop)
	defer idle.stop()

	maxInFlight := f.maxInFlight
	if f.count > 0 {
		// Lease no more than will be printed: extras would be handed back,
		// each costing a delivery attempt.
		maxInFlight = min(maxInFlight, f.count)
	}
	var mu sync.Mutex
	handled := 0
	// printed holds the ids of the deliveries shown, and notAcked those
	// of them whose ack or nack the broker did not take: the command must
	// not succeed for work that will come again.
	printed := map[string]bool{}
	notAcked := map[string]bool{}
	handler := func(_ context.Context, d *raftqv1.Delivery) error {
		idle.busy()
		defer idle.done()
		mu.Lock()
		defer mu.Unlock()
		if f.count > 0 && handled >= f.count {
			return client.ErrHandBack // not printed, so not an attempt
		}
		var err error
		if a.json {
			err = printJSON(a.out, d)
		} else if f.nack {
			// Unlike an ack (the plain line scripts read), a nack says
			// what becomes of the message.
			fate := "nacked (redelivered; dead-lettered after the queue's max deliveries)"
			if f.deadLetter {
				fate = "nacked (to the dead-letter queue)"
			}
			_, err = fmt.Fprintf(a.out, "%s\tattempt=%d\t%s\t%s\n", d.GetId(), d.GetAttempt(), fate, payloadText(d.GetPayload(), 0))
		} else {
			_, err = fmt.Fprintf(a.out, "%s\tattempt=%d\t%s\n", d.GetId(), d.GetAttempt(), payloadText(d.GetPayload(), 0))
		}
		if err != nil {
			// Output is gone (closed pipe): stop, and let the message be
			// delivered again.
			stop()
			return err
		}
		handled++
		printed[d.GetId()] = true
		if f.count > 0 && handled >= f.count {
			stop()
		}
		if f.deadLetter {
			return client.DeadLetter(errNackFlag)
		}
		if f.nack {
			return errNackFlag
		}
		return nil
	}
	con := client.NewConsumer(c, queue, handler, client.ConsumerOptions{
		Name:              f.name,
		MaxInFlight:       maxInFlight,
		Concurrency:       1, // print in delivery order
		VisibilityTimeout: f.visibility,
		NackDelay:         f.nackDelay,
		Limit:             int64(f.count),
		Unsettled: func(id string, _ error) {
			mu.Lock()
			defer mu.Unlock()
			if printed[id] {
				notAcked[id] = true
			}
		},
	})
	if err := con.Run(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(notAcked); n > 0 {
		verb := "acked"
		if f.nack {
			verb = "nacked"
		}
		return fmt.Errorf("%d of %s printed %s not %s (the lease ran out or the broker refused it; the warnings above say which): %s delivered again",
			n, plural(len(printed), "message"), wasWere(n), verb, itThem(n))
	}
	return nil
}

// idleTimer calls fire after d passes with no handler running and none
// started; d = 0 disables it.
type idleTimer struct {
	d time.Duration
	t *time.Timer

	mu     sync.Mutex
	active int
}

func newIdleTimer(d time.Duration, fire func()) *idleTimer {
	it := &idleTimer{d: d}
	if d > 0 {
		it.t = time.AfterFunc(d, fire)
	}
	return it
}

func (it *idleTimer) busy() {
	if it.t == nil {
		return
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	it.active++
	it.t.Stop()
}

func (it *idleTimer) done() {
	if it.t == nil {
		return
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	it.active--
	if it.active == 0 {
		it.t.Reset(it.d)
	}
}

func (it *idleTimer) stop() {
	if it.t != nil {
		it.t.Stop()
	}
}
