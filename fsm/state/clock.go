package state

// The state's clock (Store.lastNow) is what delays, TTLs, dedup windows
// and lease deadlines are measured on. Every entry carries its leader's
// clock reading (now_ms), and nothing else tells the state what time it is.
//
// Up to log version 3 the clock is max(last, now_ms): a leader whose clock
// was an hour fast moved it an hour ahead for good, so after correct
// clocks returned nothing timed happened for that hour, and its leases'
// deadlines looked an hour old to it, so it could expire them (two
// holders). A slow leader stopped the clock for its whole term.
//
// From log version 4 an entry moves the clock by the time its leader
// measured since that leader's previous entry: the difference of two
// readings of one clock, which a wrong offset does not change. Raft's term
// names the leader (one per term), so the first entry of a term only
// notes the new leader's reading and moves nothing; later entries of the
// term move the clock by how far the reading advanced. The clock is
// therefore independent of any node's offset (any skew between nodes is
// tolerated) and never runs ahead of real time unless a leader's clock
// runs fast in rate or steps forward while it leads; what it loses is, at
// each change of leader, the time between the old leader's last entry and
// the new one's first (an election). Time-based rules only ever wait
// longer than asked, never shorter: a lease is never expired before its
// holder's visibility timeout has elapsed on the leaders' clocks.
//
// Callers on a leader think in their own clock. Instants the state hands
// out (View.NextDue, lease deadlines, deliveries) are converted to the
// clock of the leader that proposed the last applied entry, and a grant's
// deadline (computed on the leader's clock) is read as a duration from
// the entry's own stamp.

// leaderClock is what the state knows of the current term's leader clock.
type leaderClock struct {
	known bool   // an entry of version >= elapsedTimeVersion has applied
	term  uint64 // the Raft term of the last such entry
	nowMs int64  // the largest now_ms of that term's entries
}

// offset is what converts the state's clock to the leader's: 0 until an
// entry of version >= elapsedTimeVersion has applied.
func (c leaderClock) offset(stateNow int64) int64 {
	if !c.known {
		return 0
	}
	return c.nowMs - stateNow
}

// tick moves the state's clock for one entry of the given Raft term and
// log version, stamped nowMs by its leader.
//
// Once an entry of version >= elapsedTimeVersion has applied, every entry
// moves the clock by elapsed time, whatever its version: an older entry
// after it is a proposal that raced the raise to version 4 (stamped under
// the older cluster version), no older build applies a log with a newer
// entry in it, and a max() among them would let such a straggler move the
// clock away from the leader clock that instants are converted by.
func (s *Store) tick(term uint64, version uint32, nowMs int64) {
	if version < elapsedTimeVersion && !s.leader.known {
		if nowMs > s.lastNow {
			s.lastNow = nowMs
		}
		return
	}
	c := &s.leader
	switch {
	case !c.known:
		// The first such entry continues the clock of the entries before
		// it (max, which may be a little ahead of this entry's stamp when
		// a concurrent proposal was stamped later but applied earlier),
		// so nothing the state hands out jumps at the change of rule.
		s.lastNow = max(s.lastNow, nowMs)
		*c = leaderClock{known: true, term: term, nowMs: s.lastNow}
	case term != c.term:
		// A new leader: its reading says nothing about the time elapsed
		// since the previous leader's last entry.
		*c = leaderClock{known: true, term: term, nowMs: nowMs}
	case nowMs > c.nowMs:
		s.lastNow += nowMs - c.nowMs
		c.nowMs = nowMs
	}
}
