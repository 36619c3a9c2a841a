package transport

import (
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/meta"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// groupNamer is a request that names the Raft group it is about: the
// operator calls that describe one log (Status, Snapshot, Verify,
// Checkpoint, LocalDigest, ReportDivergence, TransferLeadership, Backup).
// A node runs one data group today; the field exists so that the issue
// that adds more groups changes no message.
type groupNamer interface{ GetGroup() string }

// checkGroup answers whether req names a group this node runs: no group
// (as before the field existed) or the data group's id. Anything else is
// NOT_FOUND, before the call is routed or forwarded, so it changes
// nothing anywhere.
func checkGroup(req any) error {
	g, ok := req.(groupNamer)
	if !ok {
		return nil
	}
	switch name := g.GetGroup(); name {
	case "", broker.GroupID:
		return nil
	default:
		return status.Errorf(codes.NotFound, "group %q: this cluster runs one data group, %q (and TransferLeadership also takes the meta group, %q, from log version 21)", name, broker.GroupID, meta.MetaGroupID)
	}
}
