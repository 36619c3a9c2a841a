package meta

import (
	"maps"
	"slices"

	"github.com/raftq/raftq/acl"
)

// Seeded reports whether the seed has applied (until then the edge reads
// auth and settings from the legacy data group).
func (f *FSM) Seeded() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.seeded
}

// AppliedIndex is the index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.applied
}

// ClusterVersion is the data-plane log version the cluster runs at (0
// before the seed).
func (f *FSM) ClusterVersion() uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.clusterVersion
}

// Settings are the cluster settings.
func (f *FSM) Settings() Settings {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.settings
}

// Auth is the current identities, tokens and grants (immutable).
func (f *FSM) Auth() *acl.Auth {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.auth
}

// Lookup is where queue is placed, and the placement version the answer
// is from.
func (f *FSM) Lookup(queue string) (p Placement, ok bool, version uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok = f.s.placements[queue]
	return p, ok, f.s.placementVersion
}

// Group is one data group (a copy).
func (f *FSM) Group(id string) (*Group, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g, ok := f.s.groups[id]
	if !ok {
		return nil, false
	}
	return g.clone(), true
}

// Groups lists the data groups by id (copies) and the legacy group's id
// ("" when there is none).
func (f *FSM) Groups() (groups []*Group, legacy string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, g := range f.s.sortedGroups() {
		groups = append(groups, g.clone())
	}
	return groups, f.s.legacyGroup
}

// Members lists the members by node id.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Member, 0, len(f.s.members))
	for _, id := range slices.Sorted(maps.Keys(f.s.members)) {
		out = append(out, f.s.members[id])
	}
	return out
}

// Placed lists the queues placed on group, sorted.
func (f *FSM) Placed(group string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, q := range slices.Sorted(maps.Keys(f.s.placements)) {
		if f.s.placements[q].Group == group {
			out = append(out, q)
		}
	}
	return out
}

// Load is how many queues are placed on each group (group id → count;
// a group with none may be absent): the load ChooseGroup weighs.
func (f *FSM) Load() map[string]int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int, len(f.s.placedOn))
	for g, n := range f.s.placedOn {
		if n > 0 {
			out[g] = n
		}
	}
	return out
}
