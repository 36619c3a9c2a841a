package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
)

// clusterIDFile holds, in the data dir, the id of the cluster the node
// belongs to (see DESIGN.md, "Cluster identity"). Like node-id it stays
// when the Raft state is set aside for a repair: a repaired node comes
// back as a member of the same cluster.
const clusterIDFile = "cluster-id"

// clusterIDLen is the length of a cluster id: 16 random bytes in hex.
const clusterIDLen = 32

// newClusterID returns a fresh random cluster id.
func newClusterID() string {
	b := make([]byte, clusterIDLen/2)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// validClusterID reports whether s looks like a cluster id.
func validClusterID(s string) bool {
	if len(s) != clusterIDLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// PersistedClusterID returns the cluster id recorded in dataDir, or "" if
// none is (a new data dir, one whose node has not joined a cluster yet, or
// one from a build before cluster ids).
func PersistedClusterID(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, clusterIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: read cluster id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !validClusterID(id) {
		return "", fmt.Errorf("cluster: %s holds %q, not a cluster id", filepath.Join(dataDir, clusterIDFile), id)
	}
	return id, nil
}

// writeClusterID records id in dataDir: temp file, fsync, rename, fsync
// of the dir, so a crash leaves the old record or the new one.
func writeClusterID(dataDir, id string) error {
	if err := raftlog.WriteRecord(dataDir, clusterIDFile, id); err != nil {
		return fmt.Errorf("cluster: record cluster id: %w", err)
	}
	return nil
}

// identity is this node's cluster id: the one its data dir records, the
// one it made at bootstrap, or the one it took from the cluster it joins
// or follows. Methods are safe for concurrent use.
type identity struct {
	dir string
	log *slog.Logger
	// published is called after the id changed (re-advertise gossip
	// metadata); set before the node starts.
	published func()

	mu        sync.Mutex
	id        string
	persisted bool // id is what the data dir records
	// provisional: id is the one this founder made at bootstrap, not yet
	// the cluster's: each founder makes one and the first leader's wins,
	// so it is recorded only once this node leads (or replaced by the
	// leader's). Recorded at once, a founder stopped before it heard of
	// the leader kept an id no other node has, and, repaired later (its
	// Raft state set aside), asked to be added to the cluster under it
	// and was refused for good as another cluster's.
	provisional bool
}

func loadIdentity(dir string, log *slog.Logger) (*identity, error) {
	id, err := PersistedClusterID(dir)
	if err != nil {
		return nil, err
	}
	return &identity{dir: dir, log: log, id: id, persisted: id != ""}, nil
}

// get returns the node's cluster id ("" if it has none yet).
func (i *identity) get() string {
	if i == nil {
		return ""
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id
}

// set makes id the node's cluster id, recording it in the data dir if
// persist (a node with Raft state) and publishing it. why is logged.
func (i *identity) set(id string, persist bool, why string) error {
	i.mu.Lock()
	old, changed := i.id, i.id != id
	if !changed && (i.persisted || !persist) {
		i.mu.Unlock()
		return nil
	}
	i.id = id
	i.persisted = false
	i.provisional = false
	var err error
	if persist {
		if err = writeClusterID(i.dir, id); err == nil {
			i.persisted = true
		}
	}
	i.mu.Unlock()
	if changed {
		// A replacement is routine: the founders of a cluster each make
		// one, and take the first leader's.
		i.log.Info("cluster id: "+why, "cluster_id", id, "was", old)
		if i.published != nil {
			i.published()
		}
	}
	return err
}

// found makes id, made at bootstrap, this founder's provisional cluster
// id: presented in gossip, recorded once this node leads
// (Node.syncIdentity) or replaced by its leader's.
func (i *identity) found(id string) {
	i.mu.Lock()
	old := i.id
	i.id, i.persisted, i.provisional = id, false, true
	i.mu.Unlock()
	i.log.Info("cluster id: made at bootstrap (recorded once this node leads, or replaced by its leader's)", "cluster_id", id, "was", old)
	if i.published != nil {
		i.published()
	}
}

// isProvisional reports whether the id is a founder's, not yet the
// cluster's.
func (i *identity) isProvisional() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.provisional
}

// recorded reports whether the data dir records a cluster id.
func (i *identity) recorded() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.persisted
}

// persist records the current id, if any and not yet recorded (a joiner
// that now has Raft state).
func (i *identity) persist() error {
	i.mu.Lock()
	id, done := i.id, i.persisted || i.provisional
	i.mu.Unlock()
	if id == "" || done {
		return nil
	}
	return i.set(id, true, "recorded")
}

// admission decides whether a member that is not (at this address) in
// the Raft configuration may be added, given this node's cluster id ours.
// inConf: a server with its id is in the configuration (at another
// address). It returns "" to admit, else why not.
func admission(ours string, m membership.Meta, inConf bool) string {
	switch {
	case m.ClusterID == ours:
		return ""
	case m.ClusterID != "" && ours == "":
		return fmt.Sprintf("it presents cluster id %s and this node has none yet", m.ClusterID)
	case m.ClusterID != "":
		return fmt.Sprintf("it belongs to another cluster (%s; this is %s)", m.ClusterID, ours)
	case inConf:
		// A server of this configuration at a new address, of a build
		// that presents no id: admitted by its id, as before ids.
		return ""
	case m.IDs:
		return fmt.Sprintf("it presents no cluster id, so it was not started to join this cluster (bootstrap-expect %d): "+
			"a node joins a cluster when started with --join naming a member and --bootstrap-expect 1 or the cluster's", m.Expect)
	default:
		return "it runs an older build that presents no cluster id, and this cluster has one: upgrade it before it joins"
	}
}

// RefusedMember is a live gossip member this node would not add to the
// Raft configuration, and why (see DESIGN.md, "Cluster identity").
type RefusedMember struct {
	ID         string
	GossipAddr string
	// ClusterID is the cluster id it presents ("" for none).
	ClusterID string
	Reason    string
}

// refused lists the live members outside the configuration that this node
// would not admit, sorted by id.
func refused(ours, self string, members map[string]membership.Record, servers []raft.Server) []RefusedMember {
	var out []RefusedMember
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id == self || m.State != membership.Alive || !m.MetaOK || m.Leaving || m.Meta.Raft == "" {
			continue
		}
		i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
		if i >= 0 && string(servers[i].Address) == m.Meta.Raft {
			continue
		}
		if why := admission(ours, m.Meta, i >= 0); why != "" {
			out = append(out, RefusedMember{ID: id, GossipAddr: m.GossipAddr, ClusterID: m.Meta.ClusterID, Reason: why})
		}
	}
	return out
}

// joinable returns the cluster id a node without Raft state (and without
// an id of its own) should present to be added, from the members with
// state it sees: their one cluster id, if this node was started to join
// it (BootstrapExpect 1, or the BootstrapExpect of one of them). It
// returns "" and why not otherwise ("" and "" when no member with an id
// has state: an older cluster, or none yet).
func joinable(expect int, self string, members map[string]membership.Record) (string, string) {
	ids := map[string][]membership.Record{}
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id == self || m.State != membership.Alive || !m.MetaOK || !m.Meta.State || m.Meta.ClusterID == "" {
			continue
		}
		ids[m.Meta.ClusterID] = append(ids[m.Meta.ClusterID], m)
	}
	switch len(ids) {
	case 0:
		return "", ""
	case 1:
	default:
		return "", fmt.Sprintf("gossip shows members of %d clusters (%s): not joining any; give this node --join addresses of one cluster only",
			len(ids), strings.Join(slices.Sorted(maps.Keys(ids)), ", "))
	}
	for cid, ms := range ids {
		var names []string
		var theirs []int
		for _, m := range ms {
			if expect == 1 || m.Meta.Expect == expect {
				return cid, ""
			}
			names = append(names, m.Meta.ID)
			theirs = append(theirs, m.Meta.Expect)
		}
		return "", fmt.Sprintf("the members with state (%s, cluster %s) were started with bootstrap-expect %v and this node with %d, "+
			"so this node was not started to join them: it waits for the peers it expects; to join that cluster, start it with --bootstrap-expect 1",
			strings.Join(names, ", "), cid, theirs, expect)
	}
	return "", ""
}

// identityLoop keeps the cluster id in step with the cluster's leader
// while the node has Raft state: a leader without an id establishes one
// once every server of its configuration runs a build with ids (an
// upgraded cluster), a follower takes its leader's, and a node without
// an id and without a leader presents the one of the cluster it sees.
func (n *Node) identityLoop(ctx context.Context) {
	defer n.wg.Done()
	warned := map[string]bool{}
	for {
		l := n.g.Leadership()
		changes := n.ms.Changes()
		if n.ms.HasState() {
			n.syncIdentity(l, warned)
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Changed:
		case <-changes:
		}
	}
}

// syncIdentity makes one step of identityLoop.
func (n *Node) syncIdentity(l raftgroup.Leadership, warned map[string]bool) {
	ours := n.id.get()
	switch {
	case ours == "" && l.LeaderID == "":
		// A data dir from a build before ids, restarted while no leader
		// replicates to it (it may have been removed meanwhile, say when
		// it left during the upgrade): it presents the id of the cluster
		// it was started to join, as a new node does, to be admitted.
		cid, why := joinable(n.cfg.BootstrapExpect, n.cfg.NodeID, n.ms.Records())
		if why != "" && !warned[why] {
			warned[why] = true
			n.log.Warn("not taking the cluster id gossip shows: "+why, "bootstrap_expect", n.cfg.BootstrapExpect)
		}
		if cid != "" {
			_ = n.id.set(cid, false, "presenting the id of the cluster this node sees")
		}
	case l.Role == raftgroup.RoleLeader && l.Established && n.id.isProvisional():
		// The first leader's id wins: this founder's is the cluster's now.
		if err := n.id.set(ours, true, "established by this leader, made when it founded the cluster"); err != nil {
			n.log.Error("recording cluster id", "err", err)
		}
	case l.Role == raftgroup.RoleLeader && l.Established && ours == "":
		servers, err := raftgroup.LatestServers(n.r)
		if err != nil {
			return
		}
		// The configuration's slice is raft's own: sort a copy.
		servers = slices.SortedFunc(slices.Values(servers), func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
		taken := ""
		for _, s := range servers {
			if string(s.ID) == n.cfg.NodeID {
				continue
			}
			m, ok := n.ms.MetaOf(string(s.ID))
			if !ok || !m.IDs {
				return // an older build still serves: not yet (it could not present an id)
			}
			if taken == "" && validClusterID(m.ClusterID) {
				taken = m.ClusterID // the lowest server id's
			}
		}
		why := "established by this leader (every server runs a build with cluster ids)"
		if taken == "" {
			taken = newClusterID()
		} else {
			why = "established by this leader, from a server that has it"
		}
		if err := n.id.set(taken, true, why); err != nil {
			n.log.Error("recording cluster id", "err", err)
		}
	case l.LeaderID != "" && l.LeaderID != n.cfg.NodeID:
		m, ok := n.ms.MetaOf(l.LeaderID)
		if !ok || !validClusterID(m.ClusterID) {
			return
		}
		// (A no-op once recorded; records one it presented to be added.)
		// Raft names a leader only one that replicates to this node: the
		// node is in that leader's configuration, so in its cluster.
		if err := n.id.set(m.ClusterID, true, "taken from the leader "+l.LeaderID); err != nil {
			n.log.Error("recording cluster id", "err", err)
		}
	}
}

// ClusterID returns the id of the cluster this node belongs to ("" until
// it has one: see DESIGN.md, "Cluster identity").
func (n *Node) ClusterID() string { return n.id.get() }
