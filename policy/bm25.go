package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// BM25 defaults, the usual values for prose and code alike.
const (
	DefaultBM25K1 = 1.2  // term-frequency saturation
	DefaultBM25B  = 0.75 // length normalisation
)

// BM25MaxNgram is the longest token n-gram BM25Index indexes: unigrams up
// to 4-grams. Four tokens is the shortest span a copying model needs to
// find its place unambiguously (a needle's prefix, an identifier split into
// tokens), and a 4-gram that occurs in one block identifies it.
const BM25MaxNgram = 4

// BM25Options tune a BM25Index.
type BM25Options struct {
	// K1 saturates term frequency: 0 counts a term once however often it
	// occurs; larger values let repeats count longer. Non-negative.
	K1 float64
	// B normalises by block length: 0 ignores length, 1 normalises fully.
	// Within [0, 1].
	B float64
	// Weights multiply the BM25 terms of unigrams to 4-grams (Weights[n-1]
	// for n-grams). Non-negative.
	Weights [BM25MaxNgram]float64
	// IDFPower raises each term's IDF to this power: 1 is textbook BM25;
	// larger values weigh rare n-grams (identifiers, paths, numbers, a
	// needle's prefix) far above common ones, so that many matches of
	// common words cannot outweigh one rare match. 0 ignores IDF.
	// Non-negative.
	IDFPower float64
	// QueryHalfLife, in tokens, weighs a query's n-grams by how close they
	// end to the query's end: one ending d tokens before it counts
	// 2^(−d/QueryHalfLife). What a turn needs next is decided by its
	// newest tokens (a model copies what followed an earlier occurrence of
	// what it just read), while its earlier words also match blocks that
	// merely share vocabulary. 0 weighs every position alike. Non-negative.
	QueryHalfLife float64
	// QueryFloor is the least weight QueryHalfLife gives an n-gram, so that
	// a rare identifier early in a long turn still finds its block. Within
	// [0, 1].
	QueryFloor float64
}

// Defaults of the query weighting, chosen by measurement on text
// haystacks (docs/BENCHMARKS.md, "Recall"): with textbook BM25 (IDF
// power 1, every query position alike) a turn's ordinary words pick the
// blocks that share most of them, and the few tokens that say what the
// turn needs lose.
const (
	DefaultBM25IDFPower = 3
	// DefaultBM25QueryHalfLife is one longest n-gram: each BM25MaxNgram
	// tokens further from the query's end halve an n-gram's weight.
	DefaultBM25QueryHalfLife = BM25MaxNgram
	DefaultBM25QueryFloor    = 0.1
)

// DefaultBM25Options returns K1 = DefaultBM25K1, B = DefaultBM25B, weights
// 1, 2, 3, 4 for unigrams to 4-grams, so that a short exact match of the
// query (an identifier's token sequence, a needle's first tokens) outweighs
// scattered single-token overlap, and the query weighting defaults above.
func DefaultBM25Options() BM25Options {
	return BM25Options{K1: DefaultBM25K1, B: DefaultBM25B, Weights: [BM25MaxNgram]float64{1, 2, 3, 4},
		IDFPower: DefaultBM25IDFPower, QueryHalfLife: DefaultBM25QueryHalfLife, QueryFloor: DefaultBM25QueryFloor}
}

// BM25Index is a Scorer ranking blocks by Okapi BM25 over their token
// n-grams. Each block is a document; its terms are its unigrams to 4-grams
// (n-grams do not cross blocks), hashed into uint64 keys. A query term t,
// an n-gram ending d tokens before the query's end, adds to a block's
// score
//
//	Weights[n-1] × q(d) × IDF(t) × tf × (K1+1) / (tf + K1 × (1 − B + B × len/avglen))
//
// with tf its count in the block, len the block's tokens, avglen the mean
// over indexed blocks, IDF(t) = ln(1 + (N − df + 0.5)/(df + 0.5))^p over
// N blocks, df of which hold t (p = IDFPower: always positive, and small
// for n-grams present in most blocks), and q(d) = max(QueryFloor,
// 2^(−d/QueryHalfLife)) (1 with QueryHalfLife 0). Each distinct query
// term counts once, at its newest occurrence.
//
// Add and Remove update an inverted index, so Score only visits the blocks
// sharing a term with the query. Create one with NewBM25Index; the zero
// value is not usable. A BM25Index is not safe for concurrent use.
type BM25Index struct {
	opts     BM25Options
	docs     []bm25Doc        // by slot; a removed slot has live false
	free     []int32          // removed slots, reused by Add
	slots    map[uint64]int32 // block id → slot
	postings map[uint64][]bm25Posting
	tokens   int         // tokens over live blocks
	keys     []uint64    // scratch for n-gram keys
	qterms   []queryTerm // scratch for Score
	acc      []float64   // per slot, scratch for Score
	norm     []float64   // per slot, scratch for Score
}

type bm25Doc struct {
	id     uint64
	length int
	terms  []uint64 // distinct terms, for Remove
	live   bool
}

type bm25Posting struct {
	slot int32
	tf   int32
}

// NewBM25Index returns an empty index. Options out of range give an error
// wrapping ErrInvalidHotSet.
func NewBM25Index(opts BM25Options) (*BM25Index, error) {
	if !nonNegativeFinite(opts.K1) || !(opts.B >= 0 && opts.B <= 1) {
		return nil, fmt.Errorf("%w: BM25 k1 must be non-negative and finite and b within [0, 1], got k1 %g, b %g",
			ErrInvalidHotSet, opts.K1, opts.B)
	}
	if !(opts.QueryFloor >= 0 && opts.QueryFloor <= 1) {
		return nil, fmt.Errorf("%w: BM25 query floor must be within [0, 1], got %g", ErrInvalidHotSet, opts.QueryFloor)
	}
	if !nonNegativeFinite(opts.QueryHalfLife) {
		return nil, fmt.Errorf("%w: BM25 query half-life must be non-negative and finite, got %g", ErrInvalidHotSet, opts.QueryHalfLife)
	}
	if !nonNegativeFinite(opts.IDFPower) {
		return nil, fmt.Errorf("%w: BM25 IDF power must be non-negative and finite, got %g", ErrInvalidHotSet, opts.IDFPower)
	}
	for n, w := range opts.Weights {
		if !nonNegativeFinite(w) {
			return nil, fmt.Errorf("%w: BM25 weight of %d-grams must be non-negative and finite, got %g", ErrInvalidHotSet, n+1, w)
		}
	}
	return &BM25Index{
		opts:     opts,
		slots:    make(map[uint64]int32),
		postings: make(map[uint64][]bm25Posting),
	}, nil
}

// Len returns the number of blocks indexed.
func (x *BM25Index) Len() int { return len(x.slots) }

// Add indexes block id with its tokens, replacing any block with the same
// id. Tokens are not retained.
func (x *BM25Index) Add(id uint64, tokens []int32) {
	x.Remove(id)
	var slot int32
	if n := len(x.free); n > 0 {
		slot, x.free = x.free[n-1], x.free[:n-1]
	} else {
		slot = int32(len(x.docs))
		x.docs = append(x.docs, bm25Doc{})
	}
	keys := x.sortedTerms(tokens)
	d := bm25Doc{id: id, length: len(tokens), live: true}
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[i] {
			j++
		}
		d.terms = append(d.terms, keys[i])
		x.postings[keys[i]] = append(x.postings[keys[i]], bm25Posting{slot: slot, tf: int32(j - i)})
		i = j
	}
	x.docs[slot] = d
	x.slots[id] = slot
	x.tokens += len(tokens)
}

// Remove drops block id and reports whether it was indexed.
func (x *BM25Index) Remove(id uint64) bool {
	slot, ok := x.slots[id]
	if !ok {
		return false
	}
	d := &x.docs[slot]
	for _, key := range d.terms {
		ps := x.postings[key]
		for i := range ps {
			if ps[i].slot == slot {
				ps[i] = ps[len(ps)-1]
				ps = ps[:len(ps)-1]
				break
			}
		}
		if len(ps) == 0 {
			delete(x.postings, key)
		} else {
			x.postings[key] = ps
		}
	}
	x.tokens -= d.length
	*d = bm25Doc{}
	delete(x.slots, id)
	x.free = append(x.free, slot)
	return true
}

// Score returns the BM25 score of every indexed block for query, sorted by
// descending score then ascending ID. An empty query scores every block 0.
func (x *BM25Index) Score(query []int32) []BlockScore {
	n := len(x.slots)
	out := make([]BlockScore, 0, n)
	if n == 0 {
		return out
	}
	x.acc = slices.Grow(x.acc[:0], len(x.docs))[:len(x.docs)]
	x.norm = slices.Grow(x.norm[:0], len(x.docs))[:len(x.docs)]
	clear(x.acc)
	avg := float64(x.tokens) / float64(n)
	if avg == 0 {
		avg = 1
	}
	k1, b := x.opts.K1, x.opts.B
	for s, d := range x.docs {
		x.norm[s] = k1 * (1 - b + b*float64(d.length)/avg)
	}
	// Distinct query terms in key order, so that every block's sum is
	// accumulated in the same order whatever the insertion history; a
	// term repeated in the query takes its newest occurrence's weight.
	terms := x.queryTerms(query)
	for _, t := range terms {
		ps := x.postings[t.key]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := math.Pow(math.Log(1+(float64(n)-df+0.5)/(df+0.5)), x.opts.IDFPower)
		w := x.opts.Weights[ngramSize(t.key)-1] * idf * t.weight
		for _, p := range ps {
			tf := float64(p.tf)
			x.acc[p.slot] += w * tf * (k1 + 1) / (tf + x.norm[p.slot])
		}
	}
	for s, d := range x.docs {
		if d.live {
			out = append(out, BlockScore{ID: d.id, Score: x.acc[s]})
		}
	}
	slices.SortFunc(out, func(a, b BlockScore) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// sortedTerms returns the n-gram keys of tokens, sorted, in x's scratch
// space.
func (x *BM25Index) sortedTerms(tokens []int32) []uint64 {
	x.keys = x.keys[:0]
	for i := range tokens {
		h := uint64(0)
		for n := 1; n <= BM25MaxNgram && i+n <= len(tokens); n++ {
			h = mixNgram(h, tokens[i+n-1])
			x.keys = append(x.keys, h&^7|uint64(n))
		}
	}
	slices.Sort(x.keys)
	return x.keys
}

// queryTerm is a distinct n-gram of a query with its weight.
type queryTerm struct {
	key    uint64
	weight float64
}

// queryTerms returns the distinct n-grams of query sorted by key, each
// with the recency weight of its newest occurrence.
func (x *BM25Index) queryTerms(query []int32) []queryTerm {
	x.qterms = x.qterms[:0]
	for i := range query {
		h := uint64(0)
		for n := 1; n <= BM25MaxNgram && i+n <= len(query); n++ {
			h = mixNgram(h, query[i+n-1])
			w := 1.0
			if hl := x.opts.QueryHalfLife; hl > 0 {
				w = max(x.opts.QueryFloor, math.Exp2(-float64(len(query)-(i+n))/hl))
			}
			x.qterms = append(x.qterms, queryTerm{key: h&^7 | uint64(n), weight: w})
		}
	}
	slices.SortFunc(x.qterms, func(a, b queryTerm) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(b.weight, a.weight) // heaviest first
	})
	out := x.qterms[:0]
	for i, t := range x.qterms {
		if i == 0 || x.qterms[i-1].key != t.key {
			out = append(out, t)
		}
	}
	return out
}

// ngramSize returns the n of an n-gram key, kept in its three low bits.
func ngramSize(key uint64) int { return int(key & 7) }

// mixNgram extends the hash h of an n-gram by token t (splitmix64's
// finaliser over h and t). Keys keep 61 bits of it: two distinct n-grams of
// a size collide with probability about 2⁻⁶¹.
func mixNgram(h uint64, t int32) uint64 {
	z := h*0x9e3779b97f4a7c15 + uint64(uint32(t)) + 0x632be59bd9b4e5
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
