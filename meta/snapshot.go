package meta

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	"github.com/raftq/raftq/acl"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// SnapshotFormat is the format of the State record this build writes and
// the newest it reads.
const SnapshotFormat uint32 = 1

// marshal is the one encoding of records that are hashed or compared:
// the records hold no maps, so it is canonical.
var marshal = proto.MarshalOptions{Deterministic: true}

// seedSum is the SHA-256 of a seed's encoding: a seed retried is
// compared with the applied one by it, so the state need not keep the
// seed (its queues are in the placements, its auth in the auth record).
func seedSum(sd *metav1.Seed) []byte {
	b, err := marshal.Marshal(sd)
	if err != nil {
		// A decoded message always marshals.
		panic(fmt.Sprintf("meta: marshal seed: %v", err))
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// record is the snapshot form of s: every collection in key order (write
// keys oldest first), so equal states encode to equal bytes.
func (s *state) record() *metav1.State {
	st := &metav1.State{
		Format:         SnapshotFormat,
		AppliedIndex:   s.applied,
		Seeded:         s.seeded,
		SeededIndex:    s.seededIndex,
		SeedSha256:     s.seedSHA,
		ClusterVersion: s.clusterVersion,
		Settings: &metav1.Settings{
			MetaVoters: s.settings.MetaVoters, MaxQueuedBytes: s.settings.MaxQueuedBytes,
			MaxQueues: s.settings.MaxQueues, Groups: s.settings.Groups, Replicas: s.settings.Replicas,
		},
		PlacementVersion: s.placementVersion,
		Auth:             s.auth.Record(),
		LegacyGroup:      s.legacyGroup,
	}
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		m := s.members[id]
		st.Members = append(st.Members, &metav1.Member{NodeId: m.NodeID, RaftAddr: m.RaftAddr, ApiAddr: m.APIAddr, Zone: m.Zone})
	}
	for _, g := range s.sortedGroups() {
		st.Groups = append(st.Groups, &metav1.Group{
			Id: g.ID, Replicas: slices.Clone(g.Replicas), Epoch: g.Epoch,
			MaxQueuedBytesShare: g.Share, RegisteredIndex: g.RegisteredIndex,
		})
	}
	for _, q := range slices.Sorted(maps.Keys(s.placements)) {
		p := s.placements[q]
		st.Placements = append(st.Placements, &metav1.Placement{Queue: p.Queue, Group: p.Group, Index: p.Index})
	}
	for _, k := range s.keys {
		st.WriteKeys = append(st.WriteKeys, &metav1.WriteKey{Kind: k.kind, Target: k.target, Key: k.key, Index: k.index})
	}
	return st
}

// load rebuilds a state from its record, checking it as the commands
// would have and that every collection is in its order (so a restored
// state encodes to the bytes it was read from).
func load(st *metav1.State) (*state, error) {
	if st.GetFormat() == 0 || st.GetFormat() > SnapshotFormat {
		return nil, fmt.Errorf("%w: meta snapshot format %d, this build reads up to %d", ErrNewerVersion, st.GetFormat(), SnapshotFormat)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: meta snapshot: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	s := newState()
	s.applied, s.seeded, s.seededIndex = st.GetAppliedIndex(), st.GetSeeded(), st.GetSeededIndex()
	s.clusterVersion, s.placementVersion, s.legacyGroup = st.GetClusterVersion(), st.GetPlacementVersion(), st.GetLegacyGroup()
	if len(st.GetSeedSha256()) > 0 {
		s.seedSHA = slices.Clone(st.GetSeedSha256())
	}
	switch {
	case s.seeded && (len(s.seedSHA) != sha256.Size || s.clusterVersion == 0 || s.seededIndex == 0 || s.seededIndex > s.applied):
		return nil, bad("seeded without its seed's hash, version or index")
	case !s.seeded && (len(s.seedSHA) != 0 || s.clusterVersion != 0 || len(st.GetMembers())+len(st.GetGroups())+len(st.GetPlacements())+len(st.GetWriteKeys()) != 0):
		return nil, bad("state before the seed")
	}
	set := st.GetSettings()
	s.settings = Settings{MetaVoters: set.GetMetaVoters(), MaxQueuedBytes: set.GetMaxQueuedBytes(), MaxQueues: set.GetMaxQueues(), Groups: set.GetGroups(), Replicas: set.GetReplicas()}
	v := set.GetMetaVoters()
	r := set.GetReplicas()
	g := set.GetGroups()
	if err := validSettings(&metav1.SetSettings{MetaVoters: &v, MaxQueuedBytes: &s.settings.MaxQueuedBytes, MaxQueues: &s.settings.MaxQueues, Groups: &g, Replicas: &r}); err != nil {
		return nil, err
	}
	a, err := acl.Load(st.GetAuth())
	if err != nil {
		return nil, err
	}
	s.auth = a
	for i, m := range st.GetMembers() {
		if i > 0 && st.Members[i-1].GetNodeId() >= m.GetNodeId() {
			return nil, bad("members out of order")
		}
		if r := s.setMember(&metav1.SetMember{NodeId: m.GetNodeId(), RaftAddr: m.GetRaftAddr(), ApiAddr: m.GetApiAddr(), Zone: m.GetZone()}); r.Err != nil {
			return nil, r.Err
		}
	}
	for i, gr := range st.GetGroups() {
		if i > 0 && st.Groups[i-1].GetId() >= gr.GetId() {
			return nil, bad("groups out of order")
		}
		if err := ValidGroupID(gr.GetId()); err != nil {
			return nil, err
		}
		reps, err := replicaSet(gr.GetReplicas())
		if err != nil {
			return nil, err
		}
		if !slices.Equal(reps, gr.GetReplicas()) || gr.GetEpoch() == 0 || gr.GetRegisteredIndex() == 0 || gr.GetRegisteredIndex() > s.applied {
			return nil, bad("group %s", gr.GetId())
		}
		s.groups[gr.GetId()] = &Group{ID: gr.GetId(), Replicas: reps, Epoch: gr.GetEpoch(), Share: gr.GetMaxQueuedBytesShare(), RegisteredIndex: gr.GetRegisteredIndex()}
	}
	if len(s.groups) > MaxGroups {
		return nil, bad("%d groups", len(s.groups))
	}
	if s.legacyGroup != "" && s.groups[s.legacyGroup] == nil {
		return nil, bad("legacy group %s is not a group", s.legacyGroup)
	}
	for i, p := range st.GetPlacements() {
		if i > 0 && st.Placements[i-1].GetQueue() >= p.GetQueue() {
			return nil, bad("placements out of order")
		}
		if err := validQueue(p.GetQueue()); err != nil {
			return nil, err
		}
		if s.groups[p.GetGroup()] == nil || p.GetIndex() == 0 || p.GetIndex() > s.placementVersion {
			return nil, bad("placement of %s", p.GetQueue())
		}
		s.placements[p.GetQueue()] = Placement{Queue: p.GetQueue(), Group: p.GetGroup(), Index: p.GetIndex()}
		s.placedOn[p.GetGroup()]++
	}
	if len(s.placements) > MaxPlacements || s.placementVersion > s.applied {
		return nil, bad("placements")
	}
	for i, k := range st.GetWriteKeys() {
		wk := writeKey{k.GetKind(), k.GetTarget(), k.GetKey()}
		_, dup := s.keyIndex[wk]
		if dup || k.GetKey() == "" || len(k.GetKey()) > MaxKeyLen || k.GetIndex() == 0 || k.GetIndex() > s.applied ||
			i > 0 && st.WriteKeys[i-1].GetIndex() > k.GetIndex() || i >= MaxWriteKeys {
			return nil, bad("write key %d", i)
		}
		s.remember(keyRec{wk, k.GetIndex()})
	}
	// Shares are derived: a record whose shares are not the derivation's
	// was not written by this rule.
	want := s.clone()
	want.reshare()
	for _, g := range want.sortedGroups() {
		if g.Share != s.groups[g.ID].Share {
			return nil, bad("group %s share %d, derived %d", g.ID, s.groups[g.ID].Share, g.Share)
		}
	}
	return s, nil
}

// clone copies s for a check (groups and members are values or replaced).
func (s *state) clone() *state {
	c := *s
	c.members = maps.Clone(s.members)
	c.groups = maps.Clone(s.groups)
	c.placements = maps.Clone(s.placements)
	c.placedOn = maps.Clone(s.placedOn)
	c.keys = slices.Clone(s.keys)
	c.keyIndex = maps.Clone(s.keyIndex)
	return &c
}

// digest is the SHA-256 of the state's record.
func (s *state) digest() [32]byte {
	b, err := marshal.Marshal(s.record())
	if err != nil {
		panic(fmt.Sprintf("meta: marshal state: %v", err))
	}
	return sha256.Sum256(b)
}
