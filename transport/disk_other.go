//go:build !(linux || darwin)

package transport

// diskFree is not measured on this platform.
func diskFree(string) (uint64, bool) { return 0, false }
