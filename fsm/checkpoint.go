package fsm

import "github.com/raftq/raftq/fsm/state"

// Checkpoints pin the state they froze (copy-on-write keeps replaced
// messages and their payloads alive), so few are kept, each is dropped once
// the log has moved well past it, and its frozen state is let go as soon as
// its digest has been computed.
const (
	keepCheckpoints  = 2
	checkpointMaxAge = 50_000 // log entries
)

// checkpoints are the states frozen at Checkpoint commands, newest last,
// so every replica can report its digest at exactly that index. Guarded by
// the FSM's lock.
type checkpoints struct {
	list []*checkpointState
}

// checkpointState is a frozen state until its digest is known, then just
// the digest.
type checkpointState struct {
	index  uint64
	fr     *state.Frozen
	digest string
}

func (c *checkpoints) add(index uint64, fr *state.Frozen) {
	c.list = append(c.list, &checkpointState{index: index, fr: fr})
	if len(c.list) > keepCheckpoints {
		c.list = c.list[1:]
	}
}

// dropOld lets go of checkpoints far behind the applied index.
func (c *checkpoints) dropOld(applied uint64) {
	for len(c.list) > 0 && c.list[0].index+checkpointMaxAge < applied {
		c.list = c.list[1:]
	}
}

func (c *checkpoints) find(index uint64) *checkpointState {
	var out *checkpointState
	for _, cp := range c.list {
		if cp.index == index {
			out = cp
		}
	}
	return out
}
