//go:build unix

package protocol

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// socketpair returns the two ends of a socketpair(AF_UNIX, SOCK_STREAM).
func socketpair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		conns[i] = c
	}
	tb.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	return conns[0], conns[1]
}

func TestChannelConcurrentWritersSocketpair(t *testing.T) {
	a, b := socketpair(t)
	testConcurrentWriters(t, a, b)
}
