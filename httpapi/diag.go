package httpapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// diagSocket asks the kernel who owns a TCP socket: inet_diag over one
// NETLINK_SOCK_DIAG socket opened at start and kept, so that a lookup
// needs no new descriptor (a process out of descriptors still checks its
// peers). Lookups are serialized; each waits at most a second.
type diagSocket struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

func openDiag() (*diagSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink timeout: %w", err)
	}
	return &diagSocket{fd: fd, buf: make([]byte, 8192)}, nil
}

func (d *diagSocket) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// probe checks that the kernel answers: a loopback connection of our own
// must come back as ours.
func (d *diagSocket) probe(uid uint32) error {
	var ln net.Listener
	var err error
	for _, a := range []string{"127.0.0.1:0", "[::1]:0"} {
		if ln, err = net.Listen("tcp", a); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("probe listener: %w", err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("probe dial: %w", err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("probe accept: %w", err)
	}
	defer s.Close()
	o, err := d.lookup(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr))
	if err != nil {
		return err
	}
	if o.uid != uid || !o.open {
		return fmt.Errorf("inet_diag named uid %d (open %v) for a socket of our own uid %d", o.uid, o.open, uid)
	}
	return nil
}

// lookup finds the TCP socket whose local end is src and remote end dst
// (inet_diag exact lookup) and returns its owner.
func (d *diagSocket) lookup(src, dst *net.TCPAddr) (peerOwner, error) {
	family := uint8(unix.AF_INET)
	if src.IP.To4() == nil {
		family = unix.AF_INET6
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return peerOwner{}, errors.New("inet_diag: closed")
	}
	d.seq++
	seq := d.seq

	const hdrLen, reqLen = unix.SizeofNlMsghdr, 56
	var msg [hdrLen + reqLen]byte
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], seq)
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
	if err := unix.Sendto(d.fd, msg[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return peerOwner{}, fmt.Errorf("netlink send: %w", err)
	}
	for range 16 { // replies to earlier lookups that timed out are skipped
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err != nil {
			return peerOwner{}, fmt.Errorf("netlink receive: %w", err)
		}
		o, mine, err := parseDiag(d.buf[:n], seq)
		if mine {
			return o, err
		}
	}
	return peerOwner{}, errors.New("inet_diag: no answer to this lookup")
}

// parseDiag reads the reply to lookup seq; mine is false for a reply to
// another lookup.
func parseDiag(buf []byte, seq uint32) (o peerOwner, mine bool, err error) {
	const hdrLen = unix.SizeofNlMsghdr
	ne := binary.NativeEndian
	for len(buf) >= hdrLen {
		l := int(ne.Uint32(buf[0:]))
		typ := ne.Uint16(buf[4:])
		if l < hdrLen || l > len(buf) {
			return o, true, errors.New("netlink: truncated reply")
		}
		if ne.Uint32(buf[8:]) != seq {
			return o, false, nil
		}
		body := buf[hdrLen:l]
		switch typ {
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if code := int32(ne.Uint32(body)); code != 0 {
					if unix.Errno(-code) == unix.ENOENT {
						return o, true, errNoSocket
					}
					return o, true, fmt.Errorf("inet_diag: %w", unix.Errno(-code))
				}
			}
			return o, true, errNoSocket
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(body) < 72 {
				return o, true, errors.New("inet_diag: short message")
			}
			// inet_diag_msg: idiag_uid at 64, idiag_inode at 68; a socket
			// no process holds (closed, orphaned, TIME_WAIT) has inode 0
			// and, in TIME_WAIT, uid 0.
			return peerOwner{uid: ne.Uint32(body[64:]), open: ne.Uint32(body[68:]) != 0}, true, nil
		}
		next := (l + 3) &^ 3
		if next >= len(buf) {
			break
		}
		buf = buf[next:]
	}
	return o, true, errors.New("inet_diag: no answer")
}

func putAddr(b []byte, ip net.IP, family uint8) {
	if family == unix.AF_INET {
		copy(b, ip.To4())
		return
	}
	copy(b, ip.To16())
}
