package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Who may talk to the door. Without an API key: loopback peers whose TCP
// socket belongs to ctxd's own uid. The uid is learned from the kernel's
// socket table (inet_diag over NETLINK_SOCK_DIAG: the peer's socket is the
// one whose local end is the connection's remote address), once per
// connection. Where the kernel does not answer (another OS, a sandbox
// without netlink) only the loopback rule holds, and a warning says so
// once. With an API key every request must carry it; any address may
// connect.

type peerKey struct{}

// peerVerdict is what connContext learned about a connection.
type peerVerdict struct {
	err error // nil: allowed (before the API key check)
}

type peerCheck struct {
	keyed bool
	log   *slog.Logger
	uid   uint32
	warn  sync.Once
}

func newPeerCheck(keyed bool, log *slog.Logger) *peerCheck {
	return &peerCheck{keyed: keyed, log: log, uid: uint32(os.Getuid())}
}

// connContext checks a new connection's peer once.
func (p *peerCheck) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, &peerVerdict{err: p.check(c)})
}

func (p *peerCheck) check(c net.Conn) error {
	if p.keyed {
		return nil // the key decides, per request
	}
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return nil // not TCP (an in-memory listener in tests): nothing to learn
	}
	if !remote.IP.IsLoopback() {
		return fmt.Errorf("%w: %s is not a loopback peer; ctxd serves other hosts only with an API key", ErrForbidden, remote)
	}
	uid, err := socketUID(remote, local)
	if err != nil {
		p.warn.Do(func() {
			p.log.Warn("cannot learn the uid of loopback HTTP peers (inet_diag); any local user can use the HTTP API: set an API key to restrict it", "err", err)
		})
		return nil
	}
	if uid != p.uid {
		return fmt.Errorf("%w: the peer's socket belongs to uid %d, not ctxd's uid %d (set an API key to serve other users)", ErrForbidden, uid, p.uid)
	}
	return nil
}

// allow admits a request: the connection's verdict, then the API key.
func (p *peerCheck) allow(r *http.Request, key string) error {
	if v, ok := r.Context().Value(peerKey{}).(*peerVerdict); ok && v.err != nil {
		return &apiError{status: http.StatusForbidden, typ: "permission_error", code: "forbidden", message: v.err.Error(), cause: v.err}
	}
	if key == "" {
		return nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		got, ok = r.Header.Get("X-Api-Key"), r.Header.Get("X-Api-Key") != "" // Anthropic's clients
	}
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(key)) != 1 {
		return &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
			message: "missing or wrong API key: send Authorization: Bearer KEY (or x-api-key: KEY)", cause: ErrUnauthorized}
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// socketUID asks the kernel for the owner of the TCP socket whose local
// end is src and remote end dst (inet_diag exact lookup).
func socketUID(src, dst *net.TCPAddr) (uint32, error) {
	family := uint8(unix.AF_INET)
	if src.IP.To4() == nil {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("netlink bind: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)

	const hdrLen, reqLen = unix.SizeofNlMsghdr, 56
	msg := make([]byte, hdrLen+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], 1) // seq
	req := msg[hdrLen:]
	req[0], req[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(req[4:], 0xffffffff) // every state
	id := req[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(src.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(dst.Port))
	putAddr(id[4:20], src.IP, family)
	putAddr(id[20:36], dst.IP, family)
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("netlink receive: %w", err)
	}
	buf = buf[:n]
	for len(buf) >= hdrLen {
		l := int(ne.Uint32(buf[0:]))
		typ := ne.Uint16(buf[4:])
		if l < hdrLen || l > len(buf) {
			return 0, errors.New("netlink: truncated reply")
		}
		body := buf[hdrLen:l]
		switch typ {
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if code := int32(ne.Uint32(body)); code != 0 {
					return 0, fmt.Errorf("inet_diag: %w", unix.Errno(-code))
				}
			}
			return 0, errors.New("inet_diag: no socket")
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(body) < 72 {
				return 0, errors.New("inet_diag: short message")
			}
			return ne.Uint32(body[64:]), nil // inet_diag_msg.idiag_uid
		}
		next := (l + 3) &^ 3
		if next >= len(buf) {
			break
		}
		buf = buf[next:]
	}
	return 0, errors.New("inet_diag: no answer")
}

func putAddr(b []byte, ip net.IP, family uint8) {
	if family == unix.AF_INET {
		copy(b, ip.To4())
		return
	}
	copy(b, ip.To16())
}
