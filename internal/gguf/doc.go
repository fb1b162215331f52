// Package gguf reads and writes the GGUF container format (version 3, the
// one llama.cpp writes and reads): a header, typed metadata key/value
// pairs, tensor descriptions, and then the tensor data, each tensor at an
// aligned offset.
//
// Layout, little-endian throughout:
//
//	"GGUF" | version u32 | tensor count u64 | metadata count u64
//	metadata: key (u64 length + bytes) | value type u32 | value
//	tensors:  name | dims u32 | ne[dims] u64 | ggml type u32 | offset u64
//	padding to the alignment | tensor data
//
// The alignment is the metadata key general.alignment (a power of two,
// u32) or 32. A tensor's offset is relative to the start of the data
// section and is a multiple of the alignment.
//
// Invariants:
//   - Metadata values are plain Go values whose dynamic type fixes their
//     GGUF type (uint8 … float64, bool, string, Array); what Read returns,
//     Writer writes back byte for byte.
//   - Read never trusts a count or length in the file beyond fixed caps
//     (MaxTensors, MaxKV, MaxStringLen, MaxArrayLen, four dimensions), so a
//     corrupt file gives an error wrapping ErrFormat, never a huge
//     allocation or a panic.
//   - Writer streams tensor data: it holds the descriptions, never the
//     data, and checks that each tensor gets exactly its byte size.
//
// Only the standard library is used; nothing here needs cgo.
package gguf
