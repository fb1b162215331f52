package coldstore

import (
	"context"
	"errors"
	"sort"
)

// Verify re-reads every indexed block (framing, CRCs, header, key,
// decompression) and every snapshot (framing, CRCs, name, and that its
// blocks are stored). A block or snapshot file that fails is moved to
// quarantine/ and dropped from the index, exactly as Get and LoadSnapshot
// do; a snapshot naming missing blocks is kept and reported as
// "missing-block". Problems come back sorted by path. The error is ctx's
// (with the problems found so far) or ErrClosed.
func (s *Store) Verify(ctx context.Context) ([]Problem, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	s.mu.Lock()
	blocks := make([]*blockEntry, 0, len(s.blocks))
	for _, e := range s.blocks {
		blocks = append(blocks, e)
	}
	snaps := make([]*snapEntry, 0, len(s.snaps))
	for _, se := range s.snaps {
		snaps = append(snaps, se)
	}
	s.mu.Unlock()

	var problems []Problem
	finish := func(err error) ([]Problem, error) {
		sort.Slice(problems, func(a, b int) bool { return problems[a].Path < problems[b].Path })
		return problems, err
	}
	for _, e := range blocks {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		path := s.blockPath(e.key)
		if _, _, err := s.readBlock(ctx, path, e.key, nil); err != nil {
			var fe *fileError
			if !errors.As(err, &fe) {
				return finish(err) // ctx ended during decompression
			}
			problems = append(problems, s.blockProblem(e, path, fe))
		}
	}
	for _, se := range snaps {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		path := s.snapPath(se.name)
		if _, _, err := readSnapshotFile(path, se.name, true); err != nil {
			problems = append(problems, s.snapProblem(se, path, err.(*fileError)))
			continue
		}
		s.mu.Lock()
		missing := s.missingLocked(se.blocks)
		s.mu.Unlock()
		if len(missing) > 0 {
			problems = append(problems, missingProblem(path, se, missing))
		}
	}
	return finish(nil)
}
