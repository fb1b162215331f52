package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/client"
)

func TestTrialLogRecord(t *testing.T) {
	ndl := make([]int32, needleTokens)
	other := make([]int32, needleTokens)
	for i := range ndl {
		ndl[i], other[i] = int32(100+i), int32(300+i)
	}
	other[10], other[11] = ndl[6], ndl[7] // one scored token follows its predecessor in another needle
	tr := &trial{needles: [][]int32{other, ndl}, offsets: []int{0, 4095}}
	q := ask{needle: 1, text: true}
	ex := client.Explanation{
		ResidentTokens: 5000, HotTokens: 200,
		Retrieved: []client.RetrievedBlock{{FirstToken: 4036, Tokens: 64}},
		HotRanges: []client.TokenRange{{Start: 0, End: 4}, {Start: 4036, End: 4100}, {Start: 4900, End: 5000}},
	}
	var buf bytes.Buffer
	l := &trialLogger{enc: json.NewEncoder(&buf)}
	l.ask("both", 3, tr, q, 64, 4, 0.5, ex)
	var r askRecord
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	// The needle spans stream [4096, 4120): block (4096-4)/64 = 63 holds
	// [4036, 4100), so it starts at offset 60 and crosses into the next.
	want := askRecord{Run: "both", Trial: 3, Needle: 1, Text: true, Acc: 0.5, Span: [2]int{4096, 4120}, BlockOffset: 60, CrossesBlock: true,
		Hit: true, HotStart: 4 + 60, Resident: 5000, HotTokens: 200, InOtherNeedles: 1}
	r.Retrieved, r.HotRanges = nil, nil
	if !reflect.DeepEqual(r, want) {
		t.Errorf("record %+v, want %+v", r, want)
	}
	(*trialLogger)(nil).ask("both", 0, tr, q, 64, 4, 1, ex) // a nil logger logs nothing
}
