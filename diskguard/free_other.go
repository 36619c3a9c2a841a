//go:build !(linux || darwin)

package diskguard

// Free is not measured on this platform: the guard never refuses there.
func Free(string) (uint64, error) { return 0, ErrUnmeasured }
