package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Who may talk to the door. Without an API key: loopback peers whose TCP
// socket is open and belongs to ctxd's own uid. The uid is learned from
// the kernel's socket table (inet_diag, diag.go) when the connection is
// accepted, before a byte of it is read (listener.go). Whether the kernel
// answers is decided once, at start: where it does not (another OS, a
// sandbox without netlink) the door refuses to serve without an API key.
// A lookup that fails later (the peer reset its connection, the kernel is
// out of memory) refuses that connection: every check fails closed. With
// an API key every request must carry it; any address may connect.

// peerCheck decides which connections the door keeps.
type peerCheck struct {
	keyed bool
	log   *slog.Logger
	uid   uint32

	once     sync.Once
	diag     *diagSocket // nil when the kernel does not answer
	startErr error       // why not, decided once

	// lookup names the owner of a loopback peer's socket (diag.lookup;
	// tests replace it).
	lookup func(remote, local *net.TCPAddr) (peerOwner, error)
}

// peerOwner is what the kernel says about a peer's socket.
type peerOwner struct {
	uid  uint32
	open bool // a process holds the socket (it is not closed, orphaned or in TIME_WAIT)
}

func newPeerCheck(keyed bool, log *slog.Logger) *peerCheck {
	return &peerCheck{keyed: keyed, log: log, uid: uint32(os.Getuid())}
}

// start decides, once, whether loopback peers' owners can be learned; it
// fails without an API key when they cannot.
func (p *peerCheck) start() error {
	p.once.Do(func() {
		d, err := openDiag()
		if err == nil {
			if err = d.probe(p.uid); err != nil {
				d.close()
			}
		}
		if err != nil {
			p.startErr = err
			if p.keyed {
				p.log.Warn("cannot learn the uid of loopback HTTP peers (inet_diag): per-user connection caps count by address", "err", err)
			}
			return
		}
		p.diag = d
		if p.lookup == nil {
			p.lookup = d.lookup
		}
	})
	if p.lookup == nil && !p.keyed {
		return fmt.Errorf("%w: cannot learn which user owns a loopback HTTP peer (%v); without an API key ctxd serves HTTP only where it can check that the peer is its own user: set --api-key (or CTXD_API_KEY), or --http off", ErrForbidden, p.startErr)
	}
	return nil
}

func (p *peerCheck) close() {
	if p.diag != nil {
		p.diag.close()
	}
}

// admit checks a connection just accepted, before any of it is read. It
// returns the peer's identity for the per-user cap ("uid N" or the
// address) and, when the connection must be refused, why.
func (p *peerCheck) admit(c net.Conn) (peer string, err error) {
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		if p.keyed {
			return c.RemoteAddr().Network() + " " + c.RemoteAddr().String(), nil
		}
		return "", fmt.Errorf("%w: a %s peer cannot be checked for its user; ctxd serves it only with an API key", ErrForbidden, c.RemoteAddr().Network())
	}
	if !remote.IP.IsLoopback() {
		if p.keyed {
			return remote.IP.String(), nil
		}
		return "", fmt.Errorf("%w: %s is not a loopback peer; ctxd serves other hosts only with an API key", ErrForbidden, remote)
	}
	if p.lookup == nil {
		if p.keyed {
			return remote.IP.String(), nil
		}
		return "", fmt.Errorf("%w: the owner of loopback peers cannot be learned here", ErrForbidden)
	}
	o, err := p.lookup(remote, local)
	switch {
	case err != nil && p.keyed:
		return remote.IP.String(), nil // the key decides; count by address
	case err != nil:
		return "", fmt.Errorf("%w: cannot learn which user owns the peer's socket (%v); refused", ErrForbidden, err)
	case !o.open && !p.keyed:
		return "", fmt.Errorf("%w: the peer's socket is already closed; refused", ErrForbidden)
	case o.uid != p.uid && !p.keyed:
		return "", fmt.Errorf("%w: the peer's socket belongs to uid %d, not ctxd's uid %d (set an API key to serve other users)", ErrForbidden, o.uid, p.uid)
	}
	return fmt.Sprintf("uid %d", o.uid), nil
}

// admittedKey marks a request's connection as one the door's listener
// admitted (listener.go's ConnContext).
type admittedKey struct{}

// allow admits a request: its connection passed the peer check, then the
// API key.
func (p *peerCheck) allow(r *http.Request, key string) error {
	if key == "" {
		if ok, _ := r.Context().Value(admittedKey{}).(bool); !ok {
			err := fmt.Errorf("%w: this connection did not pass ctxd's peer check (the handler is served outside its listener without an API key)", ErrForbidden)
			return &apiError{status: http.StatusForbidden, typ: "permission_error", code: "forbidden", message: err.Error(), cause: err}
		}
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

// markAdmitted is the http.Server's ConnContext: connections reach it
// only through the guard listener's Accept.
func markAdmitted(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*guardConn); !ok {
		return ctx
	}
	return context.WithValue(ctx, admittedKey{}, true)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var errNoSocket = errors.New("inet_diag: no such socket")
