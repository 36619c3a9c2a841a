package membership

import (
	"errors"
	"fmt"
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
	// Zone is the node's declared zone, advertised as it is ("" for
	// none; CheckZone says which names are valid).
	Zone string
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

// MaxZoneLen is the longest zone name: a DNS label's limit, which keeps
// the gossip metadata well inside memberlist.MetaMaxSize.
const MaxZoneLen = 63

// CheckZone reports whether zone is a valid zone name: empty (no zone),
// or a DNS-label-like name of 1 to MaxZoneLen lower-case letters, digits
// and '-', starting and ending with a letter or digit. Lower case only,
// so two nodes can never disagree over whether "EU-1" and "eu-1" are the
// same zone when replicas are spread over them.
func CheckZone(zone string) error {
	if zone == "" {
		return nil
	}
	if len(zone) > MaxZoneLen {
		return fmt.Errorf("zone %q: %d characters, at most %d", zone, len(zone), MaxZoneLen)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(zone); i++ {
		if c := zone[i]; !alnum(c) && c != '-' {
			return fmt.Errorf("zone %q: %w", zone, errZoneChars)
		}
	}
	if !alnum(zone[0]) || !alnum(zone[len(zone)-1]) {
		return fmt.Errorf("zone %q: %w", zone, errZoneChars)
	}
	return nil
}

var errZoneChars = errors.New("want lower-case letters, digits and '-', starting and ending with a letter or digit (like a DNS label)")
