package membership

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// ClusterIDLen is the length of a cluster id (16 random bytes in hex, as
// package cluster makes them): the metadata's size check counts one.
const ClusterIDLen = 32

// Config is what this node advertises in gossip and how it joins. The
// node (package cluster) fills it from its own Config, defaults applied.
type Config struct {
	// NodeID is the memberlist node name (the Raft server id).
	NodeID string
	// GossipBind and GossipAdvertise: where memberlist listens and what
	// it advertises (default GossipBind).
	GossipBind, GossipAdvertise string
	// GRPCAdvertise, ClientGRPCAdvertise and HTTPAdvertise are the API
	// addresses advertised (ClientGRPCAdvertise: where clients are sent,
	// advertised only when it differs from GRPCAdvertise).
	GRPCAdvertise, ClientGRPCAdvertise, HTTPAdvertise string
	// BootstrapExpect, LogVersion, Version and MaxQueuedBytes are
	// advertised as they are (cluster.Config says what each is).
	BootstrapExpect int
	LogVersion      uint32
	Version         string
	MaxQueuedBytes  int64
	// Join lists the gossip addresses of other nodes, retried every
	// JoinRetry until one answers.
	Join      []string
	JoinRetry time.Duration
	// GossipKeys, when set, encrypt and authenticate gossip (the first
	// encrypts, every one is accepted).
	GossipKeys [][]byte
	// ClusterID returns the node's cluster id to advertise ("" for
	// none yet); nil: none.
	ClusterID func() string
	// ReconnectInterval, ReconnectMax and ReconnectTimeout pace the
	// re-joins of failed members (ReconnectLoop).
	ReconnectInterval, ReconnectMax, ReconnectTimeout time.Duration

	// Tests only: NoMux advertises no Raft port preambles (as a build
	// before the multiplexer); TuneGossip adjusts memberlist's config.
	NoMux      bool
	TuneGossip func(*memberlist.Config)
}

// clientGRPC is ClientGRPCAdvertise when it differs from GRPCAdvertise,
// else "" (the metadata then carries only GRPC).
func (c Config) clientGRPC() string {
	if c.ClientGRPCAdvertise == c.GRPCAdvertise {
		return ""
	}
	return c.ClientGRPCAdvertise
}
