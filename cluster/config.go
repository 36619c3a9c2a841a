package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultBootstrapExpect    = 1
	DefaultDeadNodeTimeout    = 30 * time.Second
	DefaultSnapshotThreshold  = raftgroup.DefaultSnapshotThreshold
	DefaultSnapshotInterval   = raftgroup.DefaultSnapshotInterval
	DefaultTrailingLogs       = raftgroup.DefaultTrailingLogs
	DefaultHeartbeatTimeout   = raftgroup.DefaultHeartbeatTimeout
	DefaultElectionTimeout    = raftgroup.DefaultElectionTimeout
	DefaultLeaderLeaseTimeout = raftgroup.DefaultLeaderLeaseTimeout
	DefaultPromoteAfter       = 3 * time.Second
	DefaultPromoteMaxLag      = 1024

	// lockFile is the data dir's lock (lockDataDir).
	lockFile = "lock"
	// defaultReconcileInterval is the leader's periodic resync of gossip
	// membership against the Raft configuration.
	defaultReconcileInterval = 5 * time.Second
	// defaultJoinRetry is the pause between attempts to reach the seeds.
	defaultJoinRetry = time.Second
	// defaultReconnectInterval is the first wait before re-joining a
	// failed gossip member, and the wait after a join that reached it;
	// the wait doubles up to defaultReconnectMax while it does not
	// answer. Members failed for defaultReconnectTimeout are no longer
	// tried (serf's default).
	defaultReconnectInterval = time.Second
	defaultReconnectMax      = 15 * time.Second
	defaultReconnectTimeout  = 24 * time.Hour
	// bootstrapSettle is how long the founder set must stay unchanged
	// before a multi-server bootstrap.
	bootstrapSettle = 500 * time.Millisecond
	// memberCheckTimeout bounds the leader's mTLS check of a member
	// before it is added as a voter.
	memberCheckTimeout = 5 * time.Second
	// leaveDrainTimeout bounds how long a leaving node waits to see itself
	// removed from the Raft configuration.
	leaveDrainTimeout = 5 * time.Second
)

// Config configures one node. Zero values mean the defaults documented on
// each field.
type Config struct {
	// NodeID is the node's unique, stable identity (Raft server ID and
	// memberlist node name). Required.
	NodeID string
	// DataDir holds the Raft stable store (raft.db, bolt, fsync on), the
	// Raft log (wal/, or in raft.db: see raftlog.LogStore) and the file snapshot
	// store (snapshots/, 2 retained). Required.
	DataDir string
	// raftlog.LogStore chooses the Raft log store of a data dir that holds no log
	// yet; default (raftlog.LogStoreAuto) raftlog.DefaultLogStore. A data dir holding a
	// log keeps its store, and a raftlog.LogStore naming the other one is refused
	// (raftlog.ErrLogStoreMismatch).
	LogStore raftlog.LogStore

	// GossipBind is the host:port memberlist listens on (TCP and UDP).
	// Required.
	GossipBind string
	// GossipAdvertise is the host:port other nodes gossip with; default
	// GossipBind.
	GossipAdvertise string
	// GRPCAdvertise and HTTPAdvertise are carried in gossip metadata so
	// other nodes can reach this node's API. Optional.
	GRPCAdvertise, HTTPAdvertise string
	// ClientGRPCAdvertise is the gRPC address clients are sent to (the
	// leader_addr of redirects, the addresses in Status), when it differs
	// from where peers reach the node: a port published by a container
	// runtime or a load balancer's. Default GRPCAdvertise.
	ClientGRPCAdvertise string

	// LogVersion is the newest replicated log format/semantics version this
	// binary can apply; it is advertised in gossip metadata so the leader
	// can raise the cluster's version once every voter supports it
	// (Node.VoterVersions). Default 1, which is also what a node that
	// advertises no version (an older build) counts as.
	LogVersion uint32

	// MaxQueuedBytes is this node's proposal for the cluster's
	// max_queued_bytes setting (its memory-derived --max-queued-bytes),
	// advertised in gossip: the leader that raises the cluster to the
	// version that makes it a setting starts it at the smallest voter's
	// (VoterVersions.MinMaxQueuedBytes). 0: no proposal.
	MaxQueuedBytes int64

	// Version names this node's build (release and commit), advertised in
	// gossip so Status can show what every node runs. Optional.
	Version string

	// Zone is the failure domain this node declares (--zone), advertised
	// in gossip and shown in Status, for placing group replicas across
	// zones (issue 22). Optional; membership.CheckZone says what is valid.
	Zone string

	// Join lists gossip addresses (host:port) of other nodes. Unreachable
	// seeds are retried in the background until one answers.
	Join []string
	// BootstrapExpect is the number of servers that must see each other,
	// none with Raft state, before the cluster bootstraps (default 1: a
	// single node bootstraps itself).
	BootstrapExpect int
	// DeadNodeTimeout is how long a failed (not left) member stays in the
	// Raft configuration before the leader removes it (default 30s). The
	// leader never removes a failed voter if that would leave fewer than
	// BootstrapExpect voters.
	DeadNodeTimeout time.Duration

	// SnapshotThreshold (default 8192 entries), SnapshotInterval (default
	// 120s) and TrailingLogs (default 10240) tune Raft log compaction: the
	// node snapshots once it has applied SnapshotThreshold entries past its
	// newest snapshot, at start-up too, and after each snapshot waits nine
	// times as long as it took, at least 1s and at most SnapshotInterval
	// (autosnap.go); TrailingLogs entries are kept behind each snapshot.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// Logger receives everything, including hashicorp/raft's and
	// memberlist's logs; default slog.Default().
	Logger *slog.Logger

	// PromoteAfter and PromoteMaxLag: a server the leader adds to the
	// configuration joins as a nonvoter, and is promoted to voter once its
	// applied index (as PeerProgress reports it) has stayed within
	// PromoteMaxLag entries of the leader's commit index for PromoteAfter
	// (defaults 3s and 1024 entries). Until then it takes the log and
	// counts toward no quorum. Servers a bootstrap names are voters from
	// the start.
	PromoteAfter  time.Duration
	PromoteMaxLag uint64
	// PeerProgress asks a node for its applied index, which
	// hashicorp/raft does not expose (the host asks the node's API,
	// peers.Pool.Progress). nil: a server the leader adds stays a
	// nonvoter.
	PeerProgress PeerProgress

	// Raft timing. Defaults (1s, 1s, 500ms) suit a small machine whose
	// nodes share cores and a disk; tests use shorter ones.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration

	// GossipKeys, when set, encrypts and authenticates gossip with
	// memberlist's keyring (AES-GCM): the first key encrypts, every key is
	// accepted, and a member without one of them cannot join. Each key is
	// 16, 24 or 32 bytes. Node.SetGossipKeys replaces them at run time.
	GossipKeys [][]byte

	// Test hooks (unexported: the package's own tests set them).
	reconcileInterval time.Duration
	joinRetry         time.Duration
	// reconnectInterval, reconnectMax and reconnectTimeout pace the
	// re-joins of failed gossip members (membership.Membership.ReconnectLoop).
	reconnectInterval time.Duration
	reconnectMax      time.Duration
	reconnectTimeout  time.Duration
	tuneGossip        func(*memberlist.Config)
	onLeadership      func(raftgroup.Leadership) // sees every published value, in order
	// noMux makes the node's Raft port behave as a build's before the
	// multiplexer in what others see: it advertises no preambles
	// (membership.Meta.Mux) and sends none.
	noMux bool
}

// withDefaults returns a copy of c with defaults filled in, or an error
// naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if strings.TrimSpace(c.NodeID) == "" {
		return c, errors.New("cluster: config: NodeID is required")
	}
	if strings.TrimSpace(c.NodeID) != c.NodeID || strings.ContainsAny(c.NodeID, "\r\n\x00") {
		// It is recorded on a line of its own in the data dir.
		return c, fmt.Errorf("cluster: config: NodeID %q has surrounding spaces or control characters", c.NodeID)
	}
	if c.DataDir == "" {
		return c, errors.New("cluster: config: DataDir is required")
	}
	if c.GossipBind == "" {
		return c, errors.New("cluster: config: GossipBind is required")
	}
	for name, addr := range map[string]string{
		"GossipBind": c.GossipBind, "GossipAdvertise": c.GossipAdvertise,
	} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return c, fmt.Errorf("cluster: config: %s %q: %w", name, addr, err)
		}
	}
	if _, err := raftlog.ParseLogStore(string(c.LogStore)); err != nil {
		return c, fmt.Errorf("cluster: config: %w", err)
	}
	if err := membership.CheckZone(c.Zone); err != nil {
		return c, fmt.Errorf("cluster: config: %w", err)
	}
	if c.BootstrapExpect < 0 {
		return c, fmt.Errorf("cluster: config: BootstrapExpect %d must not be negative", c.BootstrapExpect)
	}
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = DefaultBootstrapExpect
	}
	if c.LogVersion == 0 {
		c.LogVersion = 1
	}
	if c.DeadNodeTimeout <= 0 {
		c.DeadNodeTimeout = DefaultDeadNodeTimeout
	}
	// The Raft settings (snapshots, trailing logs, timeouts) pass to
	// raftgroup as they are; its Config fills their defaults.
	if c.PromoteAfter <= 0 {
		c.PromoteAfter = DefaultPromoteAfter
	}
	if c.PromoteMaxLag == 0 {
		c.PromoteMaxLag = DefaultPromoteMaxLag
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.reconcileInterval <= 0 {
		c.reconcileInterval = defaultReconcileInterval
	}
	if c.joinRetry <= 0 {
		c.joinRetry = defaultJoinRetry
	}
	if c.reconnectInterval <= 0 {
		c.reconnectInterval = defaultReconnectInterval
	}
	if c.reconnectMax <= 0 {
		c.reconnectMax = defaultReconnectMax
	}
	if c.reconnectTimeout <= 0 {
		c.reconnectTimeout = defaultReconnectTimeout
	}
	if c.ClientGRPCAdvertise == "" {
		c.ClientGRPCAdvertise = c.GRPCAdvertise
	}
	for i, k := range c.GossipKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return c, fmt.Errorf("cluster: config: gossip key %d is %d bytes, want 16, 24 or 32", i+1, n)
		}
	}
	c.Join = append([]string(nil), c.Join...)
	return c, nil
}

// membership is what the node's gossip is configured with (defaults
// applied); clusterID is the id it advertises.
func (c Config) membership(clusterID func() string) membership.Config {
	return membership.Config{
		NodeID: c.NodeID, GossipBind: c.GossipBind, GossipAdvertise: c.GossipAdvertise,
		GRPCAdvertise: c.GRPCAdvertise, ClientGRPCAdvertise: c.ClientGRPCAdvertise, HTTPAdvertise: c.HTTPAdvertise,
		BootstrapExpect: c.BootstrapExpect, LogVersion: c.LogVersion, Version: c.Version, MaxQueuedBytes: c.MaxQueuedBytes,
		Zone: c.Zone,
		Join: c.Join, JoinRetry: c.joinRetry, GossipKeys: c.GossipKeys, ClusterID: clusterID,
		ReconnectInterval: c.reconnectInterval, ReconnectMax: c.reconnectMax, ReconnectTimeout: c.reconnectTimeout,
		NoMux: c.noMux, TuneGossip: c.tuneGossip,
	}
}
