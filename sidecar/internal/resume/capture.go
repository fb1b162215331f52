package resume

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
)

// Capture: a session's state copied out under the engine token into a
// snapshot.Capture. Only memory copies happen here; the rewrite for
// compression, hashing and the writes wait for the commit, after the
// engine is released. Automatic snapshots: a session that changed since
// its last snapshot is saved when it closes and when it has been idle
// (the shell says when); the newest Env.AutoKeep of them are kept.

var snapNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidName reports whether s may name a snapshot.
func ValidName(s string) bool { return snapNameRE.MatchString(s) && s != "." && s != ".." }

// Capture copies s out into a capture of snapshot name. The caller holds
// the engine token and s is resident.
func (o *Owner) Capture(s Session, name string) (*snapshot.Capture, error) {
	t := s.Tape()
	tape := append([]engine.Token(nil), t.Tokens()...)
	c := snapshot.NewCapture(name, o.env.Compat(), tape, o.env.ElemBytes)
	meta := snapshot.Meta{Format: snapshot.Format, Session: s.Name(), Tape: snapshot.EncodeTape(tape), Mode: s.Layout().Mode()}
	if a := t.ApproxFrom(); a >= 0 {
		meta.ApproxFrom = &a
	}
	if m := s.Manifest(); m != nil {
		meta.Template = m.Template
		b, err := proto.Marshal(protocol.ManifestToWire(*m))
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the manifest: %w", protocol.ErrInternal, err)
		}
		c.Snap.Manifest = b
	}
	for _, sp := range t.Spans() {
		meta.Spans = append(meta.Spans, snapshot.Span{Seg: sp.Seg, Start: sp.Start, End: sp.End, Generated: sp.Generated})
	}
	c.Spans = meta.Spans
	if err := s.Layout().Capture(c, &meta); err != nil {
		return nil, err
	}
	c.Mode = meta.Mode
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding snapshot metadata: %w", protocol.ErrInternal, err)
	}
	c.Snap.Meta = mb
	// The saved state continues from recomputed logits, as a restore does,
	// so the two continue identically.
	t.LogitsLost()
	return c, nil
}

// Save serves a snapshot call: the session hold brings is captured under
// the engine token, then committed without it.
func (o *Owner) Save(ctx context.Context, name string, hold Hold) (*pb.SnapshotReply, error) {
	if !o.On() {
		return nil, o.ErrOff()
	}
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: snapshot name %q: use 1-128 of A-Z a-z 0-9 . _ -", protocol.ErrInvalidArgument, name)
	}
	var c *snapshot.Capture
	var id uint64
	err := hold(ctx, func(s Session) error {
		var err error
		id = s.ID()
		c, err = o.Capture(s, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	rep, err := o.store.Commit(ctx, c)
	if err != nil {
		return nil, err
	}
	rep.SessionId = id
	o.log.Info("snapshot saved", "name", rep.Name, "session", id, "tokens", rep.Tokens, "blocks", rep.Blocks, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
	return rep, nil
}

// AutoWanted reports whether a session of tokens tokens that changed since
// its last snapshot gets an automatic one: the SSD tier is open and
// healthy and the session holds at least snapshot.MinAutoTokens.
func (o *Owner) AutoWanted(tokens int) bool {
	ssd := o.env.Tiers.SSD()
	return ssd != nil && ssd.Err() == nil && tokens >= snapshot.MinAutoTokens
}

// AutoSave captures s for its automatic snapshot and commits it in the
// background; why says what took it. It reports whether s was captured.
// The caller holds the engine token and s is resident.
func (o *Owner) AutoSave(s Session, why string) bool {
	c, err := o.Capture(s, autoName(s))
	if err != nil {
		o.log.Warn("automatic snapshot not taken", "session", s.ID(), "why", why, "err", err)
		return false
	}
	o.store.CommitInBackground(c, why)
	return true
}

// autoName is a session's automatic snapshot's name.
func autoName(s Session) string {
	if name := s.Name(); name != "" {
		var b strings.Builder
		for _, r := range name {
			if r < 128 && (r == '.' || r == '_' || r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return clipString(snapshot.AutoPrefix+b.String(), 128)
	}
	return fmt.Sprintf("%s%d-s%d", snapshot.AutoPrefix, time.Now().UnixMilli(), s.ID())
}

// clipString is s cut to at most n bytes.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
