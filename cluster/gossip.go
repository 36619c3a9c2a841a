package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// nodeMeta is this node's memberlist metadata (JSON, at most
// memberlist.MetaMaxSize bytes).
type nodeMeta struct {
	ID     string `json:"id"`
	Raft   string `json:"raft"`
	GRPC   string `json:"grpc,omitempty"`
	HTTP   string `json:"http,omitempty"`
	Expect int    `json:"expect"`
	// State: the node has Raft state (bootstrapped, or replicated to), so
	// nobody that sees it may bootstrap a new cluster.
	State bool `json:"state,omitempty"`
	// Leaving: the node is shutting down gracefully; its coming departure
	// is a leave, not a failure.
	Leaving bool `json:"leaving,omitempty"`
	// LogVersion: the newest log version the node can apply. Builds before
	// it was advertised omit it; they count as version 1.
	LogVersion uint32 `json:"log_version,omitempty"`
}

// logVersion is the advertised log version, 1 if none is.
func (m nodeMeta) logVersion() uint32 { return max(m.LogVersion, 1) }

// leaveNotice is the prefix of the user message a leaving node sends to
// every member (besides setting Leaving in its metadata), followed by its id.
const leaveNotice = "raftq-leave:"

// memberState is a member's gossip state as this node last heard it.
type memberState int

const (
	memberAlive memberState = iota
	memberFailed
	memberLeft
)

func (s memberState) String() string {
	switch s {
	case memberAlive:
		return "alive"
	case memberFailed:
		return "failed"
	default:
		return "left"
	}
}

// member is the node's record of one gossip member. Records of failed and
// left members are kept (the reconciler needs their history).
type member struct {
	meta       nodeMeta
	metaOK     bool
	gossipAddr string
	state      memberState
	since      time.Time // of the last state change
	leaving    bool      // announced a graceful leave
	// noAdd: removed from Raft by an operator while alive; the reconciler
	// does not re-add it until it rejoins gossip.
	noAdd bool
}

// Member is one gossip member as this node sees it.
type Member struct {
	ID         string
	GRPCAddr   string
	RaftAddr   string
	HTTPAddr   string
	GossipAddr string
	Alive      bool
	// State is "alive", "failed" or "left".
	State string
	// LogVersion is the newest log version the member advertises (1 for a
	// build that advertises none; 0 while its metadata is unknown).
	LogVersion uint32
}

// localMeta is this node's current metadata.
func (n *Node) localMeta() nodeMeta {
	return nodeMeta{
		ID:         n.cfg.NodeID,
		Raft:       n.raftAddr,
		GRPC:       n.cfg.GRPCAdvertise,
		HTTP:       n.cfg.HTTPAdvertise,
		Expect:     n.cfg.BootstrapExpect,
		State:      n.hasState.Load(),
		Leaving:    n.leaving.Load(),
		LogVersion: n.cfg.LogVersion,
	}
}

// gossipDelegate implements memberlist.Delegate. Methods must not take n.mu
// while calling into memberlist and must not block.
type gossipDelegate Node

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	b, err := json.Marshal((*Node)(d).localMeta())
	if err != nil || len(b) > limit {
		// Checked in New; cannot happen with the same addresses.
		return nil
	}
	return b
}

func (d *gossipDelegate) NotifyMsg(b []byte) {
	n := (*Node)(d)
	s := string(b)
	if len(s) <= len(leaveNotice) || s[:len(leaveNotice)] != leaveNotice {
		return
	}
	id := s[len(leaveNotice):]
	n.mu.Lock()
	if m, ok := n.members[id]; ok {
		m.leaving = true
	}
	n.mu.Unlock()
}

func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// gossipEvents implements memberlist.EventDelegate.
type gossipEvents Node

func (e *gossipEvents) NotifyJoin(mn *memberlist.Node) {
	(*Node)(e).updateMember(mn, memberAlive, true)
}

func (e *gossipEvents) NotifyUpdate(mn *memberlist.Node) {
	(*Node)(e).updateMember(mn, memberAlive, false)
}

// NotifyLeave is called for both failures and graceful leaves; memberlist
// v0.5's Node.State does not tell them apart, so a leave is recognised by
// the Leaving flag or leave notice the node sent before it left.
func (e *gossipEvents) NotifyLeave(mn *memberlist.Node) {
	(*Node)(e).updateMember(mn, memberFailed, false)
}

func (n *Node) updateMember(mn *memberlist.Node, state memberState, joined bool) {
	var meta nodeMeta
	metaErr := json.Unmarshal(mn.Meta, &meta)
	now := time.Now()

	n.mu.Lock()
	m, ok := n.members[mn.Name]
	if !ok {
		m = &member{since: now, state: state}
		n.members[mn.Name] = m
	}
	if metaErr == nil {
		m.meta, m.metaOK = meta, true
		if meta.Leaving {
			m.leaving = true
		}
	} else if !m.metaOK {
		n.log.Warn("gossip member has unreadable metadata", "member", mn.Name, "err", metaErr)
	}
	m.gossipAddr = mn.Address()
	if state == memberFailed && m.leaving {
		state = memberLeft
	}
	if joined {
		// A (re)join starts afresh: a new process, not leaving, addable.
		m.leaving, m.noAdd = meta.Leaving, false
	}
	prev := m.state
	if m.state != state || joined {
		m.state, m.since = state, now
	}
	n.mu.Unlock()

	if prev != state || joined {
		n.log.Info("gossip member "+state.String(), "member", mn.Name, "addr", mn.Address())
	}
	notify(n.memberEv)
	notify(n.bootEv)
	n.membersChanged()
	n.lead.refresh() // the leader's metadata may have arrived or changed
}

// membersChanged wakes everyone waiting for a change of members or peers.
func (n *Node) membersChanged() {
	n.mu.Lock()
	close(n.membersCh)
	n.membersCh = make(chan struct{})
	n.mu.Unlock()
}

// Members returns this node's gossip view, sorted by id: every member it has
// heard of, including failed and left ones.
func (n *Node) Members() []Member {
	n.mu.Lock()
	out := make([]Member, 0, len(n.members))
	for id, m := range n.members {
		mm := Member{
			ID:         id,
			GRPCAddr:   m.meta.GRPC,
			RaftAddr:   m.meta.Raft,
			HTTPAddr:   m.meta.HTTP,
			GossipAddr: m.gossipAddr,
			Alive:      m.state == memberAlive,
			State:      m.state.String(),
		}
		if m.metaOK {
			mm.LogVersion = m.meta.logVersion()
		}
		out = append(out, mm)
	}
	n.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// memberMeta returns the last metadata heard from id.
func (n *Node) memberMeta(id string) (nodeMeta, bool) {
	if id == n.cfg.NodeID {
		return n.localMeta(), true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.members[id]
	if !ok || !m.metaOK {
		return nodeMeta{}, false
	}
	return m.meta, true
}

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// newMemberlist creates this node's memberlist (not yet joined).
func (n *Node) newMemberlist(ctx context.Context, hcl hclog.Logger) (*memberlist.Memberlist, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.NodeID
	host, port, err := splitHostPort(n.cfg.GossipBind)
	if err != nil {
		return nil, fmt.Errorf("gossip bind: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	if n.cfg.GossipAdvertise != "" {
		ahost, aport, err := splitHostPort(n.cfg.GossipAdvertise)
		if err != nil {
			return nil, fmt.Errorf("gossip advertise: %w", err)
		}
		ip, err := resolveIP(ctx, ahost)
		if err != nil {
			return nil, fmt.Errorf("gossip advertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ip.String(), aport
	}
	mc.Delegate = (*gossipDelegate)(n)
	mc.Events = (*gossipEvents)(n)
	mc.LogOutput = nil
	mc.Logger = hcl.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	if n.cfg.tuneGossip != nil {
		n.cfg.tuneGossip(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("memberlist: %w", err)
	}
	return ml, nil
}

// seeds returns the configured join addresses other than our own.
func (n *Node) seeds() []string {
	var out []string
	for _, s := range n.cfg.Join {
		if s == "" || s == n.gossipAddr || s == n.cfg.GossipBind || s == n.cfg.GossipAdvertise {
			continue
		}
		out = append(out, s)
	}
	return out
}

// tryJoin contacts the seeds once; it reports whether any answered.
func (n *Node) tryJoin() bool {
	seeds := n.seeds()
	if len(seeds) == 0 {
		return true
	}
	joined, err := n.ml.Join(seeds)
	if joined > 0 {
		n.log.Info("joined gossip", "contacted", joined, "seeds", seeds)
		return true
	}
	n.log.Warn("cannot reach any gossip seed yet; retrying", "seeds", seeds, "err", err)
	return false
}

// joinLoop retries the seeds until one answers or the node stops. joined is
// closed once a seed answered.
func (n *Node) joinLoop(joined chan<- struct{}) {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.joinRetry)
	defer t.Stop()
	for {
		if n.tryJoin() {
			close(joined)
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// bootstrapLoop waits until this node has Raft state, bootstrapping the
// cluster when BootstrapExpect servers without state see each other. On
// the way out it publishes State in the node's metadata.
//
// The configuration is deterministic: the BootstrapExpect alive servers
// with the lowest ids, all voters. Each of them calls BootstrapCluster with
// that identical configuration, which Raft allows; a server outside the set
// waits to be added by the leader. With more than one server the set must
// stay the same for bootstrapSettle first, so that views still converging
// after a join do not yield two different configurations.
func (n *Node) bootstrapLoop(joined <-chan struct{}) {
	defer n.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	warned := map[string]bool{}
	var pending string // founders seen last time, and since when
	var pendingSince time.Time
	for n.raft.LastIndex() == 0 {
		select {
		case <-joined: // with seeds configured, look at the cluster first
			conf, ok := n.founders(warned)
			key := fmt.Sprint(conf.Servers)
			switch {
			case !ok:
				pending = ""
			case key != pending && n.cfg.BootstrapExpect > 1:
				pending, pendingSince = key, time.Now()
			case key == pending && time.Since(pendingSince) < bootstrapSettle:
			default:
				if n.bootstrap(conf) {
					continue
				}
				pending = ""
			}
		default:
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.bootEv:
		case <-t.C:
		}
	}
	n.hasState.Store(true)
	n.publishMeta()
}

// publishMeta re-advertises this node's metadata. It never runs once the
// node is leaving: an update after memberlist's Leave would announce the
// node alive again.
func (n *Node) publishMeta() {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	if n.leaving.Load() {
		return
	}
	// The update is queued even if the wait for its broadcast times out.
	if err := n.ml.UpdateNode(time.Second); err != nil {
		n.log.Debug("publishing gossip metadata", "err", err)
	}
}

// founders returns the bootstrap configuration if the gossip view allows
// this node to bootstrap now: no member has state, and this node is among
// the BootstrapExpect alive servers with the lowest ids.
func (n *Node) founders(warned map[string]bool) (raft.Configuration, bool) {
	type cand struct{ id, raft string }
	var cands []cand
	n.mu.Lock()
	for id, m := range n.members {
		if id == n.cfg.NodeID || m.state != memberAlive || !m.metaOK || m.leaving {
			continue
		}
		if m.meta.State {
			n.mu.Unlock()
			return raft.Configuration{}, false // a cluster exists: wait to be added to it
		}
		if m.meta.Expect != n.cfg.BootstrapExpect {
			if !warned[id] {
				warned[id] = true
				n.log.Error("gossip member expects a different bootstrap size; not bootstrapping with it",
					"member", id, "its_expect", m.meta.Expect, "our_expect", n.cfg.BootstrapExpect)
			}
			continue
		}
		cands = append(cands, cand{id, m.meta.Raft})
	}
	n.mu.Unlock()
	cands = append(cands, cand{n.cfg.NodeID, n.raftAddr})
	if len(cands) < n.cfg.BootstrapExpect {
		return raft.Configuration{}, false
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].id < cands[j].id })
	cands = cands[:n.cfg.BootstrapExpect]
	if !slices.ContainsFunc(cands, func(c cand) bool { return c.id == n.cfg.NodeID }) {
		return raft.Configuration{}, false // not a founder: the leader will add us
	}
	var conf raft.Configuration
	for _, c := range cands {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(c.id), Address: raft.ServerAddress(c.raft)})
	}
	return conf, true
}

// bootstrap applies conf; it reports whether this node now has state.
func (n *Node) bootstrap(conf raft.Configuration) bool {
	err := n.raft.BootstrapCluster(conf).Error()
	switch {
	case err == nil:
		n.bootstraps.Add(1)
		n.log.Info("bootstrapped cluster", "servers", conf.Servers)
		return true
	case errors.Is(err, raft.ErrCantBootstrap):
		return true // state arrived from a leader meanwhile
	default:
		n.log.Error("bootstrap failed", "err", err)
		return false
	}
}

func splitHostPort(hostport string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hostport)
	}
	return host, port, nil
}

// resolveIP returns host as an IP, looking it up if it is a name (IPv4
// preferred).
func resolveIP(ctx context.Context, host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		if a.IP.To4() != nil {
			return a.IP, nil
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %q: no addresses", host)
	}
	return addrs[0].IP, nil
}
