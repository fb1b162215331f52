package coldstore

import (
	"context"
	"fmt"
	"sort"
)

// job is one block waiting for background compression.
type job struct {
	seq  uint64
	key  Key
	meta BlockMeta
	blob []byte
}

// Enqueue hands a block to the background compressors and returns at
// once; it never blocks. The caller must not modify blob afterwards. A
// key already stored or already queued is a no-op. It fails with
// ErrQueueFull when the bounded queue is full, a wrapped ErrUnavailable
// while the store stands aside after a disk fault, ErrClosed after Close
// and ErrInvalidArgument for bad metadata; in all those cases nothing was
// accepted. An accepted block that later fails to be written is counted
// in Stats.Failed, logged, and returned by the next Flush.
func (s *Store) Enqueue(key Key, meta BlockMeta, blob []byte) error {
	if err := meta.check(blob); err != nil {
		s.refused.Add(1)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writeGateLocked(); err != nil {
		s.refused.Add(1)
		return err
	}
	if _, ok := s.blocks[key]; ok {
		return nil
	}
	if _, ok := s.pending[key]; ok {
		return nil
	}
	j := &job{seq: s.seq + 1, key: key, meta: meta, blob: blob}
	select {
	case s.queue <- j: // under s.mu, so Close cannot close the channel meanwhile
	default:
		s.refused.Add(1)
		return fmt.Errorf("%w (%d blocks)", ErrQueueFull, cap(s.queue))
	}
	s.seq = j.seq
	s.pending[key] = j
	s.inflight[j.seq] = key
	return nil
}

// worker compresses and writes queued blocks until the queue is closed
// and drained.
func (s *Store) worker() {
	for j := range s.queue {
		s.finish(j, s.runJob(j))
	}
}

func (s *Store) runJob(j *job) error {
	if s.abort.Load() {
		return fmt.Errorf("%w: store closed before the block was written", ErrClosed)
	}
	// Not writeGateLocked: draining the queue at Close must still write.
	s.mu.Lock()
	var err error
	if s.fault != nil && s.clock().Before(s.fault.retryAt) {
		err = s.faultErrLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.writeBlock(context.Background(), j.key, j.meta, j.blob)
}

// finish records a job's outcome and wakes Flush callers.
func (s *Store) finish(j *job, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[j.key] == j {
		delete(s.pending, j.key)
	}
	delete(s.inflight, j.seq)
	if err != nil {
		s.failed.Add(1)
		s.log.Error("block not written", "key", j.key.String(), "bytes", len(j.blob), "err", err)
		if len(s.failures) < maxFailuresKept {
			s.failures[j.seq] = fmt.Errorf("block %s: %w", j.key, err)
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Flush waits until every block enqueued before the call has been written
// or has failed, and returns the first failure among the blocks enqueued
// since the previous Flush (nil if all were written). It returns ctx's
// error if ctx ends first (the blocks stay queued).
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	to := s.seq
	from := s.flushMark
	s.flushMark = max(s.flushMark, to)
	for {
		waiting := false
		for seq := range s.inflight {
			if seq <= to {
				waiting = true
				break
			}
		}
		if !waiting {
			break
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		}
	}
	var seqs []uint64
	for seq := range s.failures {
		if seq > from && seq <= to {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	sort.Slice(seqs, func(a, b int) bool { return seqs[a] < seqs[b] })
	first := s.failures[seqs[0]]
	for _, seq := range seqs {
		delete(s.failures, seq)
	}
	if len(seqs) > 1 {
		return fmt.Errorf("%w (and %d more blocks failed)", first, len(seqs)-1)
	}
	return first
}
