package trace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

func TestTurnsOfRealTraces(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testmodel.Traces(t), "*.traj"))
	if len(files) == 0 {
		t.Fatal("no traces")
	}
	for _, f := range files {
		tr, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		turns := tr.Turns()
		assistants := 0
		for _, m := range tr.History {
			if m.Role == "assistant" {
				assistants++
			}
		}
		if len(turns) != assistants || len(turns) == 0 {
			t.Fatalf("%s: %d turns for %d assistant messages", f, len(turns), assistants)
		}
		for _, turn := range turns {
			m := turn.Manifest
			if err := m.Validate(); err != nil {
				t.Fatalf("%s turn %d: %v", f, turn.Index, err)
			}
			if len(m.Segments) != turn.Message || m.Boundary() != len(m.Segments)-1 {
				t.Fatalf("%s turn %d: %d segments, boundary %d", f, turn.Index, len(m.Segments), m.Boundary())
			}
			if m.Segments[0].Kind != policy.KindSystem {
				t.Fatalf("%s: first segment %v", f, m.Segments[0].Kind)
			}
		}
		// Each prompt extends the previous one.
		for k := 1; k < len(turns); k++ {
			prev, cur := turns[k-1].Manifest.Segments, turns[k].Manifest.Segments
			for j := range prev {
				if prev[j].Text != cur[j].Text || prev[j].Kind != cur[j].Kind {
					t.Fatalf("%s: turn %d does not extend turn %d at segment %d", f, k+1, k, j)
				}
			}
		}
	}
}

func TestBadTraces(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"notjson.traj": "{",
		"empty.traj":   `{"history": []}`,
		"content.traj": `{"history": [{"role": "user", "content": 5}]}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := Load(p); !errors.Is(err, ErrBadTrace) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
