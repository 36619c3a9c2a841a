//go:build unix

package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes the data dir's lock (an flock on DATA_DIR/lock, held
// while the node runs, released by the kernel if the process dies), so
// that offline tools (cluster recover) can tell a running node's dir.
func lockDataDir(dataDir string) (release func(), err error) {
	path := filepath.Join(dataDir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("cluster: data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (%s)", ErrDataDirInUse, dataDir, path)
		}
		return nil, fmt.Errorf("cluster: data dir lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
