package engine

import (
	"errors"
	"testing"
)

func TestParseWeightType(t *testing.T) {
	for in, want := range map[string]WeightType{"q8_0": WeightQ8_0, "Q4_K_M": WeightQ4_KM, "q4_0": WeightQ4_0} {
		if got, err := ParseWeightType(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, in := range []string{"", "f16", "q4_k", "q5_1"} {
		if _, err := ParseWeightType(in); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%q: %v, want ErrInvalidArgument", in, err)
		}
	}
}
