package fsm

import (
	"sync"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Proposals lets a leader's FSM skip decoding its own entries under the
// state lock. hashicorp/raft hands the leader's FSM the very slice the
// proposer passed to Apply, so a proposer that records slice → command
// before proposing lets ApplyBatch take the command instead of decoding
// the entry while every reader and the next batch wait.
//
// The recorded command is never the proposer's own object: Encode decodes
// the bytes it just encoded, in the proposer's goroutine, and records that
// private copy. The leader therefore applies exactly what every follower
// decodes from the same bytes (a nil list element arrives as an empty
// message on both; nothing is shared with a command the caller may still
// change), by construction rather than by the caller's care. It is not
// replicated state: the proposer owns it and hands it to New
// (Options.Proposals). The zero value is ready to use.
type Proposals struct {
	m sync.Map // *byte (first byte of the entry) → *fsmv1.Command
}

// Encode serialises cmd for raft.Apply and records, for this node's FSM,
// the command decoded back from those bytes. Call forget once the proposal
// has returned, whatever its outcome. On a nil *Proposals it only encodes.
func (p *Proposals) Encode(cmd *fsmv1.Command) (data []byte, forget func(), err error) {
	data, err = Encode(cmd)
	if err != nil {
		return nil, nil, err
	}
	if p == nil || len(data) == 0 {
		return data, func() {}, nil
	}
	own, err := Decode(data)
	if err != nil {
		return nil, nil, err
	}
	key := &data[0]
	p.m.Store(key, own)
	return data, func() { p.m.Delete(key) }, nil
}

// take returns the command recorded for data, if any, and forgets it.
func (p *Proposals) take(data []byte) (*fsmv1.Command, bool) {
	if p == nil || len(data) == 0 {
		return nil, false
	}
	cmd, ok := p.m.LoadAndDelete(&data[0])
	if !ok {
		return nil, false
	}
	return cmd.(*fsmv1.Command), true
}
