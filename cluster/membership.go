package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// leaveNotice is the prefix of the user message a leaving node sends to
// every member (besides setting Leaving in its metadata), followed by its id.
const leaveNotice = "raftq-leave:"

// membership owns this node's memberlist: its metadata, the table of
// members it has heard of (with their state history), joining the seeds,
// and the gossip half of a graceful leave. Methods are safe for concurrent
// use.
type membership struct {
	cfg      Config
	log      *slog.Logger
	raftAddr string
	ml       *memberlist.Memberlist
	addr     string // advertised gossip address
	// keyring is memberlist's (shared with it; safe for concurrent use),
	// nil when gossip is not encrypted.
	keyring *memberlist.Keyring
	// id is the node's cluster id (advertised); set before start.
	id *identity
	// onChange is called after every member update, with no lock held; set
	// before start.
	onChange []func()

	// authLeaves: only a leave announced over mutual TLS
	// (authenticatedLeave) counts; the Leaving flag and leave notices in
	// gossip, which anyone who can send gossip could forge, are ignored.
	authLeaves bool

	// run is this process's gossip run id (nodeMeta.Run).
	run string

	// started: the memberlist exists (start). Until then nothing is
	// published: memberlist reads the metadata when it is created (the
	// data group reports corruption found at its start before then).
	started  atomic.Bool
	metaMu   sync.Mutex // serialises metadata updates with leaving
	hasState atomic.Bool
	leaving  atomic.Bool
	diskLow  atomic.Bool
	// corrupt: this node found its Raft state corrupt (Node.Corrupt).
	corrupt atomic.Bool

	mu      sync.Mutex
	members map[string]*member
	changed chan struct{} // closed at the next change of members or peers
}

// newMembership checks that the node's metadata fits memberlist's limit;
// start creates the memberlist.
func newMembership(cfg Config, log *slog.Logger, raftAddr string, hasState, authLeaves bool) (*membership, error) {
	m := &membership{cfg: cfg, log: log, raftAddr: raftAddr, members: map[string]*member{}, changed: make(chan struct{}),
		authLeaves: authLeaves, run: newRunID()}
	m.hasState.Store(hasState)
	probe := m.localMeta()
	probe.State, probe.Leaving, probe.DiskLow, probe.Corrupt = true, true, true, true
	probe.ClusterID = strings.Repeat("0", clusterIDLen)
	if b, _ := json.Marshal(probe); len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip metadata is %d bytes, over memberlist's %d: shorten the node id or addresses", len(b), memberlist.MetaMaxSize)
	}
	return m, nil
}

// start creates the memberlist (not yet joined).
func (m *membership) start(ctx context.Context, hcl hclog.Logger) error {
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.NodeID
	host, port, err := splitHostPort(m.cfg.GossipBind)
	if err != nil {
		return fmt.Errorf("gossip bind: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	if m.cfg.GossipAdvertise != "" {
		ahost, aport, err := splitHostPort(m.cfg.GossipAdvertise)
		if err != nil {
			return fmt.Errorf("gossip advertise: %w", err)
		}
		ip, err := resolveIP(ctx, ahost)
		if err != nil {
			return fmt.Errorf("gossip advertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ip.String(), aport
	}
	if len(m.cfg.GossipKeys) > 0 {
		kr, err := memberlist.NewKeyring(m.cfg.GossipKeys[1:], m.cfg.GossipKeys[0])
		if err != nil {
			return fmt.Errorf("gossip keyring: %w", err)
		}
		mc.Keyring, m.keyring = kr, kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Delegate = &metaDelegate{m: m}
	mc.Events = &eventDelegate{m: m}
	mc.LogOutput = nil
	mc.Logger = hcl.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	if m.cfg.tuneGossip != nil {
		m.cfg.tuneGossip(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("memberlist: %w", err)
	}
	m.ml, m.addr = ml, ml.LocalNode().Address()
	m.started.Store(true)
	return nil
}

// setKeys makes keys the gossip keyring: keys[0] encrypts from now on,
// all of them are accepted, and keys not listed are dropped.
func (m *membership) setKeys(keys [][]byte) error {
	if m.keyring == nil {
		return errors.New("gossip encryption is off on this node: start it with a gossip key to use a keyring")
	}
	if len(keys) == 0 {
		return errors.New("no gossip key: turning encryption off needs a restart of every node")
	}
	kr := m.keyring
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("gossip keyring: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip keyring: %w", err)
	}
	for _, old := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip keyring: %w", err)
			}
		}
	}
	return nil
}

// localMeta is this node's current metadata.
func (m *membership) localMeta() nodeMeta {
	return nodeMeta{
		ID:         m.cfg.NodeID,
		Raft:       m.raftAddr,
		GRPC:       m.cfg.GRPCAdvertise,
		Client:     m.cfg.clientGRPC(),
		HTTP:       m.cfg.HTTPAdvertise,
		Expect:     m.cfg.BootstrapExpect,
		State:      m.hasState.Load(),
		Leaving:    m.leaving.Load(),
		LogVersion: m.cfg.LogVersion,
		Version:    m.cfg.Version,
		DiskLow:    m.diskLow.Load(),
		Corrupt:    m.corrupt.Load(),
		ClusterID:  m.id.get(),
		IDs:        true,
		Run:        m.run,
		Mux:        !m.cfg.noMux,

		MaxQueuedBytes: m.cfg.MaxQueuedBytes,
	}
}

// update records what memberlist reported of mn.
func (m *membership) update(mn *memberlist.Node, state memberState, joined bool) {
	var meta nodeMeta
	metaErr := json.Unmarshal(mn.Meta, &meta)
	now := time.Now()

	m.mu.Lock()
	rec, ok := m.members[mn.Name]
	if !ok {
		rec = &member{since: now, state: state}
		m.members[mn.Name] = rec
	}
	if metaErr == nil {
		if rec.metaOK && rec.meta.State && !meta.State {
			// It had Raft state and now has none: a new process on a
			// wiped data dir (a diverged replica repaired, transport's
			// replica.go), back faster than gossip noticed it gone. That
			// is a rejoin: addable again.
			joined = true
		}
		if rec.metaOK && rec.meta.Run != "" && meta.Run != "" && rec.meta.Run != meta.Run {
			// Another process on this id, back before gossip noticed the
			// old one gone (it refuted the suspicion: no join event): a
			// rejoin, so an operator's removal of the old process no
			// longer keeps it out (DESIGN.md, Reconciler). It has
			// announced no leave of its own.
			joined = true
			rec.leaving = false
		}
		rec.meta, rec.metaOK = meta, true
		if meta.Leaving && !m.authLeaves {
			rec.leaving = true
		}
	} else if !rec.metaOK {
		m.log.Warn("gossip member has unreadable metadata", "member", mn.Name, "err", metaErr)
	}
	rec.gossipAddr = mn.Address()
	if state == memberFailed && rec.leaving {
		state = memberLeft
	}
	if joined {
		// A (re)join starts afresh: a new process, not leaving, addable.
		// With authenticated leaves, the Leaving flag alone never makes a
		// member leaving, but a member that announced its leave over mTLS
		// and still advertises Leaving is the same process refuting a
		// false failure (memberlist declares a slow node dead; it comes
		// back alive): it is still leaving, else the leader would re-add
		// it and then keep it as a failed voter.
		rec.leaving = meta.Leaving && (!m.authLeaves || rec.leaving)
		rec.noAdd = false
	}
	prev := rec.state
	if rec.state != state || joined {
		rec.state, rec.since = state, now
	}
	m.mu.Unlock()

	if prev != state || joined {
		m.log.Info("gossip member "+state.String(), "member", mn.Name, "addr", mn.Address())
	}
	m.notifyChanged()
}

// notifyChanged wakes everything waiting for a change of members or peers.
func (m *membership) notifyChanged() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	for _, f := range m.onChange {
		f()
	}
}

// changes returns a channel closed at the next change of members or peers.
func (m *membership) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// leaveNoticeFrom records that id announced a graceful leave in gossip
// (ignored when leaves must be authenticated).
func (m *membership) leaveNoticeFrom(id string) {
	if m.authLeaves {
		return
	}
	m.mu.Lock()
	if rec, ok := m.members[id]; ok {
		rec.leaving = true
	}
	m.mu.Unlock()
}

// authenticatedLeave records that id announced its leave over mutual TLS
// (its node certificate named it): when gossip reports it gone, or if it
// already has, it has left rather than failed.
func (m *membership) authenticatedLeave(id string) {
	m.mu.Lock()
	rec, ok := m.members[id]
	if ok {
		rec.leaving = true
		if rec.state == memberFailed {
			rec.state, rec.since = memberLeft, time.Now()
		}
	}
	m.mu.Unlock()
	if ok {
		m.notifyChanged()
	}
}

// list returns the gossip view, sorted by id: every member heard of,
// including failed and left ones.
func (m *membership) list() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for id, rec := range m.members {
		mm := Member{
			ID:             id,
			GRPCAddr:       rec.meta.GRPC,
			ClientGRPCAddr: rec.meta.clientGRPC(),
			RaftAddr:       rec.meta.Raft,
			HTTPAddr:       rec.meta.HTTP,
			GossipAddr:     rec.gossipAddr,
			Alive:          rec.state == memberAlive,
			State:          rec.state.String(),
		}
		if rec.metaOK {
			mm.LogVersion = rec.meta.logVersion()
		}
		out = append(out, mm)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// meta returns the last metadata heard from id (this node's own for its
// id).
func (m *membership) meta(id string) (nodeMeta, bool) {
	if id == m.cfg.NodeID {
		return m.localMeta(), true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.members[id]
	if !ok || !rec.metaOK {
		return nodeMeta{}, false
	}
	return rec.meta, true
}

// apiAddrs returns where node id's API is, from its last metadata (this
// node's own for its id): grpc for peers, client for clients.
func (m *membership) apiAddrs(id string) (grpc, client string, ok bool) {
	meta, ok := m.meta(id)
	if !ok {
		return "", "", false
	}
	return meta.GRPC, meta.clientGRPC(), true
}

// preamblesAt reports whether the node at Raft address addr understands
// Raft port preambles: gossip knows a member there, and every member it
// knows there says so (an old record, of a build before the multiplexer
// at the same address, keeps the legacy opening, which every build
// takes).
func (m *membership) preamblesAt(addr raft.ServerAddress) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	found := false
	for _, rec := range m.members {
		if !rec.metaOK || rec.meta.Raft != string(addr) {
			continue
		}
		if !rec.meta.Mux {
			return false
		}
		found = true
	}
	return found
}

// snapshot returns a copy of the member table.
func (m *membership) snapshot() map[string]member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]member, len(m.members))
	for id, rec := range m.members {
		out[id] = *rec
	}
	return out
}

// preventAdd keeps id out of the configuration until it rejoins gossip.
func (m *membership) preventAdd(id string) {
	m.mu.Lock()
	if rec, ok := m.members[id]; ok {
		rec.noAdd = true
	}
	m.mu.Unlock()
}

// seeds returns the configured join addresses other than our own.
func (m *membership) seeds() []string {
	var out []string
	for _, s := range m.cfg.Join {
		if s == "" || s == m.addr || s == m.cfg.GossipBind || s == m.cfg.GossipAdvertise {
			continue
		}
		out = append(out, s)
	}
	return out
}

// tryJoin contacts the seeds once; it reports whether any answered.
func (m *membership) tryJoin() bool {
	seeds := m.seeds()
	if len(seeds) == 0 {
		return true
	}
	joined, err := m.ml.Join(seeds)
	if joined > 0 {
		m.log.Info("joined gossip", "contacted", joined, "seeds", seeds)
		return true
	}
	m.log.Warn("cannot reach any gossip seed yet; retrying", "seeds", seeds, "err", err)
	return false
}

// joinLoop retries the seeds until one answers or ctx ends. joined is
// closed once a seed answered.
func (m *membership) joinLoop(ctx context.Context, wg *sync.WaitGroup, joined chan<- struct{}) {
	defer wg.Done()
	t := time.NewTicker(m.cfg.joinRetry)
	defer t.Stop()
	for {
		if m.tryJoin() {
			close(joined)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconnectTry is when the reconnect loop tries a failed member next.
type reconnectTry struct {
	at    time.Time
	delay time.Duration
}

// reconnectLoop re-joins the members gossip declared failed (not those
// that left) until they are alive again or have been failed for
// reconnectTimeout, like serf's reconnect (DESIGN.md, "Gossip after a
// partition"). memberlist alone never does: it probes and push-pulls
// only live members and gossips to dead ones only while it has
// broadcasts queued, so after a partition longer than the suspicion
// timeout both sides keep each other dead for good. Each member is
// tried reconnectInterval after it failed, then with a doubling delay up
// to reconnectMax while nothing answers; a join that reached it but left
// it failed (memberlist ignores an alive at the incarnation it declared
// dead; the member refutes with a higher one during that join) is tried
// again after reconnectInterval.
func (m *membership) reconnectLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(m.cfg.reconnectInterval)
	defer t.Stop()
	tries := map[string]reconnectTry{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.reconnect(ctx, tries, time.Now())
	}
}

// reconnect makes one pass of reconnectLoop.
func (m *membership) reconnect(ctx context.Context, tries map[string]reconnectTry, now time.Time) {
	snap := m.snapshot()
	for id := range tries {
		if rec, ok := snap[id]; !ok || rec.state != memberFailed {
			delete(tries, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(snap)) {
		rec := snap[id]
		if id == m.cfg.NodeID || rec.state != memberFailed || rec.leaving || rec.gossipAddr == "" ||
			now.Sub(rec.since) > m.cfg.reconnectTimeout || m.leaving.Load() || ctx.Err() != nil {
			continue
		}
		try, ok := tries[id]
		if !ok {
			try = reconnectTry{at: rec.since.Add(m.cfg.reconnectInterval), delay: m.cfg.reconnectInterval}
		}
		if now.Before(try.at) {
			tries[id] = try
			continue
		}
		n, err := m.ml.Join([]string{rec.gossipAddr})
		if n > 0 {
			m.log.Info("reconnected to failed gossip member", "member", id, "addr", rec.gossipAddr,
				"failed_for", now.Sub(rec.since).Round(time.Millisecond))
			try.delay = m.cfg.reconnectInterval
		} else {
			m.log.Debug("reconnecting to failed gossip member", "member", id, "addr", rec.gossipAddr, "err", err)
			try.delay = min(2*try.delay, m.cfg.reconnectMax)
		}
		try.at = time.Now().Add(try.delay)
		tries[id] = try
	}
}

// markHasState publishes that this node has Raft state.
func (m *membership) markHasState() {
	m.hasState.Store(true)
	m.publishMeta()
}

// setDiskLow publishes whether this node's disk is low, if that changed.
func (m *membership) setDiskLow(low bool) {
	if m.diskLow.Swap(low) != low {
		m.publishMeta()
	}
}

// setCorrupt publishes that this node's Raft state is corrupt (why is in
// its own log and status: gossip metadata is small).
func (m *membership) setCorrupt(string) {
	if !m.corrupt.Swap(true) {
		m.publishMeta()
	}
}

// publishMeta re-advertises this node's metadata. It never runs once the
// node is leaving: an update after memberlist's Leave would announce the
// node alive again.
func (m *membership) publishMeta() {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	if m.leaving.Load() || !m.started.Load() {
		return
	}
	// The update is queued even if the wait for its broadcast times out.
	if err := m.ml.UpdateNode(time.Second); err != nil {
		m.log.Debug("publishing gossip metadata", "err", err)
	}
}

// leave announces a graceful leave: Leaving in the metadata (waiting for
// its broadcast), a direct notice to every live member, then memberlist's
// Leave. It is bounded by timeout; failures are logged.
func (m *membership) leave(timeout time.Duration) {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	m.leaving.Store(true)
	if timeout <= 0 {
		return
	}
	if err := m.ml.UpdateNode(timeout); err != nil {
		m.log.Warn("announcing leave in metadata", "err", err)
	}
	// Address peers from our own member table: the *Node values
	// memberlist.Members returns are mutated by its packet handler (a data
	// race under -race).
	for _, mm := range m.list() {
		if mm.ID == m.cfg.NodeID || !mm.Alive {
			continue
		}
		host, port, err := splitHostPort(mm.GossipAddr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil {
			continue
		}
		to := &memberlist.Node{Name: mm.ID, Addr: ip, Port: uint16(port)}
		if err := m.ml.SendReliable(to, []byte(leaveNotice+m.cfg.NodeID)); err != nil {
			m.log.Debug("sending leave notice", "to", mm.ID, "err", err)
		}
	}
	if err := m.ml.Leave(timeout); err != nil {
		m.log.Warn("gossip leave", "err", err)
	}
}

// shutdown stops memberlist (without a leave); safe on a node whose
// memberlist was never created, and more than once.
func (m *membership) shutdown() error {
	if m == nil || m.ml == nil {
		return nil
	}
	return m.ml.Shutdown()
}

// metaDelegate is the memberlist.Delegate: it serves this node's metadata
// and receives leave notices. Its methods must not block.
type metaDelegate struct{ m *membership }

func (d *metaDelegate) NodeMeta(limit int) []byte {
	b, err := json.Marshal(d.m.localMeta())
	if err != nil || len(b) > limit {
		// Checked in newMembership; cannot happen with the same addresses.
		return nil
	}
	return b
}

func (d *metaDelegate) NotifyMsg(b []byte) {
	s := string(b)
	if len(s) <= len(leaveNotice) || s[:len(leaveNotice)] != leaveNotice {
		return
	}
	d.m.leaveNoticeFrom(s[len(leaveNotice):])
}

func (d *metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *metaDelegate) LocalState(join bool) []byte                { return nil }
func (d *metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

// eventDelegate is the memberlist.EventDelegate: it feeds the member
// table.
type eventDelegate struct{ m *membership }

func (e *eventDelegate) NotifyJoin(mn *memberlist.Node) { e.m.update(mn, memberAlive, true) }

func (e *eventDelegate) NotifyUpdate(mn *memberlist.Node) { e.m.update(mn, memberAlive, false) }

// NotifyLeave is called for both failures and graceful leaves; memberlist
// v0.5's Node.State does not tell them apart, so a leave is recognised by
// the Leaving flag or leave notice the node sent before it left.
func (e *eventDelegate) NotifyLeave(mn *memberlist.Node) { e.m.update(mn, memberFailed, false) }

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// newRunID is a random id for this start of the process (nodeMeta.Run).
func newRunID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}
