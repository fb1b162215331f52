// Package cli holds what the ctxd command-line tools share: the
// environment a command runs in (Env: socket, output streams, progress
// switch), flag parsing with usage errors (Parse, UsageError, ExitCode),
// JSON output, dialing the daemon, and progress bars on stderr.
//
// Invariants: nothing here links the daemon, the engine or cgo, so the
// operator's ctxctl stays a small pure-Go binary; a usage error exits 2,
// any other error 1.
//
// Files: main.go (Main, Command: global flags and dispatch), env.go (Env,
// Dial, PrintJSON, Query), usage.go (Parse, Usage, UsageError, ExitCode), progress.go (Progress, Tick, CallProgress).
package cli
