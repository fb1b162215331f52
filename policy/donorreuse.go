package policy

import "slices"

// Reuse from other live sessions (donors): a sub-agent that opens its own
// session with its own system prompt still sends the tools array the main
// conversation holds; a new conversation starts like one that is running.
// The donors' KV is copied, never moved: a donor keeps all it holds.

// HeldTape is what a donor holds: its tokens, their segments, and how many
// of its first tokens hold exactly the KV a cold prefill computes.
type HeldTape struct {
	Tokens []int32
	Spans  []SpanRange
	Exact  int
}

// DonorPrefix is the longest prefix of prompt, past kept, that a donor
// holds exactly (its tokens equal the prompt's from the first one on, and
// its KV there is a cold prefill's): copied at the same positions it is
// exact reuse. donor is its index in donors, or -1 with end == kept when
// none reaches past kept. Ties go to the earlier donor.
func DonorPrefix(donors []HeldTape, prompt []int32, kept int) (donor, end int) {
	donor, end = -1, kept
	for i, d := range donors {
		n := min(len(d.Tokens), len(prompt), max(0, d.Exact))
		common := 0
		for common < n && d.Tokens[common] == prompt[common] {
			common++
		}
		if common > end {
			donor, end = i, common
		}
	}
	return donor, end
}

// MatchDonorSegments finds, for each segment of the prompt that ends
// after from (one that starts before it is matched whole and cut at from
// by MergeRuns) and is covered by none of own (the session's own runs,
// MatchSegments), the first donor holding a segment with identical tokens
// anywhere in its tape (donors in order of preference), unless the donor
// of the run just before holds it right after that run: then that run
// goes on. The runs are increasing in Dst and tagged with Donor = index +
// 1; contiguous matches of one donor that are contiguous in its tape too
// merge into one run. Within one donor a segment takes the earliest of
// its equal segments not used yet.
func MatchDonorSegments(donors []HeldTape, prompt []int32, promptSpans []SpanRange, from int, own []ReuseRun) []ReuseRun {
	if len(donors) == 0 {
		return nil
	}
	index := make([]map[segmentKey][]SpanRange, len(donors))
	for i, d := range donors {
		index[i] = map[segmentKey][]SpanRange{}
		for _, s := range d.Spans {
			if s.Start < 0 || s.End <= s.Start || s.End > len(d.Tokens) {
				continue
			}
			k := segmentKeyOf(d.Tokens[s.Start:s.End])
			index[i][k] = append(index[i][k], s)
		}
	}
	covered := func(s SpanRange) bool {
		for _, r := range own {
			if s.Start < r.Dst+r.Len && r.Dst < s.End {
				return true
			}
		}
		return false
	}
	used := make([]map[int]bool, len(donors)) // donor segment starts taken
	for i := range used {
		used[i] = map[int]bool{}
	}
	var runs []ReuseRun
	for _, s := range promptSpans {
		if s.End <= from || s.Start < 0 || s.End <= s.Start || s.End > len(prompt) || covered(s) {
			continue
		}
		want := prompt[s.Start:s.End]
		k := segmentKeyOf(want)
		// The donor of the run just before, when it holds this segment
		// right after that run's source, continues it: one run, not two
		// from different donors (a hot set copies whole blocks, so every
		// run boundary costs the partial blocks around it).
		if n := len(runs); n > 0 && runs[n-1].Dst+runs[n-1].Len == s.Start {
			i, next := runs[n-1].Donor-1, runs[n-1].Src+runs[n-1].Len
			if h, ok := findSpan(index[i][k], next); ok && !used[i][h.Start] && slices.Equal(donors[i].Tokens[h.Start:h.End], want) {
				used[i][h.Start] = true
				runs[n-1].Len += s.End - s.Start
				continue
			}
		}
	donors:
		for i, d := range donors {
			for _, h := range index[i][k] {
				if used[i][h.Start] || !slices.Equal(d.Tokens[h.Start:h.End], want) {
					continue
				}
				used[i][h.Start] = true
				if n := len(runs); n > 0 && runs[n-1].Donor == i+1 && runs[n-1].Src+runs[n-1].Len == h.Start && runs[n-1].Dst+runs[n-1].Len == s.Start {
					runs[n-1].Len += s.End - s.Start
				} else {
					runs = append(runs, ReuseRun{Src: h.Start, Dst: s.Start, Len: s.End - s.Start, Donor: i + 1})
				}
				break donors
			}
		}
	}
	return runs
}

// findSpan is the span of spans starting at start.
func findSpan(spans []SpanRange, start int) (SpanRange, bool) {
	for _, h := range spans {
		if h.Start == start {
			return h, true
		}
	}
	return SpanRange{}, false
}

// MergeRuns merges own and donor runs (each increasing in Dst and
// disjoint from the other) into one list increasing in Dst, dropping or
// cutting the parts of runs that lie before from (a donor's exact prefix
// took them).
func MergeRuns(own, donor []ReuseRun, from int) []ReuseRun {
	out := make([]ReuseRun, 0, len(own)+len(donor))
	i, j := 0, 0
	for i < len(own) || j < len(donor) {
		var r ReuseRun
		if j >= len(donor) || (i < len(own) && own[i].Dst < donor[j].Dst) {
			r, i = own[i], i+1
		} else {
			r, j = donor[j], j+1
		}
		if cut := from - r.Dst; cut > 0 {
			if cut >= r.Len {
				continue
			}
			r.Src, r.Dst, r.Len = r.Src+cut, r.Dst+cut, r.Len-cut
		}
		out = append(out, r)
	}
	return out
}

// PrefixGaps are the parts of [from, end) that no run covers, as runs of
// donor (1-based) at the same indices: what a donor's common prefix with
// the prompt adds to the segments matched whole.
func PrefixGaps(runs []ReuseRun, from, end, donor int) []ReuseRun {
	var out []ReuseRun
	at := from
	for _, r := range runs {
		if r.Dst >= end {
			break
		}
		if r.Dst > at {
			out = append(out, ReuseRun{Src: at, Dst: at, Len: r.Dst - at, Donor: donor})
		}
		at = max(at, r.Dst+r.Len)
	}
	if at < end {
		out = append(out, ReuseRun{Src: at, Dst: at, Len: end - at, Donor: donor})
	}
	return out
}

// DonorWorthCopying reports whether copying saved tokens' KV from a donor
// beats prefilling them: their prefill time (perTokenSeconds each, the
// measured cost model) against the copy's estimated time (copySeconds: a
// dense donor's parked state is loaded and the receiving session's saved
// and put back, memory copies that grow with both sessions). Unknown
// figures (zero) do not stop a copy.
func DonorWorthCopying(saved int, perTokenSeconds, copySeconds float64) bool {
	if saved <= 0 {
		return false
	}
	return perTokenSeconds <= 0 || copySeconds <= 0 || float64(saved)*perTokenSeconds > copySeconds
}

// CopyCostEstimate updates the running estimate of a donor copy's seconds
// per token moved with a measured one (the first measurement is taken as
// is).
func CopyCostEstimate(old, measured float64) float64 {
	if old <= 0 {
		return measured
	}
	return (3*old + measured) / 4
}
