package raftlog

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// writeTimer is a log store whose commits take the disk times it is
// given, as bbolt would report them in its statistics.
type writeTimer struct {
	raft.LogStore
	next  []time.Duration
	total time.Duration
	fail  bool
}

func (w *writeTimer) StoreLogs(logs []*raft.Log) error {
	if w.fail {
		return errors.New("disk full")
	}
	w.total += w.next[0]
	w.next = w.next[1:]
	return w.LogStore.StoreLogs(logs)
}

func (w *writeTimer) diskTime() time.Duration { return w.total }

// TestTimedLogStore: each append is observed once in both histograms, its
// disk time read from the store's statistics around it; a failed append
// is not observed; the stored entries are the store's.
func TestTimedLogStore(t *testing.T) {
	inner := &writeTimer{LogStore: raft.NewInmemStore(), next: []time.Duration{50 * time.Microsecond, 3 * time.Millisecond, 500 * time.Millisecond}}
	s := NewTimed(inner, inner.diskTime)
	for i := range uint64(3) {
		if err := s.StoreLogs([]*raft.Log{{Index: 2*i + 1}, {Index: 2*i + 2}}); err != nil {
			t.Fatal(err)
		}
	}
	inner.fail = true
	if err := s.StoreLog(&raft.Log{Index: 7}); err == nil {
		t.Fatal("the failing append succeeded")
	}
	if last, _ := s.LastIndex(); last != 6 {
		t.Errorf("last index %d, want 6", last)
	}
	st := s.Stats()
	if st.Append.Count != 3 || st.Fsync.Count != 3 {
		t.Fatalf("observed %d appends, %d fsyncs; want 3 each", st.Append.Count, st.Fsync.Count)
	}
	if want := 0.50305; st.Fsync.Sum < want-1e-9 || st.Fsync.Sum > want+1e-9 {
		t.Errorf("fsync sum %v s, want %v", st.Fsync.Sum, want)
	}
	bounds := LogLatencyBuckets()
	for i, b := range bounds {
		want := uint64(0)
		for _, d := range []float64{0.00005, 0.003, 0.5} {
			if d <= b {
				want++
			}
		}
		if st.Fsync.Counts[i] != want {
			t.Errorf("fsync bucket ≤%v s holds %d, want %d (cumulative)", b, st.Fsync.Counts[i], want)
		}
	}
	if st.Append.Counts[len(bounds)-1] > 3 {
		t.Errorf("append buckets %v exceed the count", st.Append.Counts)
	}
}
