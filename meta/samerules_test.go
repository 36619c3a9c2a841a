package meta

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// TestSameAuthRulesAsTheQueueLog applies the same random auth commands,
// keyed and not, to the queue state machine (at its newest version) and
// to meta: every answer and the auth record after each are the same, so
// auth moved into meta behaves as it did in the data group.
func TestSameAuthRulesAsTheQueueLog(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		pick := func(names ...string) string { return names[r.IntN(len(names))] }
		q := fsm.New(fsm.Options{})
		m := newNode(t)
		now := m.now
		var index uint64
		applyQ := func(c *fsmv1.Command) fsm.Result {
			index++
			c.NowMs, c.Version = now, fsm.HandoverVersion-1 // the newest version whose log holds auth
			b, err := fsm.Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			return q.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}).(fsm.Result)
		}
		if res := applyQ(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: fsm.HandoverVersion - 1}}}); res.Failure() != nil {
			t.Fatal(res.Failure())
		}
		m.apply(emptySeed())
		for i := 0; i < 300; i++ {
			key := pick("", "", "k1", "k2", strings.Repeat("k", MaxKeyLen+1))
			var mc *metav1.Command
			switch r.IntN(4) {
			case 0:
				expires := []int64{0, now - 1, now, now + 1, now + 1e6}[r.IntN(5)]
				mc = createToken(pick("t1", "t2", "t3", "bad name"), pick("alice", "bob", ""), byte(r.IntN(3)), expires, key)
			case 1:
				mc = revokeToken(pick("t1", "t2", "t3", "bad name", ""), key)
			case 2:
				mc = grant(pick("alice", "bob", "a b"), pick("jobs.*", "*", "", "a/b"), uint32(r.IntN(20)), r.IntN(5) == 0, key)
			default:
				mc = ungrant(pick("alice", "bob", "a b"), pick("jobs.*", "*", ""), r.IntN(5) == 0, key)
			}
			qc := &fsmv1.Command{}
			switch op := mc.Op.(type) {
			case *metav1.Command_CreateToken:
				qc.Op = &fsmv1.Command_CreateToken{CreateToken: proto.Clone(op.CreateToken).(*fsmv1.CreateToken)}
			case *metav1.Command_RevokeToken:
				qc.Op = &fsmv1.Command_RevokeToken{RevokeToken: proto.Clone(op.RevokeToken).(*fsmv1.RevokeToken)}
			case *metav1.Command_AuthGrant:
				qc.Op = &fsmv1.Command_AuthGrant{AuthGrant: proto.Clone(op.AuthGrant).(*fsmv1.AuthGrant)}
			case *metav1.Command_AuthUngrant:
				qc.Op = &fsmv1.Command_AuthUngrant{AuthUngrant: proto.Clone(op.AuthUngrant).(*fsmv1.AuthUngrant)}
			}
			// Both entries carry the same stamp.
			m.now = now
			mr := m.apply(mc)
			qr := applyQ(qc)
			now += 7
			if got, want := fmt.Sprint(mr.Err), fmt.Sprint(qr.Failure()); got != want {
				t.Fatalf("seed %d step %d %T: meta answered %s, the queue log %s", seed, i, mc.Op, got, want)
			}
			if !proto.Equal(m.f.Auth().Record(), q.Reader().Auth().Record()) {
				t.Fatalf("seed %d step %d %T: auth records differ:\n%v\n%v", seed, i, mc.Op, m.f.Auth().Record(), q.Reader().Auth().Record())
			}
		}
	}
}
