// Package layering holds no code: its test checks the module's import
// rules, so a change that makes a lower package reach up, or closes a
// cycle, fails in CI rather than in review.
//
// The rules (lowest layer first):
//   - policy imports nothing of this module but policy itself: decisions
//     stay pure.
//   - engine and engine/... import only policy, engine/... and leaf
//     internal helpers: never the daemon, the protocol or the tiers.
//   - shm and coldstore import only leaf internal helpers.
//   - the daemon's inner packages (sidecar/internal/...) never import the
//     shell (package sidecar), httpapi, client or a command, and among
//     themselves import only packages of a lower rank (innerRank).
//   - protocol imports only policy and its own packages.
//   - sidecar never imports httpapi, client, a command or a tool, and only
//     the commands and httpapi import sidecar.
//   - no package imports a command, and the graph has no cycle.
package layering
