package ctxtrace

// The eBPF object and its Go bindings (probes_x86_bpfel.{go,o}) are
// generated from bpf/ctxtrace.bpf.c and committed, so a normal build needs
// no clang. Regenerate with `make generate` (clang-14 and llvm-strip-14:
// apt-get install clang-14 llvm-14).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target amd64 -go-package ctxtrace probes bpf/ctxtrace.bpf.c -- -O2 -g -Wall -Werror
