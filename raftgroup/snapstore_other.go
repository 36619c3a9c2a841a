//go:build !linux

package raftgroup

import (
	"fmt"
	"os"
)

// Without sync_file_range there is no asynchronous writeback to start:
// the data goes out when the previous chunk is waited for.
func startWriteback(*os.File, int64, int64) error { return nil }

// waitWriteback flushes the whole file, which bounds the dirty data the
// same way, only without overlapping the writing and the flushing.
func waitWriteback(f *os.File, _, _ int64) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync snapshot file: %w", err)
	}
	return nil
}
