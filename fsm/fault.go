//go:build raftqfault

package fsm

// Test builds only (-tags raftqfault): see fsm/state/fault.go.

// InjectCounterFault corrupts one counter of this replica (see
// state.Store.InjectCounterFault).
func (c Integrity) InjectCounterFault(queue, counter string, delta int64) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.store.InjectCounterFault(queue, counter, delta)
}

// InjectStateFault makes this replica's state differ from the others'
// (see state.Store.InjectStateFault).
func (c Integrity) InjectStateFault(queue string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.store.InjectStateFault(queue)
}
