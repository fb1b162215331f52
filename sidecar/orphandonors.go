package sidecar

import "github.com/ctxd/ctxd/sidecar/internal/layout"

// orphanDonors are the orphan tapes a hot-set session's prompt built
// under key may copy unchanged segments from (layout/orphandonor.go):
// parked blocks of closed sessions, or of an earlier ctxd, whose segment
// spans were recorded with them. The caller holds the slot token and has
// ruled out exact prompts, --reuse exact and sessions opened cold.
func (srv *Server) orphanDonors(sess *session, key string) []layout.Donor {
	if sess.layout == nil || sess.layout.Mode() != "hot" || !srv.tiers.HasArena() {
		return nil
	}
	return layout.OrphanDonors(srv.tiers, key, srv.layoutEnv(sess))
}

// lendKey is the compatibility key sess's parked blocks are recorded
// under (layout.Prompt.Compat): none for a session opened cold, whose
// blocks never lend to another session.
func lendKey(sess *session, key string) string {
	if sess.ephemeral {
		return ""
	}
	return key
}
