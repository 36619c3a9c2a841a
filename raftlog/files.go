package raftlog

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// RaftDBFile is the Raft stable store, and the log store of data dirs
// with the bolt one (bolt), in the data dir.
const RaftDBFile = "raft.db"

// OpenBolt opens raft.db (RaftDBFile): the stable store, and the log of a data dir on
// the bolt log store.
func OpenBolt(path string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{
		Path:   path,
		NoSync: false, // every append is fsynced before Raft counts it
		BoltOptions: &bbolt.Options{
			// A second broker on the same data dir fails instead of hanging.
			Timeout: 5 * time.Second,
			// Log compaction leaves bolt with a large freelist. Written at
			// every commit (the default) and kept as a sorted array, it
			// came to dominate the leader's CPU after a 1 GiB backlog was
			// compacted: drain fell to ~2,000 msgs/s with bbolt merging and
			// copying the freelist on each transaction. Not syncing it
			// (bolt rebuilds it by scanning at open) and keeping it as a
			// map is what Consul does for the same reason. Durability of
			// the log is unchanged: data pages and meta are still fsynced.
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
}

// SyncDir fsyncs a directory, so a rename in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteRecord writes value and a newline to dir/name: temp file, fsync,
// rename, fsync of the dir, so a crash leaves the old record or the new
// one whole. The node id, the cluster id and a group's corruption marker
// are kept this way.
func WriteRecord(dir, name, value string) error {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(append([]byte(value), '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
