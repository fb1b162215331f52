package protocol

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// The raw reader is what a client's Channel on a Unix socket reads with: frames
// larger than the read-ahead arrive whole, EOF, deadlines and Close end a
// read as the net package's reads do.
func TestRawReaderOnUnixSocket(t *testing.T) {
	a, b := unixPair(t)
	if newRawReader(b) == nil {
		t.Fatal("a *net.UnixConn gets no raw reader")
	}
	if newRawReader(&readConn{Reader: bytes.NewReader(nil)}) != nil {
		t.Fatal("a connection that is not a Unix socket got a raw reader")
	}
	r := NewClientChannel(b, 0)

	// A frame of 3× the read-ahead, then many small ones in one write.
	big := bytes.Repeat([]byte{0x5a}, 3*readBufferSize+7)
	small := frameBytes(5, 2, TypeData, 0, []byte("hello"))
	go func() {
		a.Write(frameBytes(uint32(len(big)), 1, TypeData, 0, big))
		a.Write(bytes.Repeat(small, 1000))
	}()
	h, p, err := r.ReadFrame()
	if err != nil || h.StreamID != 1 || !bytes.Equal(p, big) {
		t.Fatalf("big frame: %v %v, %d bytes", h, err, len(p))
	}
	for i := 0; i < 1000; i++ {
		h, p, err := r.ReadFrame()
		if err != nil || h.StreamID != 2 || string(p) != "hello" {
			t.Fatalf("frame %d: %v %q %v", i, h, p, err)
		}
	}

	// A deadline ends a waiting read with os.ErrDeadlineExceeded.
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, _, err := r.ReadFrame(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
}

func TestRawReaderEOFAndClose(t *testing.T) {
	a, b := unixPair(t)
	r := NewClientChannel(b, 0)
	a.Write(frameBytes(2, 1, TypeData, 0, []byte("ok")))
	a.Close()
	if _, p, err := r.ReadFrame(); err != nil || string(p) != "ok" {
		t.Fatalf("frame before EOF: %q %v", p, err)
	}
	if _, _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("at EOF: %v, want io.EOF", err)
	}

	// Closing the Channel ends a read that waits.
	_, d := unixPair(t) // the other end stays open: the read waits
	rd := NewClientChannel(d, 0)
	done := make(chan error, 1)
	go func() { _, _, err := rd.ReadFrame(); done <- err }()
	time.Sleep(10 * time.Millisecond)
	rd.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}

	// A frame cut short by EOF is malformed, as with any reader.
	e, f := unixPair(t)
	rf := NewClientChannel(f, 0)
	e.Write(frameBytes(10, 1, TypeData, 0, []byte("short"))[:HeaderSize+5])
	e.Close()
	if _, _, err := rf.ReadFrame(); !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
}
