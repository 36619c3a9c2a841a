package raftlog

import (
	"fmt"
	"strings"
	"time"
)

// Corruption is damage this node found in its own stored Raft state: a
// log entry or segment, or a snapshot, that fails its checksum or cannot
// be read. A node that finds one stops taking part in Raft (it neither
// votes nor serves) and waits to be removed by the leader and rebuilt
// from its peers (cluster/DESIGN.md, "Corrupt state").
type Corruption struct {
	// File is the damaged file (a wal segment, raft.db, a snapshot's
	// state.bin or meta.json).
	File string `json:"file"`
	// Offset is the byte offset in File where the damage was found, -1
	// when the check cannot tell (a whole-file CRC, a bolt page).
	Offset int64 `json:"offset"`
	// Index is the log index read, 0 when not an entry.
	Index uint64 `json:"index,omitempty"`
	// Reason says what failed.
	Reason string `json:"reason"`
	// At is when it was found.
	At time.Time `json:"at"`

	// Err is what failed, for errors.Is (not persisted).
	Err error `json:"-"`
}

func (c *Corruption) Error() string {
	var b strings.Builder
	b.WriteString("corrupt Raft state in ")
	b.WriteString(c.File)
	if c.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", c.Offset)
	}
	if c.Index > 0 {
		fmt.Fprintf(&b, " (log index %d)", c.Index)
	}
	b.WriteString(": ")
	b.WriteString(c.Reason)
	return b.String()
}

func (c *Corruption) Unwrap() error { return c.Err }

// KeyCurrentTerm is where hashicorp/raft keeps its current term in the
// stable store. It is part of raft's on-disk format (a raft.db written by
// one raft version is read by the next), so it does not change under us.
const KeyCurrentTerm = "CurrentTerm"
