package sidecar

import (
	"context"
	"fmt"
	"regexp"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// The snapshot calls: SaveSnapshot, Restore, ListSnapshots,
// DeleteSnapshot and VerifyCold.

var snapNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func validSnapName(s string) bool { return snapNameRE.MatchString(s) && s != "." && s != ".." }

// snapshot serves SnapshotRequest: capture under the token, then commit.
// Session 0 names the most recently used session; any allowed peer may
// snapshot any session (nothing in it changes).
func (srv *Server) snapshot(ctx context.Context, r *pb.SnapshotRequest) (*pb.SnapshotReply, error) {
	if !srv.snaps.On() {
		return nil, srv.snaps.ErrOff()
	}
	if !validSnapName(r.GetName()) {
		return nil, fmt.Errorf("%w: snapshot name %q: use 1-128 of A-Z a-z 0-9 . _ -", protocol.ErrInvalidArgument, r.GetName())
	}
	sess, err := srv.anySession(r.GetSessionId())
	if err != nil {
		return nil, err
	}
	c, err := srv.captureSession(ctx, sess, r.GetName())
	if err != nil {
		return nil, err
	}
	rep, err := srv.snaps.Commit(ctx, c)
	if err != nil {
		return nil, err
	}
	rep.SessionId = sess.id
	srv.log.Info("snapshot saved", "name", rep.Name, "session", sess.id, "tokens", rep.Tokens, "blocks", rep.Blocks, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
	return rep, nil
}

// restore serves RestoreRequest: the caller's session takes the
// snapshot's state.
func (srv *Server) restore(ctx context.Context, connID uint64, r *pb.RestoreRequest) (*pb.RestoreReply, error) {
	if !srv.snaps.On() {
		return nil, srv.snaps.ErrOff()
	}
	// Read before taking the engine: the published view names the model.
	v := srv.slot.view.Load()
	snap, meta, err := srv.snaps.Load(ctx, r.GetName(), v.compat, v.model != nil)
	if err != nil {
		return nil, err
	}
	var rep *pb.RestoreReport
	err = srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error {
		tape, err := snapshot.DecodeTape(meta.Tape)
		if err != nil {
			return fmt.Errorf("%w: snapshot %s: %w", protocol.ErrInternal, snap.Name, err)
		}
		rep, err = srv.restoreInto(ctx, sess, snap, meta, tape, len(tape))
		return err
	})
	if err != nil {
		return nil, err
	}
	srv.log.Info("snapshot restored", "name", snap.Name, "session", r.GetSessionId(), "tokens", rep.Tokens, "restored_blocks", rep.RestoredBlocks, "recomputed_blocks", rep.RecomputedBlocks, "ms", rep.ElapsedUs/1000)
	return &pb.RestoreReply{Report: rep}, nil
}

// listSnapshots serves ListSnapshotsRequest; it never waits for the engine.
func (srv *Server) listSnapshots(ctx context.Context) (*pb.ListSnapshotsReply, error) {
	if !srv.snaps.On() {
		return &pb.ListSnapshotsReply{Cold: srv.ssdStatus()}, nil
	}
	infos, err := srv.tiers.SSD().Snapshots(ctx)
	if err != nil {
		return nil, tiers.WireErr(err)
	}
	compat := srv.slot.view.Load().compat // never waits for the engine
	rep := &pb.ListSnapshotsReply{Cold: srv.ssdStatus()}
	for _, in := range infos {
		si := &pb.SnapshotInfo{Name: in.Name, CreatedUnixMs: in.Created.UnixMilli(), Tokens: int64(in.Tokens), Blocks: int32(in.Blocks),
			Bytes: in.Bytes, ModelDigest: in.Compat.ModelDigest, KvType: in.Compat.KVType, Compatible: in.Compat == compat}
		if e := srv.snaps.Entry(in.Name); e != nil {
			si.Mode = e.Mode
			si.Tokens = int64(len(e.Tape))
		}
		rep.Snapshots = append(rep.Snapshots, si)
	}
	return rep, nil
}

// verifyCold serves VerifyColdRequest.
func (srv *Server) verifyCold(ctx context.Context) (*pb.VerifyColdReply, error) {
	if !srv.snaps.On() {
		return nil, srv.snaps.ErrOff()
	}
	ssd := srv.tiers.SSD()
	probs, err := ssd.Verify(ctx)
	if err != nil {
		return nil, tiers.WireErr(err)
	}
	st := ssd.Stats()
	rep := &pb.VerifyColdReply{BlocksChecked: int64(st.Blocks), SnapshotsChecked: int32(srv.snaps.Count())}
	for _, p := range probs {
		e := ""
		if p.Err != nil {
			e = p.Err.Error()
		}
		rep.Problems = append(rep.Problems, &pb.ColdProblem{Path: p.Path, Kind: p.Kind, Error: e})
	}
	return rep, nil
}

// deleteSnapshot serves DeleteSnapshotRequest.
func (srv *Server) deleteSnapshot(ctx context.Context, name string) error {
	if !srv.snaps.On() {
		return srv.snaps.ErrOff()
	}
	return srv.snaps.Delete(ctx, name)
}

// ssdStatus reports the SSD tier and the snapshots it holds.
func (srv *Server) ssdStatus() *pb.ColdStatus { return srv.tiers.Status(srv.snaps.Count()) }
