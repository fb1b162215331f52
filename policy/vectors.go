package policy

import "fmt"

// HeadVectors is a dense block of per-head vectors: for each of Rows
// tokens, each of Layers layers and each of Heads heads, one vector of Dim
// float32s. Data holds them row-major:
//
//	Data[((row*Layers+layer)*Heads+head)*Dim+d]
//
// The engine fills it with attention queries (Heads = the model's query
// heads) or with keys (Heads = its KV heads), both with RoPE not applied,
// so positions do not bias a dot product between them. Which layers a
// HeadVectors holds is the caller's choice and is recorded in LayerIDs
// (nil: all layers, in order).
type HeadVectors struct {
	Rows, Layers, Heads, Dim int
	LayerIDs                 []int
	Data                     []float32
}

// Vec returns the vector of (row, layer, head): a slice of Data.
func (v HeadVectors) Vec(row, layer, head int) []float32 {
	i := ((row*v.Layers+layer)*v.Heads + head) * v.Dim
	return v.Data[i : i+v.Dim : i+v.Dim]
}

// Validate checks that Data has exactly the size the shape names.
func (v HeadVectors) Validate() error {
	if v.Rows < 0 || v.Layers < 0 || v.Heads < 0 || v.Dim < 0 {
		return fmt.Errorf("policy: head vectors with a negative dimension (%d×%d×%d×%d)", v.Rows, v.Layers, v.Heads, v.Dim)
	}
	if want := v.Rows * v.Layers * v.Heads * v.Dim; len(v.Data) != want {
		return fmt.Errorf("policy: head vectors of shape %d×%d×%d×%d hold %d values, want %d", v.Rows, v.Layers, v.Heads, v.Dim, len(v.Data), want)
	}
	if v.LayerIDs != nil && len(v.LayerIDs) != v.Layers {
		return fmt.Errorf("policy: head vectors name %d layer ids for %d layers", len(v.LayerIDs), v.Layers)
	}
	return nil
}
