package policy

import (
	"errors"
	"math/rand"
	"testing"
)

func TestResolveHotLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   HotLimitsInput
		want HotLimits
		err  error
	}{
		{"off", HotLimitsInput{TrainedContext: 4096}, HotLimits{}, nil},
		{"defaults", HotLimitsInput{HotTokens: 1024, TrainedContext: 4096},
			HotLimits{Budget: 1024, Window: 4096, Limit: 1024, Block: DefaultHotBlockTokens, Sinks: DefaultSinkTokens, Recent: 256, Reserve: 32}, nil},
		{"window bounds the limit", HotLimitsInput{HotTokens: 8192, Window: 2048, TrainedContext: 4096, BlockTokens: 32, SinkTokens: 8, RecentTokens: 100},
			HotLimits{Budget: 8192, Window: 2048, Limit: 2048, Block: 32, Sinks: 8, Recent: 100, Reserve: 16}, nil},
		{"no sinks", HotLimitsInput{HotTokens: 1024, TrainedContext: 4096, SinkTokens: 8, NoSinks: true},
			HotLimits{Budget: 1024, Window: 4096, Limit: 1024, Block: 64, Sinks: 0, Recent: 256, Reserve: 32}, nil},
		{"auto", HotLimitsInput{Auto: true, HotTokens: -1, TrainedContext: 4096, MemoryTokens: 100000},
			HotLimits{Budget: 4096, Window: 4096, Limit: 4096, Block: 64, Sinks: 4, Recent: 1024, Reserve: 32}, nil},
		{"auto too small is dense", HotLimitsInput{Auto: true, HotTokens: -1, TrainedContext: 128, MemoryTokens: 100000}, HotLimits{}, nil},
		{"below the floor", HotLimitsInput{HotTokens: 100, TrainedContext: 4096}, HotLimits{}, ErrHotBudget},
		{"negative", HotLimitsInput{HotTokens: 1024, BlockTokens: -1}, HotLimits{}, ErrInvalidHotSet},
		{"negative budget", HotLimitsInput{HotTokens: -5}, HotLimits{}, ErrInvalidHotSet},
	} {
		got, err := ResolveHotLimits(tc.in)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
		}
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A resolved hot set always holds its floor, and lowering never goes
// under it nor raises the limit.
func TestHotLimitsProperties(t *testing.T) {
	r := rand.New(rand.NewSource(10))
	for range 5000 {
		in := HotLimitsInput{HotTokens: r.Intn(5000), Auto: r.Intn(4) == 0, Window: r.Intn(2) * r.Intn(5000),
			TrainedContext: r.Intn(8000), MemoryTokens: r.Intn(10000), BlockTokens: r.Intn(3) * r.Intn(128),
			SinkTokens: r.Intn(2) * r.Intn(16), NoSinks: r.Intn(5) == 0, RecentTokens: r.Intn(2) * r.Intn(1000)}
		l, err := ResolveHotLimits(in)
		if err != nil {
			if !errors.Is(err, ErrHotBudget) || in.Auto {
				t.Fatalf("%+v: %v", in, err)
			}
			continue
		}
		if l == (HotLimits{}) {
			continue
		}
		if l.MinBudget() > l.Limit || l.Limit != min(l.Budget, l.Window) || l.Block <= 0 || (in.NoSinks && l.Sinks != 0) {
			t.Fatalf("%+v: %+v breaks the floor", in, l)
		}
		if l.AdoptRoom() < l.Sinks+l.Recent || l.ChunkTokens() < l.Block || l.ChunkTokens() > max(l.Block, l.Limit) {
			t.Fatalf("%+v: %+v: room %d, chunk %d", in, l, l.AdoptRoom(), l.ChunkTokens())
		}
		if s := l.TurnSuffixTokens(r.Intn(10000)); s > l.Limit/2 {
			t.Fatalf("%+v: suffix %d over half the limit", l, s)
		}
		low := l.Lowered(r.Intn(l.Limit + 100))
		if low.Limit > l.Limit || low.Limit < l.MinBudget() || low.Budget != low.Limit && low != l {
			t.Fatalf("%+v lowered: %+v", l, low)
		}
	}
}
