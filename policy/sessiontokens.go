package policy

// SessionTokensInput is what SessionTokens derives a hot-set session's
// limit from. The record sizes are the arena's format (package shm's
// BlockHeaderBytes and TokenBytes), passed in so that policy needs no
// storage package.
type SessionTokensInput struct {
	// HotLimit is HotLimits.Limit: the tokens the engine holds.
	HotLimit int
	// BlockTokens is HotLimits.Block.
	BlockTokens int
	// KVBytesPerToken is one token's raw KV size; below 1 counts as 1.
	KVBytesPerToken int64
	// RecordHeaderBytes and TokenBytes lay out one parked block in the
	// arena: a header, the tokens, then the KV blob.
	RecordHeaderBytes, TokenBytes int64
	// SlabBytes and CapacitySlabs are the open arena's slab size and the
	// most slabs it may use; with SlabBytes 0 (no arena open yet) the
	// ArenaBytes budget counts as raw KV instead.
	SlabBytes, CapacitySlabs int64
	ArenaBytes               int64
	// ColdBytes is the SSD tier's quota (0: off): blocks a full arena
	// spills there stay retrievable.
	ColdBytes int64
}

// KVFramingBytes is the allowance for the engine's framing of a KV blob of
// tokens tokens beyond their raw KV bytes (per-layer headers of the state
// format): 1/32 of each token's KV bytes.
func KVFramingBytes(kvBytesPerToken int64, tokens int) int64 {
	return kvBytesPerToken / 32 * int64(tokens)
}

// ArenaRecordBytes is the size of one parked block of tokens tokens in the
// arena: header, tokens, KV bytes and their framing allowance.
func ArenaRecordBytes(in SessionTokensInput, tokens int) int64 {
	kv := max(in.KVBytesPerToken, 1)
	t := int64(tokens)
	return in.RecordHeaderBytes + in.TokenBytes*t + kv*t + KVFramingBytes(kv, tokens)
}

// SessionTokens is the most tokens a hot-set session may hold: the hot
// limit, plus the whole blocks the arena's slabs hold (each block's record
// rounded up to whole slabs), plus the raw KV tokens the SSD quota holds.
func SessionTokens(in SessionTokensInput) int {
	kv := max(in.KVBytesPerToken, 1)
	cold := int(TokensForBytes(in.ColdBytes, kv))
	if in.SlabBytes <= 0 {
		return in.HotLimit + int(TokensForBytes(in.ArenaBytes, kv)) + cold
	}
	rec := ArenaRecordBytes(in, in.BlockTokens)
	slabs := max((rec+in.SlabBytes-1)/in.SlabBytes, 1)
	return in.HotLimit + int(in.CapacitySlabs/slabs*int64(in.BlockTokens)) + cold
}
