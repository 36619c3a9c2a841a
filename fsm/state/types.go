package state

import fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"

// Delivery is a message as a consumer receives it (after a grant) or as
// Peek shows it. Ids stay numeric; the API edge formats them.
type Delivery struct {
	ID               uint64
	Queue            string
	Payload          []byte
	Headers          map[string]string
	Priority         int32
	FairnessKey      string
	Weight           uint32
	ThrottleKeys     []string
	Attempt          int32
	EnqueuedMs       int64
	LeaseToken       uint64 // 0 unless leased
	LeaseDeadlineMs  int64  // 0 unless leased
	OriginQueue      string // in a dead-letter queue: the queue it came from
	DeadLetterReason string
	// LastError and History (log version HistoryVersion, history.go): the
	// latest failure and the last ended attempts, oldest first.
	LastError string
	History   []Attempt
}

// QueueInfo is a queue's effective config and counters.
type QueueInfo struct {
	Name              string
	Config            *fsmv1.QueueConfig // effective (defaults filled in); a copy
	IsDeadLetterQueue bool
	Stats             QueueStats
	// Redrives are its rate-limited redrives in progress (redrive.go).
	Redrives []RedriveJobInfo
	// Pauses as they hold now (pause.go): the whole queue's (Paused, and
	// its end on the leader's clock, 0 = until resumed) and the keys
	// paused on their own, by key.
	Paused        bool
	PausedUntilMs int64
	PausedKeys    []PausedKey
}

// QueueStats are a queue's counters. Consumers are the scheduler's to add.
type QueueStats struct {
	Ready, Delayed, InFlight, DeadLettered               int64
	EnqueuedTotal, AckedTotal, NackedTotal, ExpiredTotal int64
	Bytes                                                int64
	// RecentSettled is how many recently settled outcomes the queue
	// remembers for retries (recent.go).
	RecentSettled int64
	// DedupEntries and DedupBytes: the dedup entries the queue keeps and
	// what they cost (admit.go).
	DedupEntries, DedupBytes int64
}
