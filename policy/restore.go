package policy

import "fmt"

// RestoreInput is what PlanRestore weighs: a snapshot's blocks, which
// come back either by reading their KV from the SSD tier or by prefilling
// their tokens again, and this machine's measured throughputs.
type RestoreInput struct {
	// BlockTokens are the snapshot's blocks' lengths, in stream order.
	BlockTokens []int
	// UptoTokens is how much of the stream is wanted; blocks starting at or
	// past it are not considered.
	UptoTokens int
	// KVBytesPerToken is the raw KV size of one token.
	KVBytesPerToken int64
	// ReadBytesPerSec is the SSD tier's read throughput (stored bytes),
	// DecompressBytesPerSec its decompression throughput (raw bytes), and
	// PrefillTokensPerSec the engine's prefill throughput, all measured;
	// a zero or negative figure makes its side of the cost unknown:
	// restoring then costs nothing, recomputing a billion seconds.
	ReadBytesPerSec, DecompressBytesPerSec, PrefillTokensPerSec float64
}

// RestorePlan is the outcome of PlanRestore.
type RestorePlan struct {
	// Blocks is how many blocks, from the first, are read back; the rest of
	// the wanted stream is prefilled.
	Blocks int
	// Tokens are the tokens of those blocks.
	Tokens int
	// Choice says why, for the restore report, e.g. "recompute: restoring
	// 64 tokens (1.2 ms est.) is slower than prefilling them (0.8 ms est.)".
	Choice string
}

// EstimatedStoredBytes is the SSD size assumed for raw KV bytes before the
// snapshot's own sizes are read: nine tenths (compressed KV of float
// elements shrinks little).
func EstimatedStoredBytes(raw int64) int64 { return raw * 9 / 10 }

// RestoreSeconds estimates reading stored bytes from the SSD and
// decompressing them to raw bytes; 0 when a throughput is unknown.
func RestoreSeconds(raw, stored int64, readBytesPerSec, decompressBytesPerSec float64) float64 {
	if readBytesPerSec <= 0 || decompressBytesPerSec <= 0 {
		return 0
	}
	return float64(stored)/readBytesPerSec + float64(raw)/decompressBytesPerSec
}

// RecomputeSeconds estimates prefilling tokens again; 1e9 when the prefill
// throughput is unknown.
func RecomputeSeconds(tokens int, prefillTokensPerSec float64) float64 {
	if prefillTokensPerSec <= 0 {
		return 1e9
	}
	return float64(tokens) / prefillTokensPerSec
}

// PlanRestore decides which blocks of a dense snapshot come back from the
// SSD: in stream order, while restoring a block (RestoreSeconds of its
// EstimatedStoredBytes) is cheaper than recomputing it (RecomputeSeconds);
// from the first block that is not, the rest is prefilled. Blocks starting
// at or past UptoTokens are not needed.
func PlanRestore(in RestoreInput) RestorePlan {
	var p RestorePlan
	for _, n := range in.BlockTokens {
		if p.Tokens >= in.UptoTokens {
			break
		}
		raw := int64(n) * in.KVBytesPerToken
		restore := RestoreSeconds(raw, EstimatedStoredBytes(raw), in.ReadBytesPerSec, in.DecompressBytesPerSec)
		recompute := RecomputeSeconds(n, in.PrefillTokensPerSec)
		if restore >= recompute {
			p.Choice = fmt.Sprintf("recompute: restoring %d tokens (%.1f ms est.) is slower than prefilling them (%.1f ms est.)",
				n, 1e3*restore, 1e3*recompute)
			return p
		}
		p.Blocks++
		p.Tokens += n
	}
	p.Choice = "restore: reading and decompressing is cheaper than prefill for every block"
	return p
}
