package raftgroup

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/damage"
)

func TestVerifySnapshotsFindsDamage(t *testing.T) {
	cases := map[string]func(t *testing.T, snap string) string{
		"bit flipped": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotStateFile)
			damage.FlipBit(t, p, 54_321)
			return p
		},
		"range zeroed": func(t *testing.T, snap string) string {
			p := filepath.Join(snap, snapshotStateFile)
			damage.ZeroRange(t, p, 1000, 5000)
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
			damage.ZeroRange(t, p, 0, 8)
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

// snapshotFixture writes two snapshots through raft's store into dir.
func snapshotFixture(t *testing.T) (dir string, newest string) {
	t.Helper()
	data := t.TempDir()
	store, err := raft.NewFileSnapshotStoreWithLogger(data, SnapshotsRetained, hclog.NewNullLogger())
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
