// Package enginefake is a pure-Go engine.Backend for the daemon's unit
// tests: no model file format, no cgo, every call in microseconds.
//
// It models what the daemon relies on, not what a transformer computes:
//   - Tokens are bytes: byte b is token b+3 (0 is unknown, 1 BOS, 2 EOS,
//     which ends generation). TokenizeSpecial also parses "<s>" and "</s>";
//     Tokenize never does.
//   - Every decoded cell stores a state computed from its token, its
//     position and the states of the cells before it in sequence 0 (in
//     position order), as attention would. The logits after a Decode are a
//     function of every cell at or below the last position: its token,
//     position and stored state. A range put back at the wrong place, a
//     cell dropped or duplicated, a blob from another context or a shift
//     gone wrong all change what comes next; equal KV gives equal logits
//     and equal greedy tokens, bit for bit.
//   - Range and sequence blobs hold each cell's position, token and state,
//     padded to Facts.KVBytesPerToken bytes per cell, with the context's
//     settings and a checksum; InsertRange and LoadSeq refuse blobs whose
//     positions, settings or checksum do not match (ErrInvalidArgument).
//     Without flash attention the cells are stored field by field (as
//     llama.cpp transposes V), so the BlobCodec's token-major rewrite has
//     something to do; FromTokenMajor restores the exact bytes.
//   - A decode must follow the sequence's last position, as llama.cpp
//     requires: a layout that would decode into a hole fails here as it
//     would there.
//   - Argument validation and sentinel errors are engine/llama's (kv.go,
//     context.go): the same call fails the same way on both.
//   - Faults (Options.Faults) make chosen calls fail, for error paths.
//
// Files: backend.go (Backend, Options, Faults: loading), model.go (Model:
// facts, tokenizer), context.go (Context: decoding, logits), kv.go (range
// operations on sequence 0), blob.go (the blob format and its codec),
// sampler.go (greedy and seeded sampling).
package enginefake
