package coldstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// load rebuilds the index from the files (Open). There is no separate
// index file: the block and snapshot files are the only state.
func (s *Store) load(ctx context.Context, rep *OpenReport) error {
	type found struct {
		e     *blockEntry
		mtime time.Time
	}
	var all []found
	aside := func(path, kind string, err error) {
		p := Problem{Path: path, Kind: kind, Err: err}
		if dst, merr := moveAside(s.root, s.quarDir, path, kind); merr != nil {
			p.Err = fmt.Errorf("%w (could not move it to quarantine: %v)", err, merr)
		} else {
			p.MovedTo = dst
		}
		rep.SetAside = append(rep.SetAside, p)
	}
	removeTemp := func(path string) {
		if err := os.Remove(path); err == nil {
			rep.TempRemoved++
		} else {
			s.log.Warn("cannot remove temporary file", "path", path, "err", err)
		}
	}
	subs, err := os.ReadDir(s.blocksDir)
	if err != nil {
		return fmt.Errorf("coldstore: %w", err)
	}
	for _, sub := range subs {
		if err := ctx.Err(); err != nil {
			return err
		}
		subPath := filepath.Join(s.blocksDir, sub.Name())
		if !sub.IsDir() || !isHexName(sub.Name(), 2) {
			if sub.Type().IsRegular() && strings.HasSuffix(sub.Name(), tmpSuffix) {
				removeTemp(subPath)
				continue
			}
			aside(subPath, KindForeign, fmt.Errorf("%w: unexpected entry in blocks/", ErrCorrupt))
			continue
		}
		files, err := os.ReadDir(subPath)
		if err != nil {
			return fmt.Errorf("coldstore: %w", err)
		}
		for _, f := range files {
			path := filepath.Join(subPath, f.Name())
			if f.Type().IsRegular() && strings.HasSuffix(f.Name(), tmpSuffix) {
				removeTemp(path)
				continue
			}
			stem, ok := strings.CutSuffix(f.Name(), blockExt)
			if !f.Type().IsRegular() || !ok || !isHexName(stem, 64) || stem[:2] != sub.Name() || strings.ToLower(stem) != stem {
				aside(path, KindForeign, fmt.Errorf("%w: unexpected file in blocks/", ErrCorrupt))
				continue
			}
			key, _ := ParseKey(stem)
			e, err := checkBlockFile(path, key, s.cfg.VerifyOnOpen)
			if err != nil {
				fe := err.(*fileError)
				aside(path, fe.kind, fe.err)
				continue
			}
			mtime := time.Time{}
			if info, err := f.Info(); err == nil {
				mtime = info.ModTime()
			}
			e.touched = mtime
			all = append(all, found{e, mtime})
		}
	}
	// Least recently used last: the files' modification times (Get
	// touches them) order the LRU across restarts.
	sort.SliceStable(all, func(a, b int) bool { return all[a].mtime.After(all[b].mtime) })
	for _, f := range all {
		s.insertLocked(f.e, false)
	}
	if len(all) > 0 {
		s.newestTouch = all[0].mtime
	}

	files, err := os.ReadDir(s.snapsDir)
	if err != nil {
		return fmt.Errorf("coldstore: %w", err)
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(s.snapsDir, f.Name())
		if f.Type().IsRegular() && strings.HasSuffix(f.Name(), tmpSuffix) {
			removeTemp(path)
			continue
		}
		stem, ok := strings.CutSuffix(f.Name(), snapExt)
		if !f.Type().IsRegular() || !ok || validName(stem) != nil {
			aside(path, KindForeign, fmt.Errorf("%w: unexpected file in snapshots/", ErrCorrupt))
			continue
		}
		se, err := checkSnapshotFile(path, stem, true) // small: check them whole
		if err != nil {
			fe := err.(*fileError)
			aside(path, fe.kind, fe.err)
			continue
		}
		s.addSnapLocked(se)
		if missing := s.missingLocked(se.blocks); len(missing) > 0 {
			rep.Missing = append(rep.Missing, missingProblem(path, se, missing))
		}
	}
	return nil
}

// checkBlockFile checks a block file's framing, header and key (and with
// withPayload its payload CRC) and returns its index entry. Failures are
// *fileError.
func checkBlockFile(path string, key Key, withPayload bool) (*blockEntry, error) {
	fr, err := readFrameFile(path, blockMagic, withPayload, nil)
	if err != nil {
		return nil, err
	}
	h, err := decodeBlockHeader(fr.header, fr.payloadLen)
	if err != nil {
		return nil, err
	}
	if h.key != key {
		return nil, corruptf(KindMisnamed, "file holds block %s", h.key)
	}
	return &blockEntry{key: key, size: fr.size, raw: h.rawLen, tokens: len(h.meta.Tokens)}, nil
}

// checkSnapshotFile checks a snapshot file and returns its index entry
// (and, with withPayload, the whole snapshot). Failures are *fileError.
func checkSnapshotFile(path, name string, withPayload bool) (*snapEntry, error) {
	se, _, err := readSnapshotFile(path, name, withPayload)
	return se, err
}

func readSnapshotFile(path, name string, withPayload bool) (*snapEntry, Snapshot, error) {
	fr, err := readFrameFile(path, snapMagic, withPayload, nil)
	if err != nil {
		return nil, Snapshot{}, err
	}
	snap, err := decodeSnapshotHeader(fr.header, fr.payloadLen, fr.payload)
	if err != nil {
		return nil, Snapshot{}, err
	}
	if snap.Name != name {
		return nil, Snapshot{}, corruptf(KindMisnamed, "file holds snapshot %q", snap.Name)
	}
	se := &snapEntry{name: name, created: snap.Created, compat: snap.Compat, size: fr.size, blocks: make([]Key, len(snap.Blocks))}
	for i, b := range snap.Blocks {
		se.blocks[i] = b.Key
		se.tokens += b.Tokens
	}
	return se, snap, nil
}

// isHexName reports whether s is n lowercase or uppercase hex digits.
func isHexName(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
