package transport_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGroupField: every operator call that describes one Raft group
// takes a group field (issue 21). No group and "data" (the one data group
// a node runs) answer as before; another group is NOT_FOUND on any node,
// naming the group, before anything is routed, forwarded or changed.
func TestGroupField(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	l := c.WaitStable(20 * time.Second)
	var f *testcluster.Node
	for _, n := range c.Nodes {
		if n != l {
			f = n
		}
	}
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	backup := func(a raftqv1.ClusterClient, group string) (*raftqv1.BackupInfo, error) {
		s, err := a.Backup(ctx(), &raftqv1.BackupRequest{Group: group})
		if err != nil {
			return nil, err
		}
		first, err := s.Recv()
		if err != nil {
			return nil, err
		}
		for {
			if _, err := s.Recv(); errors.Is(err, io.EOF) {
				return first.GetInfo(), nil
			} else if err != nil {
				return nil, err
			}
		}
	}
	calls := []struct {
		name string
		call func(a raftqv1.ClusterClient, group string) error
	}{
		{"Status", func(a raftqv1.ClusterClient, g string) error {
			_, err := a.Status(ctx(), &raftqv1.StatusRequest{Group: g})
			return err
		}},
		{"Snapshot", func(a raftqv1.ClusterClient, g string) error {
			_, err := a.Snapshot(ctx(), &raftqv1.SnapshotRequest{Group: g})
			return err
		}},
		{"Checkpoint", func(a raftqv1.ClusterClient, g string) error {
			_, err := a.Checkpoint(ctx(), &raftqv1.CheckpointRequest{Group: g})
			return err
		}},
		{"Verify", func(a raftqv1.ClusterClient, g string) error {
			r, err := a.Verify(ctx(), &raftqv1.VerifyRequest{Group: g})
			if err == nil && !r.GetConsistent() {
				return errors.New("replicas not consistent")
			}
			return err
		}},
		{"LocalDigest", func(a raftqv1.ClusterClient, g string) error {
			cp, err := l.Admin.Checkpoint(ctx(), &raftqv1.CheckpointRequest{})
			if err != nil {
				return err
			}
			d, err := a.LocalDigest(ctx(), &raftqv1.LocalDigestRequest{Index: cp.GetIndex(), Group: g})
			if err == nil && d.GetDigest() == "" {
				return errors.New("no digest")
			}
			return err
		}},
		{"Backup", func(a raftqv1.ClusterClient, g string) error {
			info, err := backup(a, g)
			if err == nil && info.GetGroup() != "data" {
				return errors.New("backup info names group " + info.GetGroup())
			}
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			for _, g := range []string{"", "data"} {
				if err := tc.call(l.Admin, g); err != nil {
					t.Errorf("group %q: %v", g, err)
				}
			}
			for _, n := range []*testcluster.Node{l, f} {
				err := tc.call(n.Admin, "g7")
				if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), `"g7"`) || !strings.Contains(status.Convert(err).Message(), `"data"`) {
					t.Errorf("%s, group g7: %v, want NOT_FOUND naming g7 and data", n.ID, err)
				}
			}
		})
	}

	// Calls that change something change nothing for a group that is not
	// there: the leader stays, and no node is told it diverged.
	t.Run("TransferLeadership", func(t *testing.T) {
		_, err := f.Admin.TransferLeadership(ctx(), &raftqv1.TransferLeadershipRequest{Group: "g7"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("transfer in group g7: %v, want NOT_FOUND", err)
		}
		if now := c.WaitStable(20 * time.Second); now != l {
			t.Fatalf("leader moved from %s to %s on a refused transfer", l.ID, now.ID)
		}
	})
	t.Run("ReportDivergence", func(t *testing.T) {
		_, err := f.Admin.ReportDivergence(ctx(), &raftqv1.ReportDivergenceRequest{Index: 1, Digest: "00", LeaderId: l.ID, Group: "g7"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("divergence report for group g7: %v, want NOT_FOUND", err)
		}
		if _, err := f.Admin.Status(ctx(), &raftqv1.StatusRequest{}); err != nil {
			t.Fatalf("the follower stopped answering: %v", err)
		}
		if v, err := l.Admin.Verify(ctx(), &raftqv1.VerifyRequest{}); err != nil || !v.GetConsistent() {
			t.Fatalf("after a refused report: %v, %v", v, err)
		}
	})
}
