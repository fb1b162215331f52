package ctxtrace

import (
	"errors"
	"strings"
	"testing"
)

func TestMissingCapabilities(t *testing.T) {
	all := Capabilities(1<<capBPF | 1<<capPerfmon)
	if m := MissingCapabilities(all); len(m) != 0 {
		t.Fatalf("CAP_BPF+CAP_PERFMON suffice: %v", m)
	}
	if m := MissingCapabilities(1 << capSysAdmin); len(m) != 0 {
		t.Fatalf("CAP_SYS_ADMIN suffices: %v", m)
	}
	m := MissingCapabilities(0)
	if len(m) != 2 || !strings.HasPrefix(m[0], "CAP_BPF") || !strings.HasPrefix(m[1], "CAP_PERFMON") || !strings.Contains(m[1], "CAP_SYS_ADMIN") {
		t.Fatalf("none: %q", m)
	}
	m = MissingCapabilities(1 << capBPF)
	if len(m) != 1 || !strings.HasPrefix(m[0], "CAP_PERFMON") {
		t.Fatalf("CAP_BPF only: %q", m)
	}
	if _, err := EffectiveCapabilities(); err != nil {
		t.Fatal(err)
	}
	pe := &PrivilegeError{Missing: m}
	if !errors.Is(pe, ErrNoPrivileges) || !strings.Contains(pe.Error(), "CAP_PERFMON") {
		t.Fatalf("%v", pe)
	}
	if p := Preflight("/no/such/ctxd"); !strings.Contains(strings.Join(p, "\n"), "/no/such/ctxd") {
		t.Fatalf("an unreadable executable must be reported: %q", p)
	}
}
