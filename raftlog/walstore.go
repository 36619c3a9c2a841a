package raftlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/etcd/pkg/fileutil"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// LogStore names where a node keeps its Raft log. The stable store (term,
// vote) is bolt's raft.db with either.
type LogStore string

const (
	// LogStoreAuto is the data dir's log store if it holds a log, else
	// DefaultLogStore.
	LogStoreAuto LogStore = ""
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: segment files
	// appended to, one fsync per batch, entries in a binary encoding.
	LogStoreWAL LogStore = "wal"
	// LogStoreBolt is raft-boltdb's raft.db (the log beside the stable
	// store): a B+tree transaction per batch, two fdatasyncs, msgpack.
	LogStoreBolt LogStore = "bolt"

	// DefaultLogStore is what a new data dir gets (cluster/DESIGN.md,
	// "The log store", says why).
	DefaultLogStore = LogStoreWAL

	// WALDir is the wal log store's directory in the data dir.
	WALDir = "wal"
)

// ParseLogStore checks a log store name: "wal", "bolt" or "" (auto).
func ParseLogStore(s string) (LogStore, error) {
	switch ls := LogStore(s); ls {
	case LogStoreAuto, LogStoreWAL, LogStoreBolt:
		return ls, nil
	}
	return "", fmt.Errorf("log store %q: want wal or bolt", s)
}

// ErrLogStoreMismatch is returned by New when Config.LogStore names a log
// store other than the one holding the data dir's Raft state: switching
// would start from an empty log and lose what the other holds.
var ErrLogStoreMismatch = errors.New("cluster: the data dir's Raft log is in another log store")

// walMarker is all raft.db holds in a data dir whose Raft state (log,
// term and vote) is in wal/. It is not a bolt file on purpose: a raftq
// build from before the wal opens raft.db as its log and stable store,
// and bolt refuses a file this short ("invalid database"), so such a
// build stops instead of starting from the snapshots without the log and
// the vote (cluster/DESIGN.md, "The log store"; TestOldBuildRefusesWALDataDir).
// Shorter than bolt's first page (4 KiB) so that every bolt version fails
// on reading it, before it writes anything.
const walMarker = walMarkerMagic + " v1\n" +
	"This data dir keeps its Raft log, term and vote in wal/ (raftq's wal log store).\n" +
	"This file is not a bolt database on purpose: raftq builds from before the wal\n" +
	"log store open raft.db, fail on it, and stop rather than run without the log.\n" +
	"Do not delete or replace it: use a raftq build with the wal log store.\n"

// walMarkerMagic begins walMarker: what tells it from a bolt file.
const walMarkerMagic = "raftq-wal-data-dir"

// readRaftDB tells what the data dir's raft.db is: absent, the wal
// marker, or something else (bolt's file, opened as such).
func readRaftDB(path string) (exists, marker bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	head := make([]byte, len(walMarkerMagic))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return true, false, err
	}
	return true, string(head[:n]) == walMarkerMagic, nil
}

// writeWALMarker replaces raft.db with walMarker, atomically: the step
// that makes a data dir a wal one, taken last (after the wal holds the
// term and vote), so that a crash before it leaves the dir as it was.
func writeWALMarker(dataDir string) error {
	path := filepath.Join(dataDir, RaftDBFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = f.WriteString(walMarker)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mark %s a wal data dir: %w", dataDir, err)
	}
	return SyncDir(dataDir)
}

// stableKeys are what hashicorp/raft keeps in its stable store (part of
// its on-disk format): the current term, and the last vote.
var (
	stableUint64Keys = [][]byte{[]byte(KeyCurrentTerm), []byte("LastVoteTerm")}
	stableBytesKeys  = [][]byte{[]byte("LastVoteCand")}
)

// copyStable copies raft's term and vote from bolt's stable store into
// to. A key never set is not copied.
func copyStable(from *raftboltdb.BoltStore, to raft.StableStore) error {
	for _, k := range stableUint64Keys {
		v, err := from.GetUint64(k)
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := to.SetUint64(k, v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	for _, k := range stableBytesKeys {
		v, err := from.Get(k)
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := to.Set(k, v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	return nil
}

// Opened is the log store and stable store a node runs on.
type Opened struct {
	Kind   LogStore
	Store  raft.LogStore
	Stable raft.StableStore
	// DiskTime is the store's running total of write and sync time.
	DiskTime func() time.Duration
	// Syncs says when the log's fsyncs run (the wal's segment syncs); nil
	// for bolt, whose fsyncs happen inside bbolt.
	Syncs *Syncs
	// Close releases both.
	Close func() error
}

func boltOpened(b *raftboltdb.BoltStore) *Opened {
	return &Opened{Kind: LogStoreBolt, Store: b, Stable: b, Close: b.Close, DiskTime: func() time.Duration { return b.Stats().TxStats.WriteTime }}
}

func walOpened(w *walStore) *Opened {
	return &Opened{Kind: LogStoreWAL, Store: w, Stable: w, Close: w.Close, DiskTime: w.vfs.total, Syncs: &w.vfs.syncs}
}

// Open opens the data dir's Raft log and stable store. The two
// layouts (cluster/DESIGN.md, "The log store"):
//   - bolt: raft.db is a bolt file holding the log, term and vote;
//   - wal: wal/ holds the log, and the term and vote in its metadata
//     file; raft.db is walMarker, which builds before the wal refuse.
//
// Which one: raft.db as the marker is the wal. A bolt raft.db stays bolt
// unless want is the wal and its log is empty: then the term and vote
// move into the wal, and raft.db becomes the marker last. A dir with
// neither (new, wiped for repair) takes want, or DefaultLogStore. want naming the other store of a dir
// whose log is not empty is refused (ErrLogStoreMismatch, nothing
// changed), and so is a wal dir with want bolt. A wal/ left by the
// layout before the marker (raft.db bolt with the term, wal/ with the
// log) is converted: its term and vote move into the wal.
func Open(dataDir string, want LogStore, log hclog.Logger) (_ *Opened, err error) {
	return OpenSized(dataDir, want, 0, log)
}

// OpenSized is Open with the wal's new segments of segmentSize bytes
// (0: wal.DefaultSegmentSize, 64 MiB). A small group's log (the meta
// group's: a few entries a minute) takes small segments, so that it does
// not take a whole default segment of the disk, which raft-wal allocates
// up front. Existing segments keep the size they were made with.
func OpenSized(dataDir string, want LogStore, segmentSize int, log hclog.Logger) (_ *Opened, err error) {
	if segmentSize <= 0 {
		segmentSize = wal.DefaultSegmentSize
	}
	dbPath := filepath.Join(dataDir, RaftDBFile)
	dir := filepath.Join(dataDir, WALDir)
	mismatch := func(found LogStore) error {
		return fmt.Errorf("%w: asked for the %s log store, but %s holds this node's Raft state in the %s store; "+
			"drop the log store setting (the data dir's is used) or give the node a new data dir",
			ErrLogStoreMismatch, want, dataDir, found)
	}
	dbExists, marked, err := readRaftDB(dbPath)
	if err != nil {
		return nil, fmt.Errorf("raft.db: %w", err)
	}
	_, statErr := os.Stat(dir)
	walExists := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("wal log: %w", statErr)
	}
	if marked {
		if want == LogStoreBolt {
			return nil, mismatch(LogStoreWAL)
		}
		if !walExists {
			return nil, fmt.Errorf("%s marks a wal data dir, but %s is missing: restore it, or set the data dir aside and let the node rejoin", dbPath, dir)
		}
		w, err := openWALSized(dir, log, segmentSize)
		if err != nil {
			return nil, err
		}
		return walOpened(w), nil
	}

	var w *walStore
	var bolt *raftboltdb.BoltStore
	defer func() {
		if err != nil {
			if w != nil {
				_ = w.Close()
			}
			if bolt != nil {
				_ = bolt.Close()
			}
		}
	}()
	var walLast uint64
	if walExists {
		if w, err = openWALSized(dir, log, segmentSize); err != nil {
			return nil, err
		}
		if walLast, err = w.LastIndex(); err != nil {
			return nil, fmt.Errorf("wal log: %w", err)
		}
	}
	if !dbExists && walLast > 0 {
		return nil, fmt.Errorf("%s holds a Raft log, but %s, which marks a wal data dir, is missing: restore it, or set the data dir aside and let the node rejoin", dir, dbPath)
	}
	var boltLast uint64
	if dbExists {
		if bolt, err = OpenBolt(dbPath); err != nil {
			return nil, fmt.Errorf("raft store: %w", err)
		}
		if boltLast, err = bolt.LastIndex(); err != nil {
			return nil, fmt.Errorf("bolt log: %w", err)
		}
	}
	if boltLast > 0 && walLast > 0 {
		return nil, fmt.Errorf("both raft.db (up to index %d) and %s (up to index %d) hold a Raft log; "+
			"move the one that is not this node's aside", boltLast, dir, walLast)
	}
	var found LogStore
	switch {
	case walLast > 0:
		found = LogStoreWAL // the layout before the marker
	case boltLast > 0:
		found = LogStoreBolt
	case dbExists && want != LogStoreWAL:
		found = LogStoreBolt // its term, if any, and nothing asks to move it
	}
	if found != LogStoreAuto && want != LogStoreAuto && want != found {
		return nil, mismatch(found)
	}
	kind := cmpOr(found, want, DefaultLogStore)

	if kind == LogStoreBolt {
		if w != nil { // empty, or found would be wal
			if err := w.Close(); err != nil {
				return nil, fmt.Errorf("wal log: %w", err)
			}
			w = nil
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("remove the empty wal log: %w", err)
			}
			if err := SyncDir(dataDir); err != nil {
				return nil, err
			}
		}
		if bolt == nil {
			if bolt, err = OpenBolt(dbPath); err != nil {
				return nil, fmt.Errorf("raft store: %w", err)
			}
		}
		return boltOpened(bolt), nil
	}

	if w == nil {
		if err := os.Mkdir(dir, 0o750); err != nil {
			return nil, fmt.Errorf("wal log: %w", err)
		}
		if err := SyncDir(dataDir); err != nil {
			return nil, err
		}
		if w, err = openWALSized(dir, log, segmentSize); err != nil {
			return nil, err
		}
	}
	if bolt != nil {
		// Until raft.db is the marker, it holds the term and vote: a
		// crash before then repeats this copy from it.
		if err := copyStable(bolt, w); err != nil {
			return nil, fmt.Errorf("move the term and vote into the wal: %w", err)
		}
		err := bolt.Close()
		bolt = nil
		if err != nil {
			return nil, fmt.Errorf("raft store: %w", err)
		}
		log.Info("moved the Raft term and vote from raft.db into the wal", "dir", dir)
	}
	if err := writeWALMarker(dataDir); err != nil {
		return nil, err
	}
	return walOpened(w), nil
}

func cmpOr(vals ...LogStore) LogStore {
	for _, v := range vals {
		if v != LogStoreAuto {
			return v
		}
	}
	return LogStoreAuto
}

// walStore is raft-wal on a file system that times its writes, behind a
// lock that lets it be reopened. A write that fails can leave raft-wal
// refusing every later append although nothing on disk is wrong: the
// rotation to the next segment runs on raft-wal's own goroutine after the
// append that filled the segment, and when it fails (ENOSPC preallocating
// the next 64 MiB segment file, or committing the wal's metadata) the
// in-memory tail stays the sealed segment and every append after it
// answers "segment is sealed" until the process restarts. A failed write
// therefore marks the store broken, and the next write first reopens it
// the way a restart would (repairWAL, then wal.Open): a full disk stops
// appends only until space returns (TestWALRecoversFromFullDisk).
type walStore struct {
	dir string
	log hclog.Logger
	vfs *timedVFS
	// segmentSize is the size of the segment files (preallocated).
	segmentSize uint32

	// mu serialises writes (appends, deletions, the stable store) with
	// reopening. Reads of the log do not take it, so they never wait for
	// an append's fsync: they load cur under closing.
	mu  sync.Mutex
	w   *wal.WAL // nil only after a reopen that could not open it
	cur atomic.Pointer[wal.WAL]
	// closing is held for writing while the wal is closed (a reopen,
	// Close) and for reading by every read, which then waits for the
	// reopen instead of failing. raft-wal's reads also race its Close: a
	// read that passed its closed check then meets the empty state Close
	// swaps in and dereferences nil (TestWALReadsDuringReopen hit it).
	closing sync.RWMutex
	// broken is the write error that asks for a reopen before the next
	// write (nil: none).
	broken error
	// keepTo, after an append failed, is the last index the wal held
	// before it: what raft believes the log ends at.
	keepTo *uint64
	// closed: Close ran; nothing reopens the wal after it.
	closed bool
}

// openWAL opens the wal in dir. v0.4.1 or later: v0.4.0 left a segment
// truncated at its tail unreadable after a restart (hashicorp/raft-wal#31;
// TestWALTailTruncationSurvivesRestart), and did not close its metadata
// file.
func openWAL(dir string, log hclog.Logger) (*walStore, error) {
	return openWALSized(dir, log, wal.DefaultSegmentSize)
}

// openWALSized opens the wal in dir with segments of size bytes (tests
// use small ones to rotate often).
func openWALSized(dir string, log hclog.Logger, size int) (*walStore, error) {
	s := &walStore{dir: dir, log: log, vfs: &timedVFS{VFS: walfs.New()}, segmentSize: uint32(size)} //nolint:gosec // a few MiB
	if err := repairWAL(dir, s.segmentSize, log); err != nil {
		return nil, fmt.Errorf("wal log in %s: %w", dir, err)
	}
	w, err := s.open()
	if err != nil {
		return nil, err
	}
	s.w = w
	s.cur.Store(w)
	return s, nil
}

func (s *walStore) open() (*wal.WAL, error) {
	w, err := wal.Open(s.dir, wal.WithLogger(s.log), wal.WithSegmentFiler(segment.NewFiler(s.dir, s.vfs)),
		wal.WithSegmentSize(int(s.segmentSize)))
	if err != nil {
		return nil, fmt.Errorf("wal log in %s: %w", s.dir, err)
	}
	return w, nil
}

// reopenLocked closes the wal and opens it again as a restart would.
// When the repair fails (the disk still full), the wal is opened all the
// same so that reads go on, and stays broken: the next write tries again.
// s.mu must be held for writing.
func (s *walStore) reopenLocked() error {
	s.closing.Lock()
	defer s.closing.Unlock()
	s.cur.Store(nil)
	if s.w != nil {
		if err := s.w.Close(); err != nil {
			s.log.Warn("closing the wal log to reopen it", "error", err)
		}
		s.w = nil
	}
	rerr := repairWAL(s.dir, s.segmentSize, s.log)
	w, err := s.open()
	if err != nil {
		s.broken = errors.Join(rerr, err)
		return fmt.Errorf("reopen the wal log after a failed write: %w", s.broken)
	}
	s.w = w
	s.cur.Store(w)
	if rerr != nil {
		s.broken = rerr
		return fmt.Errorf("repair the wal log after a failed write: %w", rerr)
	}
	s.log.Info("reopened the wal log after a failed write; appends work again")
	s.broken = nil
	return nil
}

// repairLocked reopens the wal when an earlier write failed. An append
// that failed may have left part of its batch in the segment file; if a
// complete part reads back after the reopen, it is cut off, since raft
// was told the append failed and appends next after what it had before
// (raft-wal allows no gap and no overlap). s.mu must be held for writing.
func (s *walStore) repairLocked() error {
	if s.broken == nil && s.w != nil {
		return nil
	}
	if err := s.reopenLocked(); err != nil {
		return err
	}
	if s.keepTo == nil {
		return nil
	}
	keep := *s.keepTo
	last, err := s.w.LastIndex()
	if err == nil && last > keep {
		s.log.Warn("dropping entries of a failed append that read back after reopening the wal log", "from", keep+1, "to", last)
		err = s.w.DeleteRange(keep+1, last)
	}
	if err != nil {
		s.broken = err
		return fmt.Errorf("wal log: cut a failed append: %w", err)
	}
	s.keepTo = nil
	return nil
}

// write runs f on the wal, reopening it first when an earlier write
// failed, and marks the store broken when f fails.
func (s *walStore) write(f func(w *wal.WAL) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.repairLocked(); err != nil {
		return err
	}
	if err := f(s.w); err != nil {
		s.broken = err
		return err
	}
	return nil
}

// read runs f on the wal, without waiting for writes. A read that meets
// a reopen waits for it (closing) and runs on the reopened wal: raft does
// not retry a failed read of the log, it panics when reading a committed
// entry fails (processLogs).
func (s *walStore) read(f func(w *wal.WAL) error) error {
	s.closing.RLock()
	if w := s.cur.Load(); w != nil {
		defer s.closing.RUnlock()
		return f(w)
	}
	s.closing.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("wal log in %s: %w", s.dir, wal.ErrClosed)
	}
	if s.w == nil {
		// The last reopen could not open the wal: try again, as a
		// write would.
		if err := s.repairLocked(); err != nil {
			return err
		}
	}
	return f(s.w)
}

// stable runs f, a stable store call, on the wal under the write lock:
// raft panics if one fails, so it must not meet the wal closed for a
// reopen that a compaction's deletion started.
func (s *walStore) stable(f func(w *wal.WAL) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		if err := s.repairLocked(); err != nil {
			return err
		}
	}
	return f(s.w)
}

// FirstIndex implements raft.LogStore.
func (s *walStore) FirstIndex() (i uint64, err error) {
	err = s.read(func(w *wal.WAL) error { i, err = w.FirstIndex(); return err })
	return i, err
}

// LastIndex implements raft.LogStore.
func (s *walStore) LastIndex() (i uint64, err error) {
	err = s.read(func(w *wal.WAL) error { i, err = w.LastIndex(); return err })
	return i, err
}

// GetLog implements raft.LogStore.
func (s *walStore) GetLog(index uint64, l *raft.Log) error {
	return s.read(func(w *wal.WAL) error { return w.GetLog(index, l) })
}

// StoreLog implements raft.LogStore.
func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore. ErrSealed means raft-wal's
// rotation failed after the append that filled the segment, and nothing
// of this batch was written: the wal is reopened (which finishes the
// rotation, or answers why it cannot, ENOSPC on a full disk) and the
// batch tried once more.
func (s *walStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.repairLocked(); err != nil {
		return err
	}
	last, err := s.w.LastIndex()
	if err != nil {
		return err
	}
	err = s.w.StoreLogs(logs)
	if errors.Is(err, types.ErrSealed) {
		s.broken = err
		if err := s.repairLocked(); err != nil {
			return err
		}
		err = s.w.StoreLogs(logs)
	}
	if err != nil {
		s.broken, s.keepTo = err, &last
	}
	return err
}

// DeleteRange implements raft.LogStore.
func (s *walStore) DeleteRange(lo, hi uint64) error {
	return s.write(func(w *wal.WAL) error { return w.DeleteRange(lo, hi) })
}

// IsMonotonic implements raft.MonotonicLogStore: the wal allows no gap.
func (s *walStore) IsMonotonic() bool { return true }

// Set implements raft.StableStore (the wal's metadata file holds it).
func (s *walStore) Set(key, val []byte) error {
	return s.stable(func(w *wal.WAL) error { return w.Set(key, val) })
}

// Get implements raft.StableStore.
func (s *walStore) Get(key []byte) (v []byte, err error) {
	err = s.stable(func(w *wal.WAL) error { v, err = w.Get(key); return err })
	return v, err
}

// SetUint64 implements raft.StableStore.
func (s *walStore) SetUint64(key []byte, val uint64) error {
	return s.stable(func(w *wal.WAL) error { return w.SetUint64(key, val) })
}

// GetUint64 implements raft.StableStore.
func (s *walStore) GetUint64(key []byte) (v uint64, err error) {
	err = s.stable(func(w *wal.WAL) error { v, err = w.GetUint64(key); return err })
	return v, err
}

// Close closes the wal.
func (s *walStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Lock()
	defer s.closing.Unlock()
	s.closed = true
	s.cur.Store(nil)
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	return err
}

// repairWAL makes the wal in dir one that wal.Open can append to: it
// finishes a rotation a crash or a failed write interrupted, and gives
// the tail segment its file at full size (see finishRotation and
// ensureSegmentFile). It changes nothing when there is nothing to repair.
func repairWAL(dir string, segmentSize uint32, log hclog.Logger) error {
	meta := &metadb.BoltMetaDB{}
	st, err := meta.Load(dir)
	if err != nil {
		return err
	}
	defer meta.Close()
	n := len(st.Segments)
	if n == 0 || !st.Segments[n-1].SealTime.IsZero() {
		return nil // a new wal: wal.Open creates its first segment
	}
	tail, err := finishRotation(dir, meta, &st, segmentSize, log)
	if err != nil {
		return err
	}
	return ensureSegmentFile(dir, tail, log)
}

// finishRotation completes a segment rotation that a crash or a failed
// write interrupted, and returns the tail segment. The append that fills
// a segment writes the segment's index and is fsynced; the rotation that
// records the segment as sealed and starts the next one runs after it,
// on the wal's own goroutine. Killed in between, or failing there, the
// metadata still calls the sealed segment the tail, and raft-wal v0.4.1
// reopens it as such and refuses every append ("segment is sealed") for
// good (TestWALKilledBetweenSealAndRotation). This records what the
// rotation would have: the tail sealed where its index says, and a next
// segment, whose file is created at full size first, so that a disk too
// full for it fails here and changes nothing. One metadata commit,
// atomic: a crash before it leaves the same state for the next start.
func finishRotation(dir string, meta *metadb.BoltMetaDB, st *types.PersistentState, segmentSize uint32, log hclog.Logger) (types.SegmentInfo, error) {
	n := len(st.Segments)
	tail := st.Segments[n-1]
	sw, err := segment.NewFiler(dir, walfs.New()).RecoverTail(tail)
	if errors.Is(err, fs.ErrNotExist) {
		return tail, nil // its file is created by ensureSegmentFile
	}
	if err != nil {
		return tail, err
	}
	sealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil || !sealed {
		return tail, err
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	next := types.SegmentInfo{ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: segmentSize, Codec: tail.Codec, CreateTime: now}
	if err := ensureSegmentFile(dir, next, log); err != nil {
		return tail, err
	}
	st.Segments = append(st.Segments[:n-1], tail, next)
	st.NextSegmentID++
	if err := meta.CommitState(*st); err != nil {
		return tail, err
	}
	log.Warn("finished a segment rotation interrupted by a crash or a failed write", "segment", tail.ID, "last_index", last)
	return next, nil
}

// ensureSegmentFile gives the unsealed segment info its file, allocated
// to its full size as raft-wal's own Create does, and makes the file and
// its directory entry durable. A file already that size is left alone.
// A shorter one is what a rotation leaves when preallocating the file
// met a full disk (raft-wal created the file, then failed): appends to it
// would grow it, and could meet ENOSPC half way through a batch.
func ensureSegmentFile(dir string, info types.SegmentInfo, log hclog.Logger) error {
	path := filepath.Join(dir, segment.FileName(info))
	if fi, err := os.Stat(path); err == nil && fi.Size() >= int64(info.SizeLimit) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	err = fileutil.Preallocate(f, int64(info.SizeLimit), true)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("allocate wal segment %s: %w", path, err)
	}
	log.Info("allocated a wal segment file a failed rotation left short or missing", "file", path)
	return SyncDir(dir)
}

// timedVFS is the wal's file system, counting the time its segment
// writers spend writing and syncing (the disk part of an append), and
// publishing when they sync (syncs: the snapshot's write-behind starts
// its writeback between them).
type timedVFS struct {
	types.VFS
	nanos atomic.Int64
	syncs Syncs
}

func (v *timedVFS) total() time.Duration { return time.Duration(v.nanos.Load()) }

func (v *timedVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &timedFile{WritableFile: f, nanos: &v.nanos, syncs: &v.syncs}, nil
}

func (v *timedVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &timedFile{WritableFile: f, nanos: &v.nanos, syncs: &v.syncs}, nil
}

type timedFile struct {
	types.WritableFile
	nanos *atomic.Int64
	syncs *Syncs
}

func (f *timedFile) WriteAt(p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := f.WritableFile.WriteAt(p, off)
	f.nanos.Add(int64(time.Since(start)))
	return n, err
}

func (f *timedFile) Sync() error {
	f.syncs.begin()
	defer f.syncs.end()
	start := time.Now()
	err := f.WritableFile.Sync()
	f.nanos.Add(int64(time.Since(start)))
	return err
}

var (
	_ raft.LogStore          = (*walStore)(nil)
	_ raft.MonotonicLogStore = (*walStore)(nil)
	_ io.Closer              = (*walStore)(nil)
)
