//go:build !linux

package protocol

import (
	"io"
	"net"
)

// newRawReader is Linux-only (rawread_linux.go); elsewhere a Channel
// reads through the connection's Read method.
func newRawReader(net.Conn) io.Reader { return nil }
