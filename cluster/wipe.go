package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
)

// wipeMarker in a data dir asks the next start to set this node's Raft
// state aside and join as a new member: how a replica whose state diverged
// is repaired from the leader (hashicorp/raft cannot push a snapshot to a
// node on demand; a node with no state gets the leader's snapshot).
const wipeMarker = "raft-wipe-requested"

// raftStateFiles are what a node's Raft state consists of in its data dir.
// The node id file and anything else stay.
var raftStateFiles = []string{raftDBFile, walDir, "snapshots", corruptMarker}

// RequestWipe marks dataDir so that the next start of a node on it sets
// its Raft state (log, stable store, snapshots) aside first. The node must
// have been removed from the configuration: it then joins again with no
// state and is brought up to date by the leader.
func RequestWipe(dataDir, reason string) error {
	if err := os.WriteFile(filepath.Join(dataDir, wipeMarker), []byte(reason+"\n"), 0o640); err != nil {
		return fmt.Errorf("cluster: request wipe: %w", err)
	}
	return syncDir(dataDir)
}

// wipeIfRequested moves the Raft state into dataDir/diverged-N (kept for a
// post-mortem, never read again) when RequestWipe marked the dir, then
// removes the mark. A crash half way leaves the mark, so the next start
// finishes the job.
func wipeIfRequested(dataDir string, log *slog.Logger) error {
	reason, err := os.ReadFile(filepath.Join(dataDir, wipeMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dest := ""
	for i := 1; ; i++ {
		dest = filepath.Join(dataDir, "diverged-"+strconv.Itoa(i))
		if _, err := os.Stat(dest); errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err := os.Mkdir(dest, 0o750); err != nil {
		return err
	}
	for _, name := range raftStateFiles {
		err := os.Rename(filepath.Join(dataDir, name), filepath.Join(dest, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := syncDir(dataDir); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dataDir, wipeMarker)); err != nil {
		return err
	}
	log.Warn("set this node's Raft state aside as requested; joining as a new member to take the leader's state",
		"reason", string(reason), "kept_in", dest)
	return syncDir(dataDir)
}
