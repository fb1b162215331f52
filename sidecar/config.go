package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Config configures a Server.
type Config struct {
	ModelPath      string        // loaded at start when set
	ContextTokens  int           // --ctx; 0 derives it from capacity
	SocketPath     string        // default DefaultSocketPath()
	DataDir        string        // default DefaultDataDir()
	KVType         policy.KVType // f16 default
	FlashAttention bool
	BatchTokens    int    // prefill batch; 0 = DefaultConfig's
	Threads        int    // CPU threads: policy.ThreadsAuto (0) adapts each call to the free cores, N pins N
	AllowUIDs      []int  // peers allowed besides the server's own uid
	MaxFrame       uint32 // 0 = protocol.DefaultMaxFrame
	// Where the model runs. BackendDir holds GPU backend libraries
	// (libggml-vulkan.so, libggml-cuda.so; "" = none loaded here); Device
	// picks among their devices (policy.ChooseDevice: "" = the GPU with
	// the most free memory, "cpu" = none); GPULayers is how many
	// transformer blocks go there (0 = every one that fits).
	BackendDir string
	Device     string
	GPULayers  int
	// HandshakeTimeout bounds the wait for a new connection's hello;
	// MaxConns caps the connections served at once (more are refused with
	// RESOURCE_EXHAUSTED on stream 0). 0 = DefaultConfig's.
	HandshakeTimeout time.Duration
	MaxConns         int
	// StreamCoalesce is how long a streamed token's DATA frame may wait
	// for the next one's write (policy.HoldFrame); 0 = DefaultConfig's
	// (policy.StreamCoalesce), <0 = every frame written at once.
	StreamCoalesce time.Duration

	// Beyond the window (hot-set mode). HotTokens 0 keeps sessions dense:
	// every token resident, at most ContextTokens. HotAuto derives the
	// budget at load (policy.AutoHotBudget: the trained window, bounded by
	// memory, then by the turn-latency target).
	HotTokens    int    // the engine's hot budget in tokens
	Window       int    // positions stay below this; 0 = the model's trained context
	BlockTokens  int    // block size; 0 = DefaultConfig's
	SinkTokens   int    // attention sinks; 0 = DefaultConfig's, NoSinks = none (a plain sliding window)
	RecentTokens int    // recent window; 0 = HotTokens/4
	ArenaBytes   int64  // host-RAM arena budget; 0 = a quarter of available RAM
	MetricsAddr  string // --metrics-addr: serve /metrics over HTTP here ("" = off)
	// MetricsKey, when set, is required on /metrics as "Authorization:
	// Bearer KEY"; a MetricsAddr that is not loopback needs it.
	MetricsKey string

	// Scorers ranks parked blocks for retrieval: "both" (the default:
	// lexical and attention, fused; lexical alone on an engine without
	// the attention contracts), "lexical", "attention" or "none" (keep
	// only sinks, pinned and recent tokens).
	Scorers string

	// The SSD tier (snapshots, cross-session resume).
	NoCold         bool          // run on host RAM only
	ColdDir        string        // default DataDir/cold
	ColdQuotaBytes int64         // 0 = a quarter of the free disk space
	IdleSnapshot   time.Duration // snapshot a session idle this long; 0 = DefaultConfig's, <0 = never
	AutoSnapshots  int           // automatic snapshots kept; 0 = DefaultConfig's

	// A CPU's turn-latency target bounds the hot budget (attention cost
	// grows with the hot set): a turn of TurnSuffixTokens new tokens must
	// prefill within TurnLatency. 0 = DefaultConfig's; <0 = off.
	TurnLatency      time.Duration
	TurnSuffixTokens int
	// Reuse is how a dense session reuses KV past an early change
	// (policy.ReuseAuto, the zero value: unchanged segments moved, as
	// approximate KV, only when prefilling them again would miss the
	// latency target; policy.ReuseExact: never). ReuseLatency is that
	// target; 0 = TurnLatency.
	Reuse        policy.ReuseMode
	ReuseLatency time.Duration
	Logger       *slog.Logger
	// Engine is the inference engine, the daemon's only door to native
	// code: engine/llama's Backend in ctxd, engine/enginefake's in unit
	// tests. Required by New.
	Engine engine.Backend
	// Version is reported in HelloReply and Status.
	Version string
}

// DefaultConfig is every default of a Server, defined here once (the
// hot-set ones are policy's): the command line starts from it, and fill
// gives a zero field (one whose zero means "unset") its value from it.
// Where zero is a meaningful value, a named one says it: HotAuto, NoSinks.
func DefaultConfig() Config {
	return Config{
		SocketPath:       DefaultSocketPath(),
		DataDir:          DefaultDataDir(),
		KVType:           policy.KVTypeF16,
		BatchTokens:      512,
		MaxFrame:         protocol.DefaultMaxFrame,
		HandshakeTimeout: 10 * time.Second,
		MaxConns:         256,
		StreamCoalesce:   policy.StreamCoalesce,
		BlockTokens:      policy.DefaultHotBlockTokens,
		SinkTokens:       policy.DefaultSinkTokens,
		IdleSnapshot:     60 * time.Second,
		AutoSnapshots:    8,
		TurnLatency:      120 * time.Second,
		TurnSuffixTokens: 4096,
		Version:          "dev",
	}
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func (c *Config) fill() error {
	d := DefaultConfig()
	orDefault(&c.SocketPath, d.SocketPath)
	orDefault(&c.DataDir, d.DataDir)
	orDefault(&c.BatchTokens, d.BatchTokens)
	orDefault(&c.MaxFrame, d.MaxFrame)
	orDefault(&c.HandshakeTimeout, d.HandshakeTimeout)
	orDefault(&c.MaxConns, d.MaxConns)
	orDefault(&c.StreamCoalesce, d.StreamCoalesce)
	orDefault(&c.BlockTokens, d.BlockTokens)
	orDefault(&c.IdleSnapshot, d.IdleSnapshot)
	orDefault(&c.AutoSnapshots, d.AutoSnapshots)
	orDefault(&c.TurnLatency, d.TurnLatency)
	orDefault(&c.TurnSuffixTokens, d.TurnSuffixTokens)
	orDefault(&c.Version, d.Version)
	orDefault(&c.SinkTokens, d.SinkTokens)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HandshakeTimeout < 0 || c.MaxConns < 0 {
		return fmt.Errorf("%w: negative connection setting", ErrConfig)
	}
	if c.ColdQuotaBytes < 0 || c.AutoSnapshots < 0 {
		return fmt.Errorf("%w: negative SSD-tier setting", ErrConfig)
	}
	if c.ContextTokens < 0 {
		return fmt.Errorf("%w: --ctx %d", ErrConfig, c.ContextTokens)
	}
	if err := c.hotLimitsInput().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.ArenaBytes < 0 {
		return fmt.Errorf("%w: negative arena budget %d", ErrConfig, c.ArenaBytes)
	}
	if _, err := c.ScorerSet(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if !c.KVType.Valid() {
		return fmt.Errorf("%w: KV type %v", ErrConfig, c.KVType)
	}
	if c.GPULayers < 0 {
		return fmt.Errorf("%w: --gpu-layers %d", ErrConfig, c.GPULayers)
	}
	return nil
}

// hotLimitsInput is the hot-set part of c for policy.ResolveHotLimits,
// which holds the defaults, validation and floor; the model's facts are
// the caller's to add.
func (c *Config) hotLimitsInput() policy.HotLimitsInput {
	in := policy.HotLimitsInput{HotTokens: c.HotTokens, Auto: c.HotTokens == HotAuto, Window: c.Window,
		BlockTokens: c.BlockTokens, SinkTokens: c.SinkTokens, RecentTokens: c.RecentTokens}
	if c.SinkTokens == NoSinks {
		in.SinkTokens, in.NoSinks = 0, true
	}
	return in
}

// ssdConfig is where c puts the SSD tier.
func (c *Config) ssdConfig() tiers.SSDConfig {
	if c.NoCold {
		return tiers.SSDConfig{Off: "disabled by configuration (--no-cold)"}
	}
	dir := c.ColdDir
	if dir == "" {
		dir = filepath.Join(c.DataDir, "cold")
	}
	return tiers.SSDConfig{Dir: dir, QuotaBytes: c.ColdQuotaBytes}
}

// HotAuto as Config.HotTokens derives the hot budget from the model and
// the machine at load.
const HotAuto = -1

// NoSinks as Config.SinkTokens keeps no attention sinks (`ctxd --sinks 0`):
// the hot set is a plain sliding window with retrieval.
const NoSinks = -1

// ErrConfig reports an invalid configuration value.
var ErrConfig = errors.New("invalid configuration")

// DefaultSocketPath is protocol.DefaultSocketPath: $XDG_RUNTIME_DIR/ctxd/ctxd.sock,
// or /tmp/ctxd-UID/ctxd.sock without XDG_RUNTIME_DIR.
func DefaultSocketPath() string { return protocol.DefaultSocketPath() }

// DefaultDataDir is $XDG_STATE_HOME/ctxd or ~/.local/state/ctxd.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "ctxd")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "ctxd")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("ctxd-state-%d", os.Getuid()))
}

// defaultScorers ranks parked blocks when Config.Scorers is empty: both
// scorers, fused, which found every text needle lexical alone found and
// more (docs/BENCHMARKS.md, "Recall").
const defaultScorers = policy.ScorerBoth

// ScorerSet resolves Scorers: the scorers a server with this
// configuration ranks parked blocks with.
func (c *Config) ScorerSet() (policy.ScorerSet, error) {
	if c.Scorers == "" {
		return defaultScorers, nil
	}
	return policy.ParseScorerSet(c.Scorers)
}

// ErrScorerUnavailable reports a retrieval scorer the loaded engine cannot
// run (the attention scorer needs engine.QueryCapturer and
// engine.KeyReader).
var ErrScorerUnavailable = errors.New("retrieval scorer unavailable")
