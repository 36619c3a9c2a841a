package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/raftq/raftq/raftlog"
)

// nodeIDFile holds, in the data dir, the id of the node the dir belongs
// to. Raft stores peers' ids but not its own, so without it a restart
// under another id (a container's fresh hostname, a typo) would come up
// as a stranger holding another node's log and vote.
const nodeIDFile = "node-id"

// ErrNodeIDMismatch: the data dir belongs to a node with another id.
var ErrNodeIDMismatch = errors.New("cluster: the data dir belongs to another node id")

// PersistedNodeID returns the node id recorded in dataDir, or "" if none
// is (a new data dir, or one from a build that did not record it).
func PersistedNodeID(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, nodeIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: read node id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("cluster: %s is empty", filepath.Join(dataDir, nodeIDFile))
	}
	return id, nil
}

// claimDataDir records id as the data dir's owner on its first start and
// refuses a dir recorded for another id. The record is written to a temp
// file, fsynced and renamed, and the dir fsynced: a crash leaves either no
// record or a whole one.
func claimDataDir(dataDir, id string) error {
	have, err := PersistedNodeID(dataDir)
	if err != nil {
		return err
	}
	if have == id {
		return nil
	}
	if have != "" {
		return fmt.Errorf("%w: %s was made by node %q, not %q: start it with --node-id %s, or give node %q a new data dir",
			ErrNodeIDMismatch, dataDir, have, id, have, id)
	}
	if err := raftlog.WriteRecord(dataDir, nodeIDFile, id); err != nil {
		return fmt.Errorf("cluster: record node id: %w", err)
	}
	return nil
}
