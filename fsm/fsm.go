package fsm

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// Notifier learns which queues an applied batch touched (new ready work,
// leases ended, config changed). It is called after the state lock is
// released and must not block: the scheduler coalesces the signal.
type Notifier interface {
	QueuesChanged(queues []string)
}

// MaxLogVersion is the newest log version this build understands: it
// applies entries of versions 1..MaxLogVersion by each entry's own rules
// and stops (Options.Fatal) at a newer one. Version 1 is the format
// before versioning (entries carry no version); version 2 adds only the
// SetClusterVersion command. fsm/DESIGN.md lists every version.
const MaxLogVersion uint32 = 2

// ErrNewerVersion marks an entry or snapshot written under a log version
// newer than MaxLogVersion: this node must not apply it (it would guess
// at rules it does not know) and stops instead.
var ErrNewerVersion = errors.New("written by a newer raftq version")

// ErrHalted is every result after the FSM met a newer version: nothing
// more is applied, so this replica's state stays a true prefix of the log.
var ErrHalted = errors.New("state machine halted")

// Options configure a new FSM. The zero value is usable.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Notifier, if set, learns which queues each applied batch touched.
	Notifier Notifier
	// Fatal stops the node when the FSM meets an entry or snapshot of a
	// log version newer than MaxLogVersion. It is called without locks
	// held. The default panics with the error's message; a composition
	// root may log and exit instead. The FSM stops applying either way.
	Fatal func(error)
}

// FSM is the replicated state. It implements raft.FSM and raft.BatchingFSM.
// Reads take the read lock; Apply takes the write lock.
type FSM struct {
	log *slog.Logger

	mu       sync.RWMutex
	notifier Notifier

	queues    map[string]*queue
	delayed   *btree.BTreeG[timedRef] // delayed messages by visible time
	ttl       *btree.BTreeG[timedRef] // ready/delayed messages by TTL
	leases    *btree.BTreeG[timedRef] // leased messages by deadline
	dedupExp  *btree.BTreeG[dedupRef] // dedup entries by expiry
	consumers map[string]map[queueMsg]struct{}

	totalBytes   int64 // payload bytes across queues (derived, like the per-queue counters)
	lastNow      int64
	appliedIndex uint64
	keySeq       uint64 // derived: activation order of fairness keys, not part of the digest

	checkpoints []*checkpointState // states frozen at Checkpoint commands, newest last

	// clusterVersion is the replicated cluster version: the log version
	// every voter supports, raised by SetClusterVersion. Part of the state.
	clusterVersion uint32

	fatal  func(error)
	halted error // set once a newer version was met; nothing applies after

	// proposed maps the first byte of an entry this node is proposing to
	// the command it encodes (see Proposed); not part of the state.
	proposed sync.Map
}

// New returns an empty state machine.
func New(opts Options) *FSM {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Fatal == nil {
		opts.Fatal = func(err error) { panic(err.Error()) }
	}
	f := &FSM{log: opts.Logger, notifier: opts.Notifier, fatal: opts.Fatal}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.queues = map[string]*queue{}
	f.delayed = btree.NewG(btreeDegree, lessTimedRef)
	f.ttl = btree.NewG(btreeDegree, lessTimedRef)
	f.leases = btree.NewG(btreeDegree, lessTimedRef)
	f.dedupExp = btree.NewG(btreeDegree, lessDedupRef)
	f.consumers = map[string]map[queueMsg]struct{}{}
	f.lastNow = 0
	f.totalBytes = 0
	f.appliedIndex = 0
	f.keySeq = 0
	f.checkpoints = nil
	f.clusterVersion = 1
}

// SetNotifier installs the change listener (the leader's scheduler).
func (f *FSM) SetNotifier(n Notifier) {
	f.mu.Lock()
	f.notifier = n
	f.mu.Unlock()
}

// Encode serialises a command for raft.Apply.
func Encode(cmd *fsmv1.Command) ([]byte, error) {
	return proto.Marshal(cmd)
}

// Decode parses a log entry's data.
func Decode(data []byte) (*fsmv1.Command, error) {
	cmd := &fsmv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, fmt.Errorf("%w: decode command: %v", ErrInvalid, err)
	}
	return cmd, nil
}

// Proposed records that data, about to be proposed by this node, is the
// encoding of cmd. The leader's Raft hands the FSM the very slice it was
// given, so when the entry commits ApplyBatch takes cmd instead of
// decoding data again: that decode was the leader's third copy of every
// payload. cmd must not change afterwards. Call forget once the proposal
// has returned, whatever its outcome; an entry applied after that (or on
// any other node) is decoded as usual, to the same command.
func (f *FSM) Proposed(data []byte, cmd *fsmv1.Command) (forget func()) {
	if len(data) == 0 {
		return func() {}
	}
	key := &data[0]
	f.proposed.Store(key, cmd)
	return func() { f.proposed.Delete(key) }
}

// command returns the entry's command: the one its proposer recorded, if
// this node proposed it, otherwise decoded.
func (f *FSM) command(data []byte) (*fsmv1.Command, error) {
	if len(data) > 0 {
		if cmd, ok := f.proposed.LoadAndDelete(&data[0]); ok {
			return cmd.(*fsmv1.Command), nil
		}
	}
	return Decode(data)
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: one lock acquisition and one
// notification for many entries. Each entry is applied by the rules of the
// log version it was proposed under; an entry newer than MaxLogVersion
// halts the FSM (see Options.Fatal) before anything of it is applied.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	touched := newTouchSet()
	var halt error
	f.mu.Lock()
	for i, l := range logs {
		if f.halted != nil {
			out[i] = failed(f.halted)
			continue
		}
		if l.Type == raft.LogCommand {
			cmd, err := f.command(l.Data)
			switch {
			case err != nil:
				out[i] = failed(err)
			case entryVersion(cmd) > MaxLogVersion:
				f.halted = fmt.Errorf("%w: raft log entry %d is log version %d, this build applies versions up to %d; "+
					"upgrade this node's raftq binary (the node stops so it never guesses at rules it does not know): %w",
					ErrNewerVersion, l.Index, entryVersion(cmd), MaxLogVersion, ErrHalted)
				halt = f.halted
				out[i] = failed(f.halted)
				continue
			default:
				out[i] = f.applyCommand(entry{index: l.Index, version: entryVersion(cmd), touched: touched}, cmd)
			}
		}
		if l.Index > f.appliedIndex {
			f.appliedIndex = l.Index
		}
	}
	f.dropOldCheckpoints()
	n := f.notifier
	fatal := f.fatal
	f.mu.Unlock()
	if n != nil && len(touched.list) > 0 {
		n.QueuesChanged(touched.list)
	}
	if halt != nil {
		fatal(halt)
	}
	return out
}

// entryVersion is the log version an entry was proposed under: entries
// written before versioning carry none, which means 1.
func entryVersion(cmd *fsmv1.Command) uint32 {
	return max(cmd.GetVersion(), 1)
}

// entry is one log entry being applied: where it is, which version's rules
// apply to it, and the queues it touched. A rule that changes in log
// version N branches on e.version >= N, so an old log replays as it did.
type entry struct {
	index   uint64
	version uint32
	touched *touchSet
}

// ApplyCommand applies one command at a given index without Raft; tests and
// tools use it to drive the FSM directly.
func (f *FSM) ApplyCommand(index uint64, cmd *fsmv1.Command) Result {
	data, err := Encode(cmd)
	if err != nil {
		return failed(err)
	}
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(Result)
}

// touchSet collects touched queue names in first-touch order.
type touchSet struct {
	seen map[string]struct{}
	list []string
}

func newTouchSet() *touchSet { return &touchSet{seen: map[string]struct{}{}} }

func (t *touchSet) add(q string) {
	if _, ok := t.seen[q]; !ok {
		t.seen[q] = struct{}{}
		t.list = append(t.list, q)
	}
}

// AppliedIndex is the index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.appliedIndex
}

// ClusterVersion is the replicated cluster version: the newest log version
// every voter supported when it was last raised (1 until the first
// SetClusterVersion). The leader proposes entries under this version, and
// proposes SetClusterVersion once every voter advertises a newer one.
func (f *FSM) ClusterVersion() uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterVersion
}

// Now is the FSM's clock: the largest now_ms of any applied command.
func (f *FSM) Now() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastNow
}
