package raftlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// recordingStore records the ranges passed to DeleteRange and can fail the
// n-th one.
type recordingStore struct {
	raft.LogStore
	calls  [][2]uint64
	failAt int // 1-based call to fail; 0: never
}

var errInjected = errors.New("injected")

func (r *recordingStore) DeleteRange(lo, hi uint64) error {
	r.calls = append(r.calls, [2]uint64{lo, hi})
	if len(r.calls) == r.failAt {
		return errInjected
	}
	return r.LogStore.DeleteRange(lo, hi)
}

// boltLog returns a bolt log store holding entries first..last.
func boltLog(t *testing.T, first, last uint64) *raftboltdb.BoltStore {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d", i)})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	return s
}

// present lists which of first..last the store still holds.
func present(t *testing.T, s raft.LogStore, first, last uint64) map[uint64]bool {
	t.Helper()
	got := map[uint64]bool{}
	for i := first; i <= last; i++ {
		var l raft.Log
		switch err := s.GetLog(i, &l); {
		case err == nil:
			if string(l.Data) != fmt.Sprintf("entry %d", i) {
				t.Fatalf("entry %d holds %q", i, l.Data)
			}
			got[i] = true
		case errors.Is(err, raft.ErrLogNotFound):
		default:
			t.Fatal(err)
		}
	}
	return got
}

func TestChunkedDeleteRange(t *testing.T) {
	const first, last = 1, 100
	tests := []struct {
		name      string
		chunk     uint64
		lo, hi    uint64
		wantCalls [][2]uint64
	}{
		{"compaction smaller than a chunk", 10, 1, 5, [][2]uint64{{1, 5}}},
		{"compaction of one chunk less one", 10, 1, 9, [][2]uint64{{1, 9}}},
		{"compaction of exactly one chunk", 10, 1, 10, [][2]uint64{{1, 10}}},
		{"compaction of a chunk and one", 10, 1, 11, [][2]uint64{{1, 10}, {11, 11}}},
		{"compaction of many chunks", 25, 1, 90, [][2]uint64{{1, 25}, {26, 50}, {51, 75}, {76, 90}}},
		{"compaction from below the first index", 40, 0, 90, [][2]uint64{{0, 39}, {40, 79}, {80, 90}}},
		{"everything", 30, 1, 100, [][2]uint64{{1, 30}, {31, 60}, {61, 90}, {91, 100}}},
		{"chunk of one", 1, 1, 3, [][2]uint64{{1, 1}, {2, 2}, {3, 3}}},
		{"tail truncation stays one call", 10, 50, 100, [][2]uint64{{50, 100}}},
		{"middle range stays one call", 10, 20, 60, [][2]uint64{{20, 60}}},
		{"empty range", 10, 5, 4, [][2]uint64{{5, 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingStore{LogStore: boltLog(t, first, last)}
			s := NewChunked(rec, tc.chunk)
			if err := s.DeleteRange(tc.lo, tc.hi); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rec.calls) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("DeleteRange calls = %v, want %v", rec.calls, tc.wantCalls)
			}
			got := present(t, s, first, last)
			for i := uint64(first); i <= last; i++ {
				deleted := i >= tc.lo && i <= tc.hi
				if got[i] == deleted {
					t.Errorf("entry %d present = %v, want %v", i, got[i], !deleted)
				}
			}
		})
	}
}

// TestChunkedDeleteRangeInterrupted checks that a compaction that fails
// part-way leaves a contiguous suffix of the log: what a smaller
// compaction would have left, never a hole.
func TestChunkedDeleteRangeInterrupted(t *testing.T) {
	const first, last = 1, 100
	tests := []struct {
		name      string
		failAt    int
		wantFirst uint64
	}{
		{"first chunk fails", 1, 1},
		{"second chunk fails", 2, 11},
		{"last chunk fails", 8, 71},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingStore{LogStore: boltLog(t, first, last), failAt: tc.failAt}
			s := NewChunked(rec, 10)
			if err := s.DeleteRange(1, 80); !errors.Is(err, errInjected) {
				t.Fatalf("DeleteRange error = %v, want the injected one", err)
			}
			if len(rec.calls) != tc.failAt {
				t.Errorf("%d calls after a failure at call %d", len(rec.calls), tc.failAt)
			}
			fi, err := s.FirstIndex()
			if err != nil {
				t.Fatal(err)
			}
			if fi != tc.wantFirst {
				t.Errorf("FirstIndex = %d, want %d", fi, tc.wantFirst)
			}
			got := present(t, s, first, last)
			for i := uint64(first); i <= last; i++ {
				if got[i] != (i >= tc.wantFirst) {
					t.Errorf("entry %d present = %v after an interrupted compaction", i, got[i])
				}
			}
		})
	}
}
