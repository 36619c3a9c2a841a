package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// smallDisk mounts a tmpfs of sizeMiB at a fresh directory and fills
// ballastMiB of it with a file; the caller deletes the file (ballast) to
// give the space back. It skips the test when mounting is not permitted.
// The mount is undone when the test ends, after kill (the node that uses
// it) has run.
func smallDisk(t *testing.T, sizeMiB, ballastMiB int, kill func()) (dir, ballast string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", sizeMiB)); err != nil {
		t.Skipf("cannot mount a small tmpfs for the data dir (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		kill()
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	ballast = filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, ballastMiB<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, ballast
}

// isDiskRefusal reports whether err is the guard's refusal of a write that
// adds data: ResourceExhausted naming the node and its data dir.
func isDiskRefusal(err error, node, dataDir string) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "node "+node) &&
		strings.Contains(st.Message(), dataDir) && strings.Contains(st.Message(), "disk")
}

// TestFullDiskRefusesWritesKeepsReadsAndRecovers: a node whose data dir
// is a small tmpfs is filled with enqueues until it refuses them with a
// clear ResourceExhausted naming the node and the dir; reads and acks go
// on; after kill -9 and a restart every acknowledged message is there;
// once space is freed (a ballast file deleted), writes succeed again
// without a restart.
func TestFullDiskRefusesWritesKeepsReadsAndRecovers(t *testing.T) {
	n := harness.TestNode(t, binary, "n1", "--min-free-disk-bytes", fmt.Sprint(3<<20))
	dir, ballast := smallDisk(t, 16, 6, n.Kill)
	n.DataDir = filepath.Join(dir, "data")
	n.Start()
	c := harness.Dial(t, n)
	ctx := ctxT(t)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := harness.WaitReady(rctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "full", &raftqv1.QueueConfig{MaxMessageBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}

	// Fill: 8 messages of 16 KiB per call, until the node refuses. The
	// guard refuses before the disk is full as long as one write takes
	// less than the margin (bolt may take about four times an entry's
	// size while it rewrites a leaf); a write that still meets ENOSPC
	// gets the same ResourceExhausted, and changes nothing.
	const size, batch = 16 << 10, 8
	payload := func(i int) []byte {
		p := make([]byte, size)
		copy(p, fmt.Sprintf("m%06d", i))
		return p
	}
	idOf := func(p []byte) string { return string(p[:7]) }
	acked := map[string]bool{} // payload ids acknowledged
	var refusal error
	for i := 0; refusal == nil; i += batch {
		if i*size > 16<<20 {
			t.Fatalf("%d messages of 16 KiB accepted on a 16 MiB disk and no refusal", i)
		}
		msgs := make([]*raftqv1.EnqueueMessage, batch)
		for j := range msgs {
			msgs[j] = &raftqv1.EnqueueMessage{Payload: payload(i + j)}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Enqueue(cctx, "full", msgs...)
		cancel()
		switch {
		case err == nil:
			for _, m := range msgs {
				acked[idOf(m.Payload)] = true
			}
		case isDiskRefusal(err, "n1", n.DataDir):
			refusal = err
		default:
			t.Fatalf("enqueue %d: want success or the disk refusal, got %v", i, err)
		}
	}
	t.Logf("refused after %d messages: %v", len(acked), refusal)
	// 16 MiB, less 6 of ballast and 3 kept free: about 7 MiB of room.
	if len(acked)*size < 3<<20 {
		t.Fatalf("only %d messages of 128 KiB accepted before the refusal: the guard refuses too early", len(acked))
	}
	// Another write that adds data is refused the same way, and a new
	// queue too.
	if _, err := c.CreateQueue(ctx, "another", nil); !isDiskRefusal(err, "n1", n.DataDir) {
		t.Fatalf("create queue on a full disk: want the disk refusal, got %v", err)
	}

	// Reads go on.
	qi, err := c.GetQueue(ctx, "full", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := qi.Stats.Ready; got != int64(len(acked)) {
		t.Fatalf("GetQueue: %d ready, want the %d acknowledged", got, len(acked))
	}
	if qs, err := c.ListQueues(ctx, ""); err != nil || len(qs) != 2 { // full and its dead-letter queue
		t.Fatalf("ListQueues: %d queues, %v", len(qs), err)
	}
	if ds, err := c.Peek(ctx, "full", 5, false); err != nil || len(ds) != 5 {
		t.Fatalf("Peek: %d, %v", len(ds), err)
	}
	// Status answers, and shows the node's disk low once the node has
	// published it (it measures every second).
	harness.Eventually(t, 10*time.Second, func() error {
		st, err := statusOf(ctx, t, n)
		if err != nil {
			return err
		}
		if len(st.Nodes) != 1 || !st.Nodes[0].DiskLow {
			return fmt.Errorf("status does not show the node's disk low: %v", st.Nodes)
		}
		return nil
	})

	// Consumers drain: lease some and ack them.
	lctx, stopLease := context.WithCancel(ctx)
	ls := openLease(t, lctx, n, "full", 10)
	ds := recvN(t, ls, 10)
	refs := make([]*raftqv1.LeaseRef, len(ds))
	for i, d := range ds {
		refs[i] = refOf(d)
	}
	ar, err := raftqv1.NewBrokerClient(rawConn(t, n)).Ack(ctx, &raftqv1.AckRequest{Queue: "full", Acks: refs})
	if err != nil {
		t.Fatalf("ack on a full disk: %v", err)
	}
	for i, r := range ar.GetResults() {
		if !r.GetOk() {
			t.Fatalf("ack %d: %v", i, r)
		}
	}
	stopLease()
	for _, d := range ds {
		delete(acked, idOf(d.Payload))
	}

	// Every acknowledged message survives kill -9 and a restart.
	n.Kill()
	n.Start()
	rctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if err := harness.WaitReady(rctx2, c); err != nil {
		t.Fatal(err)
	}
	qi, err = c.GetQueue(ctx, "full", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := qi.Stats.Ready + qi.Stats.InFlight; got != int64(len(acked)) {
		t.Fatalf("after restart %d messages, want the %d acknowledged and not acked", got, len(acked))
	}
	// Each of them is delivered (at least once: this is not the test of
	// redelivery), and nothing else.
	lctx, stopLease = context.WithCancel(ctx)
	ls = openLease(t, lctx, n, "full", int32(len(acked)))
	for seen := map[string]bool{}; len(seen) < len(acked); {
		for _, d := range recvN(t, ls, 1) {
			id := idOf(d.Payload)
			if !acked[id] {
				t.Fatalf("after restart: delivery %s was never acknowledged, or was acked", id)
			}
			seen[id] = true
		}
	}
	stopLease()

	// Still refused, until space is freed: then writes succeed at once.
	if _, err := c.Enqueue(ctx, "full", &raftqv1.EnqueueMessage{Payload: payload(999998)}); !isDiskRefusal(err, "n1", n.DataDir) {
		t.Fatalf("after restart on a full disk: want the disk refusal, got %v", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "full", &raftqv1.EnqueueMessage{Payload: payload(999999)}); err != nil {
		t.Fatalf("enqueue after space was freed: %v", err)
	}
	if _, err := c.CreateQueue(ctx, "another", nil); err != nil {
		t.Fatalf("create queue after space was freed: %v", err)
	}
	// The node tells the others its disk is fine again.
	harness.Eventually(t, 10*time.Second, func() error {
		st, err := statusOf(ctx, t, n)
		if err != nil {
			return err
		}
		if st.Nodes[0].DiskLow {
			return errors.New("status still shows the disk low")
		}
		return nil
	})
}
