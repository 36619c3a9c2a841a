package test

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// beforeWAL is the last commit before the wal log store: a build that
// opens raft.db as its Raft log and stable store, and knows nothing of
// wal/.
const beforeWAL = "ed2e34bee62adbeb7b1f49eefe6cc4eb2e2c855e"

// TestOldBuildRefusesWALDataDir: a build from before the wal, started on
// a data dir whose Raft log is in the wal, stops at once, says why, and
// changes nothing in the dir; this build then starts on it again with
// every message there. (Were raft.db the wal's stable store, as it was
// before the marker, the old build would start from the snapshots and
// the term without the log: acknowledged messages gone, and a vote
// forgotten.)
func TestOldBuildRefusesWALDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier raftq")
	}
	oldBin := buildOld(t, beforeWAL, "the version before the wal")

	n := harness.TestNode(t, binary, "n1", "--log-store", "wal")
	n.Start()
	c := harness.Dial(t, n)
	ctx := ctxT(t)
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "down", nil); err != nil {
		t.Fatal(err)
	}
	const msgs = 50
	for i := range msgs {
		if _, err := c.Enqueue(ctx, "down", &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	n.Kill() // as a crash leaves it: the log's suffix is not in any snapshot
	if _, err := os.Stat(filepath.Join(n.DataDir, "wal")); err != nil {
		t.Fatalf("the node did not keep its log in the wal: %v", err)
	}
	before := dirDigest(t, n.DataDir)

	n.Args = n.Args[:len(n.Args)-2] // --log-store wal: unknown to the old build
	tail := runUntilExit(t, n, oldBin)
	if !strings.Contains(tail, "raft store") || !strings.Contains(tail, "invalid database") {
		t.Fatalf("the old build stopped without naming raft.db's refusal:\n%s", tail[max(0, len(tail)-4000):])
	}
	if after := dirDigest(t, n.DataDir); after != before {
		t.Fatalf("the old build changed the data dir:\nbefore %s\nafter  %s", before, after)
	}

	n.SetBin(binary)
	n.Start()
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	qi, err := c.GetQueue(ctx, "down", false)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Stats.Ready != msgs {
		t.Fatalf("%d messages after going back to this build, want %d", qi.Stats.Ready, msgs)
	}
}

// dirDigest lists the files under dir with a digest of each (the node's
// own log is written outside it).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s:%x ", rel, sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
