package httpapi

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ctxd/ctxd/sidecar"
)

// TestSocketUID: inet_diag names the owner of a loopback peer's socket,
// over IPv4 and IPv6.
func TestSocketUID(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (skipped)", addr, err)
			continue
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		d, err := openDiag()
		if err != nil {
			t.Skipf("inet_diag unavailable here: %v", err)
		}
		o, err := d.lookup(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr))
		d.close()
		s.Close()
		c.Close()
		ln.Close()
		if err != nil {
			t.Skipf("inet_diag unavailable here: %v", err)
		}
		uid := o.uid
		if !o.open {
			t.Errorf("%s: an open socket reported closed", addr)
		}
		if int(uid) != os.Getuid() {
			t.Errorf("%s: peer socket uid %d, we are %d", addr, uid, os.Getuid())
		}
	}
}

// TestPeerOfAnotherUIDRefused: a loopback client running as another user
// is refused (needs root to run curl as nobody).
func TestPeerOfAnotherUIDRefused(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if os.Getuid() != 0 || err != nil {
		t.Skip("needs root and curl to connect as another uid")
	}
	d := startDoor(t, sidecar.Config{ContextTokens: 256, NoCold: true}, Config{})
	cmd := exec.Command(curl, "-s", "-w", "\n%{http_code}", d.base+"/v1/models")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as nobody: %v %s", err, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "403") || !strings.Contains(string(out), "uid 65534") {
		t.Errorf("another uid got: %s", out)
	}
	if code, _ := d.get("/v1/models"); code != 200 {
		t.Errorf("our own uid got %d", code)
	}
}

// TestAPIKey: with a key, requests without it are refused in OpenAI's shape.
func TestAPIKey(t *testing.T) {
	d := startDoor(t, sidecar.Config{ContextTokens: 256, NoCold: true}, Config{APIKey: "sekret"})
	ctx := context.Background()
	if _, err := d.openai.Models.List(ctx); err != nil {
		t.Errorf("with the key: %v", err)
	}
	bad := openai.NewClient(option.WithBaseURL(d.base+"/v1"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err := bad.Models.List(ctx)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Errorf("wrong key: %v", err)
	}
	if code, _ := d.get("/api/tags"); code != 401 {
		t.Errorf("no key on /api/tags: %d", code)
	}
}

// TestListenRefusesOpenAddressWithoutKey: a non-loopback address needs a key.
func TestListenRefusesOpenAddressWithoutKey(t *testing.T) {
	s := New(noBackend{}, Config{Addr: "0.0.0.0:0"})
	if _, err := s.Listen(); !errors.Is(err, ErrForbidden) {
		t.Errorf("listening on 0.0.0.0 without a key: %v", err)
	}
}
