package sidecar

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// The SSD tier (package coldstore) holds compressed KV blocks and
// snapshots. It is opened once per Server (keys carry the model digest and
// the KV settings, so one store serves every model); when it cannot be
// opened, or later stands aside after ENOSPC/EIO, sessions keep running on
// host RAM and the reason is reported in Status/Explain.

// openCold opens the SSD tier; failures are logged and leave it off.
func (srv *Server) openCold(ctx context.Context) {
	if srv.cfg.NoCold {
		srv.coldOff = "disabled by configuration (--no-cold)"
		return
	}
	dir := srv.cfg.ColdDir
	if dir == "" {
		dir = filepath.Join(srv.cfg.DataDir, "cold")
	}
	quota := srv.cfg.ColdQuotaBytes
	if quota == 0 {
		quota = derivedColdQuota(dir)
	}
	st, rep, err := coldstore.Open(ctx, coldstore.Config{
		Dir: dir, QuotaBytes: quota, Workers: 1, Logger: srv.log.With("tier", "ssd"),
	})
	if err != nil {
		srv.coldOff = fmt.Sprintf("cannot open %s: %v", dir, err)
		srv.log.Warn("SSD tier off: sessions run on host RAM only", "dir", dir, "err", err)
		return
	}
	for _, p := range rep.SetAside {
		srv.log.Warn("SSD tier: file set aside", "path", p.Path, "kind", p.Kind, "err", p.Err)
	}
	srv.log.Info("SSD tier open", "dir", dir, "blocks", rep.Blocks, "snapshots", rep.Snapshots, "bytes", rep.Bytes, "quota", quota)
	srv.cold, srv.coldDir = st, dir
}

// derivedColdQuota is a quarter of the free space where the store lives
// (its parent when the folder does not exist yet); 1 GiB when that cannot
// be measured.
func derivedColdQuota(dir string) int64 {
	var fs unix.Statfs_t
	for d := dir; ; d = filepath.Dir(d) {
		if err := unix.Statfs(d, &fs); err == nil {
			break
		}
		if d == filepath.Dir(d) {
			return 1 << 30
		}
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	return max(free/4, 1)
}

// coldCompat is what a saved blob depends on for the loaded model.
func (srv *Server) coldCompat() coldstore.Compat {
	return coldstore.Compat{
		ModelDigest: srv.slot.facts.Digest, KVType: srv.cfg.KVType.String(),
		FlashAttention: srv.cfg.FlashAttention, Unified: true,
		Settings: strings.TrimSpace(fmt.Sprintf("format=%d envelope=1 %s", formatVersion, backendSettings(srv.slot.facts.Placement))),
	}
}

// contentKey addresses a blob by its token chain, the position its KV was
// extracted at and the bytes themselves, so equal keys mean equal bytes
// and a restore is bit-exact whatever computed the block.
func contentKey(c coldstore.Compat, chain [32]byte, pos0 int, blob []byte) coldstore.Key {
	h := sha256.New()
	h.Write(chain[:])
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(pos0))
	h.Write(b[:])
	h.Write(blob)
	var sum [32]byte
	h.Sum(sum[:0])
	return coldstore.BlockKey(c, sum)
}

// elemBytes is the byte-plane stride for the KV type.
func elemBytes(kv policy.KVType) int {
	if num, den := kv.BytesPerElement(); den == 1 && num > 0 {
		return int(num)
	}
	return 1 // quantized rows: no split
}

// coldStatus reports the SSD tier.
func (srv *Server) coldStatus() *pb.ColdStatus {
	if srv.cold == nil {
		return &pb.ColdStatus{Unavailable: srv.coldOff}
	}
	st := srv.cold.Stats()
	cs := &pb.ColdStatus{
		Enabled: true, Dir: srv.coldDir, Blocks: int64(st.Blocks), Bytes: st.Bytes, RawBytes: st.RawBytes,
		QuotaBytes: st.QuotaBytes, Queued: int64(st.Queued), Written: st.Written, Failed: st.Failed,
		Unavailable: st.Unavailable,
	}
	srv.snapMu.Lock()
	cs.Snapshots = int32(len(srv.snaps))
	srv.snapMu.Unlock()
	return cs
}

// coldErr maps coldstore errors onto protocol sentinels.
func coldErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coldstore.ErrNotFound):
		return fmt.Errorf("%w: %w", protocol.ErrNotFound, err)
	case errors.Is(err, coldstore.ErrInvalidName):
		return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	case errors.Is(err, coldstore.ErrUnavailable), errors.Is(err, coldstore.ErrQueueFull):
		return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", protocol.ErrCancelled, err)
	default:
		return fmt.Errorf("%w: %w", protocol.ErrInternal, err)
	}
}

// coldGet reads block id's KV from the SSD tier: the decompress phase of
// a fetch (read and decompression), also the fetch latency of tier "ssd".
func (srv *Server) coldGet(ctx context.Context, key coldstore.Key, id uint64) ([]byte, error) {
	t := srv.metrics.beginPhase(phaseDecompress, id)
	_, stored, err := srv.cold.Get(ctx, key)
	var blob []byte
	if err == nil {
		blob, err = fromCold(srv.cfg.Engine.BlobCodec(), stored)
	}
	d := t.end()
	if err == nil {
		srv.metrics.ObserveFetch(TierSSD, d)
		srv.metrics.ObserveColdRead(len(blob), d)
	}
	return blob, err
}

// Blobs in the SSD tier carry an 8-byte envelope saying how their bytes
// were laid out for compression (8 bytes keep the f16 byte planes
// aligned): the engine's bytes as they are, or with a transposed V
// rewritten token by token (engine.BlobCodec.TokenMajor), which
// compresses better.
var (
	envelopeRaw        = []byte("ctxdkvR1")
	envelopeTokenMajor = []byte("ctxdkvT1")
)

// toCold wraps an engine blob for the SSD tier.
func toCold(codec engine.BlobCodec, blob []byte) []byte {
	tm, changed := codec.TokenMajor(blob)
	env := envelopeRaw
	if changed {
		env = envelopeTokenMajor
	}
	out := make([]byte, 0, len(env)+len(tm))
	return append(append(out, env...), tm...)
}

// fromCold unwraps a blob read from the SSD tier.
func fromCold(codec engine.BlobCodec, stored []byte) ([]byte, error) {
	if len(stored) < 8 {
		return nil, fmt.Errorf("%w: SSD-tier blob of %d bytes has no envelope", protocol.ErrInternal, len(stored))
	}
	switch env, body := stored[:8], stored[8:]; {
	case bytes.Equal(env, envelopeRaw):
		return body, nil
	case bytes.Equal(env, envelopeTokenMajor):
		return codec.FromTokenMajor(body)
	default:
		return nil, fmt.Errorf("%w: SSD-tier blob with unknown envelope %q", protocol.ErrInternal, env)
	}
}
