package raftlog

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// failingStore fails every append with err.
type failingStore struct {
	raft.LogStore
	err error
}

func (s *failingStore) StoreLogs([]*raft.Log) error { return s.err }

// TestSpaceLogStoreRecognisesENOSPCThroughLogCache: raft's LogCache
// flattens the store's error into a string; an append that failed for
// lack of space is still recognised as one, and nothing else is.
func TestSpaceLogStoreRecognisesENOSPCThroughLogCache(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: `/data/"odd"/raft.db`, Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"ENOSPC", enospc, true},
		{"another I/O error", &os.PathError{Op: "write", Path: "/data/raft.db", Err: syscall.EIO}, false},
		{"plain error", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &failingStore{LogStore: raft.NewInmemStore(), err: tc.err}
			s := &Space{LogStore: inner, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dir: "/data"}
			cache, err := raft.NewLogCache(8, s)
			if err != nil {
				t.Fatal(err)
			}
			got := cache.StoreLogs([]*raft.Log{{Index: 1, Term: 1}})
			if got == nil {
				t.Fatal("the append did not fail")
			}
			if errors.Is(got, syscall.ENOSPC) {
				t.Log("LogCache now keeps the error chain; the text match is no longer needed")
			}
			if s.IsNoSpace(got) != tc.want {
				t.Fatalf("IsNoSpace(%q) = %t, want %t", got, !tc.want, tc.want)
			}
			if s.failing.Load() != tc.want {
				t.Fatalf("failing = %t after %v", s.failing.Load(), tc.err)
			}
		})
	}
}
