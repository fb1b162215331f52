package acceptloop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestTemporary(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&os.SyscallError{Syscall: "accept4", Err: syscall.EMFILE}, true},
		{fmt.Errorf("accept unix: %w", syscall.ENFILE), true},
		{syscall.ECONNABORTED, true},
		{os.ErrDeadlineExceeded, true},
		{syscall.EBADF, false},
		{syscall.EINVAL, false},
		{io.EOF, false},
		{errors.New("use of closed network connection"), false},
	} {
		if got := Temporary(c.err); got != c.want {
			t.Errorf("Temporary(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestBackoffDoublesAndStops(t *testing.T) {
	var b Backoff
	done := make(chan struct{})
	t0 := time.Now()
	for range 3 { // 5 + 10 + 20 ms
		if !b.Wait(syscall.EMFILE, done) {
			t.Fatal("Wait returned false before done")
		}
	}
	if d := time.Since(t0); d < 35*time.Millisecond {
		t.Errorf("three waits took %v, want ≥ 35ms", d)
	}
	if b.delay != 20*time.Millisecond || b.Errors() != 3 {
		t.Errorf("delay %v errors %d", b.delay, b.Errors())
	}
	for range 20 {
		b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	}
	if b.delay != time.Second {
		t.Errorf("delay capped at %v, want 1s", b.delay)
	}
	close(done)
	t0 = time.Now()
	if b.Wait(syscall.EMFILE, done) || time.Since(t0) > 100*time.Millisecond {
		t.Error("Wait did not return false at once after done")
	}
	b.Reset()
	if b.delay != 0 {
		t.Error("Reset kept the delay")
	}
}
