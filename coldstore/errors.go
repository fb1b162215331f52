package coldstore

import (
	"errors"

	"github.com/ctxd/ctxd/internal/privdir"
)

// Sentinel errors; every error the package returns that falls in one of
// these classes wraps it, so callers test with errors.Is.
var (
	// ErrNotFound: no block with that key, or no snapshot with that name.
	ErrNotFound = errors.New("coldstore: not found")
	// ErrCorrupt: a file failed its checksum, is truncated or malformed.
	// The file has been moved to quarantine/.
	ErrCorrupt = errors.New("coldstore: corrupt file")
	// ErrVersion: a file was written by another format version.
	ErrVersion = errors.New("coldstore: unsupported format version")
	// ErrUnavailable: the store stands aside after a disk fault (disk full,
	// I/O error); the wrapped cause says which. Reads keep working; writes
	// are retried after Config.RetryAfter or once GC freed space.
	ErrUnavailable = errors.New("coldstore: store unavailable")
	// ErrQueueFull: the background compression queue is full; the block
	// was not accepted (the caller still owns it).
	ErrQueueFull = errors.New("coldstore: compression queue full")
	// ErrMissingBlock: a snapshot names a block that is not stored.
	ErrMissingBlock = errors.New("coldstore: snapshot block missing")
	// ErrInvalidName: a snapshot name outside [A-Za-z0-9._-]{1,128}.
	ErrInvalidName = errors.New("coldstore: invalid snapshot name")
	// ErrClosed: the store is closed (or closing).
	ErrClosed = errors.New("coldstore: store closed")
	// ErrInvalidArgument: bad input other than a name (element size, a
	// negative position, too many tokens, ...). Nothing was changed.
	ErrInvalidArgument = errors.New("coldstore: invalid argument")
	// ErrReferenced: Remove of a block that a snapshot still references.
	ErrReferenced = errors.New("coldstore: block referenced by a snapshot")
	// ErrLocked: another Store (in this or another process) has the folder open.
	ErrLocked = errors.New("coldstore: folder in use by another store")
	// ErrUnsafeFolder: the store folder is a symbolic link, not a folder,
	// or owned by another uid; it is left untouched.
	ErrUnsafeFolder = privdir.ErrUnsafe
)
