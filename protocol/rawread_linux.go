package protocol

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawReader reads a Unix socket with non-blocking read(2) calls made
// through syscall.RawSyscall, which, unlike the net package's reads, does
// not enter the Go scheduler's system-call state. On a connection that
// wakes its reader for every few frames (a streamed decode) that state
// change is most of the reader's CPU: entering it wakes the runtime's
// monitor thread (sysmon) from its idle sleep, which then polls every
// 20 µs until the process is idle again — two context switches and a few
// timer sleeps per wakeup (docs/BENCHMARKS.md, issue 17). A read of a
// non-blocking socket never blocks, so the scheduler need not know; when
// there is nothing to read the reader waits in Go's network poller as
// before (RawConn.Read), with the connection's deadlines and Close.
type rawReader struct {
	rc   syscall.RawConn
	p    []byte // the current Read's buffer
	n    int
	err  error
	read func(fd uintptr) bool // r.readFD, bound once
}

// newRawReader returns a raw reader for conn, or nil when conn is not a
// *net.UnixConn (other connections, e.g. net.Pipe or a file, are read
// through their own Read method).
func newRawReader(conn net.Conn) io.Reader {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawReader{rc: rc}
	r.read = r.readFD
	return r
}

// Read reads up to len(p) bytes; io.EOF when the peer closed the
// connection.
func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.read)
	r.p = nil
	if err != nil {
		return 0, err
	}
	return r.n, r.err
}

// readFD makes one read; false asks RawConn.Read to wait until the socket
// is readable and call again.
func (r *rawReader) readFD(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch errno {
		case 0:
			r.n = int(n)
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.err = os.NewSyscallError("read", errno)
		return true
	}
}
