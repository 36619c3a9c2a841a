package broker

import (
	"sync/atomic"

	"github.com/raftq/raftq/fsm"
)

// changeFeed passes the state machine's change notices (which queues an
// applied batch touched) to the scheduler while it runs a leadership term.
// Between terms, and on followers, nobody listens: a term starts with a
// full pass over the state, so nothing missed in between matters.
type changeFeed struct {
	to atomic.Pointer[fsm.Notifier]
}

// QueuesChanged implements fsm.Notifier; it never blocks.
func (f *changeFeed) QueuesChanged(queues []string) {
	if n := f.to.Load(); n != nil {
		(*n).QueuesChanged(queues)
	}
}

func (f *changeFeed) listen(n fsm.Notifier) { f.to.Store(&n) }
func (f *changeFeed) stop()                 { f.to.Store(nil) }
