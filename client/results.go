package client

import (
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// The daemon's replies as Go values. Counts of tokens and blocks are int,
// byte sizes int64, durations time.Duration. A nested pointer is nil when
// the daemon reported nothing there (no model loaded, no restore yet).

// ModelInfo describes the loaded model.
type ModelInfo struct {
	Path            string `json:"path,omitempty"`
	Digest          string `json:"digest,omitempty"` // sha256 of the model file, hex
	Description     string `json:"description,omitempty"`
	Layers          int    `json:"layers,omitempty"`
	KVHeads         int    `json:"kv_heads,omitempty"`
	HeadDim         int    `json:"head_dim,omitempty"`
	TrainedContext  int    `json:"trained_context,omitempty"`
	VocabSize       int    `json:"vocab_size,omitempty"`
	KVBytesPerToken int64  `json:"kv_bytes_per_token,omitempty"`
	WeightsBytes    int64  `json:"weights_bytes,omitempty"`
}

func modelInfo(m *pb.ModelInfo) *ModelInfo {
	if m == nil {
		return nil
	}
	return &ModelInfo{
		Path: m.GetPath(), Digest: m.GetDigest(), Description: m.GetDescription(), Layers: int(m.GetLayers()),
		KVHeads: int(m.GetKvHeads()), HeadDim: int(m.GetHeadDim()), TrainedContext: int(m.GetTrainedContext()),
		VocabSize: int(m.GetVocabSize()), KVBytesPerToken: m.GetKvBytesPerToken(), WeightsBytes: m.GetWeightsBytes(),
	}
}

// Capacity is what the daemon derived from the model and the memory it
// may use.
type Capacity struct {
	KVBytesPerToken int64  `json:"kv_bytes_per_token,omitempty"`
	UsableBytes     int64  `json:"usable_bytes,omitempty"`
	WeightsBytes    int64  `json:"weights_bytes,omitempty"`
	OverheadBytes   int64  `json:"overhead_bytes,omitempty"`
	EffectiveTokens int    `json:"effective_tokens,omitempty"` // derived capacity of the hot set
	ModelMaxTokens  int    `json:"model_max_tokens,omitempty"` // the model's trained context
	ContextTokens   int    `json:"context_tokens,omitempty"`   // the configured --ctx
	Clamped         bool   `json:"clamped,omitempty"`          // the context was clamped; Reason says why
	Reason          string `json:"reason,omitempty"`
	MemoryKind      string `json:"memory_kind,omitempty"`    // "host" or "device"
	HotTokens       int    `json:"hot_tokens,omitempty"`     // the engine's hot budget
	WindowTokens    int    `json:"window_tokens,omitempty"`  // positions stay below this (trained window)
	ArenaBytes      int64  `json:"arena_bytes,omitempty"`    // host-RAM arena budget
	ArenaTokens     int    `json:"arena_tokens,omitempty"`   // ArenaBytes / KVBytesPerToken
	SessionTokens   int    `json:"session_tokens,omitempty"` // a session's limit: hot + arena tokens
}

func capacity(c *pb.Capacity) Capacity {
	return Capacity{
		KVBytesPerToken: c.GetKvBytesPerToken(), UsableBytes: c.GetUsableBytes(), WeightsBytes: c.GetWeightsBytes(),
		OverheadBytes: c.GetOverheadBytes(), EffectiveTokens: int(c.GetEffectiveTokens()), ModelMaxTokens: int(c.GetModelMaxTokens()),
		ContextTokens: int(c.GetContextTokens()), Clamped: c.GetClamped(), Reason: c.GetReason(), MemoryKind: c.GetMemoryKind(),
		HotTokens: int(c.GetHotTokens()), WindowTokens: int(c.GetWindowTokens()), ArenaBytes: c.GetArenaBytes(),
		ArenaTokens: int(c.GetArenaTokens()), SessionTokens: int(c.GetSessionTokens()),
	}
}

// DeviceInfo says where the model runs.
type DeviceInfo struct {
	Name             string `json:"name,omitempty"`        // e.g. "Vulkan0", "CUDA0"; "" is the CPU
	Description      string `json:"description,omitempty"` // the driver's name, e.g. "NVIDIA H200"
	Backend          string `json:"backend,omitempty"`     // "Vulkan", "CUDA"
	TotalBytes       int64  `json:"total_bytes,omitempty"`
	FreeBytes        int64  `json:"free_bytes,omitempty"` // free when the model was loaded
	GPULayers        int    `json:"gpu_layers,omitempty"` // transformer blocks on the device
	Layers           int    `json:"layers,omitempty"`     // of the model's
	OutputOnDevice   bool   `json:"output_on_device,omitempty"`
	WeightsBytes     int64  `json:"weights_bytes,omitempty"` // weights on the device
	KVBytes          int64  `json:"kv_bytes,omitempty"`      // KV cache on the device
	ComputeBytes     int64  `json:"compute_bytes,omitempty"` // compute buffers on the device
	HostWeightsBytes int64  `json:"host_weights_bytes,omitempty"`
	HostKVBytes      int64  `json:"host_kv_bytes,omitempty"`
	Reason           string `json:"reason,omitempty"`  // why this device and this many layers
	Threads          int    `json:"threads,omitempty"` // CPU threads of the last decode call
}

func deviceInfo(d *pb.DeviceInfo) *DeviceInfo {
	if d == nil {
		return nil
	}
	return &DeviceInfo{
		Name: d.GetName(), Description: d.GetDescription(), Backend: d.GetBackend(), TotalBytes: d.GetTotalBytes(),
		FreeBytes: d.GetFreeBytes(), GPULayers: int(d.GetGpuLayers()), Layers: int(d.GetLayers()), OutputOnDevice: d.GetOutputOnDevice(),
		WeightsBytes: d.GetWeightsBytes(), KVBytes: d.GetKvBytes(), ComputeBytes: d.GetComputeBytes(),
		HostWeightsBytes: d.GetHostWeightsBytes(), HostKVBytes: d.GetHostKvBytes(), Reason: d.GetReason(), Threads: int(d.GetThreads()),
	}
}

// ColdStatus is the state of the daemon's SSD tier.
type ColdStatus struct {
	Enabled     bool   `json:"enabled,omitempty"`
	Dir         string `json:"dir,omitempty"`
	Blocks      int    `json:"blocks,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"` // on disk (compressed)
	RawBytes    int64  `json:"raw_bytes,omitempty"`
	QuotaBytes  int64  `json:"quota_bytes,omitempty"`
	Queued      int    `json:"queued,omitempty"` // blocks waiting to be written
	Written     int    `json:"written,omitempty"`
	Failed      int    `json:"failed,omitempty"`
	Unavailable string `json:"unavailable,omitempty"` // why the tier stands aside, when it does
	Snapshots   int    `json:"snapshots,omitempty"`
}

func coldStatus(c *pb.ColdStatus) ColdStatus {
	return ColdStatus{
		Enabled: c.GetEnabled(), Dir: c.GetDir(), Blocks: int(c.GetBlocks()), Bytes: c.GetBytes(), RawBytes: c.GetRawBytes(),
		QuotaBytes: c.GetQuotaBytes(), Queued: int(c.GetQueued()), Written: int(c.GetWritten()), Failed: int(c.GetFailed()),
		Unavailable: c.GetUnavailable(), Snapshots: int(c.GetSnapshots()),
	}
}

// Status is the daemon, its model and capacity.
type Status struct {
	ServerVersion  string        `json:"server_version,omitempty"`
	Model          *ModelInfo    `json:"model,omitempty"` // nil when no model is loaded
	Capacity       Capacity      `json:"capacity,omitempty"`
	Sessions       int           `json:"sessions,omitempty"`
	Uptime         time.Duration `json:"uptime_ns,omitempty"`
	KVType         string        `json:"kv_type,omitempty"`
	FlashAttention bool          `json:"flash_attention,omitempty"`
	SystemInfo     string        `json:"system_info,omitempty"`
	Cold           ColdStatus    `json:"cold,omitempty"`
	Device         *DeviceInfo   `json:"device,omitempty"` // nil when no model is loaded
}

func status(s *pb.StatusReply) Status {
	return Status{
		ServerVersion: s.GetServerVersion(), Model: modelInfo(s.GetModel()), Capacity: capacity(s.GetCapacity()),
		Sessions: int(s.GetSessions()), Uptime: time.Duration(s.GetUptimeMs()) * time.Millisecond, KVType: s.GetKvType(),
		FlashAttention: s.GetFlashAttention(), SystemInfo: s.GetSystemInfo(), Cold: coldStatus(s.GetCold()), Device: deviceInfo(s.GetDevice()),
	}
}

// ModelLoad is what LoadModel loaded.
type ModelLoad struct {
	Model    *ModelInfo `json:"model,omitempty"`
	Capacity Capacity   `json:"capacity,omitempty"`
}

// RestoreReport says how a restore or cross-session resume brought a
// session back: which blocks were read from the SSD tier and which
// recomputed, and the rates the choice was made with.
type RestoreReport struct {
	Snapshot            string        `json:"snapshot,omitempty"`
	Tokens              int           `json:"tokens,omitempty"`
	RestoredBlocks      int           `json:"restored_blocks,omitempty"`
	RestoredTokens      int           `json:"restored_tokens,omitempty"`
	RecomputedBlocks    int           `json:"recomputed_blocks,omitempty"`
	RecomputedTokens    int           `json:"recomputed_tokens,omitempty"`
	CompressedBytes     int64         `json:"compressed_bytes,omitempty"`
	RawBytes            int64         `json:"raw_bytes,omitempty"`
	Elapsed             time.Duration `json:"elapsed_ns,omitempty"`
	PrefillTokensPerS   float64       `json:"prefill_tokens_per_s,omitempty"`   // measured at model load
	DecompressBytesPerS float64       `json:"decompress_bytes_per_s,omitempty"` // measured at model load
	ReadBytesPerS       float64       `json:"read_bytes_per_s,omitempty"`       // measured on SSD reads
	Choice              string        `json:"choice,omitempty"`                 // why blocks were restored or recomputed
	Automatic           bool          `json:"automatic,omitempty"`              // a cross-session resume, not an explicit restore
}

func restoreReport(r *pb.RestoreReport) *RestoreReport {
	if r == nil {
		return nil
	}
	return &RestoreReport{
		Snapshot: r.GetSnapshot(), Tokens: int(r.GetTokens()), RestoredBlocks: int(r.GetRestoredBlocks()),
		RestoredTokens: int(r.GetRestoredTokens()), RecomputedBlocks: int(r.GetRecomputedBlocks()),
		RecomputedTokens: int(r.GetRecomputedTokens()), CompressedBytes: r.GetCompressedBytes(), RawBytes: r.GetRawBytes(),
		Elapsed: time.Duration(r.GetElapsedUs()) * time.Microsecond, PrefillTokensPerS: r.GetPrefillTokensPerS(),
		DecompressBytesPerS: r.GetDecompressBytesPerS(), ReadBytesPerS: r.GetReadBytesPerS(), Choice: r.GetChoice(), Automatic: r.GetAutomatic(),
	}
}

// SnapshotInfo describes one stored snapshot.
type SnapshotInfo struct {
	Name        string    `json:"name,omitempty"`
	Created     time.Time `json:"created,omitempty"`
	Tokens      int       `json:"tokens,omitempty"`
	Blocks      int       `json:"blocks,omitempty"`
	Bytes       int64     `json:"bytes,omitempty"`
	ModelDigest string    `json:"model_digest,omitempty"`
	KVType      string    `json:"kv_type,omitempty"`
	Compatible  bool      `json:"compatible,omitempty"` // with the loaded model and settings
	Mode        string    `json:"mode,omitempty"`       // "dense" or "hot"
}

// SnapshotList is the stored snapshots and the SSD tier's state.
type SnapshotList struct {
	Snapshots []SnapshotInfo `json:"snapshots,omitempty"`
	Cold      ColdStatus     `json:"cold,omitempty"`
}

func snapshotList(r *pb.ListSnapshotsReply) SnapshotList {
	l := SnapshotList{Cold: coldStatus(r.GetCold()), Snapshots: make([]SnapshotInfo, 0, len(r.GetSnapshots()))}
	for _, s := range r.GetSnapshots() {
		l.Snapshots = append(l.Snapshots, SnapshotInfo{
			Name: s.GetName(), Created: time.UnixMilli(s.GetCreatedUnixMs()), Tokens: int(s.GetTokens()), Blocks: int(s.GetBlocks()),
			Bytes: s.GetBytes(), ModelDigest: s.GetModelDigest(), KVType: s.GetKvType(), Compatible: s.GetCompatible(), Mode: s.GetMode(),
		})
	}
	return l
}

// ColdProblem is one bad file of the SSD tier.
type ColdProblem struct {
	Path  string `json:"path,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// ColdVerification is what VerifyCold checked and found.
type ColdVerification struct {
	Problems         []ColdProblem `json:"problems,omitempty"`
	BlocksChecked    int           `json:"blocks_checked,omitempty"`
	SnapshotsChecked int           `json:"snapshots_checked,omitempty"`
}

func coldVerification(r *pb.VerifyColdReply) ColdVerification {
	v := ColdVerification{BlocksChecked: int(r.GetBlocksChecked()), SnapshotsChecked: int(r.GetSnapshotsChecked())}
	for _, p := range r.GetProblems() {
		v.Problems = append(v.Problems, ColdProblem{Path: p.GetPath(), Kind: p.GetKind(), Error: p.GetError()})
	}
	return v
}

// TimingHistogram is a log2 histogram of one of the daemon's timings:
// Buckets[i] counts samples below 2^i ns.
type TimingHistogram struct {
	Name    string   `json:"name,omitempty"` // e.g. "phase.arena_lookup", "request.decode"
	Count   uint64   `json:"count,omitempty"`
	SumNs   float64  `json:"sum_ns,omitempty"`
	Buckets []uint64 `json:"buckets,omitempty"`
}

// ArenaRange is one mapped address range of the host-RAM arena.
type ArenaRange struct {
	Start uint64 `json:"start,omitempty"`
	End   uint64 `json:"end,omitempty"`
	Path  string `json:"path,omitempty"`
}

// Metrics is the daemon's counters, gauges and timings.
type Metrics struct {
	PrometheusText string            `json:"prometheus_text,omitempty"` // the text exposition format, version 0.0.4; "" with NoText
	Histograms     []TimingHistogram `json:"histograms,omitempty"`
	ArenaRanges    []ArenaRange      `json:"arena_ranges,omitempty"` // empty without a hot-set model
	PID            int               `json:"pid,omitempty"`          // the daemon's process id
	Executable     string            `json:"executable,omitempty"`   // its executable (for uprobes)
	// Values are counters and gauges by series: `name{label="v"}`.
	Values map[string]float64 `json:"values,omitempty"`
}

func metrics(r *pb.MetricsReply) Metrics {
	m := Metrics{PrometheusText: r.GetPrometheusText(), PID: int(r.GetPid()), Executable: r.GetExecutable(), Values: r.GetValues()}
	for _, h := range r.GetHistograms() {
		m.Histograms = append(m.Histograms, TimingHistogram{Name: h.GetName(), Count: h.GetCount(), SumNs: h.GetSumNs(), Buckets: h.GetBuckets()})
	}
	for _, a := range r.GetArenaRanges() {
		m.ArenaRanges = append(m.ArenaRanges, ArenaRange{Start: a.GetStart(), End: a.GetEnd(), Path: a.GetPath()})
	}
	return m
}
