package engine

import (
	"errors"
	"runtime"
	"testing"

	"github.com/ctxd/ctxd/policy"
)

func TestContextOptionsResolve(t *testing.T) {
	f := Facts{HeadDim: 64}
	cases := []struct {
		name string
		in   ContextOptions
		f    Facts
		want ContextOptions
		bad  bool
	}{
		{name: "defaults", in: ContextOptions{ContextTokens: 4096},
			want: ContextOptions{ContextTokens: 4096, BatchTokens: DefaultBatchTokens, Threads: runtime.NumCPU(), DecodeThreads: runtime.NumCPU()}},
		{name: "batch capped at the context", in: ContextOptions{ContextTokens: 256, BatchTokens: 1024, Threads: 2},
			want: ContextOptions{ContextTokens: 256, BatchTokens: 256, Threads: 2, DecodeThreads: 2}},
		{name: "decode threads kept", in: ContextOptions{ContextTokens: 256, Threads: 4, DecodeThreads: 1},
			want: ContextOptions{ContextTokens: 256, BatchTokens: 256, Threads: 4, DecodeThreads: 1}},
		{name: "q8_0 with flash attention", in: ContextOptions{ContextTokens: 64, KVType: policy.KVTypeQ8_0, FlashAttention: true, Threads: 1},
			want: ContextOptions{ContextTokens: 64, BatchTokens: 64, KVType: policy.KVTypeQ8_0, FlashAttention: true, Threads: 1, DecodeThreads: 1}},
		{name: "no context", in: ContextOptions{}, bad: true},
		{name: "q8_0 without flash attention", in: ContextOptions{ContextTokens: 64, KVType: policy.KVTypeQ8_0}, bad: true},
		{name: "q8_0 with a head of 48", in: ContextOptions{ContextTokens: 64, KVType: policy.KVTypeQ8_0, FlashAttention: true}, f: Facts{HeadDim: 48}, bad: true},
		{name: "unknown KV type", in: ContextOptions{ContextTokens: 64, KVType: policy.KVType(99)}, bad: true},
	}
	for _, c := range cases {
		facts := f
		if c.f.HeadDim != 0 {
			facts = c.f
		}
		got, err := c.in.Resolve(facts)
		if c.bad {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: %+v gave %v, want ErrInvalidArgument", c.name, c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v resolved to %+v, %v; want %+v", c.name, c.in, got, err, c.want)
		}
	}
}
