package raftgroup

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing the range's dirty pages
// without waiting for them.
func startWriteback(f *os.File, off, n int64) error {
	if err := unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return fmt.Errorf("sync_file_range write %d+%d: %w", off, n, err)
	}
	return nil
}

// waitWriteback writes the range's remaining dirty pages and waits until
// they are on disk. sync_file_range makes no durability promise (no
// metadata, no disk cache flush); it only moves the data out of the page
// cache early so the final fsync has little left to do.
func waitWriteback(f *os.File, off, n int64) error {
	flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	if err := unix.SyncFileRange(int(f.Fd()), off, n, flags); err != nil {
		return fmt.Errorf("sync_file_range wait %d+%d: %w", off, n, err)
	}
	return nil
}
