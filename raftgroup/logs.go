package raftgroup

import (
	wal "github.com/hashicorp/raft-wal"

	"github.com/raftq/raftq/raftlog"
)

// LogReserveBytes is the space the Raft log may take on the disk at once:
// the wal allocates each segment file whole (64 MiB) when the one before
// fills, whatever the entry that filled it; bolt grows a page at a time
// (0). The disk guard keeps it free besides its margin, so that a node
// refusing writes still has room for the next segment, which the acks
// and settling it still takes may need.
func (g *Group) LogReserveBytes() int64 {
	if g.logs != nil && g.logs.Kind == raftlog.LogStoreWAL {
		return int64(wal.DefaultSegmentSize)
	}
	return 0
}

// LogStoreStats reports the latency of this node's log appends since it
// started.
func (g *Group) LogStoreStats() raftlog.LogStoreStats {
	if g.timedLogs == nil {
		return raftlog.LogStoreStats{}
	}
	return g.timedLogs.Stats()
}
