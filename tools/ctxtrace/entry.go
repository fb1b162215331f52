package ctxtrace

import (
	"bytes"
	"debug/elf"
	"fmt"
)

// A uprobe at a Go function's first byte fires twice when the goroutine's
// stack must grow: the stack-check prologue calls morestack, which
// restarts the function. entryOffset finds the first instruction after
// that prologue, where a probe fires exactly once per call. Go's amd64
// prologues (cmd/internal/obj/x86):
//
//	small frames:  CMPQ SP, 16(R14)          49 3b 66 10
//	               JBE morestack             76 rel8 | 0f 86 rel32
//	larger frames: LEAQ -N(SP), R12          4c 8d 64 24 d8 | 4c 8d a4 24 d32
//	               CMPQ R12, 16(R14)         4d 3b 66 10
//	               JBE morestack
//
// Leaf functions with small frames (the markers) have no prologue: offset
// 0. An unknown prologue also gives 0, the function's entry.
func entryOffset(code []byte) uint64 {
	cmpSP := []byte{0x49, 0x3b, 0x66, 0x10}
	cmpR12 := []byte{0x4d, 0x3b, 0x66, 0x10}
	i := 0
	switch {
	case bytes.HasPrefix(code, cmpSP):
		i = len(cmpSP)
	case bytes.HasPrefix(code, []byte{0x4c, 0x8d, 0x64, 0x24}) && len(code) > 5 && bytes.HasPrefix(code[5:], cmpR12):
		i = 5 + len(cmpR12)
	case bytes.HasPrefix(code, []byte{0x4c, 0x8d, 0xa4, 0x24}) && len(code) > 8 && bytes.HasPrefix(code[8:], cmpR12):
		i = 8 + len(cmpR12)
	default:
		return 0
	}
	switch {
	case len(code) >= i+2 && code[i] == 0x76:
		return uint64(i + 2)
	case len(code) >= i+6 && code[i] == 0x0f && code[i+1] == 0x86:
		return uint64(i + 6)
	}
	return 0
}

// symbolCode returns the machine code of symbol in the ELF executable.
func symbolCode(path, symbol string) ([]byte, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name != symbol || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			continue
		}
		for _, sec := range f.Sections {
			if sec.Type == elf.SHT_PROGBITS && sec.Addr <= s.Value && s.Value+s.Size <= sec.Addr+sec.Size {
				code := make([]byte, s.Size)
				if _, err := sec.ReadAt(code, int64(s.Value-sec.Addr)); err != nil {
					return nil, fmt.Errorf("%s: reading %s: %w", path, symbol, err)
				}
				return code, nil
			}
		}
		return nil, fmt.Errorf("%s: %s lies in no section", path, symbol)
	}
	return nil, fmt.Errorf("%s: no function symbol %s (stripped, or not ctxd?)", path, symbol)
}
