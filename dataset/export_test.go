package dataset

// PackedWaiters returns how many Gets wait for the fetch of dataset
// sample i's chunk (0 if none is in flight): a test holding the fetch
// knows from it that every Get has joined before it lets the fetch end.
func PackedWaiters(p *PackedStore, i int) int {
	s, object, _ := p.peek(int64(i))
	ck, ok := p.chunkOf(int64(i), s, object)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.mu.chunks[ck]; c != nil {
		return c.waiters
	}
	return 0
}

// SpillWaiting returns how many chunk fetches of p wait for a staging
// buffer (0 when p does not spill).
func SpillWaiting(p *PackedStore) int {
	if p.spill == nil {
		return 0
	}
	return p.spill.queued()
}

// WaitFetches waits for p's chunk fetches to end, spilled files
// written; no Get may start meanwhile.
func WaitFetches(p *PackedStore) { p.wg.Wait() }
