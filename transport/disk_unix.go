//go:build linux || darwin

package transport

import "syscall"

// diskFree is the space available to an unprivileged writer on dir's file
// system.
func diskFree(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true //nolint:gosec // sizes are non-negative
}
