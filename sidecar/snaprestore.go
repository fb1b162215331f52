package sidecar

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

// restoreInto replaces sess's state with the snapshot's, bringing back at
// least the first upto tokens. The caller holds the slot token and sess is
// resident.
func (srv *Server) restoreInto(ctx context.Context, sess *session, snap coldstore.Snapshot, meta snapshot.Meta, tape []engine.Token, upto int) (*pb.RestoreReport, error) {
	start := time.Now()
	if mode := sess.layout.Mode(); meta.Mode != mode {
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
	r := layout.Restore{Snap: snap, Meta: meta, Tokens: tape}
	for _, s := range meta.Spans {
		r.Spans = append(r.Spans, layout.Span{Seg: s.Seg, Start: s.Start, End: s.End, Generated: s.Generated})
	}
	f := &srv.slot.fig
	r.Report = &pb.RestoreReport{Snapshot: snap.Name, PrefillTokensPerS: f.prefillTokensPerSec, DecompressBytesPerS: f.decompressBPS(), ReadBytesPerS: f.readBPS}
	ssd := srv.tiers.SSD()
	readBefore := ssd.Stats().ReadBytes
	if err := sess.layout.Restore(ctx, r, upto); err != nil {
		return nil, err
	}
	rep := r.Report
	sess.manifest, sess.compat = m, srv.compatKey(meta.Template)
	sess.tape.LogitsLost()
	rep.Tokens = int64(sess.tape.Len())
	rep.CompressedBytes = ssd.Stats().ReadBytes - readBefore
	rep.ElapsedUs = time.Since(start).Microseconds()
	// A running estimate of what the SSD tier delivers.
	f.readBPS = policy.ReadRateEstimate(f.readBPS, rep.CompressedBytes, time.Since(start))
	sess.lastRestore = rep
	return rep, nil
}
