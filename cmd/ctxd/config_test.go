package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"github.com/ctxd/ctxd/sidecar"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/policy"
)

// envMap is an environment for parseInvocation.
type envMap map[string]string

func (e envMap) lookup(k string) (string, bool) { v, ok := e[k]; return v, ok }

// hermetic points the default config file into a fresh folder.
func hermetic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	return filepath.Join(dir, "ctxd", "ctxd.toml")
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func parse(t *testing.T, env envMap, args ...string) (*invocation, error) {
	t.Helper()
	var stderr bytes.Buffer
	inv, err := parseInvocation(args, env.lookup, &stderr)
	if err != nil && stderr.Len() > 0 {
		err = fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return inv, err
}

func source(t *testing.T, cfg *config, key string) string {
	t.Helper()
	s := cfg.setting(key)
	if s == nil {
		t.Fatalf("no setting %q", key)
	}
	return s.source
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, hermetic(t), `# ctxd test config
model = "models/m.gguf"
ctx = 100
hot = 1000
allow-uids = [1001, 1002]
log-level = "debug"
data-dir = "~/ctxd-state"
kv-type = "q8_0"
flash-attn = true
`)
	env := envMap{"CTXD_CTX": "200", "CTXD_HOT": "2000", "CTXD_SINKS": "8", "CTXD_NEEDLE_MODEL": "ignored", "CTXD_BLOCK": ""}
	inv, err := parse(t, env, "--ctx", "300", "--recent=50", "--no-retrieval")
	if err != nil {
		t.Fatal(err)
	}
	cfg, sc := inv.cfg, inv.cfg.server
	home, _ := os.UserHomeDir()
	checks := []struct {
		key      string
		got, val any
		src      string
	}{
		{"model", sc.ModelPath, filepath.Join(filepath.Dir(file), "models", "m.gguf"), file + ":2"},
		{"ctx", sc.ContextTokens, 300, "flag --ctx"},
		{"hot", sc.HotTokens, 2000, "env CTXD_HOT"},
		{"sinks", sc.SinkTokens, 8, "env CTXD_SINKS"},
		{"recent", sc.RecentTokens, 50, "flag --recent"},
		{"no-retrieval", cfg.noRetrieval, true, "flag --no-retrieval"},
		{"allow-uids", fmt.Sprint(sc.AllowUIDs), "[1001 1002]", file + ":5"},
		{"log-level", cfg.logLevel, slog.LevelDebug, file + ":6"},
		{"data-dir", sc.DataDir, filepath.Join(home, "ctxd-state"), file + ":7"},
		{"kv-type", sc.KVType, policy.KVTypeQ8_0, file + ":8"},
		{"flash-attn", sc.FlashAttention, true, file + ":9"},
		{"block", sc.BlockTokens, 64, "default"}, // an empty variable is unset
		{"batch", sc.BatchTokens, 512, "default"},
	}
	for _, c := range checks {
		if c.got != c.val {
			t.Errorf("%s = %v, want %v", c.key, c.got, c.val)
		}
		if got := source(t, cfg, c.key); got != c.src {
			t.Errorf("%s from %q, want %q", c.key, got, c.src)
		}
	}
	if !cfg.fileFound || cfg.file != file {
		t.Errorf("config file %q found=%v, want %q", cfg.file, cfg.fileFound, file)
	}
}

func TestConfigFileSelection(t *testing.T) {
	def := hermetic(t)
	// A missing default file is fine.
	inv, err := parse(t, envMap{})
	if err != nil {
		t.Fatalf("missing default file: %v", err)
	}
	if inv.cfg.file != def || inv.cfg.fileFound {
		t.Errorf("default file %q found=%v, want %q absent", inv.cfg.file, inv.cfg.fileFound, def)
	}
	// A missing explicit file is an error, by flag or by CTXD_CONFIG.
	missing := filepath.Join(t.TempDir(), "nope.toml")
	for _, tc := range []struct {
		env  envMap
		args []string
	}{{envMap{}, []string{"--config", missing}}, {envMap{"CTXD_CONFIG": missing}, nil}} {
		if _, err := parse(t, tc.env, tc.args...); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Errorf("missing explicit file (%v %v): %v", tc.env, tc.args, err)
		}
	}
	// --config wins over CTXD_CONFIG, which wins over the default file.
	writeFile(t, def, "ctx = 1\n")
	envFile := writeFile(t, filepath.Join(t.TempDir(), "env.toml"), "ctx = 2\n")
	flagFile := writeFile(t, filepath.Join(t.TempDir(), "flag.toml"), "\nctx = 3\n")
	for _, tc := range []struct {
		env  envMap
		args []string
		want int
		src  string
	}{
		{envMap{}, nil, 1, def + ":1"},
		{envMap{"CTXD_CONFIG": envFile}, nil, 2, envFile + ":1"},
		{envMap{"CTXD_CONFIG": envFile}, []string{"--config", flagFile}, 3, flagFile + ":2"},
	} {
		inv, err := parse(t, tc.env, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if got := inv.cfg.server.ContextTokens; got != tc.want || source(t, inv.cfg, "ctx") != tc.src {
			t.Errorf("%v %v: ctx %d from %s, want %d from %s", tc.env, tc.args, got, source(t, inv.cfg, "ctx"), tc.want, tc.src)
		}
	}
}

func TestConfigRejectsBadValues(t *testing.T) {
	file := hermetic(t)
	cases := []struct {
		name  string
		file  string // default config file content ("" = none)
		env   envMap
		args  []string
		is    error
		wants []string
	}{
		{"negative in file", "model = \"m\"\n\nctx = -1\n", nil, nil, errInvalidValue,
			[]string{"invalid ctx = -1 (" + file + ":3): must not be negative"}},
		{"string for an int", "batch = \"big\"\n", nil, nil, errInvalidValue,
			[]string{"invalid batch = \"big\" (" + file + ":1): a string, want an integer"}},
		{"float for an int", "hot = 1.5\n", nil, nil, errInvalidValue, []string{"hot", file + ":1", "a float, want an integer"}},
		{"unknown kv type", "kv-type = \"q4\"\n", nil, nil, policy.ErrUnknownName, []string{"kv-type", file + ":1", `"q4"`, "f16"}},
		{"bad uid in array", "allow-uids = [1000, \"bob\"]\n", nil, nil, errInvalidValue, []string{"allow-uids", file + ":1", "bob", "want an integer uid"}},
		{"uids not an array", "allow-uids = 1000\n", nil, nil, errInvalidValue, []string{"allow-uids", "an integer, want an array of uids"}},
		{"log format", "log-format = \"json\"\n", nil, nil, errInvalidValue, []string{"log-format", "want one of auto, text, plain, journal"}},
		{"zero batch", "batch = 0\n", nil, nil, errInvalidValue, []string{"batch", "must be positive"}},
		{"negative threads", "threads = -2\n", nil, nil, errInvalidValue, []string{"threads", `must not be negative (or "auto")`}},
		{"threads word", "", envMap{"CTXD_THREADS": "many"}, nil, errInvalidValue, []string{"threads", "env CTXD_THREADS", "not an integer"}},
		{"threads string in file", "threads = \"all\"\n", nil, nil, errInvalidValue, []string{"threads", `want "auto" or a number of threads`}},
		{"empty socket", "socket = \"\"\n", nil, nil, errInvalidValue, []string{"socket", "must not be empty"}},
		{"unknown key", "model = \"m\"\nmodle = \"x\"\n", nil, nil, errUnknownKey,
			[]string{`unknown key "modle" in ` + file + `:2 (did you mean "model"?)`}},
		{"unknown far key", "colour = \"red\"\n", nil, nil, errUnknownKey, []string{`"colour"`, "ctxd --help"}},
		{"table", "[server]\nctx = 5\n", nil, nil, errUnknownKey, []string{`unknown key "server"`, file + ":1"}},
		{"toml syntax", "ctx = = 5\n", nil, nil, nil, []string{file, "line 1"}},
		{"env not an int", "", envMap{"CTXD_CTX": "lots"}, nil, errInvalidValue, []string{`invalid ctx = "lots" (env CTXD_CTX): not an integer`}},
		{"env bool", "", envMap{"CTXD_FLASH_ATTN": "maybe"}, nil, errInvalidValue, []string{"flash-attn", "env CTXD_FLASH_ATTN", "not a boolean"}},
		{"env out of range", "", envMap{"CTXD_ARENA_BYTES": "99999999999999999999"}, nil, errInvalidValue, []string{"arena-bytes", "out of range"}},
		{"flag level", "", nil, []string{"--log-level", "loud"}, errInvalidValue, []string{`invalid log-level = "loud" (flag --log-level)`, "debug, info, warn or error"}},
		{"flag uid", "", nil, []string{"--allow-uids", "1,-2"}, errInvalidValue, []string{`"-2" is not a uid`}},
		// The last source decides, and the bad value is the flag's.
		{"flag after good env", "", envMap{"CTXD_CTX": "5"}, []string{"--ctx", "x"}, errInvalidValue, []string{"flag --ctx"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(file)
			if tc.file != "" {
				writeFile(t, file, tc.file)
			}
			_, err := parse(t, tc.env, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v: not %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// --threads is "auto" (adapt to the load; the default, also 0) or a
// pinned count, the same in the file, the environment and the flags.
func TestThreadsAutoOrPinned(t *testing.T) {
	file := hermetic(t)
	for _, tc := range []struct {
		file string
		env  envMap
		args []string
		want int
	}{
		{"", nil, nil, policy.ThreadsAuto},
		{"threads = \"auto\"\n", nil, nil, policy.ThreadsAuto},
		{"threads = 3\n", nil, nil, 3},
		{"", envMap{"CTXD_THREADS": "auto"}, nil, policy.ThreadsAuto},
		{"", envMap{"CTXD_THREADS": "2"}, []string{"--threads", "auto"}, policy.ThreadsAuto},
		{"", nil, []string{"--threads", "0"}, policy.ThreadsAuto},
		{"", nil, []string{"--threads=4"}, 4},
	} {
		os.Remove(file)
		if tc.file != "" {
			writeFile(t, file, tc.file)
		}
		inv, err := parse(t, tc.env, tc.args...)
		if err != nil {
			t.Fatalf("%q %v %v: %v", tc.file, tc.env, tc.args, err)
		}
		if got := inv.cfg.server.Threads; got != tc.want {
			t.Errorf("%q %v %v: threads %d, want %d", tc.file, tc.env, tc.args, got, tc.want)
		}
	}
	if got := threadsText(policy.ThreadsAuto) + " " + threadsText(6); got != `"auto" 6` {
		t.Errorf("print-config writes %s", got)
	}
}

func TestFlagsKeepWorking(t *testing.T) {
	hermetic(t)
	inv, err := parse(t, envMap{}, "--model", "/m.gguf", "--ctx", "512", "--socket", "/s.sock", "--data-dir", "/d",
		"--kv-type", "q8_0", "--flash-attn", "--batch", "256", "--threads", "3", "--allow-uids", "1000, 1001",
		"--hot", "4096", "--window", "2048", "--block", "32", "--sinks", "2", "--recent", "128", "--no-retrieval",
		"--arena-bytes", "1048576", "--log-level", "warn", "--log-format", "plain", "--metrics-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := inv.cfg.server
	got := fmt.Sprintf("%s %d %s %s %v %v %d %d %v %d %d %d %d %d %v %d %v %s %s", sc.ModelPath, sc.ContextTokens, sc.SocketPath, sc.DataDir,
		sc.KVType, sc.FlashAttention, sc.BatchTokens, sc.Threads, sc.AllowUIDs, sc.HotTokens, sc.Window, sc.BlockTokens,
		sc.SinkTokens, sc.RecentTokens, inv.cfg.serverConfig().Scorers == "none", sc.ArenaBytes, inv.cfg.logLevel, inv.cfg.logFormat, sc.MetricsAddr)
	want := "/m.gguf 512 /s.sock /d q8_0 true 256 3 [1000 1001] 4096 2048 32 2 128 true 1048576 WARN plain 127.0.0.1:0"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := parse(t, envMap{}, "--flash-attn=false", "--version"); err != nil {
		t.Error(err)
	}
	if _, err := parse(t, envMap{}, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if _, err := parse(t, envMap{}, "--no-such-flag"); !errors.Is(err, errUsage) {
		t.Errorf("unknown flag: %v", err)
	}
}

// printed parses --print-config output into key -> (value, source).
func printed(t *testing.T, out string) map[string][2]string {
	t.Helper()
	m := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		kv, src, ok := strings.Cut(line, "  # ")
		k, v, ok2 := strings.Cut(kv, " = ")
		if !ok || !ok2 {
			t.Fatalf("print-config line %q", line)
		}
		m[strings.TrimSpace(k)] = [2]string{strings.TrimSpace(v), src}
	}
	return m
}

// --print-config writes a TOML file that, read back, gives the same
// configuration.
func TestPrintConfigRoundTrip(t *testing.T) {
	file := writeFile(t, hermetic(t), "ctx = 4096\nallow-uids = [7]\nmodel = \"/models/a \\\"b\\\".gguf\"\n")
	inv, err := parse(t, envMap{"CTXD_HOT": "1024", "CTXD_LOG_LEVEL": "debug"}, "--kv-type", "q8", "--flash-attn")
	if err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	inv.cfg.print(&first)
	m := printed(t, first.String())
	for key, want := range map[string][2]string{
		"ctx":        {"4096", file + ":1"},
		"allow-uids": {"[7]", file + ":2"},
		"model":      {`"/models/a \"b\".gguf"`, file + ":3"},
		"hot":        {"1024", "env CTXD_HOT"},
		"log-level":  {`"debug"`, "env CTXD_LOG_LEVEL"},
		"kv-type":    {`"q8_0"`, "flag --kv-type"},
		"flash-attn": {"true", "flag --flash-attn"},
		"block":      {"64", "default"},
	} {
		if m[key] != want {
			t.Errorf("%s: printed %q, want %q", key, m[key], want)
		}
	}
	if len(m) != len(inv.cfg.settings) {
		t.Errorf("printed %d settings, have %d", len(m), len(inv.cfg.settings))
	}
	if !strings.Contains(first.String(), "# config file: "+file+"\n") {
		t.Errorf("print-config does not name the file:\n%s", first.String())
	}

	again := writeFile(t, filepath.Join(t.TempDir(), "again.toml"), first.String())
	inv2, err := parse(t, envMap{}, "--config", again)
	if err != nil {
		t.Fatalf("printed config does not read back: %v\n%s", err, first.String())
	}
	var second bytes.Buffer
	inv2.cfg.print(&second)
	m2 := printed(t, second.String())
	for k, v := range m {
		if m2[k][0] != v[0] {
			t.Errorf("%s: %s after the round trip, was %s", k, m2[k][0], v[0])
		}
		if !strings.HasPrefix(m2[k][1], again+":") {
			t.Errorf("%s read back from %q, want the file", k, m2[k][1])
		}
	}
}

// The binary: --print-config prints and exits 0 without serving; a bad
// value in the file exits 2 naming it.
func TestPrintConfigCommand(t *testing.T) {
	p := newPaths(t)
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "ctxd.toml"), fmt.Sprintf("socket = %q\ndata-dir = %q\nctx = 64\n", p.socket, p.dataDir))
	d := startCmd(t, daemonCmd(t, []string{"--config", file, "--print-config", "--hot", "128"}, []string{"CTXD_CTX=99"}), false)
	if code := d.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.stderr.String())
	}
	m := printed(t, d.stderr.String())
	if m["ctx"] != [2]string{"99", "env CTXD_CTX"} || m["hot"] != [2]string{"128", "flag --hot"} || m["socket"][1] != file+":1" {
		t.Errorf("print-config output:\n%s", d.stderr.String())
	}
	mustNotExist(t, "socket", p.socket)
	mustNotExist(t, "data dir", p.dataDir)

	writeFile(t, file, "ctx = 64\nwindow = -3\n")
	d = startCmd(t, daemonCmd(t, []string{"--config", file}, nil), false)
	if code := d.wait(t, 10*time.Second); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	if want := "ctxd: invalid window = -3 (" + file + ":2): must not be negative"; !strings.Contains(d.stderr.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, d.stderr.String())
	}
}

func TestEnvVarNames(t *testing.T) {
	cfg := newConfig()
	var names []string
	for _, s := range cfg.settings {
		names = append(names, s.envVar())
	}
	for _, want := range []string{"CTXD_MODEL", "CTXD_CTX", "CTXD_HOT", "CTXD_DATA_DIR", "CTXD_KV_TYPE", "CTXD_ALLOW_UIDS", "CTXD_ARENA_BYTES"} {
		if !slices.Contains(names, want) {
			t.Errorf("no setting reads %s (have %v)", want, names)
		}
	}
}

// TestSinksZeroMeansNone: `--sinks 0` serves no sinks (zero is not the
// default here); the default is sidecar.DefaultConfig's.
func TestSinksZeroMeansNone(t *testing.T) {
	hermetic(t)
	inv, err := parse(t, envMap{}, "--hot", "1024", "--sinks", "0")
	if err != nil {
		t.Fatal(err)
	}
	if sc := inv.cfg.serverConfig(); sc.SinkTokens != sidecar.NoSinks {
		t.Fatalf("--sinks 0: SinkTokens %d; want sidecar.NoSinks", sc.SinkTokens)
	}
	inv, err = parse(t, envMap{}, "--hot", "1024")
	if err != nil {
		t.Fatal(err)
	}
	if sc, d := inv.cfg.serverConfig(), sidecar.DefaultConfig(); sc.SinkTokens != d.SinkTokens || sc.Scorers != d.Scorers {
		t.Fatalf("default: SinkTokens %d, scorers %q; want %d, %q", sc.SinkTokens, sc.Scorers, d.SinkTokens, d.Scorers)
	}
}
