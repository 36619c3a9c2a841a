package meta

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/acl"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
)

// step is one entry of a table: the command, the error it must answer
// (nil: success), and a check of the state after it.
type step struct {
	name  string
	cmd   *metav1.Command
	err   error
	check func(t *testing.T, f *FSM, r *Result)
}

// runSteps applies the steps in order to one FSM and, after each, checks
// that a replica restored from a snapshot has the same digest.
func runSteps(t *testing.T, steps []step) *FSM {
	t.Helper()
	n := newNode(t)
	for _, s := range steps {
		before := withoutIndex(t, n.f)
		r := n.apply(s.cmd)
		switch {
		case s.err == nil && r.Err != nil:
			t.Fatalf("%s: %v", s.name, r.Err)
		case s.err != nil && !errors.Is(r.Err, s.err):
			t.Fatalf("%s: answered %v, want %v", s.name, r.Err, s.err)
		case s.err != nil && withoutIndex(t, n.f) != before:
			t.Fatalf("%s: a refused entry changed the state", s.name)
		}
		if s.check != nil {
			s.check(t, n.f, r)
		}
		if got, want := restored(t, n.f).Digest(), n.f.Digest(); got != want {
			t.Fatalf("%s: restored digest differs", s.name)
		}
	}
	return n.f
}

// withoutIndex is the state's record without its applied index, which
// every entry moves.
func withoutIndex(t *testing.T, f *FSM) string {
	t.Helper()
	f.mu.RLock()
	rec := f.s.record()
	f.mu.RUnlock()
	rec.AppliedIndex = 0
	b, err := marshal.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSeedFirst(t *testing.T) {
	runSteps(t, []step{
		{"place before the seed", place("q", "g"), ErrNotSeeded, nil},
		{"token before the seed", createToken("t", "a", 1, 0, ""), ErrNotSeeded, nil},
		{"seed without version", seedCmd(&metav1.Seed{}), ErrInvalid, nil},
		{"seed with replicas and no group", seedCmd(&metav1.Seed{ClusterVersion: 1, LegacyReplicas: []string{"n1"}}), ErrInvalid, nil},
		{"empty seed", emptySeed(), nil, func(t *testing.T, f *FSM, r *Result) {
			if !f.Seeded() || f.ClusterVersion() != 20 || r.Index != 3+2 {
				t.Fatalf("seeded %v version %d index %d", f.Seeded(), f.ClusterVersion(), r.Index)
			}
		}},
		{"the same seed retried", emptySeed(), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Index != 5 {
				t.Fatalf("retried seed answered index %d, want the first's 5", r.Index)
			}
		}},
		{"another seed", seedCmd(&metav1.Seed{ClusterVersion: 21}), ErrConflict, nil},
	})
}

func TestSeedFromLegacyGroup(t *testing.T) {
	a := acl.New()
	a, _ = a.AddToken("t1", "alice", make32(9), 0, 5)
	a, _ = a.Grant("alice", "jobs.*", uint32(acl.PermProduce), false)
	sd := &metav1.Seed{
		Auth: a.Record(), ClusterVersion: 20, MaxQueuedBytes: 1000, MaxQueues: 10_000,
		LegacyGroup: LegacyGroupID, LegacyReplicas: []string{"n3", "n1", "n2"},
		Queues: []string{"jobs", "jobs.dlq", "b"}, CopiedAtIndex: 4242,
	}
	runSteps(t, []step{
		{"seed", seedCmd(sd), nil, func(t *testing.T, f *FSM, r *Result) {
			g, ok := f.Group(LegacyGroupID)
			if !ok || !slices.Equal(g.Replicas, []string{"n1", "n2", "n3"}) || g.Epoch != 1 || g.Share != 1000 {
				t.Fatalf("legacy group %+v", g)
			}
			p, ok, v := f.Lookup("jobs.dlq")
			if !ok || p.Group != LegacyGroupID || p.Index != 1 || v != 1 {
				t.Fatalf("placement %+v %v %d", p, ok, v)
			}
			if _, ok := f.Auth().LookupToken([32]byte(make32(9))); !ok || !f.Auth().Allowed("alice", acl.PermProduce, "jobs.x") {
				t.Fatal("auth not copied")
			}
			if s := f.Settings(); s.MaxQueuedBytes != 1000 || s.MaxQueues != 10_000 {
				t.Fatalf("settings %+v", s)
			}
		}},
		{"the legacy group cannot go while queues are on it", removeGroup(LegacyGroupID, ""), ErrInUse, nil},
		{"a queue of the copy cannot move by placement", place("jobs", "other"), ErrConflict, nil},
	})
	bad := func(mut func(*metav1.Seed)) *metav1.Command {
		c := seedCmd(&metav1.Seed{ClusterVersion: 1, LegacyGroup: LegacyGroupID, LegacyReplicas: []string{"n1"}, Queues: []string{"a"}})
		mut(c.GetSeed())
		return c
	}
	for name, c := range map[string]*metav1.Command{
		"duplicate queue":   bad(func(s *metav1.Seed) { s.Queues = []string{"a", "a"} }),
		"bad queue name":    bad(func(s *metav1.Seed) { s.Queues = []string{"a b"} }),
		"group named meta":  bad(func(s *metav1.Seed) { s.LegacyGroup = MetaGroupID }),
		"duplicate replica": bad(func(s *metav1.Seed) { s.LegacyReplicas = []string{"n1", "n1"} }),
		"no replicas":       bad(func(s *metav1.Seed) { s.LegacyReplicas = nil }),
		"bad auth": bad(func(s *metav1.Seed) {
			s.Auth = &fsmv1.AuthRecord{Identities: []*fsmv1.IdentityRecord{{Identity: "x"}}}
		}),
		"negative setting": bad(func(s *metav1.Seed) { s.MaxQueues = -1 }),
	} {
		n := newNode(t)
		if r := n.apply(c); !errors.Is(r.Err, ErrInvalid) || n.f.Seeded() {
			t.Errorf("%s: %v, seeded %v", name, r.Err, n.f.Seeded())
		}
	}
}

func make32(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestGroupsAndPlacement(t *testing.T) {
	runSteps(t, []step{
		{"seed", emptySeed(), nil, nil},
		{"register g1", register("g1", "n2", "n1", "n3"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Group == nil || r.Group.Epoch != 1 || !slices.Equal(r.Group.Replicas, []string{"n1", "n2", "n3"}) || r.Index != 2 {
				t.Fatalf("%+v", r)
			}
		}},
		{"register g1 retried answers as the first", register("g1", "n1", "n3", "n2"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Index != 2 || r.Group.Epoch != 1 {
				t.Fatalf("%+v", r)
			}
		}},
		{"register g1 with other replicas", register("g1", "n1"), ErrConflict, nil},
		{"register meta", register(MetaGroupID, "n1"), ErrInvalid, nil},
		{"register a bad id", register("a/b", "n1"), ErrInvalid, nil},
		{"register too many replicas", register("g9", "1", "2", "3", "4", "5", "6", "7", "8"), ErrInvalid, nil},
		{"register g2", register("g2", "n1"), nil, nil},
		{"place q on g1", place("q", "g1"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Placement == nil || r.Placement.Group != "g1" || r.Index != 9 {
				t.Fatalf("%+v", r)
			}
			if _, _, v := f.Lookup("q"); v != 9 {
				t.Fatalf("placement version %d", v)
			}
		}},
		{"the same placement retried answers as the first", place("q", "g1"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Index != 9 || r.Placement.Index != 9 {
				t.Fatalf("%+v", r)
			}
			if _, _, v := f.Lookup("q"); v != 9 {
				t.Fatalf("a retried placement moved the version to %d", v)
			}
		}},
		{"a conflicting placement", place("q", "g2"), ErrConflict, nil},
		{"a placement on no group", place("r", "nope"), ErrNotFound, nil},
		{"a bad queue name", place("a b", "g1"), ErrInvalid, nil},
		{"g1 cannot go while q is on it", removeGroup("g1", ""), ErrInUse, nil},
		{"drop naming another group", drop("q", "g2"), ErrConflict, nil},
		{"drop", drop("q", "g1"), nil, func(t *testing.T, f *FSM, r *Result) {
			if !r.Dropped {
				t.Fatal("not dropped")
			}
			if _, ok, v := f.Lookup("q"); ok || v != 16 {
				t.Fatalf("still placed or version %d", v)
			}
		}},
		{"drop retried", drop("q", "g1"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Dropped {
				t.Fatal("dropped twice")
			}
		}},
		{"replicas at a stale epoch", setReplicas("g1", 7, "n1"), ErrConflict, nil},
		{"replicas", setReplicas("g1", 1, "n4", "n1", "n2"), nil, func(t *testing.T, f *FSM, r *Result) {
			if g, _ := f.Group("g1"); g.Epoch != 2 || !slices.Equal(g.Replicas, []string{"n1", "n2", "n4"}) {
				t.Fatalf("%+v", g)
			}
		}},
		{"replicas retried", setReplicas("g1", 1, "n1", "n2", "n4"), nil, func(t *testing.T, f *FSM, r *Result) {
			if g, _ := f.Group("g1"); g.Epoch != 2 {
				t.Fatalf("epoch %d", g.Epoch)
			}
		}},
		{"replicas of no group", setReplicas("nope", 1, "n1"), ErrNotFound, nil},
		{"remove g1", removeGroup("g1", "k1"), nil, nil},
		{"remove g1 retried with its key", removeGroup("g1", "k1"), nil, func(t *testing.T, f *FSM, r *Result) {
			if r.Index != 22 {
				t.Fatalf("answered index %d, want the first's 22", r.Index)
			}
		}},
		{"remove g1 again without a key", removeGroup("g1", ""), ErrNotFound, nil},
	})
}

func TestMembers(t *testing.T) {
	runSteps(t, []step{
		{"seed", emptySeed(), nil, nil},
		{"n1", member("n1", "z1"), nil, nil},
		{"n1 again, new zone", member("n1", "z2"), nil, func(t *testing.T, f *FSM, r *Result) {
			if m := f.Members(); len(m) != 1 || m[0].Zone != "z2" {
				t.Fatalf("%+v", m)
			}
		}},
		{"no raft address", &metav1.Command{Op: &metav1.Command_SetMember{SetMember: &metav1.SetMember{NodeId: "n2"}}}, ErrInvalid, nil},
		{"a space in the id", member("n 2", ""), ErrInvalid, nil},
		{"g on n1", register("g", "n1"), nil, nil},
		{"n1 is a replica", removeMember("n1"), ErrInUse, nil},
		{"unknown member", removeMember("n9"), ErrNotFound, nil},
		{"n2", member("n2", ""), nil, nil},
		{"remove n2", removeMember("n2"), nil, func(t *testing.T, f *FSM, r *Result) {
			if len(f.Members()) != 1 {
				t.Fatal("n2 still a member")
			}
		}},
	})
}

func TestSettingsAndShares(t *testing.T) {
	shares := func(want ...int64) func(t *testing.T, f *FSM, r *Result) {
		return func(t *testing.T, f *FSM, r *Result) {
			gs, _ := f.Groups()
			var got []int64
			var sum int64
			for _, g := range gs {
				got = append(got, g.Share)
				sum += g.Share
			}
			if !slices.Equal(got, want) {
				t.Fatalf("shares %v, want %v", got, want)
			}
			if total := f.Settings().MaxQueuedBytes; total >= int64(len(gs)) && sum != total {
				t.Fatalf("shares add up to %d, not %d", sum, total)
			}
		}
	}
	runSteps(t, []step{
		{"seed", seedCmd(&metav1.Seed{ClusterVersion: 20, MaxQueuedBytes: 10}), nil, nil},
		{"a", register("a", "n1"), nil, shares(10)},
		{"b", register("b", "n1"), nil, shares(5, 5)},
		{"c", register("c", "n1"), nil, shares(4, 3, 3)},
		{"total 2 over 3 groups: at least 1 each", settings(&metav1.SetSettings{MaxQueuedBytes: i64(2)}), nil, shares(1, 1, 1)},
		{"unlimited", settings(&metav1.SetSettings{MaxQueuedBytes: i64(0)}), nil, shares(0, 0, 0)},
		{"total 100", settings(&metav1.SetSettings{MaxQueuedBytes: i64(100)}), nil, shares(34, 33, 33)},
		{"remove b", removeGroup("b", ""), nil, shares(50, 50)},
		{"meta_voters 5, others kept", settings(&metav1.SetSettings{MetaVoters: u32(5), IdempotencyKey: "s1"}), nil, func(t *testing.T, f *FSM, r *Result) {
			if s := f.Settings(); s.MetaVoters != 5 || s.MaxQueuedBytes != 100 {
				t.Fatalf("%+v", s)
			}
		}},
		{"keyed settings retried change nothing", settings(&metav1.SetSettings{MetaVoters: u32(3), IdempotencyKey: "s1"}), nil, func(t *testing.T, f *FSM, r *Result) {
			if f.Settings().MetaVoters != 5 {
				t.Fatal("a repeat applied")
			}
		}},
		{"even meta_voters", settings(&metav1.SetSettings{MetaVoters: u32(4)}), ErrInvalid, nil},
		{"meta_voters 9", settings(&metav1.SetSettings{MetaVoters: u32(9)}), ErrInvalid, nil},
		{"even replicas", settings(&metav1.SetSettings{Replicas: u32(2)}), ErrInvalid, nil},
		{"negative max_queues", settings(&metav1.SetSettings{MaxQueues: i64(-1)}), ErrInvalid, nil},
		{"groups", settings(&metav1.SetSettings{Groups: u32(6), Replicas: u32(3), MaxQueues: i64(50)}), nil, func(t *testing.T, f *FSM, r *Result) {
			if s := f.Settings(); s.Groups != 6 || s.Replicas != 3 || s.MaxQueues != 50 {
				t.Fatalf("%+v", s)
			}
		}},
		{"a long key", settings(&metav1.SetSettings{IdempotencyKey: strings.Repeat("k", MaxKeyLen+1)}), ErrInvalid, nil},
		{"cluster version 21", clusterVersion(21), nil, nil},
		{"cluster version 21 again", clusterVersion(21), nil, nil},
		{"cluster version down", clusterVersion(20), ErrInvalid, func(t *testing.T, f *FSM, r *Result) {
			if f.ClusterVersion() != 21 {
				t.Fatal("lowered")
			}
		}},
	})
}

func TestAuthCommands(t *testing.T) {
	runSteps(t, []step{
		{"seed", emptySeed(), nil, nil},
		{"token", createToken("t1", "alice", 1, 0, "k"), nil, nil},
		{"token retried with its key: the secret is lost", createToken("t1", "alice", 1, 0, "k"), ErrAnswerLost, nil},
		{"token name taken", createToken("t1", "bob", 2, 0, ""), acl.ErrTokenExists, nil},
		{"token expired by its entry's stamp", createToken("t2", "bob", 2, 5, ""), ErrInvalid, nil},
		{"grant", grant("alice", "jobs.*", uint32(acl.PermConsume), false, "g"), nil, func(t *testing.T, f *FSM, r *Result) {
			if !f.Auth().Allowed("alice", acl.PermConsume, "jobs.a") {
				t.Fatal("not granted")
			}
		}},
		{"grant retried", grant("alice", "jobs.*", uint32(acl.PermConsume), false, "g"), nil, nil},
		{"grant a bad identity", grant("a b", "x", 1, false, ""), ErrInvalid, nil},
		{"admin", grant("root", "", 0, true, ""), nil, nil},
		{"ungrant", ungrant("alice", "jobs.*", false, ""), nil, func(t *testing.T, f *FSM, r *Result) {
			if f.Auth().Allowed("alice", acl.PermConsume, "jobs.a") {
				t.Fatal("still granted")
			}
		}},
		{"ungrant again", ungrant("alice", "jobs.*", false, ""), acl.ErrGrantNotFound, nil},
		{"revoke", revokeToken("t1", "r"), nil, nil},
		{"revoke retried", revokeToken("t1", "r"), nil, nil},
		{"revoke unknown", revokeToken("t1", ""), acl.ErrTokenNotFound, nil},
	})
}

func TestWriteKeysAreBounded(t *testing.T) {
	n := newNode(t)
	n.apply(emptySeed())
	n.apply(register("g", "n1"))
	first := n.apply(settings(&metav1.SetSettings{IdempotencyKey: "k0"})).Index
	for i := 1; i < MaxWriteKeys; i++ {
		n.apply(settings(&metav1.SetSettings{IdempotencyKey: "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + itoa(i)}))
	}
	if r := n.apply(settings(&metav1.SetSettings{IdempotencyKey: "k0"})); r.Index != first {
		t.Fatalf("k0 forgotten before the bound: %d", r.Index)
	}
	n.apply(settings(&metav1.SetSettings{IdempotencyKey: "one more"}))
	if r := n.apply(settings(&metav1.SetSettings{IdempotencyKey: "k0"})); r.Index == first {
		t.Fatal("k0 kept past the bound")
	}
	if len(n.f.s.keys) != MaxWriteKeys || len(n.f.s.keyIndex) != MaxWriteKeys {
		t.Fatalf("%d keys, %d indexed", len(n.f.s.keys), len(n.f.s.keyIndex))
	}
	if restored(t, n.f).Digest() != n.f.Digest() {
		t.Fatal("restored digest differs")
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// TestSeededAuthAndChanged: the lock-free auth read is nil until the seed
// applies, then follows every auth change and a restore; Changed is
// closed by each applied entry.
func TestSeededAuthAndChanged(t *testing.T) {
	n := newNode(t)
	if n.f.SeededAuth() != nil {
		t.Fatal("auth published before the seed")
	}
	ch := n.f.Changed()
	if r := n.apply(emptySeed()); r.Err != nil {
		t.Fatal(r.Err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by the seed")
	}
	if a := n.f.SeededAuth(); a == nil || !a.Empty() {
		t.Fatalf("seeded auth %v", a)
	}
	h := [32]byte{1}
	if r := n.apply(&metav1.Command{Op: &metav1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: "t1", Identity: "alice", Sha256: h[:]}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok := n.f.SeededAuth().LookupToken(h); !ok {
		t.Fatal("a token created after the seed is not published")
	}
	if _, ok := restored(t, n.f).SeededAuth().LookupToken(h); !ok {
		t.Fatal("a restored FSM does not publish its auth")
	}
}

// TestAwaitSeesTheChangeItWaitsFor: Await returns once an applied entry
// makes its condition true, and false when ctx ends first.
func TestAwaitSeesTheChangeItWaitsFor(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan bool)
	go func() { done <- n.f.Await(ctx, n.f.Seeded) }()
	if r := n.apply(emptySeed()); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !<-done {
		t.Fatal("Await did not see the seed")
	}
	short, stop := context.WithCancel(context.Background())
	stop()
	if n.f.Await(short, func() bool { return false }) {
		t.Fatal("Await reported a condition that never held")
	}
}
