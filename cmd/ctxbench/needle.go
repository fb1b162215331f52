package main

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/trace"
)

// A needle trial of eval recall: a haystack (the stable prompt, after
// BOS) holding K needles of needleTokens tokens, and a query turn that ends
// with the first askTokens tokens of one of them (the asked one); the
// model is scored on the asked needle's other tokens, teacher-forced.
const (
	needleTokens = 24
	askTokens    = 4  // the shortest prefix the needle model copies from unambiguously
	leadTokens   = 40 // filler before the first needle
	// baselineBack is how far before the end of the query the asked
	// needle starts in the baseline, everything inside one window.
	baselineBack = 150
	// queryDistinct is the n-gram length a query turn's own text must not
	// share with the haystack: it is taken from the needle source, never
	// from the haystack.
	queryDistinct = 8
	pickTries     = 4000
)

// errNeedleSource reports needle-source text that cannot give what a trial
// needs (a needle prefix absent from the haystack, a query turn not taken
// from it).
var errNeedleSource = errors.New("eval recall: needle source")

// needleSources are the token streams trials draw from.
type needleSources struct {
	filler []int32             // haystack text; nil: random token ids
	source []int32             // needle-source text: text needles and query turns
	hay4   map[uint64]struct{} // 4-grams of filler, cyclically
	hay8   map[uint64]struct{} // queryDistinct-grams of filler, cyclically
	vocab  int
	log    *trialLogger // nil: no per-ask log
}

func newNeedleSources(filler, source []int32, vocab int) *needleSources {
	s := &needleSources{filler: filler, source: source, vocab: vocab}
	s.hay4 = cyclicGrams(filler, askTokens)
	s.hay8 = cyclicGrams(filler, queryDistinct)
	return s
}

// cyclicGrams hashes every n-gram of toks read as a cycle (the haystack is
// drawn from it with wrap-around).
func cyclicGrams(toks []int32, n int) map[uint64]struct{} {
	out := make(map[uint64]struct{}, len(toks))
	if len(toks) < n {
		return out
	}
	for i := range toks {
		out[gramKey(toks, i, n)] = struct{}{}
	}
	return out
}

// gramKey hashes toks[i:i+n], wrapping around the end.
func gramKey(toks []int32, i, n int) uint64 {
	h := uint64(14695981039346656037)
	for k := 0; k < n; k++ {
		h ^= uint64(uint32(toks[(i+k)%len(toks)]))
		h *= 1099511628211
	}
	return h
}

// trialShape is what a trial looks like.
type trialShape struct {
	distance  int // far: filler tokens after the first needle; baseline: 0
	needles   int // K
	queryTurn int // tokens of the query turn; 0: the asked prefix alone
	window    int // trained window (baseline layout)
	block     int // the server's block size and sinks: far needles stay inside one block
	sinks     int
	baseline  bool
	// aloneBaseline (a diagnostic) leaves the needles not asked out of
	// the baseline's haystack: filler in their place.
	aloneBaseline bool
	// aloneFar (a diagnostic) does the same for the far haystacks.
	aloneFar bool
	// baselineTokens (a diagnostic) sets the baseline's haystack length
	// (0: the layout's own), within what the window holds.
	baselineTokens int
	// kind is "random" (token ids), "text" (spans of the needle source) or
	// "both": needles alternately random and text in adjacent blocks (all
	// about as far back), each asked in turn on the same haystack: one
	// build serves several asks of both kinds.
	kind string
}

// isText says whether needle j of a trial is text.
func (sh trialShape) isText(j int) bool { return sh.kind == "text" || sh.kind == "both" && j%2 == 1 }

// trial is one placement.
type trial struct {
	hay     []int32 // after BOS
	needles [][]int32
	offsets []int // needle j starts at hay[offsets[j]] (stream position offsets[j]+1)
	asks    []ask
}

// ask is one question of a trial.
type ask struct {
	needle int     // index into needles
	text   bool    // a text needle (else random ids)
	query  []int32 // the query turn, ending with the needle's first askTokens tokens
}

// span is the asked needle's stream range (BOS at 0).
func (t *trial) span(a ask) (int, int) {
	o := t.offsets[a.needle] + 1
	return o, o + needleTokens
}

func (sh trialShape) queryLen() int { return max(askTokens, sh.queryTurn) }

// layout returns the haystack length and the needles' offsets in it.
func (sh trialShape) layout() (int, []int, error) {
	k := sh.needles
	offs := make([]int, k)
	if sh.baseline {
		// Needles back to back (4 filler tokens apart) after the lead,
		// the asked one baselineBack tokens before the query's end when
		// the window allows; needle, query turn and the decoded tokens in
		// one window.
		gap := 4
		minLen := leadTokens + k*needleTokens + (k-1)*gap + 8
		n := leadTokens + k*needleTokens + (k-1)*gap + (baselineBack - needleTokens - (sh.queryLen() - askTokens))
		n = min(n, sh.window-2-sh.queryLen()-(needleTokens-askTokens))
		if sh.baselineTokens > 0 {
			n = min(max(sh.baselineTokens, minLen), sh.window-2-sh.queryLen()-(needleTokens-askTokens))
		}
		if n < minLen {
			return 0, nil, fmt.Errorf("eval recall: a %d-token window cannot hold %d needles and a %d-token query turn", sh.window, k, sh.queryLen())
		}
		for j := range offs {
			offs[j] = leadTokens + j*(needleTokens+gap)
		}
		return n, offs, nil
	}
	n := leadTokens + needleTokens + sh.distance
	if k*needleTokens*2 > sh.distance || sh.kind == "both" && (k%2 != 0 || k*sh.block*4 > sh.distance) {
		return 0, nil, fmt.Errorf("eval recall: %d %s needles do not fit %d tokens", k, sh.kind, sh.distance)
	}
	for j := range offs {
		p := 1 + leadTokens + j*sh.distance/k // stream position (BOS at 0)
		if sh.kind == "both" {
			p = 1 + leadTokens + j*max(sh.block, needleTokens+1) // adjacent blocks, as far back
		}
		if sh.block >= needleTokens && p >= sh.sinks {
			// Inside one block: a needle split over two blocks needs both
			// back, which a hot set as small as the needle model's cannot
			// hold beside its recent window and the query turn.
			b, in := (p-sh.sinks)/sh.block, (p-sh.sinks)%sh.block
			p = sh.sinks + b*sh.block + min(in, sh.block-needleTokens)
		}
		offs[j] = p - 1
	}
	return n, offs, nil
}

// draw builds one trial.
func (s *needleSources) draw(rng *rand.Rand, sh trialShape) (*trial, error) {
	n, offs, err := sh.layout()
	if err != nil {
		return nil, err
	}
	for try := 0; try < pickTries; try++ {
		t := &trial{offsets: offs}
		var spans [][2]int // source spans used by needles
		seen := map[uint64]bool{}
		ok := true
		for j := range sh.needles {
			ndl, at, good := s.needle(rng, seen, sh.isText(j))
			if !good {
				ok = false
				break
			}
			t.needles = append(t.needles, ndl)
			if at >= 0 {
				spans = append(spans, [2]int{at, at + needleTokens})
			}
		}
		if !ok {
			continue
		}
		t.hay = s.fill(rng, n)
		asked := []int{rng.Intn(sh.needles)}
		if sh.kind == "both" {
			asked = asked[:0]
			for j := range sh.needles {
				asked = append(asked, j)
			}
		}
		for j, o := range offs {
			if (sh.baseline && sh.aloneBaseline || !sh.baseline && sh.aloneFar) && !slices.Contains(asked, j) {
				continue // filler where the other needles would be
			}
			copy(t.hay[o:], t.needles[j])
		}
		// Never from the haystack: not from the filler, nor from the
		// needles placed in it (text needles come from the same source).
		inNeedles := map[uint64]struct{}{}
		for _, ndl := range t.needles {
			for i := 0; i+queryDistinct <= len(ndl); i++ {
				inNeedles[gramKey(ndl, i, queryDistinct)] = struct{}{}
			}
		}
		text := s.queryText(rng, sh.queryLen()-askTokens, spans, inNeedles)
		if text == nil {
			continue
		}
		for _, j := range asked {
			prefix := t.needles[j][:askTokens]
			// One answer: the asked prefix occurs once in the haystack and
			// not in the query turn's own text.
			if countSeq(t.hay, prefix) != 1 || countSeq(text, prefix) != 0 {
				ok = false
				break
			}
			t.asks = append(t.asks, ask{needle: j, text: sh.isText(j), query: append(append([]int32(nil), text...), prefix...)})
		}
		if !ok {
			continue
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: no placement found in %d tries (needles whose first %d tokens are absent from the haystack, a query turn sharing no %d-token run with it)",
		errNeedleSource, pickTries, askTokens, queryDistinct)
}

// needle draws a needle: random ids, or a span of the source whose first
// askTokens tokens occur nowhere in the haystack (and in no other needle
// of the trial). at is its offset in the source, -1 for random ids.
func (s *needleSources) needle(rng *rand.Rand, seen map[uint64]bool, text bool) ([]int32, int, bool) {
	if !text {
		ndl := make([]int32, needleTokens)
		for i := range ndl {
			ndl[i] = int32(3 + rng.Intn(s.vocab-3))
		}
		k := gramKey(ndl, 0, askTokens)
		if seen[k] {
			return nil, -1, false
		}
		seen[k] = true
		return ndl, -1, true
	}
	if len(s.source) < needleTokens {
		return nil, 0, false
	}
	for try := 0; try < pickTries; try++ {
		at := rng.Intn(len(s.source) - needleTokens + 1)
		ndl := s.source[at : at+needleTokens]
		k := gramKey(ndl, 0, askTokens)
		if _, inHay := s.hay4[k]; inHay || seen[k] {
			continue
		}
		seen[k] = true
		return append([]int32(nil), ndl...), at, true
	}
	return nil, 0, false
}

// queryText is n tokens of the needle source, outside the needles' spans
// and sharing no queryDistinct-gram with the haystack's filler or with
// needles (their queryDistinct-grams); nil when none is found.
func (s *needleSources) queryText(rng *rand.Rand, n int, avoid [][2]int, needles map[uint64]struct{}) []int32 {
	if n == 0 {
		return []int32{}
	}
	if len(s.source) < n {
		return nil
	}
next:
	for try := 0; try < pickTries; try++ {
		at := rng.Intn(len(s.source) - n + 1)
		for _, a := range avoid {
			if at < a[1] && a[0] < at+n {
				continue next
			}
		}
		q := s.source[at : at+n]
		for i := 0; i+queryDistinct <= n; i++ {
			k := gramKey(q, i, queryDistinct)
			_, inHay := s.hay8[k]
			_, inNeedle := needles[k]
			if inHay || inNeedle {
				continue next
			}
		}
		return append([]int32(nil), q...)
	}
	return nil
}

// fill returns n haystack tokens: a cyclic run of the filler from a random
// offset, or random ids.
func (s *needleSources) fill(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	if len(s.filler) > 0 {
		off := rng.Intn(len(s.filler))
		for i := range out {
			out[i] = s.filler[(off+i)%len(s.filler)]
		}
		return out
	}
	for i := range out {
		out[i] = int32(3 + rng.Intn(s.vocab-3))
	}
	return out
}

// countSeq counts the occurrences of seq in toks.
func countSeq(toks, seq []int32) int {
	n := 0
	for i := 0; i+len(seq) <= len(toks); i++ {
		match := true
		for k := range seq {
			if toks[i+k] != seq[k] {
				match = false
				break
			}
		}
		if match {
			n++
		}
	}
	return n
}

// textTokens tokenizes files (comma-separated): a SWE-agent trajectory
// (.traj) gives its messages' contents, in order; any other file its text.
func textTokens(m engine.Model, files string) ([]int32, error) {
	var all []int32
	for _, f := range strings.Split(files, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var texts []string
		if filepath.Ext(f) == ".traj" {
			tr, err := trace.Load(f)
			if err != nil {
				return nil, err
			}
			for _, msg := range tr.History {
				texts = append(texts, msg.Content)
			}
		} else {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			texts = append(texts, string(b))
		}
		for _, t := range texts {
			toks, err := m.Tokenize(t, false)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			all = append(all, toks...)
		}
	}
	return all, nil
}

// sameFiles reports a file named in both comma-separated lists.
func sameFiles(a, b string) string {
	abs := func(f string) string {
		if p, err := filepath.Abs(strings.TrimSpace(f)); err == nil {
			return p
		}
		return f
	}
	in := map[string]bool{}
	for _, f := range strings.Split(a, ",") {
		if strings.TrimSpace(f) != "" {
			in[abs(f)] = true
		}
	}
	for _, f := range strings.Split(b, ",") {
		if in[abs(f)] {
			return f
		}
	}
	return ""
}
