//go:build raftqfault

package fsm

// Test builds only (-tags raftqfault): see fsm/state/fault.go.

// InjectCounterFault corrupts one counter of this replica (see
// state.Store.InjectCounterFault).
func (f *FSM) InjectCounterFault(queue, counter string, delta int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store.InjectCounterFault(queue, counter, delta)
}

// InjectStateFault makes this replica's state differ from the others'
// (see state.Store.InjectStateFault).
func (f *FSM) InjectStateFault(queue string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store.InjectStateFault(queue)
}
