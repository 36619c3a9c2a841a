package host

import (
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/raftgroup"
)

// dataGroup is what the meta group reads of the node's data group
// (metagroup.DataGroup): its local state and its Raft configuration.
type dataGroup struct {
	fsm.Reader
	group *raftgroup.Group
}

func (d dataGroup) Servers() ([]raft.Server, error) { return raftgroup.LatestServers(d.group.Raft()) }
