package resume

import (
	"context"

	"github.com/ctxd/ctxd/coldstore"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// The snapshot calls that need no session: listing, verification,
// deletion. None waits for the engine.

// List serves a list call; compat is the loaded model's SSD key prefix,
// read from the published view.
func (o *Owner) List(ctx context.Context, compat coldstore.Compat) (*pb.ListSnapshotsReply, error) {
	if !o.On() {
		return &pb.ListSnapshotsReply{Cold: o.Status()}, nil
	}
	infos, err := o.env.Tiers.SSD().Snapshots(ctx)
	if err != nil {
		return nil, tiers.WireErr(err)
	}
	rep := &pb.ListSnapshotsReply{Cold: o.Status()}
	for _, in := range infos {
		si := &pb.SnapshotInfo{Name: in.Name, CreatedUnixMs: in.Created.UnixMilli(), Tokens: int64(in.Tokens), Blocks: int32(in.Blocks),
			Bytes: in.Bytes, ModelDigest: in.Compat.ModelDigest, KvType: in.Compat.KVType, Compatible: in.Compat == compat}
		if e := o.store.Entry(in.Name); e != nil {
			si.Mode = e.Mode
			si.Tokens = int64(len(e.Tape))
		}
		rep.Snapshots = append(rep.Snapshots, si)
	}
	return rep, nil
}

// Verify serves a verify call: every stored block and snapshot checked.
func (o *Owner) Verify(ctx context.Context) (*pb.VerifyColdReply, error) {
	if !o.On() {
		return nil, o.ErrOff()
	}
	ssd := o.env.Tiers.SSD()
	probs, err := ssd.Verify(ctx)
	if err != nil {
		return nil, tiers.WireErr(err)
	}
	st := ssd.Stats()
	rep := &pb.VerifyColdReply{BlocksChecked: int64(st.Blocks), SnapshotsChecked: int32(o.Count())}
	for _, p := range probs {
		e := ""
		if p.Err != nil {
			e = p.Err.Error()
		}
		rep.Problems = append(rep.Problems, &pb.ColdProblem{Path: p.Path, Kind: p.Kind, Error: e})
	}
	return rep, nil
}

// Delete serves a delete call.
func (o *Owner) Delete(ctx context.Context, name string) error {
	if !o.On() {
		return o.ErrOff()
	}
	return o.store.Delete(ctx, name)
}

// Status reports the SSD tier and the snapshots it holds.
func (o *Owner) Status() *pb.ColdStatus { return o.env.Tiers.Status(o.Count()) }
