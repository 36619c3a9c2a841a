package workload

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLedgerExactlyOnce(t *testing.T) {
	l := NewLedger()
	for i := range 10 {
		l.Acked(MakeKey(1, 0, uint64(i)))
	}
	for i := range 10 {
		l.Delivered(MakeKey(1, 0, uint64(i)))
	}
	c := l.Check()
	if !c.OK() || c.Acked != 10 || c.Delivered != 10 || c.Missing != 0 || c.Duplicates != 0 {
		t.Fatalf("clean run judged %s", c)
	}
	if l.Pending() != 0 {
		t.Fatalf("pending %d after every message was delivered", l.Pending())
	}
}

func TestLedgerDetectsMissingAndDuplicates(t *testing.T) {
	l := NewLedger()
	for i := range 10 {
		l.Acked(MakeKey(1, 2, uint64(i)))
	}
	// 0..7 delivered once, 3 twice more, 5 once more; 8 and 9 lost.
	for i := range 8 {
		l.Delivered(MakeKey(1, 2, uint64(i)))
	}
	l.Delivered(MakeKey(1, 2, 3))
	l.Delivered(MakeKey(1, 2, 3))
	l.Delivered(MakeKey(1, 2, 5))
	// Delivered though its enqueue was never acknowledged (timed out).
	l.Delivered(MakeKey(1, 2, 100))

	c := l.Check()
	if c.OK() {
		t.Fatal("lossy run judged OK")
	}
	want := Check{Acked: 10, Delivered: 9, Missing: 2, Duplicates: 3, DuplicateKeys: 2, Unacknowledged: 1}
	c2 := c
	c2.Examples = nil
	if !reflect.DeepEqual(c2, want) {
		t.Fatalf("check = %+v, want %+v", c2, want)
	}
	joined := strings.Join(c.Examples, "\n")
	for _, s := range []string{"missing phase=1 producer=2 seq=8", "missing phase=1 producer=2 seq=9", "duplicate x3 phase=1 producer=2 seq=3"} {
		if !strings.Contains(joined, s) {
			t.Errorf("examples lack %q:\n%s", s, joined)
		}
	}
	if l.Pending() != 2 {
		t.Fatalf("pending %d, want 2", l.Pending())
	}
	if l.Deliveries() != 12 {
		t.Fatalf("deliveries %d, want 12", l.Deliveries())
	}
}

func TestLedgerLeftInQueueFailsCheck(t *testing.T) {
	c := NewLedger().Check()
	c.LeftInQueue = 4
	if c.OK() {
		t.Fatal("messages left in the queue judged OK")
	}
}

func TestLedgerDeliveryBeforeAck(t *testing.T) {
	// A consumer can see a message before its producer sees the ack.
	l := NewLedger()
	k := MakeKey(4, 1, 1)
	l.Delivered(k)
	l.Acked(k)
	if l.Pending() != 0 {
		t.Fatalf("pending %d: a message delivered before its ack counts as delivered", l.Pending())
	}
	if c := l.Check(); !c.OK() || c.Unacknowledged != 0 {
		t.Fatalf("check %s", c)
	}
}

func TestLedgerWaitDelivered(t *testing.T) {
	l := NewLedger()
	keys := []Key{MakeKey(1, 0, 1), MakeKey(1, 0, 2)}
	l.Acked(keys...)
	done := make(chan error, 1)
	go func() { done <- l.WaitDelivered(context.Background(), time.Minute) }()
	l.Delivered(keys[0])
	l.Delivered(keys[1])
	if err := <-done; err != nil {
		t.Fatalf("WaitDelivered: %v", err)
	}

	// Nothing is delivered: the idle timeout ends the wait with an error
	// that says how many are missing.
	l.Acked(MakeKey(1, 0, 3))
	err := l.WaitDelivered(context.Background(), 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 acknowledged messages not delivered") {
		t.Fatalf("WaitDelivered on a stuck ledger: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitDelivered(ctx, time.Minute); err == nil {
		t.Fatal("WaitDelivered ignored a cancelled context")
	}
}

// A phase waits for its own messages: one an earlier phase lost does not
// hold it up, and its error counts only its own.
func TestLedgerWaitDeliveredForPhases(t *testing.T) {
	l := NewLedger()
	lost := MakeKey(1, 0, 1)
	mine := []Key{MakeKey(4, 0, 1), MakeKey(4, 1, 1)}
	l.Acked(lost)
	l.Acked(mine...)
	if n := l.PendingIn(4); n != 2 {
		t.Fatalf("pending in phase 4: %d, want 2", n)
	}
	done := make(chan error, 1)
	go func() { done <- l.WaitDelivered(context.Background(), time.Minute, 4) }()
	l.Delivered(mine[0])
	l.Delivered(mine[1])
	if err := <-done; err != nil {
		t.Fatalf("WaitDelivered(phase 4): %v", err)
	}
	if n, all := l.PendingIn(4, 5), l.Pending(); n != 0 || all != 1 {
		t.Fatalf("pending in phases 4 and 5: %d, in all: %d; want 0 and 1", n, all)
	}
	err := l.WaitDelivered(context.Background(), 200*time.Millisecond, 1, 4)
	if err == nil || !strings.Contains(err.Error(), "1 acknowledged messages not delivered") {
		t.Fatalf("WaitDelivered(phases 1, 4) with phase 1's message lost: %v", err)
	}
	// A delivery before its ack counts for its phase too.
	early := MakeKey(6, 0, 1)
	l.Delivered(early)
	l.Acked(early)
	if n := l.PendingIn(6); n != 0 {
		t.Fatalf("pending in phase 6: %d, want 0", n)
	}
}
