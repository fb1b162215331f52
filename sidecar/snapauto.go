package sidecar

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Automatic snapshots: a session that changed since its last snapshot is
// saved when it closes and when it has been idle for Config.IdleSnapshot;
// the newest Config.AutoSnapshots of them are kept. The capture runs under
// the slot token, the commit in the background.

// autoPrefix starts every automatic snapshot's name.
const autoPrefix = "auto-"

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
		return clipString(autoPrefix+b.String(), 128)
	}
	return fmt.Sprintf("%s%d-s%d", autoPrefix, time.Now().UnixMilli(), sess.id)
}

// autoSnapshot captures sess for an automatic snapshot when it changed
// since the last one; the commit continues in the background. The caller
// holds the slot token.
func (srv *Server) autoSnapshot(sess *session, why string) {
	ssd := srv.tiers.SSD()
	if ssd == nil || ssd.Err() != nil || sess.closed || sess.ephemeral || len(sess.tape) < minAutoSnapshotTokens || sess.version == sess.savedVersion {
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
	s := srv.snaps
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rep, err := s.commit(ctx, c)
		if err != nil {
			s.log.Warn("automatic snapshot failed; the session's state stays in memory only", "name", c.snap.Name, "why", why, "err", err)
			return
		}
		s.log.Info("automatic snapshot", "name", rep.Name, "why", why, "tokens", rep.Tokens, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
		s.pruneAuto(ctx)
	}()
}

// idleSnapshots saves sessions idle for IdleSnapshot until ctx ends.
func (srv *Server) idleSnapshots(ctx context.Context) {
	idle := srv.cfg.IdleSnapshot
	if !srv.snaps.on() || idle <= 0 {
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
