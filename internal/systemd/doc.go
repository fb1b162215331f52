// Package systemd speaks the service manager's side protocols that a
// long-running daemon needs, without linking libsystemd:
//
//   - readiness and status notification over $NOTIFY_SOCKET (Notifier:
//     READY=1, STATUS=, STOPPING=1, WATCHDOG=1);
//   - the watchdog keep-alive loop driven by $WATCHDOG_USEC and
//     $WATCHDOG_PID (Watchdog);
//   - socket activation: the listening sockets passed from file descriptor
//     3 on, described by $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES
//     (Listeners, ListenFiles);
//   - journald-friendly logging: JournalHandler writes slog records without
//     timestamps and with a "<N>" syslog priority prefix, and IsJournal
//     tells whether a file is the journal stream named by $JOURNAL_STREAM.
//
// Invariants:
//   - Without the manager's environment every function is a harmless
//     no-op: a zero Notifier sends nothing, no LISTEN_* means no
//     listeners, no WATCHDOG_USEC means no watchdog. Malformed variables
//     are errors wrapping ErrEnvironment, never guesses.
//   - Activation variables are for one process: ListenFiles checks that
//     LISTEN_PID is this process and always unsets LISTEN_PID, LISTEN_FDS
//     and LISTEN_FDNAMES, so children never inherit them; the returned
//     descriptors are close-on-exec.
//   - The package holds no global state; the notification socket address
//     is read once into a Notifier value.
package systemd
