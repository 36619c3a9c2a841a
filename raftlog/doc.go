// Package raftlog is the Raft log and stable store of one Raft group on
// this node's disk: which store a data dir holds (raft-wal, or bolt for
// data dirs that began there) and opening it, converting an empty bolt
// log to the wal, repairing a wal left mid-rotation, and the wrappers
// every append and read goes through (per-entry checksums that find
// damage, bounded compaction, append timing, running out of disk, the
// snapshot watch's view of the log's end). It knows nothing of the group
// it stores: the cluster package composes these for its Raft instance.
// The layout of a data dir and the choices behind it are in
// cluster/DESIGN.md, "The log store".
package raftlog
