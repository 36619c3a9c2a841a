package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// randomLog is a log of n encoded entries drawn from a small universe of
// names, so placements, groups, members and auth records collide, retry
// and conflict; some entries are invalid.
func randomLog(seed uint64, n int) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func(names ...string) string { return names[r.IntN(len(names))] }
	group := func() string { return pick("g1", "g2", "g3", LegacyGroupID, "nope") }
	node := func() string { return pick("n1", "n2", "n3", "n4", "n5") }
	reps := func() []string {
		out := make([]string, 1+r.IntN(3))
		for i := range out {
			out[i] = node()
		}
		return out
	}
	queue := func() string { return pick("a", "b", "c", "d", "jobs", "jobs.dlq", "bad name") }
	key := func() string { return pick("", "", "k1", "k2") }
	now := int64(1_000_000)
	var log [][]byte
	for i := 0; i < n; i++ {
		var c *metav1.Command
		switch k := r.IntN(20); {
		case i == 0 || k == 0:
			if r.IntN(2) == 0 {
				c = emptySeed()
			} else {
				c = seedCmd(&metav1.Seed{ClusterVersion: 20, MaxQueuedBytes: int64(r.IntN(1000)), LegacyGroup: LegacyGroupID,
					LegacyReplicas: []string{"n1", "n2", "n3"}, Queues: []string{"a", "jobs"}})
			}
		case k == 1:
			c = member(node(), pick("", "z1", "z2"))
		case k == 2:
			c = removeMember(node())
		case k <= 4:
			c = register(group(), reps()...)
		case k == 5:
			c = setReplicas(group(), uint64(r.IntN(4)), reps()...)
		case k == 6:
			c = removeGroup(group(), key())
		case k <= 9:
			c = place(queue(), group())
		case k <= 11:
			c = drop(queue(), group())
		case k == 12:
			ss := &metav1.SetSettings{IdempotencyKey: key()}
			if r.IntN(2) == 0 {
				ss.MaxQueuedBytes = i64(int64(r.IntN(2000) - 10))
			}
			if r.IntN(3) == 0 {
				ss.MetaVoters = u32(uint32(r.IntN(7)))
			}
			c = settings(ss)
		case k == 13:
			c = clusterVersion(uint32(19 + r.IntN(4)))
		case k == 14:
			c = createToken(pick("t1", "t2", "t3"), pick("alice", "bob"), byte(r.IntN(4)), int64(r.IntN(3))*now, key())
		case k == 15:
			c = revokeToken(pick("t1", "t2", "t3"), key())
		case k <= 17:
			c = grant(pick("alice", "bob", "a b"), pick("jobs.*", "*", ""), uint32(r.IntN(20)), r.IntN(5) == 0, key())
		case k == 18:
			c = ungrant(pick("alice", "bob"), pick("jobs.*", "*", ""), r.IntN(5) == 0, key())
		default:
			// Invalid: no command, no version, or bytes that do not decode.
			switch r.IntN(3) {
			case 0:
				c = &metav1.Command{}
			case 1:
				log = append(log, []byte{0x10, 0x00}) // version 0
				continue
			default:
				log = append(log, []byte{0xff, 0xff})
				continue
			}
		}
		now += int64(r.IntN(5000))
		b, err := Encode(c, 0, now)
		if err != nil {
			panic(err)
		}
		log = append(log, b)
	}
	return log
}

// answer is a result as a comparable string.
func answer(r *Result) string {
	s := fmt.Sprintf("i=%d dropped=%v", r.Index, r.Dropped)
	if r.Err != nil {
		s += " err=" + r.Err.Error()
	}
	if r.Group != nil {
		s += fmt.Sprintf(" group=%+v", *r.Group)
	}
	if r.Placement != nil {
		s += fmt.Sprintf(" placement=%+v", *r.Placement)
	}
	return s
}

// TestReplicasAgree feeds the same random logs to a live replica and to
// one that is restored from the live one's snapshot at random points (a
// follower that installed a snapshot): both answer every entry alike and
// have the same digest after each.
func TestReplicasAgree(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		log := randomLog(seed, 400)
		live, follower := New(Options{}), New(Options{})
		r := rand.New(rand.NewPCG(seed, 7))
		seeded := false
		for i, b := range log {
			l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: b}
			a, f := answer(live.Apply(l).(*Result)), answer(follower.Apply(l).(*Result))
			if a != f {
				t.Fatalf("seed %d entry %d: answers differ:\n%s\n%s", seed, i+1, a, f)
			}
			if live.Digest() != follower.Digest() {
				t.Fatalf("seed %d entry %d: digests differ", seed, i+1)
			}
			seeded = seeded || live.Seeded()
			if r.IntN(25) == 0 {
				follower = restored(t, live)
			}
		}
		if !seeded {
			t.Fatalf("seed %d: never seeded", seed)
		}
		// The same log replayed gives the same digest (nothing depends on
		// map order or anything outside the log).
		again := New(Options{})
		for i, b := range log {
			again.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
		}
		if again.Digest() != live.Digest() {
			t.Fatalf("seed %d: a replay differs", seed)
		}
	}
}

func TestVersions(t *testing.T) {
	n := newNode(t)
	if r := n.raw([]byte{0x10, 0x00}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("version 0: %v", r.Err)
	}
	if r := n.apply(emptySeed()); r.Err != nil {
		t.Fatal(r.Err)
	}
	var fatal string
	n.f.fatal = func(msg string) { fatal = msg }
	b, err := Encode(place("q", "g"), MaxLogVersion+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := n.raw(b); !errors.Is(r.Err, ErrHalted) || !strings.Contains(fatal, "upgrade") {
		t.Fatalf("newer entry: %v, fatal %q", r.Err, fatal)
	}
	if r := n.apply(register("g", "n1")); !errors.Is(r.Err, ErrHalted) {
		t.Fatalf("after halting: %v", r.Err)
	}
	if _, err := Decode(b); !errors.Is(err, ErrNewerVersion) {
		t.Fatalf("decode: %v", err)
	}
	// Entries of other log types change nothing.
	before := n.f.Digest()
	n.f.halted = false
	n.f.Apply(&raft.Log{Index: 99, Type: raft.LogBarrier})
	if n.f.Digest() != before {
		t.Fatal("a barrier changed the state")
	}
}

// TestRestoreRefuses checks that a restore takes only a record the rules
// could have written: each mutation of a good snapshot is refused and
// leaves the FSM as it was.
func TestRestoreRefuses(t *testing.T) {
	n := newNode(t)
	for _, c := range []*metav1.Command{
		seedCmd(&metav1.Seed{ClusterVersion: 20, MaxQueuedBytes: 9, LegacyGroup: LegacyGroupID, LegacyReplicas: []string{"n1"}, Queues: []string{"a"}}),
		register("g2", "n1", "n2"), place("b", "g2"), member("n1", "z"), member("n2", "z"),
		settings(&metav1.SetSettings{MetaVoters: u32(3), IdempotencyKey: "k"}), grant("alice", "*", 1, false, ""),
	} {
		if r := n.apply(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	good := n.f.s.record()
	for name, mut := range map[string]func(*metav1.State){
		"newer format":           func(s *metav1.State) { s.Format = SnapshotFormat + 1 },
		"no format":              func(s *metav1.State) { s.Format = 0 },
		"groups out of order":    func(s *metav1.State) { s.Groups[0], s.Groups[1] = s.Groups[1], s.Groups[0] },
		"members out of order":   func(s *metav1.State) { s.Members[0], s.Members[1] = s.Members[1], s.Members[0] },
		"placement on no group":  func(s *metav1.State) { s.Placements[0].Group = "x" },
		"placement past version": func(s *metav1.State) { s.Placements[0].Index = s.PlacementVersion + 1 },
		"a share not derived":    func(s *metav1.State) { s.Groups[0].MaxQueuedBytesShare++ },
		"replicas unsorted":      func(s *metav1.State) { s.Groups[1].Replicas = []string{"n2", "n1"} },
		"epoch 0":                func(s *metav1.State) { s.Groups[0].Epoch = 0 },
		"legacy group missing":   func(s *metav1.State) { s.LegacyGroup = "zz" },
		"seeded without hash":    func(s *metav1.State) { s.SeedSha256 = nil },
		"state before the seed":  func(s *metav1.State) { s.Seeded = false; s.SeedSha256 = nil; s.ClusterVersion = 0 },
		"write key without key":  func(s *metav1.State) { s.WriteKeys[0].Key = "" },
		"even meta_voters":       func(s *metav1.State) { s.Settings.MetaVoters = 2 },
		"bad auth":               func(s *metav1.State) { s.Auth.Identities[0].Grants = nil },
	} {
		rec := cloneState(good)
		mut(rec)
		b, err := marshal.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		g := restored(t, n.f)
		before := g.Digest()
		if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err == nil {
			t.Errorf("%s: restored", name)
		}
		if g.Digest() != before {
			t.Errorf("%s: a refused restore changed the state", name)
		}
	}
}

func cloneState(s *metav1.State) *metav1.State {
	b, err := marshal.Marshal(s)
	if err != nil {
		panic(err)
	}
	c := &metav1.State{}
	if err := proto.Unmarshal(b, c); err != nil {
		panic(err)
	}
	return c
}
