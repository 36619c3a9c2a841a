//go:build !unix

package cluster

// lockDataDir is a no-op where flock is not available: offline tools
// then rely on the stores' own locks.
func lockDataDir(string) (func(), error) { return func() {}, nil }
