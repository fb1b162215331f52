package main

import (
	"encoding/json"

	"github.com/ctxd/ctxd/client"
)

// trialLogger writes eval recall's per-ask log (--trial-log): one JSON
// line per ask and scorer, so that accuracy can be read against where the
// needle sat in its block and in the hot set.
type trialLogger struct {
	enc *json.Encoder
}

// askRecord is one line of the trial log.
type askRecord struct {
	Run    string  `json:"run"` // baseline, dense far, none (sinks+recent), lexical, attention, both
	Trial  int     `json:"trial"`
	Needle int     `json:"needle"` // index of the asked needle in the trial
	Text   bool    `json:"text"`
	Acc    float64 `json:"acc"`
	// Span is the asked needle's stream range [lo, hi) (BOS at 0).
	Span [2]int `json:"span"`
	// BlockOffset is the needle's first token's offset inside its block,
	// assuming blocks of BlockTokens after the sinks (the eval's layout);
	// CrossesBlock says its span does not end in that block.
	BlockOffset  int  `json:"block_offset"`
	CrossesBlock bool `json:"crosses_block"`
	// Hit says a retrieved block overlaps the span; HotStart is the
	// needle's first position in the hot layout (-1: not hot).
	Hit       bool                `json:"hit"`
	HotStart  int                 `json:"hot_start"`
	Retrieved []int               `json:"retrieved,omitempty"` // first stream token of each retrieved block
	HotRanges []client.TokenRange `json:"hot_ranges,omitempty"`
	Resident  int                 `json:"resident_tokens"`
	// Budget is the turn's retrieval budget in tokens; HotTokens what the
	// engine holds after the turn's prefill (the answer goes after it).
	Budget    int `json:"budget_tokens"`
	HotTokens int `json:"hot_tokens"`
	// InOtherNeedles counts the asked needle's scored tokens (after the
	// asked prefix) that follow their predecessor in another needle of
	// the trial: tokens a model could take from a neighbouring needle in
	// the baseline window, where all needles sit together.
	InOtherNeedles int `json:"in_other_needles"`
}

// ask logs one ask; a nil logger logs nothing.
func (l *trialLogger) ask(run string, trial int, t *trial, q ask, block, sinks int, acc float64, ex client.Explanation) {
	if l == nil {
		return
	}
	lo, hi := t.span(q)
	r := askRecord{Run: run, Trial: trial, Needle: q.needle, Text: q.text, Acc: acc, Span: [2]int{lo, hi}, HotStart: -1, Resident: ex.ResidentTokens, HotRanges: ex.HotRanges}
	if block > 0 && lo >= sinks {
		r.BlockOffset = (lo - sinks) % block
		r.CrossesBlock = (lo-sinks)/block != (hi-1-sinks)/block
	}
	r.HotTokens = ex.HotTokens
	if ex.LastRetrieval != nil {
		r.Budget = ex.LastRetrieval.BudgetTokens
	}
	ndl := t.needles[q.needle]
	for i := askTokens; i < len(ndl); i++ {
		for j, o := range t.needles {
			if j != q.needle && followsIn(o, ndl[i-1], ndl[i]) {
				r.InOtherNeedles++
				break
			}
		}
	}
	for _, b := range ex.Retrieved {
		r.Retrieved = append(r.Retrieved, b.FirstToken)
		if b.FirstToken < hi && lo < b.FirstToken+b.Tokens {
			r.Hit = true
		}
	}
	// Hot ranges are stream ranges laid out contiguously from position 0.
	pos := 0
	for _, hr := range ex.HotRanges {
		if lo >= hr.Start && lo < hr.End {
			r.HotStart = pos + lo - hr.Start
		}
		pos += hr.End - hr.Start
	}
	_ = l.enc.Encode(r)
}

// followsIn says whether b follows a somewhere in toks.
func followsIn(toks []int32, a, b int32) bool {
	for i := 1; i < len(toks); i++ {
		if toks[i-1] == a && toks[i] == b {
			return true
		}
	}
	return false
}
