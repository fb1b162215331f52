package sidecar

import (
	"context"
	"fmt"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"strings"
	"time"
)

// Automatic snapshots: a session that changed since its last snapshot is
// saved when it closes and when it has been idle for Config.IdleSnapshot;
// the newest Config.AutoSnapshots of them are kept. The capture runs under
// the slot token, the commit in the background.

// autoName is the name of a session's automatic snapshot.
func autoName(sess *session) string {
	if sess.name != "" {
		var b strings.Builder
		for _, r := range sess.name {
			if r < 128 && (r == '.' || r == '_' || r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return clipString(snapshot.AutoPrefix+b.String(), 128)
	}
	return fmt.Sprintf("%s%d-s%d", snapshot.AutoPrefix, time.Now().UnixMilli(), sess.id)
}

// autoSnapshot captures sess for an automatic snapshot when it changed
// since the last one; the commit continues in the background. The caller
// holds the slot token.
func (srv *Server) autoSnapshot(sess *session, why string) {
	ssd := srv.tiers.SSD()
	if ssd == nil || ssd.Err() != nil || sess.closed || sess.ephemeral || sess.tape.Len() < snapshot.MinAutoTokens || sess.version == sess.savedVersion {
		return
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return
	}
	c, err := srv.capture(sess, autoName(sess))
	if err != nil {
		srv.log.Warn("automatic snapshot not taken", "session", sess.id, "why", why, "err", err)
		return
	}
	sess.savedVersion = sess.version
	srv.snaps.CommitInBackground(c, why)
}

// idleSnapshots saves sessions idle for IdleSnapshot until ctx ends.
func (srv *Server) idleSnapshots(ctx context.Context) {
	idle := srv.cfg.IdleSnapshot
	if !srv.snaps.On() || idle <= 0 {
		return
	}
	t := time.NewTicker(max(idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		srv.mu.Lock()
		var due []*session
		for _, s := range srv.sessions {
			due = append(due, s)
		}
		srv.mu.Unlock()
		for _, sess := range due {
			srv.mu.Lock()
			idleFor := time.Since(sess.lastUsed)
			srv.mu.Unlock()
			if idleFor < idle {
				continue
			}
			// Only when the engine is free: never delay a client's call.
			if !srv.slot.token.tryAcquire() {
				continue
			}
			if srv.slot.model != nil {
				srv.autoSnapshot(sess, "idle")
			}
			srv.slot.release()
		}
	}
}

// clipString is s cut to at most n bytes.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
