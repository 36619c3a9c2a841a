package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/test/harness"
)

// TestRestoreSnapshotStartsANewCluster: a data dir made by RestoreSnapshot
// starts a node that holds the snapshot's state, is the only voter, elects
// itself in a term after the snapshot's and takes writes after it; a
// second node joins it like any cluster. The restored dir is laid out for
// the log store asked for, which the node then runs on without being told.
func TestRestoreSnapshotStartsANewCluster(t *testing.T) {
	for _, ls := range []raftlog.LogStore{raftlog.LogStoreBolt, raftlog.LogStoreWAL} {
		t.Run(string(ls), func(t *testing.T) { restoreStartsANewCluster(t, ls) })
	}
}

func restoreStartsANewCluster(t *testing.T, ls raftlog.LogStore) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	cfg := testConfig(t, "r", dir, 1)
	data, _ := json.Marshal([]string{"x", "y"})
	rc := RestoreConfig{DataDir: cfg.DataDir, NodeID: "r", RaftAdvertise: cfg.RaftBind, Index: 42, Term: 9, LogStore: ls}
	var validated []byte
	err := RestoreSnapshot(context.Background(), rc, strings.NewReader(string(data)), func(r io.Reader) error {
		var err error
		validated, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(validated) != string(data) {
		t.Fatalf("validate saw %q", validated)
	}
	r := startNode(t, cfg)
	defer shutdown(t, r)
	// The wal reserves a segment on the disk, bolt nothing.
	kind := raftlog.LogStoreBolt
	if r.LogReserveBytes() > 0 {
		kind = raftlog.LogStoreWAL
	}
	if kind != ls {
		t.Fatalf("the restored node runs on the %s log store, want %s", kind, ls)
	}
	if _, err := r.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("restored node never led: %v", err)
	}
	if got := r.fsm.Entries(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("restored state %v", got)
	}
	if st := r.Status(); st.Term <= 9 || st.AppliedIndex < 42 {
		t.Fatalf("restored node at term %d (want > 9), applied %d (want >= 42)", st.Term, st.AppliedIndex)
	}
	if v := voters(r); !slices.Equal(v, []string{"r"}) {
		t.Fatalf("voters %v", v)
	}
	if _, err := r.Apply(ctxTimeout(t, 5*time.Second), []byte("z")); err != nil {
		t.Fatal(err)
	}

	jcfg := testConfig(t, "j", dir, 1)
	jcfg.Join = []string{r.GossipAddr()}
	j := startNode(t, jcfg)
	defer shutdown(t, j)
	harness.Eventually(t, 20*time.Second, harness.Holds("the joiner to be a voter with the state", func() bool {
		return len(voters(r)) == 2 && slices.Equal(j.fsm.Entries(), []string{"x", "y", "z"})
	}))
	shutdown(t, j)
	shutdown(t, r)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// TestRestoreSnapshotRefuses: a non-empty data dir is never touched, and a
// restore whose validation or input fails leaves nothing behind.
func TestRestoreSnapshotRefuses(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "raft.db"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := RestoreConfig{DataDir: full, NodeID: "r", RaftAdvertise: "127.0.0.1:7401", Index: 5, Term: 1}
	err := RestoreSnapshot(context.Background(), rc, strings.NewReader("[]"), nil)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a non-empty dir: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "raft.db")); string(b) != "keep" {
		t.Fatal("a refused restore changed the data dir")
	}

	bad := errors.New("bad state")
	for name, tc := range map[string]struct {
		pre      bool // the dir exists (empty) beforehand
		validate func(io.Reader) error
		input    string
	}{
		"validation fails, new dir":   {false, func(io.Reader) error { return bad }, "[]"},
		"validation fails, empty dir": {true, func(io.Reader) error { return bad }, "[]"},
		"input fails":                 {false, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "data")
			if tc.pre {
				if err := os.Mkdir(d, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			rc := RestoreConfig{DataDir: d, NodeID: "r", RaftAdvertise: "127.0.0.1:7401", Index: 5, Term: 1}
			var err error
			if tc.input == "" {
				err = RestoreSnapshot(context.Background(), rc, failingReader{bad}, nil)
			} else {
				err = RestoreSnapshot(context.Background(), rc, strings.NewReader(tc.input), tc.validate)
			}
			if !errors.Is(err, bad) {
				t.Fatalf("restore: %v, want %v", err, bad)
			}
			entries, statErr := os.ReadDir(d)
			if tc.pre && (statErr != nil || len(entries) != 0) {
				t.Fatalf("the empty dir holds %v after a failed restore (%v)", entries, statErr)
			}
			if !tc.pre && !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("a failed restore left the dir it made: %v", entries)
			}
		})
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// An advertised Raft host name stays a name in the restored configuration,
// as a normal start keeps it (raftmux.Listen): peers then resolve it at
// each dial, so a container recreated with another IP is still reached.
// An IP stays that IP.
func TestRestoreKeepsAdvertisedNames(t *testing.T) {
	for _, tc := range []struct{ advertise, want string }{
		{"localhost:7401", "localhost:7401"},
		{"127.0.0.1:7401", "127.0.0.1:7401"},
	} {
		t.Run(tc.advertise, func(t *testing.T) {
			dir := t.TempDir()
			rc := RestoreConfig{DataDir: dir, NodeID: "r", RaftAdvertise: tc.advertise, Index: 5, Term: 1}
			if err := RestoreSnapshot(context.Background(), rc, strings.NewReader("[]"), func(r io.Reader) error {
				_, err := io.Copy(io.Discard, r)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			snaps, err := raft.NewFileSnapshotStore(dir, raftgroup.SnapshotsRetained, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			metas, err := snaps.List()
			if err != nil || len(metas) != 1 {
				t.Fatalf("snapshots %v, %v; want the restored one", metas, err)
			}
			servers := metas[0].Configuration.Servers
			if len(servers) != 1 || servers[0].ID != "r" || string(servers[0].Address) != tc.want {
				t.Fatalf("restored configuration %+v; want r at %s", servers, tc.want)
			}
		})
	}
}
