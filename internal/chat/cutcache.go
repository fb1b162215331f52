package chat

import (
	"hash/fnv"
	"strconv"
	"sync"
)

// cutCache remembers, per conversation prefix (tools and messages[:k]),
// what finding its cut point rendered, so that the next turn of a
// conversation, which extends this one, re-renders only its new messages.
// An entry is used only after checking it against the new full rendering,
// so the cache changes how fast a cut point is found, never which.
type cutCache struct {
	mu sync.Mutex
	m  map[uint64]cutEntry
}

// maxCutEntries bounds the cache; it is cleared when full.
const maxCutEntries = 1 << 14

// cutEntry is what rendering one prefix gave.
type cutEntry struct {
	// exactLen and exactHash describe render(messages[:k]); exactLen -1
	// when it failed.
	exactLen  int
	exactHash uint64
	// probed is set when the history-probe rendering was made: it agreed
	// with the full rendering of its request on probeLen bytes (hash
	// probeHash), then had probeNext (-1: it ended there); probeErr when
	// it failed.
	probed    bool
	probeErr  bool
	probeLen  int
	probeHash uint64
	probeNext int
}

// missing counts the keys the cache holds no entry for.
func (c *cutCache) missing(keys []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := c.m[k]; !ok {
			n++
		}
	}
	return n
}

func (c *cutCache) get(key uint64) (cutEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e, ok
}

func (c *cutCache) put(key uint64, e cutEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCutEntries {
		c.m = make(map[uint64]cutEntry)
	}
	c.m[key] = e
}

// prefixKeys returns keys[k] identifying (tools, msgs[:k]) for k = 0..len.
func prefixKeys(msgs []Message, tools []Tool) []uint64 {
	h := fnv.New64a()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	for _, t := range tools {
		field(t.Name)
		field(t.Description)
		field(string(t.Parameters))
	}
	field("messages")
	keys := make([]uint64, 0, len(msgs)+1)
	keys = append(keys, h.Sum64())
	for _, m := range msgs {
		field(m.Role)
		field(m.Content)
		field(m.Reasoning)
		field(m.ToolCallID)
		field(m.Name)
		for _, c := range m.ToolCalls {
			field(c.ID)
			field(c.Name)
			field(c.Arguments)
		}
		field("end")
		keys = append(keys, h.Sum64())
	}
	return keys
}

// prefixHasher hashes prefixes of one text, walking forward from the last
// prefix asked for.
type prefixHasher struct {
	s   string
	pos int
	h   uint64
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// sum returns the FNV-1a hash of s[:n].
func (p *prefixHasher) sum(n int) uint64 {
	if n < p.pos || p.pos == 0 {
		p.pos, p.h = 0, fnvOffset
	}
	for ; p.pos < n; p.pos++ {
		p.h ^= uint64(p.s[p.pos])
		p.h *= fnvPrime
	}
	return p.h
}

// hashString is the FNV-1a hash of s.
func hashString(s string) uint64 {
	p := prefixHasher{s: s}
	return p.sum(len(s))
}
