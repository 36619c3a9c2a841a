package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/test/harness"
)

func TestEntryChecksum(t *testing.T) {
	l := &raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("hello"), AppendedAt: time.Now()}
	s := sealLog(l)
	if l.Extensions != nil {
		t.Fatal("sealLog changed the entry it was given (raft's LogCache holds it)")
	}
	got := *s
	if sealed, err := openLog(&got); !sealed || err != nil || got.Extensions != nil || string(got.Data) != "hello" {
		t.Fatalf("openLog of a sealed entry: sealed %v, err %v, %+v", sealed, err, got)
	}
	for _, mutate := range []func(*raft.Log){
		func(l *raft.Log) { l.Data = []byte("hellp") },
		func(l *raft.Log) { l.Index = 8 },
		func(l *raft.Log) { l.Term = 2 },
		func(l *raft.Log) { l.Type = raft.LogNoop },
		func(l *raft.Log) { l.Extensions = append(bytes.Clone(l.Extensions), 'x') },
	} {
		bad := *s
		bad.Data = bytes.Clone(s.Data)
		mutate(&bad)
		if _, err := openLog(&bad); err == nil {
			t.Fatalf("a changed entry passed its checksum: %+v", bad)
		}
	}
	old := &raft.Log{Index: 1, Data: []byte("written before checksums")}
	if sealed, err := openLog(old); sealed || err != nil {
		t.Fatalf("an entry without the envelope: sealed %v, err %v; want it passed as it is", sealed, err)
	}
}

// walFixture writes batches of entries to a wal with small segments (so
// some are sealed) through the checks, and closes it.
func walFixture(t *testing.T, batches int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	s := &checkedLogStore{LogStore: w, file: dir, onCorrupt: func(c *Corruption) { t.Errorf("corrupt while writing: %v", c) }}
	idx := uint64(1)
	for b := 0; b < batches; b++ {
		var logs []*raft.Log
		for range 8 {
			logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(idx)}, 200)})
			idx++
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// segments returns the wal's segment files, oldest first.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(files) < 2 {
		t.Fatalf("segments: %v, %v; want a sealed one and the tail", files, err)
	}
	sort.Strings(files)
	return files
}

// dataEnd is where the committed frames of a segment file end.
func dataEnd(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	end, _, _, c := (&segWalker{f: newWindowReader(f), size: fi.Size()}).walk(path)
	if c != nil || end <= walFileHeaderLen {
		t.Fatalf("walk %s: end %d, %v", path, end, c)
	}
	return end
}

func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func zeroRange(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyWALFindsDamage: raft-wal itself opens each of these damaged
// logs without complaint (a flipped bit before the tail's last batch, a
// range zeroed or a cut in the tail silently end the log early, losing
// acknowledged entries); the start-up check finds each, naming the file
// and the offset.
func TestVerifyWALFindsDamage(t *testing.T) {
	cases := []struct {
		name string
		// damage changes the wal in dir; the file it hits is returned.
		damage func(t *testing.T, segs []string) string
	}{
		{"bit flipped in a sealed segment", func(t *testing.T, segs []string) string {
			flipBit(t, segs[0], dataEnd(t, segs[0])/2)
			return segs[0]
		}},
		{"bit flipped in an early batch of the tail", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			flipBit(t, tail, walFileHeaderLen+(dataEnd(t, tail)-walFileHeaderLen)/4)
			return tail
		}},
		{"range zeroed in the middle of the tail", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			zeroRange(t, tail, dataEnd(t, tail)/3, 300)
			return tail
		}},
		{"tail cut short", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			if err := os.Truncate(tail, dataEnd(t, tail)/2); err != nil {
				t.Fatal(err)
			}
			return tail
		}},
		{"sealed segment cut short", func(t *testing.T, segs []string) string {
			if err := os.Truncate(segs[0], dataEnd(t, segs[0])/2); err != nil {
				t.Fatal(err)
			}
			return segs[0]
		}},
		{"bit flipped in the tail's last commit", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			flipBit(t, tail, dataEnd(t, tail)-2)
			return tail
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := walFixture(t, 60)
			if c := verifyWAL(dir); c != nil {
				t.Fatalf("a sound wal: %v", c)
			}
			file := tc.damage(t, segments(t, dir))
			c := verifyWAL(dir)
			if c == nil {
				t.Fatal("damage not found")
			}
			if c.File != file || c.Offset < 0 {
				t.Fatalf("found %v; want file %s and an offset", c, file)
			}
			t.Logf("found: %v", c)
		})
	}
}

// TestVerifyWALAcceptsTornTail: what a kill -9 during an append leaves (the
// batch's frames, no commit) is what raft-wal rolls back at open, not
// damage.
func TestVerifyWALAcceptsTornTail(t *testing.T) {
	dir := walFixture(t, 60)
	segs := segments(t, dir)
	tail := segs[len(segs)-1]
	end := dataEnd(t, tail)
	f, err := os.OpenFile(tail, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An entry frame of 16 bytes, no commit after it.
	frame := append([]byte{walFrameEntry, 0, 0, 0, 16, 0, 0, 0}, bytes.Repeat([]byte{7}, 16)...)
	if _, err := f.WriteAt(frame, end); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if c := verifyWAL(dir); c != nil {
		t.Fatalf("a torn last append taken for damage: %v", c)
	}
	w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if last, err := w.LastIndex(); err != nil || last != 60*8 {
		t.Fatalf("last index after the torn append: %d, %v; want %d", last, err, 60*8)
	}
}

// TestCheckedReadsFindDamageWhileRunning: a bit flipped, a range zeroed
// or the file cut under an open wal is found by the next read of an entry
// there, reported once, with the file and index; raft-wal alone returns
// the changed bytes as the entry.
func TestCheckedReadsFindDamageWhileRunning(t *testing.T) {
	for _, tc := range []string{"flip", "zero", "truncate"} {
		t.Run(tc, func(t *testing.T) {
			dir := walFixture(t, 60)
			w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var reports []*Corruption
			s := &checkedLogStore{LogStore: w, file: dir, onCorrupt: func(c *Corruption) { reports = append(reports, c) }}
			segs := segments(t, dir)
			tail := segs[len(segs)-1]
			end := dataEnd(t, tail)
			switch tc {
			case "flip":
				// Every byte of an entry's payload: flip one in each
				// of the first entries of the tail.
				for off := int64(walFileHeaderLen + 64); off < end; off += 4096 {
					flipBit(t, tail, off)
				}
			case "zero":
				zeroRange(t, tail, walFileHeaderLen, end-walFileHeaderLen)
			case "truncate":
				if err := os.Truncate(tail, walFileHeaderLen); err != nil {
					t.Fatal(err)
				}
			}
			first, _ := w.FirstIndex()
			last, _ := w.LastIndex()
			bad := 0
			for i := first; i <= last; i++ {
				var l raft.Log
				err := s.GetLog(i, &l)
				if err != nil {
					var c *Corruption
					if !errors.As(err, &c) || c.Index != i || c.File != dir {
						t.Fatalf("read %d: %v; want a Corruption naming the index and the wal", i, err)
					}
					bad++
					continue
				}
				if l.Index != i || len(l.Data) != 200 || l.Data[0] != byte(i) || l.Extensions != nil {
					t.Fatalf("read %d: a damaged entry passed: %+v", i, l)
				}
			}
			if bad == 0 || len(reports) != bad {
				t.Fatalf("%d corrupt reads, %d reports; want some, each reported", bad, len(reports))
			}
		})
	}
}

// snapshotFixture writes two snapshots through raft's store into dir.
func snapshotFixture(t *testing.T) (dir string, newest string) {
	t.Helper()
	data := t.TempDir()
	store, err := raft.NewFileSnapshotStoreWithLogger(data, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		sink, err := store.Create(raft.SnapshotVersionMax, 10*i, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(bytes.Repeat([]byte(fmt.Sprint(i)), 100_000)); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	metas, err := store.List()
	if err != nil || len(metas) != 2 {
		t.Fatalf("snapshots: %v, %v", metas, err)
	}
	dir = filepath.Join(data, "snapshots")
	return dir, filepath.Join(dir, metas[0].ID)
}

func TestVerifySnapshotsFindsDamage(t *testing.T) {
	cases := map[string]func(t *testing.T, snap string) string{
		"bit flipped": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotStateFile)
			flipBit(t, p, 54_321)
			return p
		},
		"range zeroed": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotStateFile)
			zeroRange(t, p, 1000, 5000)
			return p
		},
		"cut short": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotStateFile)
			if err := os.Truncate(p, 70_000); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"metadata damaged": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotMetaFile)
			zeroRange(t, p, 0, 8)
			return p
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir, newest := snapshotFixture(t)
			if c := verifySnapshots(dir, true); c != nil {
				t.Fatalf("sound snapshots: %v", c)
			}
			file := damage(t, newest)
			c := verifySnapshots(dir, true)
			if c == nil || c.File != file {
				t.Fatalf("found %v; want damage in %s", c, file)
			}
			if strings.HasSuffix(file, snapshotMetaFile) {
				if c := verifySnapshots(dir, false); c == nil {
					t.Fatal("damaged metadata not found by the metadata-only check")
				}
			}
		})
	}
}

// TestNodeQuarantinesCorruptState: a node restarted on a data dir whose
// wal segment or newest snapshot was damaged while it was stopped does
// not take part in Raft (before: it started on the damaged log, which
// raft-wal had silently cut short, or crashed applying it), says so in
// its status and gossip, and records it so that every later start does
// too, until its state is wiped for repair.
func TestNodeQuarantinesCorruptState(t *testing.T) {
	for _, target := range []string{"wal", "snapshot"} {
		t.Run(target, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(t, "solo", dir, 1)
			n := startNode(t, cfg)
			if _, err := n.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				if _, err := n.Apply(ctxTimeout(t, 5*time.Second), bytes.Repeat([]byte{byte(i)}, 300)); err != nil {
					t.Fatal(err)
				}
				if i == 100 {
					if _, err := n.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
						t.Fatal(err)
					}
				}
			}
			shutdown(t, n)

			var file string
			switch target {
			case "wal":
				files, _ := filepath.Glob(filepath.Join(cfg.DataDir, walDir, "*.wal"))
				sort.Strings(files)
				file = files[len(files)-1]
				zeroRange(t, file, dataEnd(t, file)/3, 500)
			case "snapshot":
				files, _ := filepath.Glob(filepath.Join(cfg.DataDir, "snapshots", "*", snapshotStateFile))
				if len(files) != 1 {
					t.Fatalf("snapshots: %v", files)
				}
				file = files[0]
				fi, _ := os.Stat(file)
				flipBit(t, file, fi.Size()/2)
			}

			for restart := range 2 {
				n = startNode(t, cfg)
				c := n.Corrupt()
				if c == nil || !n.Quarantined() {
					shutdown(t, n)
					t.Fatalf("start %d on damaged %s: not quarantined", restart, file)
				}
				if restart == 0 && c.File != file {
					t.Errorf("corruption names %s, want %s", c.File, file)
				}
				select {
				case <-n.CorruptFound():
				default:
					t.Error("CorruptFound not closed on a quarantined start")
				}
				st := n.Status()
				if len(st.Nodes) != 1 || st.Nodes[0].State != "corrupt" || st.Nodes[0].Healthy || !strings.Contains(st.Nodes[0].CorruptReason, filepath.Base(file)) {
					t.Errorf("status = %+v", st)
				}
				// It must never lead (nor serve what it holds).
				if li, err := n.WaitLeader(ctxTimeout(t, 3*testHeartbeat)); err == nil {
					t.Errorf("a quarantined node elected %+v", li)
				}
				if _, err := n.Apply(ctxTimeout(t, time.Second), []byte("x")); err == nil {
					t.Error("a quarantined node applied a command")
				}
				shutdown(t, n)
			}
			// The repair path sets the state aside, marker included: the
			// next start is a new member with no state.
			if err := RequestWipe(cfg.DataDir, "test repair"); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			defer shutdown(t, n)
			if n.Corrupt() != nil || n.Quarantined() {
				t.Fatalf("still corrupt after the wipe: %v", n.Corrupt())
			}
		})
	}
}

// TestRunningLeaderFindsCorruptLog: the leader's wal is damaged under it
// while it runs; a follower that was away needs those entries, and the
// leader's read of them (not in its cache) finds the damage: it stops Raft
// at once (no vote, no append from corrupt state: before, raft-wal handed
// the changed bytes to the follower as the entries), records the damage
// for its next start, and the other two elect a leader and go on.
func TestRunningLeaderFindsCorruptLog(t *testing.T) {
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]Config{}
	for _, id := range []string{"n1", "n2", "n3"} {
		cfgs[id] = testConfig(t, id, c.dir, 3)
		c.seeds = append(c.seeds, cfgs[id].GossipBind)
	}
	defer c.shutdownAll()
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(cfgs[id])
	}
	c.waitVoters(15*time.Second, "n1", "n2", "n3")
	l := c.leader()
	away := c.follower()
	if _, err := l.Apply(ctxTimeout(t, 5*time.Second), []byte("before")); err != nil {
		t.Fatal(err)
	}
	crash(t, away)
	// More than the log cache holds, so the leader reads them from disk.
	for i := range 3 * logCacheSize {
		if _, err := l.Apply(ctxTimeout(t, 5*time.Second), bytes.Repeat([]byte{byte(i)}, 300)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(l.cfg.DataDir, walDir, "*.wal"))
	sort.Strings(files)
	tail := files[len(files)-1]
	end := dataEnd(t, tail)
	for off := end / 10; off < end/2; off += 1000 {
		flipBit(t, tail, off)
	}
	start := time.Now()
	c.start(cfgs[away.ID()])
	harness.Eventually(t, 20*time.Second, harness.Holds("the leader finding its damaged log", func() bool { return l.Corrupt() != nil }))
	t.Logf("found %v after %v", l.Corrupt(), time.Since(start))
	if cr := l.Corrupt(); cr.File != filepath.Join(l.cfg.DataDir, walDir) || cr.Index == 0 {
		t.Errorf("corruption = %+v; want the wal and an index", cr)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("raft stopped on the damaged node", func() bool { return l.raft.State() == raft.Shutdown }))
	if m, err := readCorruptMarker(l.cfg.DataDir); err != nil || m == nil {
		t.Errorf("marker: %v, %v; want the damage recorded for the next start", m, err)
	}
	shutdown(t, l)
	// Leadership may change hands once more while the node that was
	// away catches up: an apply that lost it is tried on the next leader.
	var nl *testNode
	harness.Eventually(t, 30*time.Second, harness.Holds("the other two committing", func() bool {
		nl = c.leader()
		_, err := nl.Apply(ctxTimeout(t, 5*time.Second), []byte("after"))
		return err == nil && nl != l
	}))
	harness.Eventually(t, 20*time.Second, harness.Holds("the follower that was away caught up from the new leader", func() bool {
		return c.nodes[away.ID()].AppliedIndex() >= nl.AppliedIndex()
	}))
	// Restarted, it stays out until repaired.
	r := startNode(t, l.cfg)
	defer shutdown(t, r)
	if !r.Quarantined() {
		t.Fatal("restarted without quarantine")
	}
}
