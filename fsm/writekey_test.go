package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// keyedWrite is one of the writes the SDK retries that WriteKeyVersion
// makes safe: the first attempt applies (its answer is lost), someone else
// changes the same thing, and the SDK's retry of the first attempt, with
// its key, arrives.
type keyedWrite struct {
	name       string
	setup      func(h *harness)
	first      func(key string) *fsmv1.Command // the retried call
	interleave func(h *harness)                // the other client's change
	// kept reports whether the interleaved change is still there.
	kept func(h *harness) error
	// wantErr is the retry's answer from WriteKeyVersion (nil: OK, as the
	// first attempt answered).
	wantErr error
}

func keyedWrites() []keyedWrite {
	maxDepth := func(v int64, key string) *fsmv1.Command {
		return &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "jobs",
			Config: &fsmv1.QueueConfig{MaxDepth: v}, Mask: []string{"max_depth"}, IdempotencyKey: key}}}
	}
	tokenNamed := func(h *harness, name string) (state.Token, bool) {
		for _, id := range h.f.Reader().Auth().Identities() {
			for _, t := range id.Tokens {
				if t.Name == name {
					return t, true
				}
			}
		}
		return state.Token{}, false
	}
	hasGrant := func(h *harness) bool { return len(h.f.Reader().Auth().Grants("alice")) > 0 }
	settings := func(v int64, key string) *fsmv1.Command {
		return &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueuedBytes: &v, IdempotencyKey: key}}}
	}
	return []keyedWrite{
		{
			name:       "UpdateQueue",
			setup:      func(h *harness) { h.create("jobs", nil) },
			first:      func(key string) *fsmv1.Command { return maxDepth(10, key) },
			interleave: func(h *harness) { h.mustOK(maxDepth(20, "")) },
			kept: func(h *harness) error {
				if got := h.info("jobs").Config.GetMaxDepth(); got != 20 {
					return errors.New("the retry set max_depth back to " + fmt.Sprint(got) + ", over the later update's 20")
				}
				return nil
			},
		},
		{
			name: "CreateQueue",
			first: func(key string) *fsmv1.Command {
				return &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "jobs", IdempotencyKey: key}}}
			},
			interleave: func(h *harness) { h.mustOK(deleteKeyed("jobs", "")) },
			kept: func(h *harness) error {
				if err := h.f.Reader().HasQueue("jobs"); !errors.Is(err, ErrQueueNotFound) {
					return errors.New("the retry created the deleted queue again")
				}
				return nil
			},
		},
		{
			name: "CreateToken",
			first: func(key string) *fsmv1.Command {
				c := createToken("ci", "ci", "secret-1", 0)
				c.GetCreateToken().IdempotencyKey = key
				// A retry draws another secret (the proposer draws one per attempt).
				return c
			},
			interleave: func(h *harness) {
				h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "ci"}}})
			},
			kept: func(h *harness) error {
				if _, ok := tokenNamed(h, "ci"); ok {
					return errors.New("the retry made a second token after the first was revoked")
				}
				return nil
			},
			wantErr: ErrAnswerLost,
		},
		{
			name:  "RevokeToken",
			setup: func(h *harness) { h.mustOK(createToken("ci", "ci", "secret-1", 0)) },
			first: func(key string) *fsmv1.Command {
				return &fsmv1.Command{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "ci", IdempotencyKey: key}}}
			},
			interleave: func(h *harness) { h.mustOK(createToken("ci", "ci", "secret-2", 0)) },
			kept: func(h *harness) error {
				if _, ok := h.f.Reader().Auth().LookupToken(sha256.Sum256([]byte("secret-2"))); !ok {
					return errors.New("the retry revoked the token created again under the name")
				}
				return nil
			},
		},
		{
			name: "Grant",
			first: func(key string) *fsmv1.Command {
				c := authGrant("alice", "a.*", PermProduce, false)
				c.GetAuthGrant().IdempotencyKey = key
				return c
			},
			interleave: func(h *harness) { h.mustOK(authUngrant("alice", "a.*", false)) },
			kept: func(h *harness) error {
				if hasGrant(h) {
					return errors.New("the retry gave back the grant an ungrant took")
				}
				return nil
			},
		},
		{
			name:  "Ungrant",
			setup: func(h *harness) { h.mustOK(authGrant("alice", "a.*", PermProduce, false)) },
			first: func(key string) *fsmv1.Command {
				c := authUngrant("alice", "a.*", false)
				c.GetAuthUngrant().IdempotencyKey = key
				return c
			},
			interleave: func(h *harness) { h.mustOK(authGrant("alice", "a.*", PermProduce, false)) },
			kept: func(h *harness) error {
				if !hasGrant(h) {
					return errors.New("the retry took away the grant given again")
				}
				return nil
			},
		},
		{
			name:       "SetClusterSettings",
			first:      func(key string) *fsmv1.Command { return settings(100<<20, key) },
			interleave: func(h *harness) { h.mustOK(settings(200<<20, "")) },
			kept: func(h *harness) error {
				if _, s := h.f.Reader().Held(); s.MaxQueuedBytes != 200<<20 {
					return errors.New("the retry set max_queued_bytes back to " + fmt.Sprint(s.MaxQueuedBytes))
				}
				return nil
			},
		},
	}
}

// TestRetriedWritesAfterAnInterleavedChange (issue 20, retries): each write
// the SDK retries, retried after someone else's change, answers as the
// first attempt did and changes nothing more from WriteKeyVersion; in an
// entry of the version before, the key is ignored, as an older build
// ignores it, and the retry undoes the other change.
func TestRetriedWritesAfterAnInterleavedChange(t *testing.T) {
	for _, w := range keyedWrites() {
		for _, v := range []uint32{WriteKeyVersion - 1, WriteKeyVersion} {
			t.Run(w.name+"/"+fmtVersion(v), func(t *testing.T) {
				h := newHarness(t)
				h.raise(v)
				if w.setup != nil {
					w.setup(h)
				}
				h.mustOK(w.first("k1")) // its answer is lost
				w.interleave(h)
				before := stateDigest(t, h.f)
				err := h.apply(w.first("k1")).Failure()
				if v < WriteKeyVersion {
					// An older entry ignores the key, byte for byte: the
					// same entries without it give the same state.
					u := newHarness(t)
					u.raise(v)
					if w.setup != nil {
						w.setup(u)
					}
					u.mustOK(w.first(""))
					w.interleave(u)
					uerr := u.apply(w.first("")).Failure()
					if a, b := stateDigest(t, h.f), stateDigest(t, u.f); a != b || fmt.Sprint(err) != fmt.Sprint(uerr) {
						t.Fatalf("version %d: keyed entries gave digest %s and %v, unkeyed %s and %v", v, a, err, b, uerr)
					}
					if w.kept(h) == nil {
						t.Fatalf("version %d: the retry left the interleaved change (err %v); the older rule undoes it", v, err)
					}
					return
				}
				if !errors.Is(err, w.wantErr) {
					t.Fatalf("retry answered %v, want %v", err, w.wantErr)
				}
				if err := w.kept(h); err != nil {
					t.Fatal(err)
				}
				if stateDigest(t, h.f) != before {
					t.Fatal("the retry changed the state")
				}
				// Another key is another call: judged afresh.
				if w.wantErr == nil {
					h.mustOK(w.first("k2"))
					if w.kept(h) == nil {
						t.Fatal("a new call with another key did not apply")
					}
				}
			})
		}
	}
}

// TestWriteKeyRules: a failed keyed write records nothing (its retry is
// judged afresh); a key names one target; a record lapses after the
// window; a key too long is refused and changes nothing.
func TestWriteKeyRules(t *testing.T) {
	h := newHarness(t)
	h.raise(WriteKeyVersion)
	grant := func(identity, key string) *fsmv1.Command {
		c := authGrant(identity, "a.*", PermProduce, false)
		c.GetAuthGrant().IdempotencyKey = key
		return c
	}
	ungrant := func(identity, key string) *fsmv1.Command {
		c := authUngrant(identity, "a.*", false)
		c.GetAuthUngrant().IdempotencyKey = key
		return c
	}
	if err := h.apply(ungrant("alice", "k1")).Failure(); !errors.Is(err, ErrGrantNotFound) {
		t.Fatalf("ungrant of nothing: %v", err)
	}
	h.mustOK(grant("alice", ""))
	h.mustOK(ungrant("alice", "k1")) // the failed attempt recorded nothing
	if len(h.f.Reader().Auth().Grants("alice")) != 0 {
		t.Fatal("an ungrant after a failed attempt with the same key did nothing")
	}
	// The same key on another identity is another write.
	h.mustOK(grant("bob", "k2"))
	h.mustOK(grant("alice", "k2"))
	if len(h.f.Reader().Auth().Grants("alice")) == 0 {
		t.Fatal("bob's grant key stopped alice's grant")
	}
	// After the window a repeat is judged afresh.
	h.mustOK(ungrant("alice", ""))
	h.now += state.RecentWindowMs
	h.tick()
	h.mustOK(grant("alice", "k2"))
	if len(h.f.Reader().Auth().Grants("alice")) == 0 {
		t.Fatal("a repeat after the window was not judged afresh")
	}
	before := stateDigest(t, h.f)
	err := h.apply(ungrant("alice", strings.Repeat("k", MaxDedupIDLen+1))).Failure()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "idempotency_key") {
		t.Fatalf("a key too long: %v, want ErrInvalid naming idempotency_key", err)
	}
	if stateDigest(t, h.f) != before {
		t.Fatal("a refused write changed the state")
	}
}

// TestWriteKeysTravel: the records are state: the digest sees them, a
// restored replica has the same digest and answers a retry as the live one.
func TestWriteKeysTravel(t *testing.T) {
	h := newHarness(t)
	h.raise(WriteKeyVersion)
	h.create("jobs", nil)
	without := stateDigest(t, h.f)
	for _, w := range keyedWrites() {
		if w.name == "UpdateQueue" {
			h.mustOK(w.first("k1"))
		}
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "jobs",
		Config: &fsmv1.QueueConfig{}, Mask: []string{"max_depth"}}}}) // back to the default, unkeyed
	if stateDigest(t, h.f) == without {
		t.Fatal("the digest does not see the update key")
	}
	h.mustOK(authGrant("alice", "a.*", PermProduce, false))
	g := authGrant("alice", "a.*", PermConsume, false)
	g.GetAuthGrant().IdempotencyKey = "g1"
	h.mustOK(g)
	h.mustOK(deleteKeyed("jobs", "d1"))
	h.create("jobs", nil)

	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if a, b := digestOf(t, h.f), digestOf(t, restored); a != b {
		t.Fatalf("restored digest %s != live %s", b, a)
	}
	live := h.f
	for _, f := range []*FSM{live, restored} {
		h.f = f
		h.mustOK(authUngrant("alice", "a.*", false))
		h.mustOK(g) // the retry: changes nothing on either replica
		if len(f.Reader().Auth().Grants("alice")) != 0 {
			t.Fatal("a retried grant on a replica gave back the grant")
		}
		h.mustOK(deleteKeyed("jobs", "d1"))
		if err := f.Reader().HasQueue("jobs"); err != nil {
			t.Fatalf("a retried delete deleted the new queue: %v", err)
		}
		h.index -= 3 // the same entries on both replicas
	}
	h.index += 3
	if a, b := digestOf(t, live), digestOf(t, restored); a != b {
		t.Fatalf("after the retries: restored digest %s != live %s", b, a)
	}
}
