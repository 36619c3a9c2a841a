package broker

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
)

func TestNextClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vv      cluster.VoterVersions
		current uint32
		want    uint32
		raise   bool
	}{
		{"every voter applies the newest", cluster.VoterVersions{Min: fsm.MaxLogVersion, Complete: true, Voters: 3}, 1, fsm.MaxLogVersion, true},
		{"one voter runs an old build", cluster.VoterVersions{Min: 1, Complete: true, Voters: 3}, 1, 1, false},
		{"a voter's metadata is not known yet", cluster.VoterVersions{Min: fsm.MaxLogVersion, Complete: false, Voters: 3}, 1, fsm.MaxLogVersion, false},
		{"voters newer than this build: capped", cluster.VoterVersions{Min: fsm.MaxLogVersion + 5, Complete: true, Voters: 3}, 1, fsm.MaxLogVersion, true},
		{"already there", cluster.VoterVersions{Min: fsm.MaxLogVersion, Complete: true, Voters: 3}, fsm.MaxLogVersion, fsm.MaxLogVersion, false},
		{"never lowered", cluster.VoterVersions{Min: 1, Complete: true, Voters: 3}, fsm.MaxLogVersion, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, raise := nextClusterVersion(tc.vv, tc.current)
			if got != tc.want || raise != tc.raise {
				t.Fatalf("nextClusterVersion = %d, %v; want %d, %v", got, raise, tc.want, tc.raise)
			}
		})
	}
}

// A node on its own is every voter: once it leads, the cluster version
// rises to what its build applies, and later entries carry that version.
func TestSingleNodeRaisesClusterVersion(t *testing.T) {
	b := startOne(t, nil)
	deadline := time.Now().Add(10 * time.Second)
	for b.State().Reader().ClusterVersion() != fsm.MaxLogVersion {
		if time.Now().After(deadline) {
			t.Fatalf("cluster version %d, want %d", b.State().Reader().ClusterVersion(), fsm.MaxLogVersion)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Operator().Checkpoint(ctx); err != nil {
		t.Fatalf("an entry proposed under version %d: %v", fsm.MaxLogVersion, err)
	}
}
