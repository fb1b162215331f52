package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// Config configures a Server.
type Config struct {
	ModelPath      string        // loaded at start when set
	ContextTokens  int           // --ctx; 0 derives it from capacity
	SocketPath     string        // default DefaultSocketPath()
	DataDir        string        // default DefaultDataDir()
	KVType         policy.KVType // f16 default
	FlashAttention bool
	BatchTokens    int    // prefill batch; 0 = 512
	Threads        int    // 0 = all CPUs
	AllowUIDs      []int  // peers allowed besides the server's own uid
	MaxFrame       uint32 // 0 = protocol.DefaultMaxFrame

	// Beyond the window (hot-set mode). HotTokens 0 keeps sessions dense:
	// every token resident, at most ContextTokens.
	HotTokens    int    // the engine's hot budget in tokens
	Window       int    // positions stay below this; 0 = the model's trained context
	BlockTokens  int    // block size; 0 = 64
	SinkTokens   int    // attention sinks; 0 = 4
	RecentTokens int    // recent window; 0 = HotTokens/4
	NoRetrieval  bool   // keep only sinks, pinned and recent (evaluation baseline)
	NoSinks      bool   // no attention sinks: a plain sliding window (evaluation baseline)
	MaxRetrieved int    // cap on retrieved blocks per turn; 0 = none
	ArenaBytes   int64  // host-RAM arena budget; 0 = a quarter of available RAM
	MetricsAddr  string // --metrics-addr: serve /metrics over HTTP here ("" = off)

	// Scorers ranks parked blocks for retrieval: "lexical" (the default),
	// "attention", "both" or "none" (like NoRetrieval).
	Scorers string

	// The SSD tier (snapshots, cross-session resume).
	NoCold         bool          // run on host RAM only
	ColdDir        string        // default DataDir/cold
	ColdQuotaBytes int64         // 0 = a quarter of the free disk space
	IdleSnapshot   time.Duration // snapshot a session idle this long; 0 = 60s, <0 = never
	AutoSnapshots  int           // automatic snapshots kept; 0 = 8

	// A CPU's turn-latency target bounds the hot budget (attention cost
	// grows with the hot set): a turn of TurnSuffixTokens new tokens must
	// prefill within TurnLatency. 0 = 120 s and 4096 tokens; <0 = off.
	TurnLatency      time.Duration
	TurnSuffixTokens int
	Logger           *slog.Logger
	// Version is reported in HelloReply and Status.
	Version string
}

func (c *Config) fill() error {
	if c.SocketPath == "" {
		c.SocketPath = DefaultSocketPath()
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = protocol.DefaultMaxFrame
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.IdleSnapshot == 0 {
		c.IdleSnapshot = 60 * time.Second
	}
	if c.AutoSnapshots == 0 {
		c.AutoSnapshots = 8
	}
	if c.TurnLatency == 0 {
		c.TurnLatency = 120 * time.Second
	}
	if c.TurnSuffixTokens == 0 {
		c.TurnSuffixTokens = 4096
	}
	if c.ColdQuotaBytes < 0 || c.AutoSnapshots < 0 {
		return fmt.Errorf("%w: negative SSD-tier setting", ErrConfig)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.ContextTokens < 0 {
		return fmt.Errorf("%w: --ctx %d", ErrConfig, c.ContextTokens)
	}
	if c.HotTokens < 0 || c.Window < 0 || c.BlockTokens < 0 || c.SinkTokens < 0 || c.RecentTokens < 0 || c.ArenaBytes < 0 {
		return fmt.Errorf("%w: negative hot-set setting", ErrConfig)
	}
	if _, err := c.ScorerSet(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if !c.KVType.Valid() {
		return fmt.Errorf("%w: KV type %v", ErrConfig, c.KVType)
	}
	return nil
}

// ErrConfig reports an invalid configuration value.
var ErrConfig = errors.New("invalid configuration")

// DefaultSocketPath is $XDG_RUNTIME_DIR/ctxd/ctxd.sock, or
// /tmp/ctxd-UID/ctxd.sock without XDG_RUNTIME_DIR.
func DefaultSocketPath() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ctxd", "ctxd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("ctxd-%d", os.Getuid()), "ctxd.sock")
}

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

// defaultScorers ranks parked blocks when Config.Scorers is empty.
const defaultScorers = policy.ScorerLexical

// ScorerSet resolves Scorers and NoRetrieval: the scorers a server with
// this configuration ranks parked blocks with.
func (c *Config) ScorerSet() (policy.ScorerSet, error) {
	if c.NoRetrieval {
		return policy.ScorerNone, nil
	}
	if c.Scorers == "" {
		return defaultScorers, nil
	}
	s, err := policy.ParseScorerSet(c.Scorers)
	if err == nil && s.Has(policy.ScorerAttention) {
		return 0, fmt.Errorf("%w: the attention scorer is not implemented yet (README, \"Beyond the trained window\")", ErrScorerUnavailable)
	}
	return s, err
}

// ErrScorerUnavailable reports a retrieval scorer this build cannot run.
var ErrScorerUnavailable = errors.New("retrieval scorer unavailable")
