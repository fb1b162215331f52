package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ListenFDsStart is the first descriptor the manager passes.
const ListenFDsStart = 3

// ErrNotListener reports a passed descriptor that is not a listening
// socket (a datagram socket, a FIFO, a connected socket...).
var ErrNotListener = errors.New("systemd: passed descriptor is not a listening socket")

// Listener is one socket-activated listener.
type Listener struct {
	// Name is the descriptor's name from $LISTEN_FDNAMES (the socket
	// unit's FileDescriptorName=, by default its unit name), or
	// "LISTEN_FD_<n>" when the manager passed no names.
	Name     string
	Listener net.Listener
}

// ListenFiles returns the descriptors passed by socket activation, in
// order from ListenFDsStart, each named as in Listener.Name. It returns
// none when $LISTEN_PID is unset or names another process. Whatever the
// outcome it unsets $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES, and it
// marks the descriptors close-on-exec, so children inherit neither.
// Calling it a second time therefore returns none.
func ListenFiles() ([]*os.File, error) {
	pidEnv, fdsEnv, namesEnv := os.Getenv(EnvListenPID), os.Getenv(EnvListenFDs), os.Getenv(EnvListenFDNames)
	for _, v := range []string{EnvListenPID, EnvListenFDs, EnvListenFDNames} {
		os.Unsetenv(v)
	}
	if pidEnv == "" {
		return nil, nil
	}
	pid, err := strconv.Atoi(pidEnv)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("%w: %s=%q is not a pid", ErrEnvironment, EnvListenPID, pidEnv)
	}
	if pid != os.Getpid() {
		return nil, nil // meant for the process that exec'd us, not for us
	}
	n, err := strconv.Atoi(fdsEnv)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%w: %s=%q is not a count", ErrEnvironment, EnvListenFDs, fdsEnv)
	}
	var names []string
	if namesEnv != "" {
		names = strings.Split(namesEnv, ":")
		if len(names) != n {
			return nil, fmt.Errorf("%w: %s has %d names for %s=%d", ErrEnvironment, EnvListenFDNames, len(names), EnvListenFDs, n)
		}
	}
	// Check every descriptor before touching any: a lying LISTEN_FDS must
	// not make us adopt (and later close) descriptors we do not own.
	for i := range n {
		fd := ListenFDsStart + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return nil, fmt.Errorf("%w: %s=%d but descriptor %d is not open: %v", ErrEnvironment, EnvListenFDs, n, fd, err)
		}
	}
	files := make([]*os.File, 0, n)
	for i := range n {
		fd := ListenFDsStart + i
		unix.CloseOnExec(fd)
		name := "LISTEN_FD_" + strconv.Itoa(fd)
		if names != nil {
			name = names[i]
		}
		files = append(files, os.NewFile(uintptr(fd), name))
	}
	return files, nil
}

// Listeners returns the listening sockets passed by socket activation
// (see ListenFiles for the environment it reads and clears). Every passed
// descriptor must be a listening socket: anything else is an error
// wrapping ErrNotListener, and then no descriptor stays open.
func Listeners() ([]Listener, error) {
	files, err := ListenFiles()
	if err != nil {
		return nil, err
	}
	out := make([]Listener, 0, len(files))
	for i, f := range files {
		ln, err := fileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			closeAll(files[i+1:])
			for _, l := range out {
				l.Listener.Close()
			}
			return nil, err
		}
		out = append(out, Listener{Name: f.Name(), Listener: ln})
	}
	return out, nil
}

func fileListener(f *os.File) (net.Listener, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotListener, f.Name(), err)
	}
	var accepting int
	var sockErr error
	if err := rc.Control(func(fd uintptr) {
		accepting, sockErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	}); err != nil {
		sockErr = err
	}
	if sockErr != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotListener, f.Name(), sockErr)
	}
	if accepting == 0 {
		return nil, fmt.Errorf("%w: %s does not accept connections", ErrNotListener, f.Name())
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotListener, f.Name(), err)
	}
	return ln, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
