package sidecar

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Emitter sends one streamed event of a call (a DATA frame on the wire).
// It is an alias, so in-process callers (the HTTP door) name the function
// type without importing this package.
type Emitter = func(*pb.StreamEvent) error

// Handle serves one request. It is the whole server minus the socket:
// connections call it for every REQUEST frame, and benchmarks call it
// in-process to measure what the socket adds. connID identifies the caller
// for session ownership (0 for in-process callers).
func (srv *Server) Handle(ctx context.Context, connID uint64, req *pb.Request, emit Emitter) (resp *pb.Response) {
	defer srv.metrics.observeCall(req, time.Now(), &resp)
	resp, err := srv.handle(ctx, connID, req, emit)
	if err != nil {
		srv.log.Debug("call failed", "conn", connID, "err", err)
		return &pb.Response{Error: protocol.ToWire(err)}
	}
	return resp
}

func (srv *Server) handle(ctx context.Context, connID uint64, req *pb.Request, emit Emitter) (*pb.Response, error) {
	if err := srv.fenced(); err != nil {
		return nil, err
	}
	switch b := req.Body.(type) {
	case *pb.Request_Ping:
		return &pb.Response{Body: &pb.Response_Ping{Ping: &pb.PingReply{Payload: b.Ping.GetPayload()}}}, nil
	case *pb.Request_Hello:
		return nil, fmt.Errorf("%w: hello is only valid as the first frame", protocol.ErrProtocol)
	case *pb.Request_Status:
		r, err := srv.status(ctx)
		return wrap(r, err, func(r *pb.StatusReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Status{Status: r}}
		})
	case *pb.Request_LoadModel:
		r, err := srv.loadModel(ctx, b.LoadModel)
		return wrap(r, err, func(r *pb.LoadModelReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_LoadModel{LoadModel: r}}
		})
	case *pb.Request_UnloadModel:
		err := srv.unloadModel(ctx)
		return wrap(&pb.UnloadModelReply{}, err, func(r *pb.UnloadModelReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_UnloadModel{UnloadModel: r}}
		})
	case *pb.Request_OpenSession:
		r, err := srv.openWithManifest(ctx, connID, b.OpenSession)
		return wrap(r, err, func(r *pb.OpenSessionReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_OpenSession{OpenSession: r}}
		})
	case *pb.Request_EnsurePrefix:
		r, err := srv.ensurePrefix(withProgress(ctx, b.EnsurePrefix.GetProgress(), emit), connID, b.EnsurePrefix)
		return wrap(r, err, func(r *pb.PrefixReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_EnsurePrefix{EnsurePrefix: r}}
		})
	case *pb.Request_PrefillSuffix:
		r, err := srv.prefillSuffix(withProgress(ctx, b.PrefillSuffix.GetProgress(), emit), connID, b.PrefillSuffix)
		return wrap(r, err, func(r *pb.PrefixReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_PrefillSuffix{PrefillSuffix: r}}
		})
	case *pb.Request_Decode:
		r, err := srv.decode(ctx, connID, b.Decode, emit)
		return wrap(r, err, func(r *pb.DecodeReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Decode{Decode: r}}
		})
	case *pb.Request_Explain:
		r, err := srv.explain(ctx, b.Explain)
		return wrap(r, err, func(r *pb.ExplainReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Explain{Explain: r}}
		})
	case *pb.Request_Metrics:
		r, err := srv.metricsReply(b.Metrics)
		return wrap(r, err, func(r *pb.MetricsReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Metrics{Metrics: r}}
		})
	case *pb.Request_CloseSession:
		err := srv.closeSession(ctx, connID, b.CloseSession.GetSessionId())
		return wrap(&pb.CloseSessionReply{}, err, func(r *pb.CloseSessionReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_CloseSession{CloseSession: r}}
		})
	case *pb.Request_Snapshot:
		r, err := srv.snapshot(ctx, b.Snapshot)
		return wrap(r, err, func(r *pb.SnapshotReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Snapshot{Snapshot: r}}
		})
	case *pb.Request_Restore:
		r, err := srv.restore(withProgress(ctx, b.Restore.GetProgress(), emit), connID, b.Restore)
		return wrap(r, err, func(r *pb.RestoreReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_Restore{Restore: r}}
		})
	case *pb.Request_ListSnapshots:
		r, err := srv.listSnapshots(ctx)
		return wrap(r, err, func(r *pb.ListSnapshotsReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_ListSnapshots{ListSnapshots: r}}
		})
	case *pb.Request_DeleteSnapshot:
		err := srv.deleteSnapshot(ctx, b.DeleteSnapshot.GetName())
		return wrap(&pb.DeleteSnapshotReply{}, err, func(r *pb.DeleteSnapshotReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_DeleteSnapshot{DeleteSnapshot: r}}
		})
	case *pb.Request_ReportEdit:
		r, err := srv.reportEdit(ctx, connID, b.ReportEdit)
		return wrap(r, err, func(r *pb.ReportEditReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_ReportEdit{ReportEdit: r}}
		})
	case *pb.Request_VerifyCold:
		r, err := srv.verifyCold(ctx)
		return wrap(r, err, func(r *pb.VerifyColdReply) *pb.Response {
			return &pb.Response{Body: &pb.Response_VerifyCold{VerifyCold: r}}
		})
	default:
		return nil, fmt.Errorf("%w: request without a known body", protocol.ErrInvalidArgument)
	}
}

func wrap[T any](r T, err error, f func(T) *pb.Response) (*pb.Response, error) {
	if err != nil {
		return nil, err
	}
	return f(r), nil
}

// status never waits for the engine: the model's figures are those
// published at its load (view.go), the CPU threads those of the last
// decode call.
func (srv *Server) status(ctx context.Context) (*pb.StatusReply, error) {
	r := &pb.StatusReply{
		ServerVersion:  srv.cfg.Version,
		UptimeMs:       time.Since(srv.started).Milliseconds(),
		KvType:         srv.cfg.KVType.String(),
		FlashAttention: srv.cfg.FlashAttention,
		SystemInfo:     srv.cfg.Engine.SystemInfo(),
		Cold:           srv.ssdStatus(),
	}
	srv.mu.Lock()
	r.Sessions = int32(len(srv.sessions))
	srv.mu.Unlock()
	v := srv.slot.view.Load()
	r.Model, r.Capacity, r.Device = v.model, v.capacity, withThreads(v.device, v.threads)
	return r, ctx.Err()
}

func (srv *Server) modelInfo() *pb.ModelInfo {
	f := srv.slot.facts
	return &pb.ModelInfo{
		Path: f.Path, Digest: f.Digest, Description: f.Description,
		Layers: int32(f.Layers), KvHeads: int32(f.KVHeads), HeadDim: int32(f.HeadDim),
		TrainedContext: int32(f.TrainedContext), VocabSize: int32(f.VocabSize),
		KvBytesPerToken: f.KVBytesPerToken(srv.cfg.KVType), WeightsBytes: f.WeightsBytes,
	}
}

func capacityToWire(c policy.Capacity) *pb.Capacity {
	return &pb.Capacity{
		KvBytesPerToken: c.KVBytesPerToken, UsableBytes: c.UsableBytes, WeightsBytes: c.WeightsBytes,
		OverheadBytes: c.OverheadBytes, EffectiveTokens: c.EffectiveTokens, ModelMaxTokens: c.ModelMaxTokens,
		ContextTokens: c.ContextTokens, Clamped: c.Clamped, Reason: c.Reason, MemoryKind: c.MemoryKind,
	}
}

// capacityReply adds the hot-set figures of the loaded model.
func (srv *Server) capacityReply() *pb.Capacity {
	c := capacityToWire(srv.slot.capacity)
	if hc := srv.slot.hot; hc.Budget > 0 {
		c.HotTokens, c.WindowTokens, c.ArenaBytes = int64(hc.Limit), int64(hc.Window), srv.tiers.ArenaBytes()
		c.ArenaTokens = int64(srv.slot.sessionTokens() - hc.Limit)
	}
	c.SessionTokens = int64(srv.slot.sessionTokens())
	return c
}

func (srv *Server) loadModel(ctx context.Context, r *pb.LoadModelRequest) (*pb.LoadModelReply, error) {
	if r.GetPath() == "" || r.GetContextTokens() < 0 {
		return nil, fmt.Errorf("%w: load_model needs a path and a non-negative context", protocol.ErrInvalidArgument)
	}
	srv.beforeModelChange(ctx)
	if err := srv.slot.acquire(ctx); err != nil {
		return nil, err
	}
	defer srv.slot.release()
	if err := srv.loadLocked(ctx, r.GetPath(), int(r.GetContextTokens())); err != nil {
		return nil, err
	}
	return &pb.LoadModelReply{Model: srv.modelInfo(), Capacity: srv.capacityReply()}, nil
}

// loadLocked loads a model; the caller holds the slot token.
func (srv *Server) loadLocked(ctx context.Context, path string, ctxTokens int) error {
	warn, err := srv.slot.load(ctx, loadOptions{
		cfg: &srv.cfg, dataDir: srv.cfg.DataDir, log: srv.log.Warn, info: srv.log.Info,
		path: path, contextTokens: ctxTokens, kvType: srv.cfg.KVType,
		flashAttention: srv.cfg.FlashAttention, batchTokens: srv.cfg.BatchTokens, threads: srv.cfg.Threads,
	})
	if err != nil {
		return err
	}
	srv.mu.Lock()
	srv.nextSession = max(srv.nextSession, srv.slot.arenaMaxSession)
	srv.mu.Unlock()
	srv.slot.ssdBytes = srv.tiers.SSDQuota()
	srv.publishSlot()
	c := srv.slot.capacity
	srv.log.Info("model loaded", "path", path, "digest", srv.slot.facts.Digest[:16],
		"ctx", c.ContextTokens, "effective", c.EffectiveTokens, "kv_bytes_per_token", c.KVBytesPerToken, "bound", c.Reason)
	if warn != "" {
		srv.log.Warn(warn)
	}
	return nil
}

func (srv *Server) unloadModel(ctx context.Context) error {
	srv.beforeModelChange(ctx)
	if err := srv.slot.acquire(ctx); err != nil {
		return err
	}
	defer srv.slot.release()
	if srv.slot.holders > 0 {
		return fmt.Errorf("%w: %d sessions are open", protocol.ErrModelBusy, srv.slot.holders)
	}
	srv.slot.unload()
	srv.publishSlot()
	return nil
}

// OnModelChange registers f, run before a model is loaded or unloaded,
// outside the engine token: an in-process front door (the HTTP API) closes
// the sessions it keeps between requests, which would otherwise hold the
// model slot (ErrModelBusy) for good.
func (srv *Server) OnModelChange(f func(context.Context)) {
	srv.mu.Lock()
	srv.modelChange = append(srv.modelChange, f)
	srv.mu.Unlock()
}

func (srv *Server) beforeModelChange(ctx context.Context) {
	srv.mu.Lock()
	fs := slices.Clone(srv.modelChange)
	srv.mu.Unlock()
	for _, f := range fs {
		f(ctx)
	}
}
