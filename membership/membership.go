package membership

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

	"github.com/raftq/raftq/internal/hostport"
)

// LeaveNotice is the prefix of the user message a leaving node sends to
// every member (besides setting Leaving in its metadata), followed by its id.
const LeaveNotice = "raftq-leave:"

// Membership owns this node's memberlist: its metadata, the table of
// members it has heard of (with their state history) and its change
// feed, joining the seeds, re-joining failed members, and the gossip half
// of a graceful leave. Methods are safe for concurrent use.
type Membership struct {
	cfg      Config
	log      *slog.Logger
	raftAddr string
	ml       *memberlist.Memberlist
	addr     string // advertised gossip address
	// keyring is memberlist's (shared with it; safe for concurrent use),
	// nil when gossip is not encrypted.
	keyring *memberlist.Keyring
	// onChange is called after every member update, with no lock held;
	// given to Start.
	onChange []func()

	// authLeaves: only a leave announced over mutual TLS
	// (authenticatedLeave) counts; the Leaving flag and leave notices in
	// gossip, which anyone who can send gossip could forge, are ignored.
	authLeaves bool

	// run is this process's gossip run id (Meta.Run).
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
	// leads: the data groups this node leads (SetLeads), sorted; the
	// prefix that fits is advertised (fitLeads).
	leads atomic.Pointer[[]string]
	// leadsCut: how many of leads the last advertisement left out (so
	// the cut is logged once per change of it).
	leadsCut atomic.Int64

	mu      sync.Mutex
	members map[string]*Record
	changed chan struct{} // closed at the next change of members or peers
}

// New checks that the node's metadata fits memberlist's limit; Start
// creates the memberlist. raftAddr is the node's advertised Raft address;
// hasState whether it has Raft state (SetHasState before Start when that
// is known later); authLeaves: only a leave announced over mutual TLS
// (AuthenticatedLeave) counts.
func New(cfg Config, log *slog.Logger, raftAddr string, hasState, authLeaves bool) (*Membership, error) {
	m := &Membership{cfg: cfg, log: log, raftAddr: raftAddr, members: map[string]*Record{}, changed: make(chan struct{}),
		authLeaves: authLeaves, run: newRunID()}
	m.hasState.Store(hasState)
	probe := m.localMeta()
	probe.State, probe.Leaving, probe.DiskLow, probe.Corrupt = true, true, true, true
	probe.ClusterID = strings.Repeat("0", ClusterIDLen)
	if b, _ := json.Marshal(probe); len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip metadata is %d bytes, over memberlist's %d: shorten the node id, addresses or zone", len(b), memberlist.MetaMaxSize)
	}
	return m, nil
}

// Start creates the memberlist (not yet joined: JoinLoop). onChange is
// called after every member update, with no lock held.
func (m *Membership) Start(ctx context.Context, hcl hclog.Logger, onChange ...func()) error {
	m.onChange = onChange
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.NodeID
	host, port, err := hostport.Split(m.cfg.GossipBind)
	if err != nil {
		return fmt.Errorf("gossip bind: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	if m.cfg.GossipAdvertise != "" {
		ahost, aport, err := hostport.Split(m.cfg.GossipAdvertise)
		if err != nil {
			return fmt.Errorf("gossip advertise: %w", err)
		}
		ip, err := hostport.ResolveIP(ctx, ahost)
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
	if m.cfg.TuneGossip != nil {
		m.cfg.TuneGossip(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("memberlist: %w", err)
	}
	m.ml, m.addr = ml, ml.LocalNode().Address()
	m.started.Store(true)
	return nil
}

// SetKeys makes keys the gossip keyring: keys[0] encrypts from now on,
// all of them are accepted, and keys not listed are dropped.
func (m *Membership) SetKeys(keys [][]byte) error {
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
func (m *Membership) localMeta() Meta {
	return Meta{
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
		ClusterID:  m.clusterID(),
		IDs:        true,
		Run:        m.run,
		Mux:        !m.cfg.NoMux,
		Zone:       m.cfg.Zone,
		Leads:      strings.Join(m.leadsNow(), ","),

		MaxQueuedBytes: m.cfg.MaxQueuedBytes,
	}
}

func (m *Membership) leadsNow() []string {
	if p := m.leads.Load(); p != nil {
		return *p
	}
	return nil
}

// SetLeads publishes the ids of the data groups this node leads, if they
// changed. What gossip carries is bounded by memberlist's 512-byte
// metadata limit: the ids that do not fit beside the rest of the
// metadata (group ids are short, "g1"…, so a few dozen fit) are left out
// from the end of the sorted list, logged, and a node looking for such a
// group's leader finds none in gossip (GroupLeader: ok false) and must
// ask one of its replicas.
func (m *Membership) SetLeads(ids []string) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if slices.Equal(ids, m.leadsNow()) {
		return
	}
	m.leads.Store(&ids)
	m.Publish()
}

// fitLeads cuts meta's Leads until its encoding fits limit, and reports
// the encoding and how many ids it left out.
func fitLeads(meta Meta, limit int) ([]byte, int, error) {
	ids := meta.LeadGroups()
	for n := len(ids); ; n-- {
		meta.Leads = strings.Join(ids[:n], ",")
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, 0, err
		}
		if len(b) <= limit || n == 0 {
			return b, len(ids) - n, nil
		}
	}
}

// GroupLeader is the node that advertises in gossip that it leads data
// group id, and where its API is; ok false when no live member does (no
// leader, or gossip has not caught up, or its list was cut). A stale
// claim (two nodes, one of them deposed a moment ago) resolves to the
// lowest node id; a call sent there is redirected as any call is.
func (m *Membership) GroupLeader(id string) (nodeID, apiAddr string, ok bool) {
	if slices.Contains(m.leadsNow(), id) {
		return m.cfg.NodeID, m.cfg.GRPCAdvertise, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mid := range slices.Sorted(maps.Keys(m.members)) {
		rec := m.members[mid]
		if rec.State == Alive && rec.MetaOK && slices.Contains(rec.Meta.LeadGroups(), id) {
			return mid, rec.Meta.GRPC, true
		}
	}
	return "", "", false
}

// update records what memberlist reported of mn.
func (m *Membership) update(mn *memberlist.Node, state MemberState, joined bool) {
	var meta Meta
	metaErr := json.Unmarshal(mn.Meta, &meta)
	now := time.Now()

	m.mu.Lock()
	rec, ok := m.members[mn.Name]
	if !ok {
		rec = &Record{Since: now, State: state}
		m.members[mn.Name] = rec
	}
	if metaErr == nil {
		if rec.MetaOK && rec.Meta.State && !meta.State {
			// It had Raft state and now has none: a new process on a
			// wiped data dir (a diverged replica repaired, transport's
			// replica.go), back faster than gossip noticed it gone. That
			// is a rejoin: addable again.
			joined = true
		}
		if rec.MetaOK && rec.Meta.Run != "" && meta.Run != "" && rec.Meta.Run != meta.Run {
			// Another process on this id, back before gossip noticed the
			// old one gone (it refuted the suspicion: no join event): a
			// rejoin, so an operator's removal of the old process no
			// longer keeps it out (DESIGN.md, Reconciler). It has
			// announced no leave of its own.
			joined = true
			rec.Leaving = false
		}
		rec.Meta, rec.MetaOK = meta, true
		if meta.Leaving && !m.authLeaves {
			rec.Leaving = true
		}
	} else if !rec.MetaOK {
		m.log.Warn("gossip member has unreadable metadata", "member", mn.Name, "err", metaErr)
	}
	rec.GossipAddr = mn.Address()
	if state == Failed && rec.Leaving {
		state = Left
	}
	if joined {
		// A (re)join starts afresh: a new process, not leaving, addable.
		// With authenticated leaves, the Leaving flag alone never makes a
		// member leaving, but a member that announced its leave over mTLS
		// and still advertises Leaving is the same process refuting a
		// false failure (memberlist declares a slow node dead; it comes
		// back alive): it is still leaving, else the leader would re-add
		// it and then keep it as a failed voter.
		rec.Leaving = meta.Leaving && (!m.authLeaves || rec.Leaving)
		rec.NoAdd = false
	}
	prev := rec.State
	if rec.State != state || joined {
		rec.State, rec.Since = state, now
	}
	m.mu.Unlock()

	if prev != state || joined {
		m.log.Info("gossip member "+state.String(), "member", mn.Name, "addr", mn.Address())
	}
	m.NotifyChanged()
}

// NotifyChanged wakes everything waiting for a change of members or peers.
func (m *Membership) NotifyChanged() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	for _, f := range m.onChange {
		f()
	}
}

// Changes returns a channel closed at the next change of members or peers.
func (m *Membership) Changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// leaveNoticeFrom records that id announced a graceful leave in gossip
// (ignored when leaves must be authenticated).
func (m *Membership) leaveNoticeFrom(id string) {
	if m.authLeaves {
		return
	}
	m.mu.Lock()
	if rec, ok := m.members[id]; ok {
		rec.Leaving = true
	}
	m.mu.Unlock()
}

// AuthenticatedLeave records that id announced its leave over mutual TLS
// (its node certificate named it): when gossip reports it gone, or if it
// already has, it has left rather than failed.
func (m *Membership) AuthenticatedLeave(id string) {
	m.mu.Lock()
	rec, ok := m.members[id]
	if ok {
		rec.Leaving = true
		if rec.State == Failed {
			rec.State, rec.Since = Left, time.Now()
		}
	}
	m.mu.Unlock()
	if ok {
		m.NotifyChanged()
	}
}

// List returns the gossip view, sorted by id: every member heard of,
// including failed and left ones.
func (m *Membership) List() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for id, rec := range m.members {
		mm := Member{
			ID:             id,
			GRPCAddr:       rec.Meta.GRPC,
			ClientGRPCAddr: rec.Meta.ClientGRPC(),
			RaftAddr:       rec.Meta.Raft,
			HTTPAddr:       rec.Meta.HTTP,
			GossipAddr:     rec.GossipAddr,
			Alive:          rec.State == Alive,
			State:          rec.State.String(),
		}
		if rec.MetaOK {
			mm.LogVersion = rec.Meta.EffectiveLogVersion()
		}
		out = append(out, mm)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// MetaOf returns the last metadata heard from id (this node's own for its
// id).
func (m *Membership) MetaOf(id string) (Meta, bool) {
	if id == m.cfg.NodeID {
		return m.localMeta(), true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.members[id]
	if !ok || !rec.MetaOK {
		return Meta{}, false
	}
	return rec.Meta, true
}

// APIAddrs returns where node id's API is, from its last metadata (this
// node's own for its id): grpc for peers, client for clients.
func (m *Membership) APIAddrs(id string) (grpc, client string, ok bool) {
	meta, ok := m.MetaOf(id)
	if !ok {
		return "", "", false
	}
	return meta.GRPC, meta.ClientGRPC(), true
}

// PreamblesAt reports whether the node at Raft address addr understands
// Raft port preambles: gossip knows a member there, and every member it
// knows there says so (an old record, of a build before the multiplexer
// at the same address, keeps the legacy opening, which every build
// takes).
func (m *Membership) PreamblesAt(addr raft.ServerAddress) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	found := false
	for _, rec := range m.members {
		if !rec.MetaOK || rec.Meta.Raft != string(addr) {
			continue
		}
		if !rec.Meta.Mux {
			return false
		}
		found = true
	}
	return found
}

// Records returns a copy of the member table.
func (m *Membership) Records() map[string]Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Record, len(m.members))
	for id, rec := range m.members {
		out[id] = *rec
	}
	return out
}

// PreventAdd keeps id out of the configuration until it rejoins gossip.
func (m *Membership) PreventAdd(id string) {
	m.mu.Lock()
	if rec, ok := m.members[id]; ok {
		rec.NoAdd = true
	}
	m.mu.Unlock()
}

// seeds returns the configured join addresses other than our own.
func (m *Membership) seeds() []string {
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
func (m *Membership) tryJoin() bool {
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

// JoinLoop retries the seeds until one answers or ctx ends. joined is
// closed once a seed answered.
func (m *Membership) JoinLoop(ctx context.Context, wg *sync.WaitGroup, joined chan<- struct{}) {
	defer wg.Done()
	t := time.NewTicker(m.cfg.JoinRetry)
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

// ReconnectLoop re-joins the members gossip declared failed (not those
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
func (m *Membership) ReconnectLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(m.cfg.ReconnectInterval)
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
func (m *Membership) reconnect(ctx context.Context, tries map[string]reconnectTry, now time.Time) {
	snap := m.Records()
	for id := range tries {
		if rec, ok := snap[id]; !ok || rec.State != Failed {
			delete(tries, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(snap)) {
		rec := snap[id]
		if id == m.cfg.NodeID || rec.State != Failed || rec.Leaving || rec.GossipAddr == "" ||
			now.Sub(rec.Since) > m.cfg.ReconnectTimeout || m.leaving.Load() || ctx.Err() != nil {
			continue
		}
		try, ok := tries[id]
		if !ok {
			try = reconnectTry{at: rec.Since.Add(m.cfg.ReconnectInterval), delay: m.cfg.ReconnectInterval}
		}
		if now.Before(try.at) {
			tries[id] = try
			continue
		}
		n, err := m.ml.Join([]string{rec.GossipAddr})
		if n > 0 {
			m.log.Info("reconnected to failed gossip member", "member", id, "addr", rec.GossipAddr,
				"failed_for", now.Sub(rec.Since).Round(time.Millisecond))
			try.delay = m.cfg.ReconnectInterval
		} else {
			m.log.Debug("reconnecting to failed gossip member", "member", id, "addr", rec.GossipAddr, "err", err)
			try.delay = min(2*try.delay, m.cfg.ReconnectMax)
		}
		try.at = time.Now().Add(try.delay)
		tries[id] = try
	}
}

// MarkHasState publishes that this node has Raft state.
func (m *Membership) MarkHasState() {
	m.hasState.Store(true)
	m.Publish()
}

// SetDiskLow publishes whether this node's disk is low, if that changed.
func (m *Membership) SetDiskLow(low bool) {
	if m.diskLow.Swap(low) != low {
		m.Publish()
	}
}

// SetCorrupt publishes that this node's Raft state is corrupt (why is in
// its own log and status: gossip metadata is small).
func (m *Membership) SetCorrupt(string) {
	if !m.corrupt.Swap(true) {
		m.Publish()
	}
}

// Publish re-advertises this node's metadata. It never runs once the
// node is leaving: an update after memberlist's Leave would announce the
// node alive again.
func (m *Membership) Publish() {
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

// Leave announces a graceful leave: Leaving in the metadata (waiting for
// its broadcast), a direct notice to every live member, then memberlist's
// Leave. It is bounded by timeout; failures are logged.
func (m *Membership) Leave(timeout time.Duration) {
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
	for _, mm := range m.List() {
		if mm.ID == m.cfg.NodeID || !mm.Alive {
			continue
		}
		host, port, err := hostport.Split(mm.GossipAddr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil {
			continue
		}
		to := &memberlist.Node{Name: mm.ID, Addr: ip, Port: uint16(port)}
		if err := m.ml.SendReliable(to, []byte(LeaveNotice+m.cfg.NodeID)); err != nil {
			m.log.Debug("sending leave notice", "to", mm.ID, "err", err)
		}
	}
	if err := m.ml.Leave(timeout); err != nil {
		m.log.Warn("gossip leave", "err", err)
	}
}

// Shutdown stops memberlist (without a leave); safe on a node whose
// memberlist was never created, and more than once.
func (m *Membership) Shutdown() error {
	if m == nil || m.ml == nil {
		return nil
	}
	return m.ml.Shutdown()
}

// metaDelegate is the memberlist.Delegate: it serves this node's metadata
// and receives leave notices. Its methods must not block.
type metaDelegate struct{ m *Membership }

func (d *metaDelegate) NodeMeta(limit int) []byte {
	b, cut, err := fitLeads(d.m.localMeta(), limit)
	if err != nil || len(b) > limit {
		// Checked in newMembership; cannot happen with the same addresses.
		return nil
	}
	if int64(cut) != d.m.leadsCut.Swap(int64(cut)) && cut > 0 {
		d.m.log.Warn("gossip metadata full: some of the data groups this node leads are not advertised", "left_out", cut, "advertised", len(d.m.leadsNow())-cut)
	}
	return b
}

func (d *metaDelegate) NotifyMsg(b []byte) {
	s := string(b)
	if len(s) <= len(LeaveNotice) || s[:len(LeaveNotice)] != LeaveNotice {
		return
	}
	d.m.leaveNoticeFrom(s[len(LeaveNotice):])
}

func (d *metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *metaDelegate) LocalState(join bool) []byte                { return nil }
func (d *metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

// eventDelegate is the memberlist.EventDelegate: it feeds the member
// table.
type eventDelegate struct{ m *Membership }

func (e *eventDelegate) NotifyJoin(mn *memberlist.Node) { e.m.update(mn, Alive, true) }

func (e *eventDelegate) NotifyUpdate(mn *memberlist.Node) { e.m.update(mn, Alive, false) }

// NotifyLeave is called for both failures and graceful leaves; memberlist
// v0.5's Node.State does not tell them apart, so a leave is recognised by
// the Leaving flag or leave notice the node sent before it left.
func (e *eventDelegate) NotifyLeave(mn *memberlist.Node) { e.m.update(mn, Failed, false) }

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// newRunID is a random id for this start of the process (Meta.Run).
func newRunID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

// clusterID is the id advertised ("" for none).
func (m *Membership) clusterID() string {
	if m.cfg.ClusterID == nil {
		return ""
	}
	return m.cfg.ClusterID()
}

// Addr is the advertised gossip address (what others join), once
// started.
func (m *Membership) Addr() string { return m.addr }

// RaftAddr is the node's advertised Raft address, as its metadata says.
func (m *Membership) RaftAddr() string { return m.raftAddr }

// HasState reports whether the metadata says this node has Raft state.
func (m *Membership) HasState() bool { return m.hasState.Load() }

// SetHasState sets whether this node has Raft state, without publishing
// (before Start, when the data group has opened; MarkHasState later).
func (m *Membership) SetHasState(has bool) { m.hasState.Store(has) }

// DiskLow reports whether this node advertises its disk low.
func (m *Membership) DiskLow() bool { return m.diskLow.Load() }

// Join contacts the gossip members at addrs now (JoinLoop does it for
// the configured seeds), as memberlist.Join: how many answered.
func (m *Membership) Join(addrs []string) (int, error) { return m.ml.Join(addrs) }
