package resume

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
)

// named is a Session that only has a name and an id (autoName's needs).
type named struct {
	Session
	id   uint64
	name string
}

func (n named) ID() uint64   { return n.id }
func (n named) Name() string { return n.name }

// An automatic snapshot's name is the session's name made a valid
// snapshot name (at most 128 bytes), or a time and the id for an unnamed
// session; ValidName accepts every one of them and refuses the rest.
func TestAutoNameAndValidName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"agent/task 7", snapshot.AutoPrefix + "agent_task_7"},
		{"ok.name-1_x", snapshot.AutoPrefix + "ok.name-1_x"},
		{"é", snapshot.AutoPrefix + "_"},
		{strings.Repeat("a", 300), snapshot.AutoPrefix + strings.Repeat("a", 128-len(snapshot.AutoPrefix))},
	} {
		got := autoName(named{id: 3, name: tc.name})
		if got != tc.want || !ValidName(got) {
			t.Errorf("autoName(%q) = %q (valid %v), want %q", tc.name, got, ValidName(got), tc.want)
		}
	}
	if got := autoName(named{id: 42}); !strings.HasPrefix(got, snapshot.AutoPrefix) || !strings.HasSuffix(got, "-s42") || !ValidName(got) {
		t.Errorf("an unnamed session's automatic snapshot: %q", got)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("x", 129)} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
}
