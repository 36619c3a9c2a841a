//go:build raftqfault

package state

import "fmt"

// This file exists only in test builds (-tags raftqfault): it breaks the
// state on purpose, bypassing put, so tests can show that the counter
// audit and the replica check find and repair what no correct code path
// produces. A production binary has no way to reach it.

// InjectCounterFault adds delta to one of a queue's counters (ready,
// delayed, in_flight, bytes, dead_lettered) or, with counter total_bytes,
// to the node's byte total. The messages are untouched.
func (s *Store) InjectCounterFault(queue, counter string, delta int64) error {
	if counter == "total_bytes" {
		s.totalBytes += delta
		return nil
	}
	q := s.queues[queue]
	if q == nil {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	switch counter {
	case "ready":
		q.ready += delta
	case "delayed":
		q.delayed += delta
	case "in_flight":
		q.inFlight += delta
	case "bytes":
		q.bytes += delta
	case "dead_lettered":
		q.deadLettered += delta
	default:
		return fmt.Errorf("unknown counter %q", counter)
	}
	return nil
}

// InjectStateFault changes a queue's replicated state on this replica
// alone (its enqueued total, which snapshots and digests carry), as a
// replica that diverged would: its digest no longer matches the others'.
func (s *Store) InjectStateFault(queue string) error {
	q := s.queues[queue]
	if q == nil {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	q.enqueuedTotal += 1000
	return nil
}
