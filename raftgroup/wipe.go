package raftgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/raftq/raftq/raftlog"
)

// wipeMarker in a data dir asks the next start to set this node's Raft
// state aside and join as a new member: how a replica whose state diverged
// is repaired from the leader (hashicorp/raft cannot push a snapshot to a
// node on demand; a node with no state gets the leader's snapshot).
const wipeMarker = "raft-wipe-requested"

// raftStateFiles are what a node's Raft state consists of in its data dir.
// The node id file and anything else stay.
var raftStateFiles = []string{raftlog.RaftDBFile, raftlog.WALDir, "snapshots", corruptMarker}

// RequestWipe marks dataDir so that the next start of a node on it sets
// its Raft state (log, stable store, snapshots) aside first. The node must
// have been removed from the configuration: it then joins again with no
// state and is brought up to date by the leader.
func RequestWipe(dataDir, reason string) error {
	if err := os.WriteFile(filepath.Join(dataDir, wipeMarker), []byte(reason+"\n"), 0o640); err != nil {
		return fmt.Errorf("cluster: request wipe: %w", err)
	}
	return raftlog.SyncDir(dataDir)
}

// divergedKept is how many set-aside states (diverged-N) a data dir keeps:
// the newest, and the one before it to compare a repeat with. Each holds
// a whole log (a 64 MiB wal segment at least) and the snapshots, and a
// node repaired again and again (the soak: a dozen corrupt faults) filled
// its data dir with them, 65 to 364 MiB in 45 minutes.
const divergedKept = 2

// wipeIfRequested moves the Raft state into dataDir/diverged-N (N one past
// the highest there; kept for a post-mortem, never read again) when
// RequestWipe marked the dir, then removes the mark, and removes all but
// the newest divergedKept of them. A crash half way leaves the mark, so
// the next start finishes the job.
func wipeIfRequested(dataDir string, log *slog.Logger) error {
	reason, err := os.ReadFile(filepath.Join(dataDir, wipeMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	aside, err := divergedDirs(dataDir)
	if err != nil {
		return err
	}
	next := 1
	if len(aside) > 0 {
		next = aside[len(aside)-1] + 1
	}
	dest := filepath.Join(dataDir, "diverged-"+strconv.Itoa(next))
	if err := os.Mkdir(dest, 0o750); err != nil {
		return err
	}
	for _, name := range raftStateFiles {
		err := os.Rename(filepath.Join(dataDir, name), filepath.Join(dest, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := raftlog.SyncDir(dataDir); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dataDir, wipeMarker)); err != nil {
		return err
	}
	log.Warn("set this node's Raft state aside as requested; joining as a new member to take the leader's state",
		"reason", string(reason), "kept_in", dest)
	aside = append(aside, next)
	for _, i := range aside[:max(0, len(aside)-divergedKept)] {
		old := filepath.Join(dataDir, "diverged-"+strconv.Itoa(i))
		if err := os.RemoveAll(old); err != nil {
			log.Warn("removing an older set-aside Raft state", "dir", old, "err", err)
			continue
		}
		log.Info("removed an older set-aside Raft state", "dir", old, "kept", divergedKept)
	}
	return raftlog.SyncDir(dataDir)
}

// divergedDirs returns the N of dataDir's diverged-N directories, sorted.
func divergedDirs(dataDir string) ([]int, error) {
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, err
	}
	var ns []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "diverged-")
		if n, err := strconv.Atoi(rest); ok && err == nil && n > 0 && e.IsDir() {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}
