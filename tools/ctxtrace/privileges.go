package ctxtrace

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrNoPrivileges reports that the eBPF probes could not be loaded or
// attached for lack of privileges; the PrivilegeError says which.
var ErrNoPrivileges = errors.New("ctxtrace: missing privileges for eBPF probes")

// PrivilegeError lists exactly what the probes need and do not have.
type PrivilegeError struct {
	Missing []string // one line each
	Err     error    // what the kernel said, when it refused
}

func (e *PrivilegeError) Error() string {
	var b strings.Builder
	b.WriteString("eBPF probes unavailable: ")
	b.WriteString(strings.Join(e.Missing, "; "))
	if e.Err != nil {
		fmt.Fprintf(&b, " (kernel: %v)", e.Err)
	}
	return b.String()
}

func (e *PrivilegeError) Unwrap() error { return ErrNoPrivileges }

// Capabilities is a process's effective capability set.
type Capabilities uint64

// Has reports whether capability c is set.
func (c Capabilities) Has(capability int) bool { return c&(1<<uint(capability)) != 0 }

// EffectiveCapabilities reads this process's CapEff from /proc/self/status.
func EffectiveCapabilities() (Capabilities, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapEff %q: %w", v, err)
			}
			return Capabilities(c), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// TracefsMounted reports whether tracefs (with its events folder) is
// mounted at one of the usual places.
func TracefsMounted() bool {
	for _, d := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if st, err := os.Stat(d + "/events"); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// MissingCapabilities lists the capabilities the probes need that caps
// lacks: CAP_BPF (maps and programs) and CAP_PERFMON (attaching tracing
// programs), or CAP_SYS_ADMIN instead of both.
func MissingCapabilities(caps Capabilities) []string {
	if caps.Has(capSysAdmin) {
		return nil
	}
	var out []string
	if !caps.Has(capBPF) {
		out = append(out, "CAP_BPF (to create BPF maps and load programs)")
	}
	if !caps.Has(capPerfmon) {
		out = append(out, "CAP_PERFMON (to attach tracepoints and uprobes)")
	}
	if len(out) > 0 {
		out[len(out)-1] += " — or CAP_SYS_ADMIN instead"
	}
	return out
}

// Preflight lists what the probes need and this process lacks:
// capabilities, tracefs (for the block and page-fault tracepoints) and read
// access to the target's executable (for the fetch-phase uprobes). An
// empty list does not promise success (a kernel may still refuse); Attach
// reports that.
func Preflight(executable string) []string {
	var out []string
	caps, err := EffectiveCapabilities()
	if err != nil {
		out = append(out, fmt.Sprintf("cannot read this process's capabilities: %v", err))
	} else {
		out = append(out, MissingCapabilities(caps)...)
	}
	if !TracefsMounted() {
		out = append(out, "tracefs is not mounted (block and page-fault tracepoints): mount -t tracefs nodev /sys/kernel/tracing")
	}
	if executable != "" {
		if f, err := os.Open(executable); err != nil {
			out = append(out, fmt.Sprintf("cannot read ctxd's executable for the fetch-phase uprobes: %v (needs the same user or CAP_SYS_PTRACE)", err))
		} else {
			f.Close()
		}
	}
	return out
}
