package broker

import (
	"fmt"
	"log/slog"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
)

// Recover rewrites the Raft configuration of a stopped node's data dir
// (cluster.RecoverCluster) with this build's state machine, which replays
// the node's snapshot and log into the snapshot the recovery writes. A
// snapshot or entry this build cannot apply fails it before anything is
// written.
func Recover(cfg cluster.RecoverConfig) (cluster.RecoverReport, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &guardedFSM{}
	g.FSM = fsm.New(fsm.Options{Logger: cfg.Logger.With("component", "fsm"), Fatal: func(err error) {
		if g.fatal == nil {
			g.fatal = err
		}
	}})
	return cluster.RecoverCluster(cfg, g)
}

// guardedFSM refuses to snapshot once the state machine met what it
// cannot apply: RecoverCluster then writes nothing.
type guardedFSM struct {
	*fsm.FSM
	fatal error // RecoverCluster runs on one goroutine
}

func (g *guardedFSM) Snapshot() (raft.FSMSnapshot, error) {
	if g.fatal != nil {
		return nil, fmt.Errorf("the node's state holds what this build cannot apply (%w): recover it with a build that can", g.fatal)
	}
	return g.FSM.Snapshot()
}
