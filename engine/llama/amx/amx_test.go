package amx

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// compilerEnablesAMX asks the C++ compiler cgo used for amx.cpp, with the
// flags it used, whether it defines ggml's AMX condition (__AMX_INT8__
// and __AVX512VNNI__).
func compilerEnablesAMX(t *testing.T) bool {
	t.Helper()
	cc := strings.Fields(goEnv(t, "CXX"))
	if len(cc) == 0 {
		t.Fatal("go env CXX is empty")
	}
	args := append(cc[1:], strings.Fields(goEnv(t, "CGO_CXXFLAGS"))...)
	args = append(args, "-dM", "-E", "-x", "c++", os.DevNull)
	out, err := exec.Command(cc[0], args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", cc[0], args, err)
	}
	return bytes.Contains(out, []byte("__AMX_INT8__")) && bytes.Contains(out, []byte("__AVX512VNNI__"))
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(out))
}

// hasAMXSymbol reads the running test binary's symbol table for ggml's AMX
// buffer type, the function ggml-cpu.cpp calls under the AMX condition;
// ok is false when the binary has no symbol table (go test strips it
// unless run with -ldflags=-s=false; tools/build/targets.sh reads the
// symbols of whole ctxd binaries).
func hasAMXSymbol(t *testing.T) (has, ok bool) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return false, false
	}
	for _, s := range syms {
		if strings.Contains(s.Name, "ggml_backend_amx_buffer_type") && s.Section != elf.SHN_UNDEF {
			return true, true
		}
	}
	return false, true
}

// The AMX kernels are in the binary exactly when the compiler enables AMX:
// the build can neither fail to link on an AMX CPU nor silently drop AMX
// there, and elsewhere nothing of it is compiled.
func TestAMXLinkedExactlyWhenTheCompilerEnablesIt(t *testing.T) {
	want := compilerEnablesAMX(t)
	if got := Compiled(); got != want {
		t.Errorf("Compiled() = %v, compiler enables AMX = %v (CGO_CXXFLAGS %q)", got, want, goEnv(t, "CGO_CXXFLAGS"))
	}
	if got, ok := hasAMXSymbol(t); !ok {
		t.Log("no symbol table in the test binary: checked the compiled object's own answer only")
	} else if got != want {
		t.Errorf("binary has ggml_backend_amx_buffer_type = %v, compiler enables AMX = %v", got, want)
	}
	t.Logf("AMX kernels compiled: %v (CGO_CXXFLAGS %q)", want, goEnv(t, "CGO_CXXFLAGS"))
}
