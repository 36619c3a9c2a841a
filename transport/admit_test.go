package transport_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAdmissionCannotBeBypassed: what a queue holds is bounded by its
// limits and the cluster's, counted as messages really cost, however the
// messages arrive. Before: 200 messages with 3.2 MB of headers and empty
// payloads were accepted into a queue with max_bytes=10 (stats.bytes
// stayed 0), and concurrent enqueues that each passed the leader's check
// against committed state overran max_depth together.
func TestAdmissionCannotBeBypassed(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	waitUntil(t, 10*time.Second, "cluster version", func() error {
		if v := l.State().Reader().ClusterVersion(); v != fsm.MaxLogVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	ctx := tctx(t, time.Minute)
	create := func(name string, cfg *raftqv1.QueueConfig) {
		t.Helper()
		if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	stats := func(name string) *raftqv1.QueueStats {
		t.Helper()
		r, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetQueue().GetStats()
	}

	t.Run("headers count against max_bytes", func(t *testing.T) {
		create("hdr", &raftqv1.QueueConfig{MaxBytes: 10})
		headers := map[string]string{}
		for j := range 16 {
			headers[fmt.Sprintf("h%02d", j)] = strings.Repeat("x", 1021)
		}
		refused := 0
		for range 4 {
			msgs := make([]*raftqv1.EnqueueMessage, 50)
			for i := range msgs {
				msgs[i] = &raftqv1.EnqueueMessage{Headers: headers}
			}
			_, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "hdr", Messages: msgs})
			if status.Code(err) == codes.ResourceExhausted {
				refused++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if st := stats("hdr"); refused != 4 || st.Ready != 0 || st.Bytes != 0 {
			t.Fatalf("%d of 4 batches of 50 messages with 16 KiB of headers refused; queue holds %d messages, %d bytes (max_bytes 10)", refused, st.Ready, st.Bytes)
		}
		create("hdr-big", nil)
		if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "hdr-big", Messages: []*raftqv1.EnqueueMessage{{Headers: headers}}}); err != nil {
			t.Fatal(err)
		}
		if st := stats("hdr-big"); st.Bytes < 16<<10 {
			t.Fatalf("a message with 16 KiB of headers counts %d bytes", st.Bytes)
		}
	})

	t.Run("concurrent enqueues cannot overrun max_depth", func(t *testing.T) {
		const limit, callers = 20, 64
		create("depth", &raftqv1.QueueConfig{MaxDepth: limit})
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				_, errs[i] = l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "depth", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("enqueue: %v", err)
			}
		}
		// More callers than room and nothing consumed: exactly max_depth
		// are admitted (a refusal only comes from a full queue), so a
		// test that refused everything fails too.
		if st := stats("depth"); st.Ready != limit || int64(ok) != st.Ready {
			t.Fatalf("%d enqueues answered OK, the queue holds %d (max_depth %d)", ok, st.Ready, limit)
		}
	})

	t.Run("the cluster setting, changed at runtime", func(t *testing.T) {
		create("cap", nil)
		st, err := l.Admin.Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		held := st.GetHeldBytes()
		if held <= 0 || st.GetSettings() == nil {
			t.Fatalf("status: held %d, settings %v", held, st.GetSettings())
		}
		limit := held + 1000
		resp, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &limit})
		if err != nil || resp.GetSettings().GetMaxQueuedBytes() != limit {
			t.Fatalf("SetClusterSettings: %v, %v", resp, err)
		}
		_, err = l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "cap", Messages: []*raftqv1.EnqueueMessage{{Payload: make([]byte, 2000)}}})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_queued_bytes") {
			t.Fatalf("past the cluster's max_queued_bytes: %v", err)
		}
		neg := int64(-1)
		if _, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &neg}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("negative setting: %v", err)
		}
		zero := int64(0)
		if _, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &zero}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "cap", Messages: []*raftqv1.EnqueueMessage{{Payload: make([]byte, 2000)}}}); err != nil {
			t.Fatalf("with the setting at 0 (unlimited): %v", err)
		}
	})

	t.Run("dedup window bound", func(t *testing.T) {
		_, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "long", Config: &raftqv1.QueueConfig{DedupWindowMs: fsm.MaxDedupWindowMs + 1}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "dedup_window_ms") {
			t.Fatalf("dedup window past the bound: %v", err)
		}
		_, err = l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: strings.Repeat("n", 252)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "251") {
			t.Fatalf("a 252-character name with a default DLQ: %v", err)
		}
	})
}
