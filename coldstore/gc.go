package coldstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// gcBatch is how many files GC unlinks per hold of the index lock, so
// Enqueue and Get never wait behind a long collection.
const gcBatch = 16

// GC removes least recently used blocks until the store's files fit
// QuotaBytes, sparing every block a snapshot references. It reports how
// many blocks it removed and the file bytes freed. Without a quota it does
// nothing. When the referenced blocks alone exceed the quota it removes
// every unreferenced block and logs a warning (it is not an error).
// Freed space ends an out-of-space back-off. Writes collect garbage
// themselves when they push the store over its quota.
func (s *Store) GC(ctx context.Context) (removed int, freed int64, err error) {
	quota := s.cfg.QuotaBytes
	if quota <= 0 {
		return 0, 0, nil
	}
	for {
		if cerr := ctx.Err(); cerr != nil {
			return removed, freed, cerr
		}
		n, f, more, berr := s.gcBatch(quota)
		removed += n
		freed += f
		if berr != nil {
			return removed, freed, berr
		}
		if !more {
			break
		}
	}
	if removed > 0 {
		s.log.Debug("gc", "removed", removed, "freed", freed, "quota", quota)
	}
	return removed, freed, nil
}

// gcBatch removes up to gcBatch unreferenced blocks from the cold end of
// the LRU while the store is over quota. more is false once the store
// fits or nothing else can be collected. Files are unlinked under the
// lock, so a concurrent Put of the same key never loses its fresh file.
func (s *Store) gcBatch(quota int64) (removed int, freed int64, more bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.lru.Back()
	for el != nil && s.bytes > quota && removed < gcBatch {
		prev := el.Prev()
		e := el.Value.(*blockEntry)
		if s.refs[e.key] == 0 && s.pins[e.key] == 0 {
			if rerr := os.Remove(s.blockPath(e.key)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = fmt.Errorf("coldstore: gc: %w", rerr)
				break
			}
			s.dropLocked(e)
			removed++
			freed += e.size
		}
		el = prev
	}
	s.evicted.Add(int64(removed))
	s.spaceFreedLocked(freed)
	more = err == nil && el != nil && s.bytes > quota
	if err == nil && el == nil && s.bytes > quota && time.Since(s.overQuotaLogged) > time.Minute {
		s.overQuotaLogged = time.Now()
		s.log.Warn("over quota: the rest is referenced by snapshots", "bytes", s.bytes, "quota", quota)
	}
	return removed, freed, more, err
}

// Pin spares key from garbage collection until a matching Unpin: a block
// that lives only here while a session still needs it (a spill from a
// full arena). Pins are held in memory and end with the Store; a key may
// be pinned before its block is written.
func (s *Store) Pin(key Key) {
	s.mu.Lock()
	s.pins[key]++
	s.mu.Unlock()
}

// Unpin releases one Pin of key.
func (s *Store) Unpin(key Key) {
	s.mu.Lock()
	if s.pins[key] <= 1 {
		delete(s.pins, key)
	} else {
		s.pins[key]--
	}
	s.mu.Unlock()
}
