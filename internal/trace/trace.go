// Package trace reads SWE-agent trajectories (.traj JSON) and turns each
// model call in them into a ctxd manifest: the prompt of the k-th assistant
// message is every message before it.
package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ctxd/ctxd/policy"
)

// ErrBadTrace reports a file that is not a usable trajectory.
var ErrBadTrace = errors.New("bad trajectory")

// Message is one entry of a trajectory's history.
type Message struct {
	Role    string
	Content string
	IsDemo  bool
}

// Trajectory is a parsed .traj file.
type Trajectory struct {
	Path    string
	History []Message
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	IsDemo  bool            `json:"is_demo"`
}

// Load parses a .traj file.
func Load(path string) (*Trajectory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw struct {
		History []rawMessage `json:"history"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadTrace, path, err)
	}
	if len(raw.History) == 0 {
		return nil, fmt.Errorf("%w: %s has no history", ErrBadTrace, path)
	}
	t := &Trajectory{Path: path}
	for i, m := range raw.History {
		text, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: message %d: %v", ErrBadTrace, path, i, err)
		}
		t.History = append(t.History, Message{Role: m.Role, Content: text, IsDemo: m.IsDemo})
	}
	return t, nil
}

// contentText accepts a string or a list of {"type":"text","text":...}.
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// Turn is one model call: the index of its assistant message and the
// manifest of its prompt.
type Turn struct {
	Index    int // 1-based turn number
	Message  int // index of the assistant message in History
	Manifest policy.Manifest
}

// Turns renders every assistant message's prompt as a manifest. Segments:
// system → System, demonstrations → Tools, the task (first other user
// message) → Pinned, later user/tool messages (observations) → Terminal,
// assistant messages → UserTurn. Everything but the newest message is
// stable, as an agent would send it.
func (t *Trajectory) Turns() []Turn {
	segs := make([]policy.Segment, 0, len(t.History))
	var turns []Turn
	taskSeen := false
	for i, m := range t.History {
		if m.Role == "assistant" && len(segs) > 0 {
			s := append([]policy.Segment(nil), segs...)
			for j := range s {
				s[j].Stable = j < len(s)-1
			}
			turns = append(turns, Turn{Index: len(turns) + 1, Message: i, Manifest: policy.Manifest{Segments: s}})
		}
		seg := policy.Segment{ID: fmt.Sprintf("m%d", i), Text: render(m)}
		switch {
		case m.Role == "system":
			seg.Kind = policy.KindSystem
		case m.Role == "assistant":
			seg.Kind = policy.KindUserTurn
		case m.IsDemo:
			seg.Kind = policy.KindTools
		case !taskSeen:
			seg.Kind = policy.KindPinned
			taskSeen = true
		default:
			seg.Kind = policy.KindTerminal
		}
		segs = append(segs, seg)
	}
	return turns
}

func render(m Message) string {
	return "\n[" + m.Role + "]\n" + m.Content
}
