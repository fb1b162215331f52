package resume

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
)

// Restore: a session takes a snapshot's state. A restore reproduces the
// saved engine state byte for byte; both the saved and the restored
// session recompute the last token's logits, so they continue alike.

// Restore serves a restore call: snapshot name, read and checked against
// the loaded model (compat; modelLoaded false: none) before the engine is
// taken, replaces the state of the session hold brings.
func (o *Owner) Restore(ctx context.Context, name string, compat coldstore.Compat, modelLoaded bool, hold Hold) (*pb.RestoreReport, error) {
	if !o.On() {
		return nil, o.ErrOff()
	}
	snap, meta, err := o.store.Load(ctx, name, compat, modelLoaded)
	if err != nil {
		return nil, err
	}
	var rep *pb.RestoreReport
	var id uint64
	err = hold(ctx, func(s Session) error {
		id = s.ID()
		tape, err := snapshot.DecodeTape(meta.Tape)
		if err != nil {
			return fmt.Errorf("%w: snapshot %s: %w", protocol.ErrInternal, snap.Name, err)
		}
		rep, err = o.restoreInto(ctx, s, snap, meta, tape, len(tape), 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	o.log.Info("snapshot restored", "name", snap.Name, "session", id, "tokens", rep.Tokens, "restored_blocks", rep.RestoredBlocks, "recomputed_blocks", rep.RecomputedBlocks, "ms", rep.ElapsedUs/1000)
	return rep, nil
}

// restoreInto replaces s's state with the snapshot's, bringing back at
// least the first upto tokens and, of a dense session, the blocks up to
// token more that are cheaper to read than to prefill (layout.Restore).
// The caller holds the engine token and s is resident.
func (o *Owner) restoreInto(ctx context.Context, s Session, snap coldstore.Snapshot, meta snapshot.Meta, tape []engine.Token, upto, more int) (*pb.RestoreReport, error) {
	start := time.Now()
	l := s.Layout()
	if mode := l.Mode(); meta.Mode != mode {
		return nil, fmt.Errorf("%w: snapshot %s holds a %s session; this server runs %s sessions", protocol.ErrIncompatible, snap.Name, meta.Mode, mode)
	}
	var m *policy.Manifest
	if len(snap.Manifest) > 0 {
		var w pb.Manifest
		if err := proto.Unmarshal(snap.Manifest, &w); err != nil {
			return nil, fmt.Errorf("%w: snapshot %s: manifest: %w", protocol.ErrIncompatible, snap.Name, err)
		}
		mm := protocol.ManifestFromWire(&w)
		m = &mm
	}
	r := layout.Restore{Snap: snap, Meta: meta, Tokens: tape, More: more}
	for _, sp := range meta.Spans {
		r.Spans = append(r.Spans, layout.Span{Seg: sp.Seg, Start: sp.Start, End: sp.End, Generated: sp.Generated})
	}
	readBPS, decompressBPS, prefillTPS := o.env.Rates()
	r.Report = &pb.RestoreReport{Snapshot: snap.Name, PrefillTokensPerS: prefillTPS, DecompressBytesPerS: decompressBPS, ReadBytesPerS: readBPS}
	ssd := o.env.Tiers.SSD()
	readBefore := ssd.Stats().ReadBytes
	if err := l.Restore(ctx, r, upto); err != nil {
		return nil, err
	}
	rep := r.Report
	s.Restored(m, meta.Template)
	t := s.Tape()
	t.LogitsLost()
	rep.Tokens = int64(t.Len())
	rep.CompressedBytes = ssd.Stats().ReadBytes - readBefore
	rep.ElapsedUs = time.Since(start).Microseconds()
	// A running estimate of what the SSD tier delivers.
	o.env.ObserveRead(rep.CompressedBytes, time.Since(start))
	s.Reported(rep)
	return rep, nil
}
