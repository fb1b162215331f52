package client

import (
	"context"
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// SnapshotResult describes a committed snapshot: when Snapshot returns
// without error the snapshot is on disk and restores bit-exactly.
type SnapshotResult struct {
	Name            string
	SessionID       uint64
	Tokens          int
	Blocks          int
	NewBlocks       int // written by this call; the rest were stored already
	RawBytes        int64
	CompressedBytes int64
	Elapsed         time.Duration
}

func snapshotResult(r *pb.SnapshotReply) SnapshotResult {
	return SnapshotResult{
		Name: r.GetName(), SessionID: r.GetSessionId(), Tokens: int(r.GetTokens()), Blocks: int(r.GetBlocks()),
		NewBlocks: int(r.GetNewBlocks()), RawBytes: r.GetRawBytes(), CompressedBytes: r.GetCompressedBytes(),
		Elapsed: time.Duration(r.GetElapsedUs()) * time.Microsecond,
	}
}

// Snapshot saves the session under name (letters, digits, '.', '_', '-';
// at most 128) in the daemon's SSD tier, replacing a snapshot of that name.
func (s *Session) Snapshot(ctx context.Context, name string) (SnapshotResult, error) {
	return s.c.Snapshot(ctx, s.id, name)
}

// Snapshot saves session id (0: the most recently used session) under name.
func (c *Client) Snapshot(ctx context.Context, id uint64, name string) (SnapshotResult, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_Snapshot{Snapshot: &pb.SnapshotRequest{SessionId: id, Name: name}}}, nil)
	if err != nil {
		return SnapshotResult{}, err
	}
	return snapshotResult(r.GetSnapshot()), nil
}

// Restore replaces the session's state with snapshot name's. The report
// says which blocks were read back and which recomputed, and why.
func (s *Session) Restore(ctx context.Context, name string) (RestoreReport, error) {
	want, onEvent := progressEvents(ctx)
	r, err := s.c.do(ctx, &pb.Request{Body: &pb.Request_Restore{Restore: &pb.RestoreRequest{SessionId: s.id, Name: name, Progress: want}}}, onEvent)
	if err != nil {
		return RestoreReport{}, err
	}
	if rep := restoreReport(r.GetRestore().GetReport()); rep != nil {
		return *rep, nil
	}
	return RestoreReport{Snapshot: name}, nil
}

// Snapshots lists the stored snapshots and the SSD tier's state.
func (c *Client) Snapshots(ctx context.Context) (SnapshotList, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_ListSnapshots{ListSnapshots: &pb.ListSnapshotsRequest{}}}, nil)
	if err != nil {
		return SnapshotList{}, err
	}
	return snapshotList(r.GetListSnapshots()), nil
}

// DeleteSnapshot removes snapshot name; its blocks go when no other
// snapshot needs them and the quota calls for room.
func (c *Client) DeleteSnapshot(ctx context.Context, name string) error {
	_, err := c.do(ctx, &pb.Request{Body: &pb.Request_DeleteSnapshot{DeleteSnapshot: &pb.DeleteSnapshotRequest{Name: name}}}, nil)
	return err
}

// VerifyCold re-reads every file of the SSD tier and reports the bad ones.
func (c *Client) VerifyCold(ctx context.Context) (ColdVerification, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_VerifyCold{VerifyCold: &pb.VerifyColdRequest{}}}, nil)
	if err != nil {
		return ColdVerification{}, err
	}
	return coldVerification(r.GetVerifyCold()), nil
}
