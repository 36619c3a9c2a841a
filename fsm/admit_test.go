package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// heavy is a message with a one-byte payload and 16 KiB of headers, the
// most a message may carry: what a max_bytes that counted payloads only
// let through without limit.
func heavy(i int) *fsmv1.EnqueueMessage {
	h := map[string]string{}
	for j := range 16 {
		h[fmt.Sprintf("h%02d", j)] = strings.Repeat("x", 1024-3)
	}
	return &fsmv1.EnqueueMessage{Payload: []byte{byte(i)}, Headers: h, FairnessKey: "tenant", ThrottleKeys: []string{"api"}, DedupId: fmt.Sprint("id-", i)}
}

func batchesCmd(batches ...*fsmv1.EnqueueBatch) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: batches}}}
}

// TestStatsBytesCountWhatAMessageCosts: stats.bytes counts payload,
// headers, keys, ids and the per-message overhead, and dedup entries are
// counted apart, also after their message is gone.
func TestStatsBytesCountWhatAMessageCosts(t *testing.T) {
	h := newHarness(t)
	h.raise(state.AdmitVersion)
	h.create("q", nil)
	m := heavy(1)
	h.enqueue("q", m)
	want := int64(1 + 16*(state.HeaderOverheadBytes+1024) + len("tenant") + len("api") + len("id-1") + state.MessageOverheadBytes)
	if got := state.MessageCost(m); got != want {
		t.Fatalf("MessageCost = %d, want %d", got, want)
	}
	st := h.info("q").Stats
	if st.Bytes != want || st.DedupEntries != 1 || st.DedupBytes != state.DedupEntryOverheadBytes+4 {
		t.Fatalf("stats bytes=%d dedup=%d/%d, want %d, 1/%d", st.Bytes, st.DedupEntries, st.DedupBytes, want, state.DedupEntryOverheadBytes+4)
	}
	ds := h.grant("q", "c", 1000, h.readyIDsAsUint("q")...)
	h.ack(ds...)
	if st := h.info("q").Stats; st.Bytes != 0 || st.DedupEntries != 1 {
		t.Fatalf("after ack: bytes=%d dedup entries=%d, want 0 and 1 (kept for the window)", st.Bytes, st.DedupEntries)
	}
	held, _ := h.f.Reader().Held()
	if held < state.DedupEntryOverheadBytes {
		t.Fatalf("held = %d: the dedup entry must count against max_queued_bytes", held)
	}
	h.now += state.DefaultDedupWindowMs + 1
	h.tick()
	if st := h.info("q").Stats; st.DedupEntries != 0 || st.DedupBytes != 0 {
		t.Fatalf("after the window: dedup %d entries, %d bytes", st.DedupEntries, st.DedupBytes)
	}
}

func (h *harness) readyIDsAsUint(q string) []uint64 {
	h.t.Helper()
	ds, err := h.f.Reader().Peek(q, 1000, false)
	if err != nil {
		h.t.Fatal(err)
	}
	ids := make([]uint64, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}

// TestAdmissionAtApply: from log version 9 a batch that would pass a
// queue's limit or the cluster's is refused as the entry applies, whole,
// with ErrQueueFull, and changes nothing; two batches that each passed
// the leader's check against committed state (concurrent callers whose
// requests share an entry) cannot overrun the limit together. Version-8
// entries replay as they did: no limit at apply.
func TestAdmissionAtApply(t *testing.T) {
	fifty := make([]*fsmv1.EnqueueMessage, 50)
	for i := range fifty {
		fifty[i] = heavy(i)
	}
	cases := []struct {
		name      string
		version   uint32
		cfg       *fsmv1.QueueConfig
		maxQueued int64 // the cluster setting
		batches   [][]*fsmv1.EnqueueMessage
		wantErrs  []bool // per batch: refused with ErrQueueFull
	}{
		{"headers into max_bytes=10", state.AdmitVersion, &fsmv1.QueueConfig{MaxBytes: 10}, 0,
			[][]*fsmv1.EnqueueMessage{fifty}, []bool{true}},
		{"version 8 replays unrefused", state.AdmitVersion - 1, &fsmv1.QueueConfig{MaxBytes: 10}, 0,
			[][]*fsmv1.EnqueueMessage{fifty}, []bool{false}},
		{"two callers in one entry overrun max_bytes", state.AdmitVersion, &fsmv1.QueueConfig{MaxBytes: 30 * 17 << 10}, 0,
			[][]*fsmv1.EnqueueMessage{fifty[:25], fifty[25:]}, []bool{false, true}},
		{"two callers in one entry overrun max_depth", state.AdmitVersion, &fsmv1.QueueConfig{MaxDepth: 40}, 0,
			[][]*fsmv1.EnqueueMessage{fifty[:25], fifty[25:]}, []bool{false, true}},
		{"max_depth counts new messages, not duplicates", state.AdmitVersion, &fsmv1.QueueConfig{MaxDepth: 25}, 0,
			[][]*fsmv1.EnqueueMessage{fifty[:25], fifty[:25]}, []bool{false, false}},
		{"cluster max_queued_bytes", state.AdmitVersion, nil, 40 * 17 << 10,
			[][]*fsmv1.EnqueueMessage{fifty[:25], fifty[25:]}, []bool{false, true}},
		{"cluster setting ignored at version 8", state.AdmitVersion - 1, nil, 40 * 17 << 10,
			[][]*fsmv1.EnqueueMessage{fifty[:25], fifty[25:]}, []bool{false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.version = c.version
			h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: c.version, MaxQueuedBytes: c.maxQueued}}})
			h.create("q", c.cfg)
			var batches []*fsmv1.EnqueueBatch
			for _, b := range c.batches {
				batches = append(batches, &fsmv1.EnqueueBatch{Queue: "q", Messages: b})
			}
			res := as[*EnqueueResult](t, h.apply(batchesCmd(batches...)))
			if res.Failure() != nil {
				t.Fatal(res.Failure())
			}
			var stored int64
			for i, b := range res.Batches {
				if full := errors.Is(b.Err, ErrQueueFull); full != c.wantErrs[i] || (!full && b.Err != nil) {
					t.Fatalf("batch %d: %v, want refused=%v", i, b.Err, c.wantErrs[i])
				}
				if b.Err == nil {
					for _, m := range c.batches[i] {
						stored += state.MessageCost(m)
					}
				}
			}
			st := h.info("q").Stats
			if c.version >= state.AdmitVersion && c.wantErrs[len(c.wantErrs)-1] {
				// Duplicates aside (none here when refused), what is held
				// is what the admitted batches cost, within the limit.
				if st.Bytes != stored {
					t.Fatalf("queue holds %d bytes, the admitted batches cost %d: a refused batch changed something", st.Bytes, stored)
				}
				if lim := c.cfg.GetMaxBytes(); lim > 0 && st.Bytes > lim {
					t.Fatalf("queue holds %d bytes past max_bytes %d", st.Bytes, lim)
				}
				if lim := c.cfg.GetMaxDepth(); lim > 0 && st.Ready > lim {
					t.Fatalf("queue holds %d messages past max_depth %d", st.Ready, lim)
				}
				if held, _ := h.f.Reader().Held(); c.maxQueued > 0 && held > c.maxQueued {
					t.Fatalf("cluster holds %d bytes past max_queued_bytes %d", held, c.maxQueued)
				}
			}
		})
	}
}

// TestRefusedBatchChangesNothing: a refused batch stores no message, no
// dedup entry and no counter, so a replica that applied it equals one
// that applied a no-op in its place.
func TestRefusedBatchChangesNothing(t *testing.T) {
	refused, noop := newHarness(t), newHarness(t)
	for _, h := range []*harness{refused, noop} {
		h.raise(state.AdmitVersion)
		h.create("q", &fsmv1.QueueConfig{MaxDepth: 2})
		h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("a"), DedupId: "a"})
	}
	res := as[*EnqueueResult](t, refused.apply(batchesCmd(&fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{
		{Payload: []byte("b"), DedupId: "b"}, {Payload: []byte("c"), DedupId: "c"},
	}})))
	if !errors.Is(res.Batches[0].Err, ErrQueueFull) || !strings.Contains(res.Batches[0].Err.Error(), "max_depth") {
		t.Fatalf("got %v, want queue full naming max_depth", res.Batches[0].Err)
	}
	noop.tick()
	if a, b := snapshotBytes(t, refused.f), snapshotBytes(t, noop.f); !bytes.Equal(a, b) {
		t.Fatal("the refused batch changed the state")
	}
	// The duplicate of what is stored still answers its id when full.
	ids := refused.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("a"), DedupId: "a"})
	if len(ids) != 1 || ids[0] == 0 {
		t.Fatalf("duplicate answered %v", ids)
	}
}

// TestClusterSettingTravels: max_queued_bytes starts from the entry that
// raises the cluster to version 9, changes by SetClusterSettings (an
// unknown command in older entries), and a restored replica has it.
func TestClusterSettingTravels(t *testing.T) {
	h := newHarness(t)
	h.raise(state.AdmitVersion - 1)
	mq := int64(5000)
	setCmd := func() *fsmv1.Command {
		return &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueuedBytes: &mq}}}
	}
	if res := h.apply(setCmd()); !errors.Is(res.Failure(), ErrInvalid) {
		t.Fatalf("SetClusterSettings in a version-8 entry: %v, want unknown command", res.Failure())
	}
	h.version = state.AdmitVersion
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: state.AdmitVersion, MaxQueuedBytes: 1 << 30}}})
	if _, s := h.f.Reader().Held(); s.MaxQueuedBytes != 1<<30 {
		t.Fatalf("after the raise: %d, want the proposed default", s.MaxQueuedBytes)
	}
	h.mustOK(setCmd())
	neg := int64(-1)
	if res := h.apply(&fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueuedBytes: &neg}}}); !errors.Is(res.Failure(), ErrInvalid) {
		t.Fatalf("negative max_queued_bytes: %v", res.Failure())
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{}}}) // absent: unchanged
	h.create("q", nil)
	h.enqueuePayloads("q", strings.Repeat("x", 4500))
	res := as[*EnqueueResult](t, h.apply(batchesCmd(&fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{Payload: []byte("y")}}})))
	if err := res.Batches[0].Err; !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "max_queued_bytes") {
		t.Fatalf("past the cluster setting: %v", err)
	}
	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if _, s := restored.Reader().Held(); s.MaxQueuedBytes != mq {
		t.Fatalf("restored setting %d, want %d", s.MaxQueuedBytes, mq)
	}
	if a, b := digestOf(t, h.f), digestOf(t, restored); a != b {
		t.Fatalf("digests differ: %s, %s", a, b)
	}
	other := newHarness(t)
	other.version = state.AdmitVersion
	other.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: state.AdmitVersion, MaxQueuedBytes: 7}}})
	h2 := newHarness(t)
	h2.version = state.AdmitVersion
	h2.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: state.AdmitVersion, MaxQueuedBytes: 8}}})
	if digestOf(t, other.f) == digestOf(t, h2.f) {
		t.Fatal("the setting is not in the digest")
	}
}

// TestDedupWindowBound: from version 9 a dedup window longer than
// MaxDedupWindowMs is refused on create and update; older entries replay
// as they did.
func TestDedupWindowBound(t *testing.T) {
	long := &fsmv1.QueueConfig{DedupWindowMs: state.MaxDedupWindowMs + 1}
	for _, v := range []uint32{state.AdmitVersion - 1, state.AdmitVersion} {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			h := newHarness(t)
			h.raise(v)
			res := h.apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q", Config: long}}})
			h.create("ok", &fsmv1.QueueConfig{DedupWindowMs: state.MaxDedupWindowMs})
			upd := h.apply(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "ok", Config: long, Mask: []string{"dedup_window_ms"}}}})
			for _, err := range []error{res.Failure(), upd.Failure()} {
				if refused := errors.Is(err, ErrInvalid); refused != (v >= state.AdmitVersion) {
					t.Fatalf("dedup window of %d ms at version %d: %v", long.DedupWindowMs, v, err)
				}
			}
		})
	}
}

// TestDefaultDLQNameWithinLimit: every name raftq creates keeps the
// 255-character rule: a queue whose default dead-letter queue name would
// pass it is refused, saying why and what to do, and nothing is created.
func TestDefaultDLQNameWithinLimit(t *testing.T) {
	cases := []struct {
		name string
		dlq  string
		ok   bool
	}{
		{strings.Repeat("a", 251), "", true},
		{strings.Repeat("b", 252), "", false},
		{strings.Repeat("c", 255), "", false},
		{strings.Repeat("d", 255), "shared", true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(len(c.name), c.dlq), func(t *testing.T) {
			h := newHarness(t)
			h.raise(state.AdmitVersion)
			res := h.apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: c.name, Config: &fsmv1.QueueConfig{DeadLetterQueue: c.dlq}}}})
			if c.ok {
				if res.Failure() != nil {
					t.Fatal(res.Failure())
				}
				return
			}
			err := res.Failure()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "251") || !strings.Contains(err.Error(), "dead_letter_queue") {
				t.Fatalf("got %v, want invalid naming the 251-character limit and dead_letter_queue", err)
			}
			if qs := h.f.store.View().QueueNames(); len(qs) != 0 {
				t.Fatalf("created %v", qs)
			}
		})
	}
}
