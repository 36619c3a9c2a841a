package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// raftqCmd runs the binary with args and returns stdout, stderr and the
// error of the run (non-nil on a non-zero exit).
func raftqCmd(ctx context.Context, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func payloads(ds []*raftqv1.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Payload))
	}
	return out
}

// TestBackupAndRestore: a backup taken through a follower while leases are
// in flight and a DLQ holds messages restores into a fresh data dir; the
// node started there is a new cluster holding exactly the backed-up state
// (the digest every source replica reports at the backup's index; the
// same queues, settings, order, leases and dead letters), every message
// is deliverable, and a second node joins it. A damaged or truncated file
// and a non-empty data dir are refused, leaving nothing behind.
func TestBackupAndRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process backup and restore")
	}
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	jobsCfg := &raftqv1.QueueConfig{
		VisibilityTimeoutMs: 600_000, MaxDeliveries: 3, DedupWindowMs: 3_600_000, MaxDepth: 10_000,
		Throttles: map[string]*raftqv1.ThrottleRule{"api": {RatePerSec: 500, Burst: 20}},
	}
	if _, err := c.CreateQueue(ctx, "jobs", jobsCfg); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	var all []string // payloads of jobs that are deliverable now
	for i := range 40 {
		p := fmt.Sprintf("job-%02d", i)
		all = append(all, p)
		m := &raftqv1.EnqueueMessage{Payload: []byte(p), Priority: int32(i % 3), FairnessKey: fmt.Sprintf("tenant-%d", i%4), Weight: uint32(1 + i%2)}
		if _, err := c.Enqueue(ctx, "jobs", m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Enqueue(ctx, "jobs", &raftqv1.EnqueueMessage{Payload: []byte("later-1"), DelayMs: 3_600_000},
		&raftqv1.EnqueueMessage{Payload: []byte("later-2"), DelayMs: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueuePayloads(ctx, "other", []byte("o1"), []byte("o2")); err != nil {
		t.Fatal(err)
	}
	// Five leases in flight; two of them go to the DLQ. The stream stays
	// open past the backup, so its leases are held, not released.
	leader := leaderOf(t, nodes)
	// Limit: nacking returns credit, which must not bring more grants.
	stream, err := raftqv1.NewBrokerClient(rawConn(t, leader)).Lease(ctx, &raftqv1.LeaseRequest{Queue: "jobs", MaxInFlight: 5, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	held := recvN(t, stream, 5)
	for _, d := range held[:2] {
		res, err := c.Nack(ctx, "jobs", &raftqv1.NackItem{MessageId: d.Id, LeaseToken: d.LeaseToken, DeadLetter: true, Reason: "poison"})
		if err != nil || !res[0].Ok {
			t.Fatalf("nack to DLQ: %v %v", res, err)
		}
	}
	inFlight := held[2:]
	srcReady, err := c.Peek(ctx, "jobs", 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	srcDLQ, err := c.Peek(ctx, "jobs", 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	srcJobs, err := c.GetQueue(ctx, "jobs", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcReady) != 35 || len(srcDLQ) != 2 || srcJobs.Stats.InFlight != 3 || srcJobs.Stats.Delayed != 2 {
		t.Fatalf("source before the backup: %d ready, %d dead-lettered, stats %v", len(srcReady), len(srcDLQ), srcJobs.Stats)
	}

	// Save through a follower: the client follows its redirect.
	var follower *harness.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	file := filepath.Join(t.TempDir(), "state.backup")
	out := cli(t, ctx, follower, "backup", "save", file, "--json")
	sum := &raftqv1.BackupChunk{}
	if err := protojson.Unmarshal([]byte(out), sum); err != nil {
		t.Fatalf("backup save --json printed %q: %v", out, err)
	}
	if sum.Info.GetIndex() == 0 || sum.Info.NodeId != leader.ID || sum.Sha256 == "" || sum.Size == 0 {
		t.Fatalf("backup summary %v (leader %s)", sum, leader.ID)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Fatalf("the backup left files beside it: %v", entries)
	}
	// The checksum is the digest every source replica reports at the
	// backup's index.
	for _, n := range nodes {
		nd, err := raftqv1.NewClusterClient(rawConn(t, n)).LocalDigest(ctx, &raftqv1.LocalDigestRequest{Index: sum.Info.Index})
		if err != nil || nd.Digest != sum.Sha256 || !nd.CountersOk {
			t.Fatalf("%s at index %d: %v %v; the backup's SHA-256 is %s", n.ID, sum.Info.Index, nd, err, sum.Sha256)
		}
	}
	if _, err := c.EnqueuePayloads(ctx, "jobs", []byte("after-backup")); err != nil {
		t.Fatal(err)
	}

	// Refusals first (they must leave nothing), on copies of the file.
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := slices.Clone(good)
	damaged[len(damaged)/2] ^= 0x40
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"damaged":   {damaged, "damaged"},
		"truncated": {good[:len(good)-20], "truncated"},
		"not one":   {[]byte("hello\n"), "not an intact raftq backup"},
	} {
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "data")
		_, errOut, err := raftqCmd(ctx, "backup", "restore", f, "--data-dir", dir, "--node-id", "x")
		if err == nil || !strings.Contains(errOut, tc.want) {
			t.Fatalf("restore of a %s file: %v, stderr %q; want an error saying %q", name, err, errOut, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("a refused restore (%s) made the data dir: %v", name, err)
		}
	}

	// Restore into a fresh data dir and start a node there.
	r := harness.TestNode(t, binary, "restored")
	out = cli(t, ctx, follower, "backup", "restore", file, "--data-dir", r.DataDir, "--node-id", r.ID, "--raft-addr", r.Raft)
	if !strings.Contains(out, fmt.Sprintf("index %d", sum.Info.Index)) {
		t.Fatalf("restore printed %q", out)
	}
	_, errOut, err := raftqCmd(ctx, "backup", "restore", file, "--data-dir", r.DataDir, "--node-id", r.ID, "--raft-addr", r.Raft)
	if err == nil || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore over a restored dir: %v, stderr %q", err, errOut)
	}
	r.Start()
	rc := harness.Dial(t, r)
	if err := harness.WaitReady(ctx, rc); err != nil {
		t.Fatal(err)
	}
	nd, err := raftqv1.NewClusterClient(rawConn(t, r)).LocalDigest(ctx, &raftqv1.LocalDigestRequest{Index: sum.Info.Index})
	if err != nil || nd.Digest != sum.Sha256 || !nd.CountersOk {
		t.Fatalf("restored node at index %d: %v %v; want digest %s", sum.Info.Index, nd, err, sum.Sha256)
	}
	// The restored node's meta group is the backup's meta state, re-founded
	// with this node its only voter (the backup's were the source
	// cluster's), seeded from the start.
	harness.Eventually(t, 30*time.Second, func() error {
		m := statusAt(t, r).GetMeta()
		if !m.GetSeeded() || m.GetLeaderId() != r.ID || !slices.Equal(m.GetVoters(), []string{r.ID}) {
			return fmt.Errorf("restored node's meta group %v", m)
		}
		return nil
	})
	gotJobs, err := rc.GetQueue(ctx, "jobs", false)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotJobs.Config, srcJobs.Config) {
		t.Fatalf("restored config %v, source %v", gotJobs.Config, srcJobs.Config)
	}
	gs, ss := gotJobs.Stats, srcJobs.Stats
	if gs.Ready != ss.Ready || gs.Delayed != ss.Delayed || gs.InFlight != ss.InFlight || gs.DeadLettered != ss.DeadLettered || gs.EnqueuedTotal != ss.EnqueuedTotal {
		t.Fatalf("restored stats %v, source %v", gs, ss)
	}
	for _, dlq := range []bool{false, true} {
		got, err := rc.Peek(ctx, "jobs", 1000, dlq)
		if err != nil {
			t.Fatal(err)
		}
		want := srcReady
		if dlq {
			want = srcDLQ
		}
		if !slices.Equal(payloads(got), payloads(want)) {
			t.Fatalf("restored peek (dlq %v) %v, source %v", dlq, payloads(got), payloads(want))
		}
	}
	if q, err := rc.GetQueue(ctx, "other", false); err != nil || q.Stats.Ready != 2 {
		t.Fatalf("restored queue other: %v %v", q, err)
	}

	// Leases survived with their tokens: acked on the new cluster.
	res, err := rc.Ack(ctx, "jobs", refOf(inFlight[0]), refOf(inFlight[1]), refOf(inFlight[2]))
	if err != nil {
		t.Fatal(err)
	}
	for i, ir := range res {
		if !ir.Ok {
			t.Fatalf("ack of in-flight lease %d on the restored node: %v", i, ir)
		}
	}
	// Dead letters come back, and every message is delivered.
	if moved, err := rc.Redrive(ctx, "jobs", 0); err != nil || moved != 2 {
		t.Fatalf("redrive on the restored node: %d, %v", moved, err)
	}
	lease := openLease(t, ctx, r, "jobs", 100)
	got := recvN(t, lease, 37)
	for _, d := range got {
		if res, err := rc.Ack(ctx, "jobs", refOf(d)); err != nil || !res[0].Ok {
			t.Fatalf("ack %s: %v %v", d.Payload, res, err)
		}
	}
	delivered := append(payloads(got), payloads(inFlight)...)
	slices.Sort(delivered)
	if !slices.Equal(delivered, all) {
		t.Fatalf("delivered %v, want every job enqueued before the backup %v", delivered, all)
	}
	if q, err := rc.GetQueue(ctx, "jobs", false); err != nil || q.Stats.Ready != 0 || q.Stats.InFlight != 0 || q.Stats.Delayed != 2 || q.Stats.DeadLettered != 0 {
		t.Fatalf("restored jobs after draining: %v %v", q, err)
	}

	// More nodes join the restored cluster like any other.
	j := harness.TestNode(t, binary, "joiner", "--join", r.Gossip)
	j.Start()
	waitVoters(t, rc, r, 2)
	verifyConsistent(t, rc, 2)
}
