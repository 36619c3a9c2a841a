package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	dir = harness.SmallTmpfs(t, sizeMiB, kill)
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
// without a restart. On each log store: the wal allocates its 64 MiB
// segment files whole, and the guard keeps the next one free besides its
// margin, so its disk is sized for two segments and room to spare.
func TestFullDiskRefusesWritesKeepsReadsAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		store               string
		diskMiB, ballastMiB int
		size                int // bytes per message
	}{
		{store: "bolt", diskMiB: 16, ballastMiB: 6, size: 16 << 10},
		// 96 MiB free beside the first segment: the node refuses once the
		// second is allocated (32 MiB left, below 3 + 64 MiB).
		{store: "wal", diskMiB: 400, ballastMiB: 240, size: 64 << 10},
	} {
		t.Run(tc.store, func(t *testing.T) { fullDisk(t, tc.store, tc.diskMiB, tc.ballastMiB, tc.size) })
	}
}

func fullDisk(t *testing.T, store string, diskMiB, ballastMiB, size int) {
	n := harness.TestNode(t, binary, "n1", "--min-free-disk-bytes", fmt.Sprint(3<<20), "--log-store", store)
	dir, ballast := smallDisk(t, diskMiB, ballastMiB, n.Kill)
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

	// Fill: 8 messages per call, until the node refuses. The guard
	// refuses before the disk is full as long as one write takes less
	// than the margin (bolt may take about four times an entry's size
	// while it rewrites a leaf; the wal a whole segment, which the guard
	// keeps free besides the margin); a write that still meets ENOSPC
	// gets the same ResourceExhausted, and changes nothing.
	const batch = 8
	payload := func(i int) []byte {
		p := make([]byte, size)
		copy(p, fmt.Sprintf("m%06d", i))
		return p
	}
	idOf := func(p []byte) string { return string(p[:7]) }
	acked := map[string]bool{} // payload ids acknowledged
	var refusal error
	for i := 0; refusal == nil; i += batch {
		if i*size > diskMiB<<20 {
			t.Fatalf("%d messages of %d KiB accepted on a %d MiB disk and no refusal", i, size>>10, diskMiB)
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
	// bolt: 16 MiB, less 6 of ballast and 3 kept free: about 7 MiB of
	// room. wal: the first segment's 64 MiB.
	if len(acked)*size < 3<<20 {
		t.Fatalf("only %d messages of %d KiB accepted before the refusal: the guard refuses too early", len(acked), size>>10)
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

// diskLowIn waits until node via's status shows exactly the nodes in want
// with their disk low.
func diskLowIn(t *testing.T, via *harness.Node, want ...string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := statusOf(ctx, t, via)
		if err != nil {
			return err
		}
		var low []string
		for _, nd := range st.Nodes {
			if nd.DiskLow {
				low = append(low, nd.Id)
			}
		}
		if fmt.Sprint(low) != fmt.Sprint(want) {
			return fmt.Errorf("nodes with their disk low: %v, want %v", low, want)
		}
		return nil
	})
}

// TestFullDiskOnFollowers: in a cluster of three, a follower whose disk is
// full to the last block does not stop writes (the other two are a
// quorum); when a second voter runs short too, writes that add data are
// refused with ResourceExhausted naming both while acks go on; once space
// is freed writes succeed again and every replica, the full one included,
// ends with the same state, nobody restarted. On each log store: the
// wal's full follower goes on appending into its preallocated segment,
// so enough is written to fill it, and its rotation to the next segment
// fails, until space returns.
func TestFullDiskOnFollowers(t *testing.T) {
	for _, tc := range []struct {
		store   string
		diskMiB int
	}{
		{store: "bolt", diskMiB: 24},
		{store: "wal", diskMiB: 320},
	} {
		t.Run(tc.store, func(t *testing.T) { fullDiskOnFollowers(t, tc.store, tc.diskMiB) })
	}
}

func fullDiskOnFollowers(t *testing.T, store string, diskMiB int) {
	nodes := make([]*harness.Node, 3)
	ballasts := map[string]string{}
	for i := range nodes {
		n := harness.TestNode(t, binary, fmt.Sprintf("n%d", i+1), "--min-free-disk-bytes", fmt.Sprint(4<<20), "--log-store", store)
		dir, ballast := smallDisk(t, diskMiB, 0, n.Kill)
		n.DataDir = filepath.Join(dir, "data")
		nodes[i], ballasts[n.ID] = n, ballast
	}
	flags := append(harness.JoinFlags(nodes), "--lease-grace", "2s")
	for _, n := range nodes {
		n.Args = append(n.Args, flags...)
		n.Start()
	}
	c := harness.Dial(t, nodes...)
	ctx := ctxT(t)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := harness.WaitReady(rctx, c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, c, nodes[0], 3)
	leader := leaderOf(t, nodes)
	var followers []*harness.Node
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	full, short := followers[0], followers[1]
	if _, err := c.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	enqueue := func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := c.Enqueue(cctx, "jobs", &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "m%d", i)})
		return err
	}

	// One follower full to the last block: writes go on.
	harness.FillDisk(t, ballasts[full.ID])
	diskLowIn(t, leader, full.ID)
	enqueued := 0
	for i := range 20 {
		if err := enqueue(i); err != nil {
			t.Fatalf("enqueue %d with one follower's disk full: %v", i, err)
		}
		enqueued++
	}
	const failedAppend = "cannot append to the Raft log: no space left"
	if store == "wal" {
		// Until its preallocated segment is full, the wal's follower
		// appends as before: write 64 MiB and more, 512 KiB a call.
		// (New messages each call: the client gives each message it
		// sends an id, and the same id again is a retry.)
		for sent := 0; !strings.Contains(full.Log(), failedAppend); sent += 512 << 10 {
			if sent > 160<<20 {
				t.Fatalf("%d MiB written and %s has not failed to append on its full disk", sent>>20, full.ID)
			}
			bulk := make([]*raftqv1.EnqueueMessage, 8)
			for j := range bulk {
				bulk[j] = &raftqv1.EnqueueMessage{Payload: make([]byte, 64<<10)}
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.Enqueue(cctx, "jobs", bulk...)
			cancel()
			if err != nil {
				t.Fatalf("enqueue with one follower's disk full, %d MiB in: %v", sent>>20, err)
			}
			enqueued += len(bulk)
		}
	}
	// The full follower really failed to append, and said why.
	harness.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(full.Log(), failedAppend) {
			return fmt.Errorf("%s has not logged its failed appends", full.ID)
		}
		return nil
	})

	// A second voter short of space (not full): no quorum has room.
	if store == "wal" {
		// The short follower has allocated its second segment (the bulk
		// writes reached it, and the rotation runs just after the append
		// that filled the first): the space measured next stays free.
		harness.Eventually(t, 10*time.Second, func() error {
			segs, _ := filepath.Glob(filepath.Join(short.DataDir, "wal", "*.wal"))
			full := 0
			for _, seg := range segs {
				if fi, err := os.Stat(seg); err == nil && fi.Size() >= 64<<20 {
					full++
				}
			}
			if full < 2 {
				return fmt.Errorf("%s has %d segment files allocated, want 2", short.ID, full)
			}
			return nil
		})
	}
	free, err := diskFree(short.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ballasts[short.ID], make([]byte, free-2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{full.ID, short.ID}
	slices.Sort(want)
	diskLowIn(t, leader, want...)
	err = enqueue(100)
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), strings.Join(want, ", ")) || !strings.Contains(st.Message(), "quorum") {
		t.Fatalf("enqueue with two of three voters short of disk: want ResourceExhausted naming %v and the quorum, got %v", want, err)
	}
	// Acks still commit (the leader and the short follower store them).
	lctx, stopLease := context.WithCancel(ctx)
	ds := recvN(t, openLease(t, lctx, leader, "jobs", 5), 5)
	refs := make([]*raftqv1.LeaseRef, len(ds))
	for i, d := range ds {
		refs[i] = refOf(d)
	}
	ar, err := raftqv1.NewBrokerClient(rawConn(t, leader)).Ack(ctx, &raftqv1.AckRequest{Queue: "jobs", Acks: refs})
	if err != nil {
		t.Fatalf("ack with two of three voters short of disk: %v", err)
	}
	for i, r := range ar.GetResults() {
		if !r.GetOk() {
			t.Fatalf("ack %d: %v", i, r)
		}
	}
	stopLease()

	// Space returns: writes succeed again, nobody restarted, and the full
	// follower catches up.
	for _, n := range want {
		if err := os.Remove(ballasts[n]); err != nil {
			t.Fatal(err)
		}
	}
	diskLowIn(t, leader)
	if err := enqueue(101); err != nil {
		t.Fatalf("enqueue after space was freed: %v", err)
	}
	enqueued++
	verifyConsistent(t, c, 3)
	if !strings.Contains(full.Log(), "appending to the Raft log works again") {
		t.Fatalf("%s caught up without logging that its appends work again:\n%s", full.ID, full.LogTail(4000))
	}
	qi, err := c.GetQueue(ctx, "jobs", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := qi.Stats.Ready + qi.Stats.InFlight; got != int64(enqueued-5) {
		t.Fatalf("%d messages in jobs, want %d acknowledged less 5 acked", got, enqueued)
	}
}

// diskFree is the space available on dir's file system.
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
