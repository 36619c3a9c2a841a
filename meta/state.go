package meta

import (
	"fmt"
	"maps"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/raftq/raftq/acl"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
)

// MaxLogVersion is the newest meta log version this build applies.
// Version 1 is the first: every command in this package.
const MaxLogVersion uint32 = 1

// Limits of the meta state.
const (
	MaxGroupIDLen = 64   // as raftmux's preamble bounds it
	MaxNodeIDLen  = 255  // node ids are host names by default
	MaxAddrLen    = 255  // host:port
	MaxZoneLen    = 64   // --zone
	MaxReplicas   = 7    // voters of one data group
	MaxGroups     = 1024 // data groups of a cluster
	MaxMembers    = 1024
	MaxPlacements = 1_000_000
	MaxQueueLen   = 255     // a queue name's limit (fsm/state.MaxQueueNameLen)
	MaxWriteKeys  = 4096    // keyed writes remembered, oldest out first
	MaxKeyLen     = 255     // an idempotency key
	MaxMetaVoters = 7       // the setting meta_voters
	MetaGroupID   = "meta"  // the meta group's own id (mux preamble, DATA/meta): no data group takes it
	LegacyGroupID = "data"  // the group an upgraded cluster's single group becomes
	autoVoters    = 3       // meta_voters 0: 3 voters,
	autoVotersBig = 5       // or 5
	autoVotersAt  = 5       // once there are this many members
	maxSettingGrp = 1 << 16 // the setting groups
)

// Group is a data group as meta records it.
type Group struct {
	ID       string
	Replicas []string // node ids, sorted, distinct
	Epoch    uint64   // 1 at registration, +1 on every replica change
	// Share is the group's part of the cluster setting max_queued_bytes
	// (0 = unlimited), which the meta leader proposes into its log.
	Share           int64
	RegisteredIndex uint64
}

// Placement is a queue's group and the index that placed it.
type Placement struct {
	Queue, Group string
	Index        uint64
}

// Member is a node as meta records it.
type Member struct {
	NodeID, RaftAddr, APIAddr, Zone string
}

// Settings are the replicated cluster settings (0 = the default / unlimited).
type Settings struct {
	MetaVoters     uint32
	MaxQueuedBytes int64
	MaxQueues      int64
	Groups         uint32
	Replicas       uint32
}

type writeKey struct {
	kind        metav1.WriteKind
	target, key string
}

// keyRec is a remembered keyed write: its key and the index it applied at.
type keyRec struct {
	writeKey
	index uint64
}

// state is the data and its rules; the FSM locks around it. Maps are only
// looked up or walked in sorted order.
type state struct {
	applied          uint64
	seeded           bool
	seededIndex      uint64
	seedSHA          []byte
	legacyGroup      string
	clusterVersion   uint32
	settings         Settings
	members          map[string]Member
	groups           map[string]*Group
	placements       map[string]Placement
	placedOn         map[string]int // group → queues placed on it (derived)
	placementVersion uint64
	auth             *acl.Auth
	keys             []keyRec // oldest first
	keyIndex         map[writeKey]uint64
}

func newState() *state {
	return &state{
		members:    map[string]Member{},
		groups:     map[string]*Group{},
		placements: map[string]Placement{},
		placedOn:   map[string]int{},
		auth:       acl.New(),
		keyIndex:   map[writeKey]uint64{},
	}
}

// Result is what an entry answers: Err, or what it did.
type Result struct {
	Err error
	// Index is the index of the entry whose effect the answer describes:
	// this entry's, or the first's when a retry answers as the first.
	Index     uint64
	Group     *Group     // RegisterGroup, SetGroupReplicas
	Placement *Placement // PlaceQueue
	Dropped   bool       // DropPlacement: a placement was removed
}

func failed(err error) *Result { return &Result{Err: err} }

// ValidGroupID reports why id cannot name a data group: 1 to 64 bytes of
// [A-Za-z0-9._-], not "." or ".." (it names a directory and a mux
// preamble, whose rule this is), and not the meta group's own id.
func ValidGroupID(id string) error {
	if len(id) == 0 || len(id) > MaxGroupIDLen {
		return fmt.Errorf("%w: group id length %d not in 1..%d", ErrInvalid, len(id), MaxGroupIDLen)
	}
	if id == "." || id == ".." || id == MetaGroupID {
		return fmt.Errorf("%w: group id %q is not available", ErrInvalid, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: group id has byte 0x%02x at %d", ErrInvalid, c, i)
		}
	}
	return nil
}

// validText checks a node id, address or zone: UTF-8 without control
// characters or spaces, 1..max bytes (0 allowed when optional).
func validText(what, s string, maxLen int, optional bool) error {
	if s == "" && optional {
		return nil
	}
	if s == "" || len(s) > maxLen {
		return fmt.Errorf("%w: %s length %d not in 1..%d", ErrInvalid, what, len(s), maxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, what)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: %s %q has character %q", ErrInvalid, what, s, r)
		}
	}
	return nil
}

// validQueue checks a queue name as fsm/state.ValidateQueueName does
// (1–255 of [A-Za-z0-9._-]); meta never creates queues, it only places
// names the edge validated, so the message is short.
func validQueue(name string) error {
	if name == "" || len(name) > MaxQueueLen {
		return fmt.Errorf("%w: queue name length %d not in 1..%d", ErrInvalid, len(name), MaxQueueLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: queue name %q has byte 0x%02x", ErrInvalid, name, c)
		}
	}
	return nil
}

// replicaSet checks a group's replicas and returns them sorted.
func replicaSet(ids []string) ([]string, error) {
	if len(ids) == 0 || len(ids) > MaxReplicas {
		return nil, fmt.Errorf("%w: %d replicas, not in 1..%d", ErrInvalid, len(ids), MaxReplicas)
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	for i, id := range out {
		if err := validText("replica node id", id, MaxNodeIDLen, false); err != nil {
			return nil, err
		}
		if i > 0 && out[i-1] == id {
			return nil, fmt.Errorf("%w: replica %q twice", ErrInvalid, id)
		}
	}
	return out, nil
}

// validVoters checks a voter count setting: 0 (automatic) or odd in
// 1..MaxMetaVoters.
func validVoters(what string, n uint32) error {
	if n != 0 && (n%2 == 0 || n > MaxMetaVoters) {
		return fmt.Errorf("%w: %s %d: 0 (automatic) or an odd number up to %d", ErrInvalid, what, n, MaxMetaVoters)
	}
	return nil
}

// apply runs one decoded command at index, stamped nowMs by its leader.
func (s *state) apply(c *metav1.Command, index uint64) *Result {
	s.applied = index
	if sd := c.GetSeed(); sd != nil {
		return s.seed(sd, index)
	}
	if c.Op == nil {
		return failed(fmt.Errorf("%w: entry names no command", ErrInvalid))
	}
	if !s.seeded {
		return failed(ErrNotSeeded)
	}
	switch op := c.Op.(type) {
	case *metav1.Command_SetMember:
		return s.setMember(op.SetMember)
	case *metav1.Command_RemoveMember:
		return s.keyed(metav1.WriteKind_WRITE_KIND_REMOVE_MEMBER, op.RemoveMember.GetNodeId(), op.RemoveMember.GetIdempotencyKey(), index,
			func() *Result { return s.removeMember(op.RemoveMember.GetNodeId()) }, nil)
	case *metav1.Command_RegisterGroup:
		return s.registerGroup(op.RegisterGroup, index)
	case *metav1.Command_SetGroupReplicas:
		return s.setGroupReplicas(op.SetGroupReplicas)
	case *metav1.Command_RemoveGroup:
		return s.keyed(metav1.WriteKind_WRITE_KIND_REMOVE_GROUP, op.RemoveGroup.GetGroup(), op.RemoveGroup.GetIdempotencyKey(), index,
			func() *Result { return s.removeGroup(op.RemoveGroup.GetGroup()) }, nil)
	case *metav1.Command_PlaceQueue:
		return s.placeQueue(op.PlaceQueue, index)
	case *metav1.Command_DropPlacement:
		return s.dropPlacement(op.DropPlacement, index)
	case *metav1.Command_SetSettings:
		if err := validSettings(op.SetSettings); err != nil {
			return failed(err)
		}
		return s.keyed(metav1.WriteKind_WRITE_KIND_SETTINGS, "", op.SetSettings.GetIdempotencyKey(), index,
			func() *Result { return s.setSettings(op.SetSettings) }, nil)
	case *metav1.Command_SetClusterVersion:
		return s.setClusterVersion(op.SetClusterVersion.GetVersion())
	case *metav1.Command_CreateToken:
		ct := op.CreateToken
		if err := acl.CheckToken(ct.GetName(), ct.GetIdentity(), ct.GetSha256(), ct.GetExpiresUnixMs(), c.GetNowMs()); err != nil {
			return failed(err)
		}
		lost := fmt.Errorf("%w: token %s was created by this call's first attempt, whose answer was lost; its secret was only in that answer and is never stored: revoke %s and create it again",
			ErrAnswerLost, ct.GetName(), ct.GetName())
		return s.keyed(metav1.WriteKind_WRITE_KIND_CREATE_TOKEN, ct.GetName(), ct.GetIdempotencyKey(), index, func() *Result {
			return s.setAuth(s.auth.AddToken(ct.GetName(), ct.GetIdentity(), ct.GetSha256(), ct.GetExpiresUnixMs(), c.GetNowMs()))
		}, lost)
	case *metav1.Command_RevokeToken:
		rt := op.RevokeToken
		// As the queue log from WriteKeyVersion: a keyed write names a
		// valid target (an unkeyed one is simply not found).
		if err := acl.ValidateIdentity(rt.GetName()); err != nil && rt.GetIdempotencyKey() != "" {
			return failed(err)
		}
		return s.keyed(metav1.WriteKind_WRITE_KIND_REVOKE_TOKEN, rt.GetName(), rt.GetIdempotencyKey(), index,
			func() *Result { return s.setAuth(s.auth.RemoveToken(rt.GetName())) }, nil)
	case *metav1.Command_AuthGrant:
		g := op.AuthGrant
		if err := acl.ValidateIdentity(g.GetIdentity()); err != nil {
			return failed(err)
		}
		return s.keyed(metav1.WriteKind_WRITE_KIND_GRANT, g.GetIdentity(), g.GetIdempotencyKey(), index, func() *Result {
			return s.setAuth(s.auth.Grant(g.GetIdentity(), g.GetPattern(), g.GetPerms(), g.GetAdmin()))
		}, nil)
	case *metav1.Command_AuthUngrant:
		u := op.AuthUngrant
		if err := acl.ValidateIdentity(u.GetIdentity()); err != nil && u.GetIdempotencyKey() != "" {
			return failed(err)
		}
		return s.keyed(metav1.WriteKind_WRITE_KIND_UNGRANT, u.GetIdentity(), u.GetIdempotencyKey(), index,
			func() *Result { return s.setAuth(s.auth.Ungrant(u.GetIdentity(), u.GetPattern(), u.GetAdmin())) }, nil)
	}
	return failed(fmt.Errorf("%w: unknown command", ErrInvalid))
}

func (s *state) setAuth(a *acl.Auth, err error) *Result {
	if err != nil {
		return failed(err)
	}
	s.auth = a
	return &Result{}
}

// keyed runs a write that may carry an idempotency key: a repeat of a
// keyed write that succeeded answers as the first (repeatErr, or OK at the
// first's index) and changes nothing; only a success is remembered.
func (s *state) keyed(kind metav1.WriteKind, target, key string, index uint64, do func() *Result, repeatErr error) *Result {
	if len(key) > MaxKeyLen {
		return failed(fmt.Errorf("%w: idempotency_key is longer than %d bytes", ErrInvalid, MaxKeyLen))
	}
	k := writeKey{kind, target, key}
	if key != "" {
		if first, ok := s.keyIndex[k]; ok {
			if repeatErr != nil {
				return failed(repeatErr)
			}
			return &Result{Index: first}
		}
	}
	r := do()
	if r.Err != nil {
		return r
	}
	if r.Index == 0 {
		r.Index = index
	}
	if key != "" {
		s.remember(keyRec{k, index})
	}
	return r
}

func (s *state) remember(r keyRec) {
	if len(s.keys) >= MaxWriteKeys {
		delete(s.keyIndex, s.keys[0].writeKey)
		s.keys = slices.Delete(s.keys, 0, 1)
	}
	s.keys = append(s.keys, r)
	s.keyIndex[r.writeKey] = r.index
}

// seed starts the state once; a seed equal to the applied one answers as
// it did, another is refused.
func (s *state) seed(sd *metav1.Seed, index uint64) *Result {
	sum := seedSum(sd)
	if s.seeded {
		if slices.Equal(sum, s.seedSHA) {
			return &Result{Index: s.seededIndex}
		}
		return failed(fmt.Errorf("%w: the meta group was seeded at index %d with another state", ErrConflict, s.seededIndex))
	}
	n, err := seededState(sd, index)
	if err != nil {
		return failed(err)
	}
	n.seedSHA = sum
	*s = *n
	return &Result{Index: index}
}

// seededState builds the state a seed makes, checking it whole first.
func seededState(sd *metav1.Seed, index uint64) (*state, error) {
	if sd.GetClusterVersion() == 0 {
		return nil, fmt.Errorf("%w: seed without a cluster version", ErrInvalid)
	}
	if sd.GetMaxQueuedBytes() < 0 || sd.GetMaxQueues() < 0 {
		return nil, fmt.Errorf("%w: negative setting in seed", ErrInvalid)
	}
	a, err := acl.Load(sd.GetAuth())
	if err != nil {
		return nil, fmt.Errorf("seed auth: %w", err)
	}
	n := newState()
	n.applied, n.seeded, n.seededIndex = index, true, index
	n.auth = a
	n.clusterVersion = sd.GetClusterVersion()
	n.settings.MaxQueuedBytes, n.settings.MaxQueues = sd.GetMaxQueuedBytes(), sd.GetMaxQueues()
	lg := sd.GetLegacyGroup()
	if lg == "" {
		if len(sd.GetLegacyReplicas()) > 0 || len(sd.GetQueues()) > 0 {
			return nil, fmt.Errorf("%w: seed lists replicas or queues without a legacy group", ErrInvalid)
		}
		return n, nil
	}
	if err := ValidGroupID(lg); err != nil {
		return nil, err
	}
	reps, err := replicaSet(sd.GetLegacyReplicas())
	if err != nil {
		return nil, err
	}
	if len(sd.GetQueues()) > MaxPlacements {
		return nil, fmt.Errorf("%w: %d queues in seed", ErrLimit, len(sd.GetQueues()))
	}
	n.legacyGroup = lg
	n.groups[lg] = &Group{ID: lg, Replicas: reps, Epoch: 1, RegisteredIndex: index}
	for _, q := range sd.GetQueues() {
		if err := validQueue(q); err != nil {
			return nil, err
		}
		if _, dup := n.placements[q]; dup {
			return nil, fmt.Errorf("%w: queue %q twice in seed", ErrInvalid, q)
		}
		n.placements[q] = Placement{Queue: q, Group: lg, Index: index}
	}
	n.placedOn[lg] = len(sd.GetQueues())
	n.placementVersion = index
	n.reshare()
	return n, nil
}

func (s *state) setMember(m *metav1.SetMember) *Result {
	for _, c := range []struct {
		what, v  string
		max      int
		optional bool
	}{{"node id", m.GetNodeId(), MaxNodeIDLen, false}, {"raft address", m.GetRaftAddr(), MaxAddrLen, false},
		{"api address", m.GetApiAddr(), MaxAddrLen, true}, {"zone", m.GetZone(), MaxZoneLen, true}} {
		if err := validText(c.what, c.v, c.max, c.optional); err != nil {
			return failed(err)
		}
	}
	if _, ok := s.members[m.GetNodeId()]; !ok && len(s.members) >= MaxMembers {
		return failed(fmt.Errorf("%w: %d members", ErrLimit, MaxMembers))
	}
	s.members[m.GetNodeId()] = Member{NodeID: m.GetNodeId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(), Zone: m.GetZone()}
	return &Result{}
}

func (s *state) removeMember(id string) *Result {
	if _, ok := s.members[id]; !ok {
		return failed(fmt.Errorf("%w: member %q", ErrNotFound, id))
	}
	for _, g := range s.sortedGroups() {
		if slices.Contains(g.Replicas, id) {
			return failed(fmt.Errorf("%w: %s is a replica of group %s", ErrInUse, id, g.ID))
		}
	}
	delete(s.members, id)
	return &Result{}
}

func (s *state) registerGroup(rg *metav1.RegisterGroup, index uint64) *Result {
	if err := ValidGroupID(rg.GetGroup()); err != nil {
		return failed(err)
	}
	reps, err := replicaSet(rg.GetReplicas())
	if err != nil {
		return failed(err)
	}
	if g, ok := s.groups[rg.GetGroup()]; ok {
		if g.Epoch == 1 && slices.Equal(g.Replicas, reps) {
			return &Result{Index: g.RegisteredIndex, Group: g.clone()}
		}
		return failed(fmt.Errorf("%w: group %s exists (epoch %d, replicas %v)", ErrConflict, g.ID, g.Epoch, g.Replicas))
	}
	if len(s.groups) >= MaxGroups {
		return failed(fmt.Errorf("%w: %d groups", ErrLimit, MaxGroups))
	}
	g := &Group{ID: rg.GetGroup(), Replicas: reps, Epoch: 1, RegisteredIndex: index}
	s.groups[g.ID] = g
	s.reshare()
	return &Result{Index: index, Group: g.clone()}
}

func (s *state) setGroupReplicas(sr *metav1.SetGroupReplicas) *Result {
	g, ok := s.groups[sr.GetGroup()]
	if !ok {
		return failed(fmt.Errorf("%w: group %q", ErrNotFound, sr.GetGroup()))
	}
	reps, err := replicaSet(sr.GetReplicas())
	if err != nil {
		return failed(err)
	}
	switch {
	case sr.GetExpectedEpoch() == g.Epoch-1 && slices.Equal(reps, g.Replicas):
		// The change that made this epoch, retried.
		return &Result{Group: g.clone()}
	case sr.GetExpectedEpoch() != g.Epoch:
		return failed(fmt.Errorf("%w: group %s is at epoch %d, not %d", ErrConflict, g.ID, g.Epoch, sr.GetExpectedEpoch()))
	}
	n := g.clone()
	n.Replicas, n.Epoch = reps, g.Epoch+1
	s.groups[g.ID] = n
	return &Result{Group: n.clone()}
}

func (s *state) removeGroup(id string) *Result {
	if _, ok := s.groups[id]; !ok {
		return failed(fmt.Errorf("%w: group %q", ErrNotFound, id))
	}
	if n := s.placedOn[id]; n > 0 {
		return failed(fmt.Errorf("%w: %d queues are placed on group %s", ErrInUse, n, id))
	}
	delete(s.groups, id)
	delete(s.placedOn, id)
	if id == s.legacyGroup {
		s.legacyGroup = ""
	}
	s.reshare()
	return &Result{}
}

func (s *state) placeQueue(pq *metav1.PlaceQueue, index uint64) *Result {
	if err := validQueue(pq.GetQueue()); err != nil {
		return failed(err)
	}
	if p, ok := s.placements[pq.GetQueue()]; ok {
		if p.Group == pq.GetGroup() {
			return &Result{Index: p.Index, Placement: &p}
		}
		return failed(fmt.Errorf("%w: queue %s is placed on group %s", ErrConflict, p.Queue, p.Group))
	}
	if _, ok := s.groups[pq.GetGroup()]; !ok {
		return failed(fmt.Errorf("%w: group %q", ErrNotFound, pq.GetGroup()))
	}
	if len(s.placements) >= MaxPlacements {
		return failed(fmt.Errorf("%w: %d placements", ErrLimit, MaxPlacements))
	}
	p := Placement{Queue: pq.GetQueue(), Group: pq.GetGroup(), Index: index}
	s.placements[p.Queue] = p
	s.placedOn[p.Group]++
	s.placementVersion = index
	return &Result{Index: index, Placement: &p}
}

func (s *state) dropPlacement(dp *metav1.DropPlacement, index uint64) *Result {
	p, ok := s.placements[dp.GetQueue()]
	switch {
	case !ok:
		return &Result{Index: index}
	case p.Group != dp.GetGroup():
		return failed(fmt.Errorf("%w: queue %s is placed on group %s, not %s", ErrConflict, p.Queue, p.Group, dp.GetGroup()))
	}
	delete(s.placements, p.Queue)
	s.placedOn[p.Group]--
	s.placementVersion = index
	return &Result{Index: index, Dropped: true}
}

func validSettings(ss *metav1.SetSettings) error {
	switch {
	case ss.MetaVoters != nil && validVoters("meta_voters", ss.GetMetaVoters()) != nil:
		return validVoters("meta_voters", ss.GetMetaVoters())
	case ss.Replicas != nil && validVoters("replicas", ss.GetReplicas()) != nil:
		return validVoters("replicas", ss.GetReplicas())
	case ss.MaxQueuedBytes != nil && ss.GetMaxQueuedBytes() < 0:
		return fmt.Errorf("%w: max_queued_bytes %d", ErrInvalid, ss.GetMaxQueuedBytes())
	case ss.MaxQueues != nil && ss.GetMaxQueues() < 0:
		return fmt.Errorf("%w: max_queues %d", ErrInvalid, ss.GetMaxQueues())
	case ss.Groups != nil && ss.GetGroups() > maxSettingGrp:
		return fmt.Errorf("%w: groups %d, the limit is %d", ErrInvalid, ss.GetGroups(), maxSettingGrp)
	}
	return nil
}

func (s *state) setSettings(ss *metav1.SetSettings) *Result {
	if ss.MetaVoters != nil {
		s.settings.MetaVoters = ss.GetMetaVoters()
	}
	if ss.MaxQueuedBytes != nil {
		s.settings.MaxQueuedBytes = ss.GetMaxQueuedBytes()
	}
	if ss.MaxQueues != nil {
		s.settings.MaxQueues = ss.GetMaxQueues()
	}
	if ss.Groups != nil {
		s.settings.Groups = ss.GetGroups()
	}
	if ss.Replicas != nil {
		s.settings.Replicas = ss.GetReplicas()
	}
	s.reshare()
	return &Result{}
}

func (s *state) setClusterVersion(v uint32) *Result {
	if v < s.clusterVersion {
		return failed(fmt.Errorf("%w: cluster version %d is below the cluster's %d; it never goes down", ErrInvalid, v, s.clusterVersion))
	}
	s.clusterVersion = v
	return &Result{}
}

// reshare derives every group's share of max_queued_bytes: the total
// split evenly in group id order, the remainder to the first ids, at least
// 1 each while the total is not 0 (0 = unlimited for all).
func (s *state) reshare() {
	gs := s.sortedGroups()
	total := s.settings.MaxQueuedBytes
	for i, g := range gs {
		share := int64(0)
		if total > 0 {
			n := int64(len(gs))
			share = total / n
			if int64(i) < total%n {
				share++
			}
			share = max(share, 1)
		}
		if share != g.Share {
			c := g.clone()
			c.Share = share
			s.groups[g.ID] = c
		}
	}
}

func (s *state) sortedGroups() []*Group {
	out := make([]*Group, 0, len(s.groups))
	for _, id := range slices.Sorted(maps.Keys(s.groups)) {
		out = append(out, s.groups[id])
	}
	return out
}

// clone copies g so a reader's copy never changes (groups in the state
// are replaced, not changed in place).
func (g *Group) clone() *Group {
	c := *g
	c.Replicas = slices.Clone(g.Replicas)
	return &c
}
