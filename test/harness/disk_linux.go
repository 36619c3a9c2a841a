package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// SmallTmpfs mounts a tmpfs of sizeMiB at a fresh directory, so that a
// test can fill a disk without touching the machine's. It skips t when
// mounting is not permitted (needs root or CAP_SYS_ADMIN). When t ends,
// before (if not nil) runs, to stop what still uses the mount, and then
// the mount is undone; cleanups registered after this call run first.
func SmallTmpfs(t testing.TB, sizeMiB int, before func()) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", sizeMiB)); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if before != nil {
			before()
		}
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk appends to path until the file system refuses (ENOSPC): the
// disk is then full to the last block. Any other error fails t.
func FillDisk(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}
