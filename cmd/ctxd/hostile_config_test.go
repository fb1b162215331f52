package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/httpapi"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar"
)

// TestConfigFileMustBeRegular: --config on a FIFO or a device is refused
// at once. Before, a FIFO hung ctxd and /dev/zero filled its memory.
func TestConfigFileMustBeRegular(t *testing.T) {
	hermetic(t)
	fifo := filepath.Join(t.TempDir(), "ctxd.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := parse(t, envMap{}, "--config", path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("--config %s: %v, want a refusal naming it", path, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("--config %s hung", path)
		}
	}
}

// TestAPIKeyTooShortRefused: a blank or one-character key is refused with
// the reason; a real one is taken.
func TestAPIKeyTooShortRefused(t *testing.T) {
	hermetic(t)
	for _, key := range []string{"x", "   ", "short", " padded-key "} {
		if _, err := parse(t, envMap{"CTXD_API_KEY": key}); !errors.Is(err, errInvalidValue) {
			t.Errorf("api key %q: %v, want a refusal", key, err)
		}
	}
	inv, err := parse(t, envMap{}, "--api-key", "a-real-key-1234")
	if err != nil || inv.cfg.http.APIKey != "a-real-key-1234" {
		t.Fatalf("a real key: %v", err)
	}
	if sc := inv.cfg.serverConfig(); sc.MetricsKey != "a-real-key-1234" {
		t.Errorf("the metrics listener does not get the key")
	}
}

// TestMisspeltEnvWarned: a CTXD_* variable that names no setting is
// reported, with the closest setting.
func TestMisspeltEnvWarned(t *testing.T) {
	hermetic(t)
	inv, err := parse(t, envMap{})
	if err != nil {
		t.Fatal(err)
	}
	got := inv.cfg.unknownEnv([]string{"CTXD_API_KY=secret", "CTXD_MODEL=/m.gguf", "CTXD_CONFIG=/c", "PATH=/bin", "CTXD_TRACES=/t"})
	if len(got) != 1 || !strings.Contains(got[0], "CTXD_API_KY") || !strings.Contains(got[0], `"api-key"`) {
		t.Errorf("warnings %q, want one for CTXD_API_KY suggesting api-key", got)
	}
}

// TestConfigErrorsExitTwo: configuration errors found after parsing exit
// 2 (systemd's RestartPreventExitStatus), other failures 1.
func TestConfigErrorsExitTwo(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("%w: --metrics-addr 0.0.0.0:9 is not loopback", sidecar.ErrConfig): 2,
		fmt.Errorf("data directory: %w", sidecar.ErrUnsafeFolder):                     2,
		fmt.Errorf("%w: socket path too long", protocol.ErrInvalidArgument):           2,
		fmt.Errorf("%w: http address not loopback", httpapi.ErrForbidden):             2,
		errors.New("accept: something else"):                                          1,
		sidecar.ErrAlreadyRunning:                                                     1,
	} {
		if got := exitStatus(err); got != want {
			t.Errorf("exitStatus(%v) = %d, want %d", err, got, want)
		}
	}
}
