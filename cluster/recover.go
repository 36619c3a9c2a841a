package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/hclogslog"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
)

// RecoverConfig says how to rewrite a stopped node's Raft configuration
// after its cluster lost its quorum for good (RecoverCluster).
type RecoverConfig struct {
	DataDir string
	// Voters are the node ids of the new configuration, every one a
	// server of the node's latest configuration, this node among them.
	Voters []string
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	Logger *slog.Logger
}

// RecoverReport is what RecoverCluster found, and did.
type RecoverReport struct {
	NodeID string
	// LastIndex and LastTerm are the newest entry the node holds (log or
	// snapshot): everything up to it becomes committed.
	LastIndex, LastTerm uint64
	// Old and New are the configurations before and after.
	Old, New []raft.Server
}

// RecoverCluster rewrites the Raft configuration of the node whose data
// dir is cfg.DataDir, which must not be in use, to cfg.Voters: the way out
// of a lost quorum (hashicorp/raft's RecoverCluster, as Consul's and
// rqlite's peers.json). The node's state (its newest snapshot and every
// entry after it, committed or not) is replayed into fsm and written as a
// snapshot whose configuration is the new one; the log is emptied. Started
// again, a node alone in the new configuration elects itself. Entries the
// lost nodes held and this one did not are gone.
func RecoverCluster(cfg RecoverConfig, fsm raft.FSM) (RecoverReport, error) {
	var rep RecoverReport
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Voters) == 0 {
		return rep, errors.New("cluster: recover: no voters given")
	}
	nodeID, err := PersistedNodeID(cfg.DataDir)
	if err != nil {
		return rep, err
	}
	if nodeID == "" {
		return rep, fmt.Errorf("cluster: recover: %s records no node id (no %s file): not a raftq data dir, or one from a build before it", cfg.DataDir, nodeIDFile)
	}
	rep.NodeID = nodeID
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return rep, fmt.Errorf("%w: stop the node before recovering it", err)
	}
	defer unlock()

	hcl := hclogslog.New(cfg.Logger, "")
	logs, err := raftlog.Open(cfg.DataDir, raftlog.LogStoreAuto, hcl.Named("wal"))
	if err != nil {
		return rep, fmt.Errorf("cluster: recover: raft log: %w", err)
	}
	defer logs.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, raftgroup.SnapshotsRetained, hcl.Named("snapshots"))
	if err != nil {
		return rep, fmt.Errorf("cluster: recover: snapshot store: %w", err)
	}
	old, last, lastTerm, err := storedConfiguration(logs.Store, snaps)
	if err != nil {
		return rep, err
	}
	rep.Old, rep.LastIndex, rep.LastTerm = old.Servers, last, lastTerm

	var conf raft.Configuration
	for _, id := range cfg.Voters {
		i := slices.IndexFunc(old.Servers, func(s raft.Server) bool { return string(s.ID) == id })
		if i < 0 {
			return rep, fmt.Errorf("cluster: recover: %s is not a server of this node's configuration (%s)", id, describeServers(old.Servers))
		}
		if slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			return rep, fmt.Errorf("cluster: recover: %s is listed twice", id)
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: old.Servers[i].ID, Address: old.Servers[i].Address})
	}
	if !slices.Contains(cfg.Voters, nodeID) {
		return rep, fmt.Errorf("cluster: recover: this data dir is node %s's, which is not among the voters (%s): a node outside its own configuration never elects itself",
			nodeID, strings.Join(cfg.Voters, ","))
	}
	rep.New = conf.Servers
	if cfg.DryRun {
		return rep, nil
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(nodeID)
	rc.Logger = hcl.Named("raft")
	// The snapshot encodes peers through a transport; an in-memory one
	// encodes an address as itself, as the TCP one does.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	if err := raft.RecoverCluster(rc, fsm, logs.Store, logs.Stable, snaps, trans, conf); err != nil {
		return rep, fmt.Errorf("cluster: recover: %w", err)
	}
	cfg.Logger.Warn("recovered the Raft configuration", "node", nodeID, "voters", describeServers(conf.Servers), "last_index", last)
	return rep, nil
}

// storedConfiguration returns the latest configuration a node's stores
// hold (the newest configuration entry of its log, else its newest
// snapshot's) and its newest entry's index and term.
func storedConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (raft.Configuration, uint64, uint64, error) {
	metas, err := snaps.List()
	if err != nil {
		return raft.Configuration{}, 0, 0, fmt.Errorf("cluster: recover: list snapshots: %w", err)
	}
	var conf raft.Configuration
	var snapIndex, last, lastTerm uint64
	found := false
	if len(metas) > 0 {
		conf, snapIndex, last, lastTerm, found = metas[0].Configuration, metas[0].Index, metas[0].Index, metas[0].Term, true
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return conf, 0, 0, fmt.Errorf("cluster: recover: raft log: %w", err)
	}
	lastLog, err := logs.LastIndex()
	if err != nil {
		return conf, 0, 0, fmt.Errorf("cluster: recover: raft log: %w", err)
	}
	if lastLog > 0 {
		var e raft.Log
		if err := logs.GetLog(lastLog, &e); err != nil {
			return conf, 0, 0, fmt.Errorf("cluster: recover: read entry %d: %w", lastLog, err)
		}
		if lastLog > last {
			last, lastTerm = lastLog, e.Term
		}
		for i := lastLog; i >= max(first, 1) && i > snapIndex; i-- {
			if err := logs.GetLog(i, &e); err != nil {
				return conf, 0, 0, fmt.Errorf("cluster: recover: read entry %d: %w", i, err)
			}
			if e.Type == raft.LogConfiguration {
				conf, found = raft.DecodeConfiguration(e.Data), true
				break
			}
		}
	}
	if !found {
		return conf, 0, 0, errors.New("cluster: recover: the data dir holds no Raft state: nothing to recover")
	}
	return conf, last, lastTerm, nil
}

// RecoverWarning is what an operator must read before recovering.
func RecoverWarning(rep RecoverReport) string {
	return fmt.Sprintf(`WARNING: this rewrites node %s's Raft configuration from
  %s
to
  %s
Every entry this node holds (up to index %d, term %d) becomes committed. Entries
that only the lost nodes held are gone, acknowledged ones included: with the
majority lost, some acknowledged writes may exist only on their disks (an ack
may be undone, a message acked there may be delivered again, an enqueue may be
missing). Run it only on a stopped node whose peers are gone for good; nodes not
listed must join again with empty data dirs.`, rep.NodeID, describeServers(rep.Old), describeServers(rep.New), rep.LastIndex, rep.LastTerm)
}
