package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/httpapi"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// Configuration: every setting has one key, used as
//
//	key = value      in the TOML config file,
//	CTXD_KEY=value   in the environment (upper case, '-' becomes '_'),
//	--key value      on the command line,
//
// and the value comes from the last of defaults, file, environment and
// flags that sets it.

var (
	errInvalidValue = errors.New("invalid value")
	errUnknownKey   = errors.New("unknown key")
)

// valueError is a rejected value: which key, what value, where it came
// from and why.
type valueError struct {
	Key, Value, Source string
	Err                error
}

func (e *valueError) Error() string {
	return fmt.Sprintf("invalid %s = %s (%s): %v", e.Key, e.Value, e.Source, e.Err)
}

func (e *valueError) Unwrap() []error { return []error{errInvalidValue, e.Err} }

// config is ctxd's merged configuration.
type config struct {
	server    sidecar.Config
	http      httpapi.Config
	logLevel  slog.Level
	logFormat string
	// noRetrieval is --no-retrieval (a baseline): scorers "none".
	noRetrieval bool

	// file is the config file read ("" when none); fileFound says whether
	// it existed (a missing default file is not an error).
	file      string
	fileFound bool
	settings  []*setting
}

// serverConfig is the daemon's configuration as set: `--sinks 0` means no
// sinks (sidecar.Config reads a zero SinkTokens as its default), and
// `--no-retrieval` the scorer set "none".
func (c *config) serverConfig() sidecar.Config {
	sc := c.server
	sc.Engine = llama.Backend{}
	if sc.SinkTokens == 0 {
		sc.SinkTokens = sidecar.NoSinks
	}
	if c.noRetrieval {
		sc.Scorers = policy.ScorerNone.String()
	}
	sc.MetricsKey = c.http.APIKey
	return sc
}

// Log formats; logAuto picks journal when stderr is the journal, plain
// when it is not a terminal, text otherwise.
const (
	logAuto    = "auto"
	logText    = "text"    // slog text with timestamps
	logPlain   = "plain"   // slog text without timestamps
	logJournal = "journal" // plain plus a "<N>" syslog priority prefix
)

func newConfig() *config {
	c := &config{logLevel: slog.LevelInfo, logFormat: logAuto}
	c.server = sidecar.DefaultConfig()
	sc := &c.server
	sc.BackendDir = defaultBackendDir()
	sc.HotTokens = sidecar.HotAuto
	c.http.Addr, c.http.MaxSessions = httpapi.DefaultAddr, 16
	c.settings = []*setting{
		bind("model", "GGUF model to load at start (optional: clients may load one)", &sc.ModelPath, pathCodec, nil),
		bind("ctx", "KV context in tokens (0: derived from free memory and the model's maximum; may exceed the trained context, with a warning)", &sc.ContextTokens, intCodec, nonNegative),
		bind("socket", "Unix socket to serve (ignored when the service manager passes one)", &sc.SocketPath, pathCodec, notEmpty),
		bind("data-dir", "state directory (one ctxd owns it)", &sc.DataDir, pathCodec, notEmpty),
		bind("kv-type", "KV cache type: f16, q8_0 or f32 (q8_0 needs flash-attn)", &sc.KVType, kvTypeCodec, nil),
		bind("flash-attn", "use flash attention", &sc.FlashAttention, boolCodec, nil),
		bind("batch", "prefill batch size in tokens", &sc.BatchTokens, intCodec, positive),
		bind("threads", "CPU threads: auto (each decode call uses every core other processes leave free) or N (exactly N, whatever the load)", &sc.Threads, threadsCodec, nil).printedAs(func() string { return threadsText(sc.Threads) }),
		bind("max-conns", "connections served at once; more are refused", &sc.MaxConns, intCodec, positive),
		bind("handshake-timeout", "how long a new connection may take to send its hello", &sc.HandshakeTimeout, durationCodec, positiveDuration),
		bind("backend-dir", "folder of GPU backend libraries (make gpu GPU=vulkan|cuda puts them in bin/backends; empty: none, CPU only)", &sc.BackendDir, pathCodec, nil),
		bind("device", "device to offload to: a name (Vulkan0, CUDA0), a backend (vulkan, cuda), cpu, or empty for the GPU with the most free memory", &sc.Device, stringCodec, nil),
		bind("gpu-layers", "transformer blocks on the device (0: every one that fits its free memory with the weights, compute buffers and hot-set KV)", &sc.GPULayers, intCodec, nonNegative),
		bind("allow-uids", "uids allowed besides our own (comma-separated; an array in the file)", &sc.AllowUIDs, uidsCodec, nil),
		bind("hot", "hot-set budget in tokens: sessions grow beyond it, parked in host RAM (auto: the trained window, bounded by memory and turn-latency; with an explicit ctx, auto means dense; 0: dense, sessions limited to ctx)", &sc.HotTokens, hotCodec, nil).printedAs(func() string { return hotText(sc.HotTokens) }),
		bind("window", "with hot: positions stay below this (0: the model's trained context)", &sc.Window, intCodec, nonNegative),
		bind("block", "with hot: block size in tokens", &sc.BlockTokens, intCodec, positive),
		bind("sinks", "with hot: attention-sink tokens kept hot (0: none, a plain sliding window)", &sc.SinkTokens, intCodec, nonNegative),
		bind("recent", "with hot: recent-window tokens kept hot (0: a quarter of hot)", &sc.RecentTokens, intCodec, nonNegative),
		bind("no-retrieval", "with hot: keep only sinks, pinned and recent tokens (baseline)", &c.noRetrieval, boolCodec, nil),
		bind("scorers", "with hot: how parked blocks are ranked for retrieval: both (the default: lexical and the model's attention, fused), lexical, attention or none", &sc.Scorers, stringCodec, nil),
		bind("arena-bytes", "with hot: host-RAM arena budget in bytes (0: a quarter of available RAM)", &sc.ArenaBytes, int64Codec, nonNegative),
		bind("no-cold", "run without the SSD tier: no snapshots, no cross-session resume", &sc.NoCold, boolCodec, nil),
		bind("cold-dir", "SSD tier folder (empty: DATA-DIR/cold)", &sc.ColdDir, pathCodec, nil),
		bind("cold-quota", "SSD tier quota in bytes; least recently used blocks go first (0: a quarter of the free disk space)", &sc.ColdQuotaBytes, int64Codec, nonNegative),
		bind("idle-snapshot", "snapshot a session idle this long, e.g. 60s (negative: never)", &sc.IdleSnapshot, durationCodec, nil),
		bind("auto-snapshots", "automatic snapshots kept (closed, idle and shutdown sessions)", &sc.AutoSnapshots, intCodec, positive),
		bind("turn-latency", "with hot: the hot budget is lowered until a turn of turn-suffix tokens prefills within this on this machine (negative: off)", &sc.TurnLatency, durationCodec, nil),
		bind("turn-suffix", "with hot: the new tokens of a worst-case turn", &sc.TurnSuffixTokens, intCodec, positive),
		bind("reuse", "KV reuse past an early change in the prompt (dense sessions): auto (unchanged segments moved into place, approximate, only when prefilling them again would miss reuse-latency; part of each recomputed) or exact (never: bit-exact with a cold prefill)", &sc.Reuse, reuseCodec, nil),
		bind("reuse-latency", "the turn latency segment reuse weighs (0: turn-latency)", &sc.ReuseLatency, durationCodec, nil),
		bind("http", "serve the OpenAI- and Ollama-compatible HTTP API at this host:port (off: none; a non-loopback address needs api-key)", &c.http.Addr, stringCodec, notEmpty),
		secret(bind("api-key", "require this Bearer token on HTTP requests, and allow non-loopback peers (empty: loopback peers of ctxd's uid only)", &c.http.APIKey, stringCodec, apiKeyCheck)),
		bind("model-name", "model id the HTTP API reports and accepts (empty: the GGUF file's stem)", &c.http.ModelName, stringCodec, nil),
		bind("http-sessions", "live HTTP sessions kept; the least recently used idle one is closed (and snapshotted) first", &c.http.MaxSessions, intCodec, positive),
		bind("metrics-addr", "serve Prometheus /metrics over HTTP at this host:port, e.g. 127.0.0.1:9464 (empty: off)", &sc.MetricsAddr, stringCodec, nil),
		bind("log-level", "debug, info, warn or error", &c.logLevel, levelCodec, nil),
		bind("log-format", "auto, text, plain (no timestamps) or journal (no timestamps, syslog priority prefix); auto: journal when stderr is the journal, plain when it is not a terminal", &c.logFormat, stringCodec, oneOf(logAuto, logText, logPlain, logJournal)),
	}
	return c
}

func (c *config) setting(key string) *setting {
	for _, s := range c.settings {
		if s.key == key {
			return s
		}
	}
	return nil
}

// defaultBackendDir is the backends folder beside the ctxd binary, where
// make gpu puts the GPU backend libraries; "" when the binary's path is
// unknown.
func defaultBackendDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), "backends")
}

// defaultConfigPath is $XDG_CONFIG_HOME/ctxd/ctxd.toml, else
// ~/.config/ctxd/ctxd.toml; "" without either.
func defaultConfigPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "ctxd", "ctxd.toml")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config", "ctxd", "ctxd.toml")
	}
	return ""
}

// setting is one configuration key.
type setting struct {
	key      string
	usage    string
	typeName string
	isBool   bool
	isPath   bool
	source   string // "default", "FILE:LINE", "env CTXD_KEY" or "flag --key"
	fromText func(string) error
	fromTOML func(any) error
	toTOML   func() string
}

// envVar is the setting's environment variable.
func (s *setting) envVar() string {
	return "CTXD_" + strings.ToUpper(strings.ReplaceAll(s.key, "-", "_"))
}

// setText sets s from an environment variable or a flag.
func (s *setting) setText(text, source string) error {
	if err := s.fromText(text); err != nil {
		return &valueError{Key: s.key, Value: strconv.Quote(text), Source: source, Err: err}
	}
	s.source = source
	return nil
}

// codec converts one Go type from and to its textual and TOML forms.
type codec[T any] struct {
	typeName string
	parse    func(string) (T, error) // environment and flags
	decode   func(any) (T, error)    // a decoded TOML value
	isPath   bool
}

func bind[T any](key, usage string, p *T, c codec[T], check func(T) error) *setting {
	set := func(v T) error {
		if check != nil {
			if err := check(v); err != nil {
				return err
			}
		}
		*p = v
		return nil
	}
	_, isBool := any(p).(*bool)
	return &setting{
		key: key, usage: usage, typeName: c.typeName, isBool: isBool, isPath: c.isPath, source: "default",
		fromText: func(text string) error {
			v, err := c.parse(text)
			if err != nil {
				return err
			}
			return set(v)
		},
		fromTOML: func(a any) error {
			v, err := c.decode(a)
			if err != nil {
				return err
			}
			return set(v)
		},
		toTOML: func() string { return tomlLiteral(tomlValue(*p)) },
	}
}

// tomlValue is what print-config writes for a Go value.
func tomlValue(v any) any {
	switch v := v.(type) {
	case policy.KVType:
		return v.String()
	case policy.ReuseMode:
		return v.String()
	case slog.Level:
		return strings.ToLower(v.String())
	case []int:
		if v == nil {
			return []int{}
		}
	}
	return v
}

// tomlLiteral renders v as a TOML value, as the toml package writes it.
func tomlLiteral(v any) string {
	b, err := toml.Marshal(map[string]any{"v": v})
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	_, lit, _ := strings.Cut(strings.TrimSpace(string(b)), "=")
	return strings.TrimSpace(lit)
}

// tomlType names a decoded TOML value's type for error messages.
func tomlType(a any) string {
	switch a.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date/time"
}

func wrongType(a any, want string) error {
	return fmt.Errorf("%s, want %s", tomlType(a), want)
}

var stringCodec = codec[string]{
	typeName: "string",
	parse:    func(s string) (string, error) { return s, nil },
	decode: func(a any) (string, error) {
		if s, ok := a.(string); ok {
			return s, nil
		}
		return "", wrongType(a, "a string")
	},
}

var pathCodec = codec[string]{typeName: "path", parse: stringCodec.parse, decode: stringCodec.decode, isPath: true}

func parseInt(s string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, errors.New("out of range")
		}
		return 0, errors.New("not an integer")
	}
	return v, nil
}

var int64Codec = codec[int64]{
	typeName: "int",
	parse:    parseInt,
	decode: func(a any) (int64, error) {
		if v, ok := a.(int64); ok {
			return v, nil
		}
		return 0, wrongType(a, "an integer")
	},
}

func toInt(v int64, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if int64(int(v)) != v {
		return 0, errors.New("out of range")
	}
	return int(v), nil
}

var intCodec = codec[int]{
	typeName: "int",
	parse:    func(s string) (int, error) { return toInt(int64Codec.parse(s)) },
	decode:   func(a any) (int, error) { return toInt(int64Codec.decode(a)) },
}

var durationCodec = codec[time.Duration]{
	typeName: "duration",
	parse: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return 0, errors.New("not a duration (e.g. 90s, 2m, 1h)")
		}
		return d, nil
	},
	decode: func(a any) (time.Duration, error) {
		if s, ok := a.(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return 0, errors.New("not a duration (e.g. \"90s\", \"2m\")")
			}
			return d, nil
		}
		return 0, wrongType(a, "a duration string such as \"90s\"")
	},
}

// autoIntCodec reads "auto" (the value auto) or a count of unit that is
// not negative.
func autoIntCodec(auto int, unit string) codec[int] {
	notNegative := func(v int, err error) (int, error) {
		if err == nil && v < 0 {
			err = errors.New(`must not be negative (or "auto")`)
		}
		return v, err
	}
	return codec[int]{
		typeName: "auto|int",
		parse: func(s string) (int, error) {
			if strings.TrimSpace(s) == "auto" {
				return auto, nil
			}
			return notNegative(intCodec.parse(s))
		},
		decode: func(a any) (int, error) {
			if s, ok := a.(string); ok {
				if s == "auto" {
					return auto, nil
				}
				return 0, fmt.Errorf(`want "auto" or a number of %s`, unit)
			}
			return notNegative(intCodec.decode(a))
		},
	}
}

// hotCodec reads the hot budget: "auto" (sidecar.HotAuto) or tokens.
var hotCodec = autoIntCodec(sidecar.HotAuto, "tokens")

// threadsCodec reads --threads: "auto" (policy.ThreadsAuto, also 0) or a
// pinned count.
var threadsCodec = autoIntCodec(policy.ThreadsAuto, "threads")

func threadsText(v int) string {
	if v == policy.ThreadsAuto {
		return `"auto"`
	}
	return strconv.Itoa(v)
}

// resolveAuto settles settings whose default depends on others: hot =
// auto with an explicitly set ctx asks for a dense context of that size.
func (c *config) resolveAuto() {
	if c.server.HotTokens == sidecar.HotAuto && c.setting("ctx").source != "default" {
		c.server.HotTokens = 0
		c.setting("hot").source = "auto: dense, since ctx is set"
	}
}

func hotText(v int) string {
	if v == sidecar.HotAuto {
		return `"auto"`
	}
	return strconv.Itoa(v)
}

// printedAs replaces how print-config writes the setting's value.
func (s *setting) printedAs(f func() string) *setting {
	s.toTOML = f
	return s
}

// secret prints a setting's value masked (print-config, --help).
func secret(s *setting) *setting {
	plain := s.toTOML
	s.toTOML = func() string {
		if plain() == `""` {
			return `""`
		}
		return `"(set)"`
	}
	return s
}

var boolCodec = codec[bool]{
	typeName: "bool",
	parse: func(s string) (bool, error) {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "t", "true", "yes", "on":
			return true, nil
		case "0", "f", "false", "no", "off":
			return false, nil
		}
		return false, errors.New("not a boolean (want true or false)")
	},
	decode: func(a any) (bool, error) {
		if v, ok := a.(bool); ok {
			return v, nil
		}
		return false, wrongType(a, "true or false")
	},
}

func parseUID(s string) (int, error) {
	uid, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || uid < 0 || uid > 1<<32-2 {
		return 0, fmt.Errorf("%q is not a uid", s)
	}
	return uid, nil
}

var uidsCodec = codec[[]int]{
	typeName: "uids",
	parse: func(s string) ([]int, error) {
		var uids []int
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
			uid, err := parseUID(f)
			if err != nil {
				return nil, err
			}
			uids = append(uids, uid)
		}
		return uids, nil
	},
	decode: func(a any) ([]int, error) {
		arr, ok := a.([]any)
		if !ok {
			return nil, wrongType(a, "an array of uids")
		}
		uids := make([]int, 0, len(arr))
		for _, e := range arr {
			v, ok := e.(int64)
			if !ok {
				return nil, fmt.Errorf("element %v is %s, want an integer uid", e, tomlType(e))
			}
			uid, err := parseUID(strconv.FormatInt(v, 10))
			if err != nil {
				return nil, err
			}
			uids = append(uids, uid)
		}
		return uids, nil
	},
}

var kvTypeCodec = codec[policy.KVType]{
	typeName: "f16|q8_0|f32",
	parse:    policy.ParseKVType,
	decode: func(a any) (policy.KVType, error) {
		s, err := stringCodec.decode(a)
		if err != nil {
			return 0, err
		}
		return policy.ParseKVType(s)
	},
}

var reuseCodec = codec[policy.ReuseMode]{
	typeName: "auto|exact",
	parse:    policy.ParseReuseMode,
	decode: func(a any) (policy.ReuseMode, error) {
		s, err := stringCodec.decode(a)
		if err != nil {
			return 0, err
		}
		return policy.ParseReuseMode(s)
	},
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return 0, errors.New("unknown level (want debug, info, warn or error)")
	}
	return l, nil
}

var levelCodec = codec[slog.Level]{
	typeName: "level",
	parse:    parseLevel,
	decode: func(a any) (slog.Level, error) {
		s, err := stringCodec.decode(a)
		if err != nil {
			return 0, err
		}
		return parseLevel(s)
	},
}

func nonNegative[T int | int64](v T) error {
	if v < 0 {
		return errors.New("must not be negative")
	}
	return nil
}

func positive(v int) error {
	if v <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

func positiveDuration(v time.Duration) error {
	if v <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

// minAPIKey is the shortest API key ctxd accepts: a blank or one-letter
// key guards nothing.
const minAPIKey = 8

func apiKeyCheck(s string) error {
	switch {
	case s == "":
		return nil // no key
	case strings.TrimSpace(s) == "":
		return errors.New("blank: set a real key, or leave it empty for none")
	case strings.TrimSpace(s) != s:
		return errors.New("has leading or trailing spaces")
	case len(s) < minAPIKey:
		return fmt.Errorf("%d characters: an API key needs at least %d", len(s), minAPIKey)
	}
	return nil
}

func notEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func oneOf(allowed ...string) func(string) error {
	return func(s string) error {
		for _, a := range allowed {
			if s == a {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(allowed, ", "))
	}
}

// loadFile applies the TOML file at path. A missing file is an error only
// when explicit (named by --config or CTXD_CONFIG).
func (c *config) loadFile(path string, explicit bool) error {
	c.file = path
	b, err := readConfigFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	c.fileFound = true
	var raw map[string]toml.Primitive
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for _, key := range md.Keys() {
		if len(key) != 1 {
			continue // inside a table: the table's own key is reported
		}
		name := key[0]
		prim := raw[name]
		where := fmt.Sprintf("%s:%d", path, keyLine(&md, prim))
		s := c.setting(name)
		if s == nil {
			return fmt.Errorf("%w %q in %s%s", errUnknownKey, name, where, c.suggest(name))
		}
		var v any
		if err := md.PrimitiveDecode(prim, &v); err != nil {
			return fmt.Errorf("config file %s: %w", where, err)
		}
		if str, ok := v.(string); ok && s.isPath {
			v = resolvePath(str, filepath.Dir(path))
		}
		if err := s.fromTOML(v); err != nil {
			return &valueError{Key: name, Value: tomlLiteral(v), Source: where, Err: err}
		}
		s.source = where
	}
	return nil
}

// resolvePath expands a leading "~/" and makes a relative path relative
// to the config file's folder.
func resolvePath(p, dir string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, rest)
		}
	}
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// errLineProbe stops a probe decode; the error the toml package wraps
// around it carries the key's position.
var errLineProbe = errors.New("line probe")

type lineProbe struct{}

func (lineProbe) UnmarshalTOML(any) error { return errLineProbe }

// keyLine is the line where prim's key is set (0 if unknown).
func keyLine(md *toml.MetaData, prim toml.Primitive) int {
	var pe toml.ParseError
	if err := md.PrimitiveDecode(prim, lineProbe{}); errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

// suggest names the closest known key, if one is close.
func (c *config) suggest(key string) string {
	best, bestD := "", 3
	for _, s := range c.settings {
		if d := editDistance(key, s.key); d < bestD {
			best, bestD = s.key, d
		}
	}
	if best == "" {
		return " (see ctxd --help for the keys)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// loadEnv applies the CTXD_<KEY> variables that are set and not empty.
func (c *config) loadEnv(lookup func(string) (string, bool)) error {
	for _, s := range c.settings {
		if v, ok := lookup(s.envVar()); ok && v != "" {
			if err := s.setText(v, "env "+s.envVar()); err != nil {
				return err
			}
		}
	}
	return nil
}

// print writes the merged configuration as a TOML file, each value with
// its source as a comment.
func (c *config) print(w io.Writer) {
	fmt.Fprintln(w, "# ctxd configuration: defaults < config file < environment (CTXD_*) < flags")
	switch {
	case c.file == "":
		fmt.Fprintln(w, "# config file: none")
	case c.fileFound:
		fmt.Fprintf(w, "# config file: %s\n", c.file)
	default:
		fmt.Fprintf(w, "# config file: %s (absent)\n", c.file)
	}
	kw, vw := 0, 0
	vals := make([]string, len(c.settings))
	for i, s := range c.settings {
		vals[i] = s.toTOML()
		kw, vw = max(kw, len(s.key)), max(vw, len(vals[i]))
	}
	for i, s := range c.settings {
		fmt.Fprintf(w, "%-*s = %-*s  # %s\n", kw, s.key, vw, vals[i], s.source)
	}
}

// maxConfigBytes bounds a config file (real ones are a few hundred bytes).
const maxConfigBytes = 1 << 20

// readConfigFile reads a config file that is a regular file of at most
// maxConfigBytes: a FIFO or a device (/dev/zero) is refused at once
// instead of hanging or filling memory.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, st.Mode().Type())
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s is %d bytes, over %d", path, st.Size(), maxConfigBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
}

// unknownEnv lists the CTXD_* variables of environ that name no setting,
// each with the closest one when one is close: a misspelt variable
// (CTXD_API_KY) would otherwise be ignored silently.
func (c *config) unknownEnv(environ []string) []string {
	known := map[string]bool{"CTXD_CONFIG": true}
	for _, s := range c.settings {
		known[s.envVar()] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CTXD_") || known[name] || testEnv[name] || strings.HasPrefix(name, "CTXD_TEST_") {
			continue
		}
		key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "CTXD_")), "_", "-")
		out = append(out, fmt.Sprintf("%s is not a ctxd setting%s", name, c.suggest(key)))
	}
	return out
}

// testEnv (and CTXD_TEST_*) are variables of ctxd's tests and tools, not
// settings.
var testEnv = map[string]bool{"CTXD_NEEDLE_MODEL": true, "CTXD_TRACES": true, "CTXD_TEST_LOG": true}
