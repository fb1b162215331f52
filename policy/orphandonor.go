package policy

import "sort"

// Orphan tapes as donors: parked blocks whose session closed (or whose
// ctxd restarted) still hold the KV of their segments. A prompt that
// differs early from every tape it could adopt may copy an orphan's
// unchanged later segments as it copies a live session's.

// MaxOrphanDonors bounds the orphan tapes a prompt is matched against:
// matching indexes every segment of every donor, per sync, so the bound
// keeps that cost (and the tapes read) small next to the prefill it
// saves; the most recent tapes are the likeliest to hold what a new
// session of the same agent sends.
const MaxOrphanDonors = 4

// OrphanDonorCandidate is an orphan tape as ChooseOrphanDonors sees it.
type OrphanDonorCandidate struct {
	// Spans is how many segment spans were recorded with its blocks.
	Spans int
	// SameCompat: its KV was built under the prompt's compatibility key
	// (model, template, KV settings).
	SameCompat bool
	// Since orders the tapes: when its session ended (larger: newer).
	Since int64
}

// ChooseOrphanDonors picks the orphan tapes a prompt may copy segments
// from: those with recorded spans built under the prompt's key, the most
// recent first, at most MaxOrphanDonors. It returns their indices.
func ChooseOrphanDonors(cands []OrphanDonorCandidate) []int {
	var out []int
	for i, c := range cands {
		if c.Spans > 0 && c.SameCompat {
			out = append(out, i)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return cands[out[a]].Since > cands[out[b]].Since })
	return out[:min(len(out), MaxOrphanDonors)]
}
