//go:build linux || darwin

package diskguard

import (
	"fmt"
	"syscall"
)

// Free is the space available to an unprivileged writer on dir's file
// system (statfs: available blocks times block size).
func Free(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // sizes are non-negative
}
