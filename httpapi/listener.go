package httpapi

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/internal/acceptloop"
)

// guardListener is the door's listener: every connection is checked
// (peer.go) and counted against the caps when it is accepted, before
// net/http reads a byte of it. A refused connection gets a one-line HTTP
// answer (403 or 503) and is closed at once. Temporary accept errors
// (EMFILE, ENFILE, ...) are waited out (acceptloop), never returned.
//
// Caps: MaxConns in all, MaxConnsPerPeer per user (uid, or address for
// peers whose uid is unknown). ctxd's own uid keeps its per-user share
// when the total is reached by others, so other users cannot lock the
// owner out.
type guardListener struct {
	net.Listener
	peers   *peerCheck
	log     *slog.Logger
	total   int
	perPeer int
	own     string // ctxd's own uid as a peer identity

	done      chan struct{}
	closeOnce sync.Once
	backoff   acceptloop.Backoff

	mu     sync.Mutex
	open   int
	byPeer map[string]int

	stats connStats
}

// connStats counts what the listener did (tests, benchmarks, logs).
type connStats struct {
	accepted, refusedPeer, refusedFull atomic.Uint64
	lastWarn                           atomic.Int64 // unix ns of the last refusal logged at warn level
}

func newGuardListener(ln net.Listener, peers *peerCheck, log *slog.Logger, total, perPeer int) *guardListener {
	g := &guardListener{Listener: ln, peers: peers, log: log, total: total, perPeer: perPeer,
		own: "uid " + strconv.FormatUint(uint64(peers.uid), 10), done: make(chan struct{}), byPeer: map[string]int{}}
	g.backoff = acceptloop.Backoff{Log: log, What: "http"}
	return g
}

func (g *guardListener) Close() error {
	g.closeOnce.Do(func() { close(g.done) })
	return g.Listener.Close()
}

// Accept returns the next connection that passes the peer check and the
// caps.
func (g *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			select {
			case <-g.done:
				return nil, err
			default:
			}
			if acceptloop.Temporary(err) && g.backoff.Wait(err, g.done) {
				continue
			}
			return nil, err
		}
		g.backoff.Reset()
		peer, err := g.peers.admit(c)
		if err != nil {
			g.stats.refusedPeer.Add(1)
			g.refuse(c, "403 Forbidden", "permission_error", "forbidden", err)
			continue
		}
		if err := g.take(peer); err != nil {
			g.stats.refusedFull.Add(1)
			g.refuse(c, "503 Service Unavailable", "server_error", "too_many_connections", err)
			continue
		}
		g.stats.accepted.Add(1)
		return &guardConn{Conn: c, release: func() { g.give(peer) }}, nil
	}
}

// take counts a connection of peer, or says which cap it would break.
func (g *guardListener) take(peer string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.byPeer[peer]
	if n >= g.perPeer {
		return fmt.Errorf("%w: %s holds %d HTTP connections, the most ctxd serves one user (MaxConnsPerPeer)", ErrTooManyConns, peer, n)
	}
	if g.open >= g.total && peer != g.own {
		return fmt.Errorf("%w: %d HTTP connections are open, the most ctxd serves (MaxConns)", ErrTooManyConns, g.open)
	}
	g.open++
	g.byPeer[peer] = n + 1
	return nil
}

func (g *guardListener) give(peer string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if g.byPeer[peer]--; g.byPeer[peer] <= 0 {
		delete(g.byPeer, peer)
	}
}

// refuse answers a connection with one short HTTP response, without
// reading it, and closes it. The write cannot block: the socket's send
// buffer is empty, and a deadline bounds it anyway.
func (g *guardListener) refuse(c net.Conn, status, typ, code string, err error) {
	body := fmt.Sprintf(`{"error":{"message":%q,"type":%q,"code":%q,"param":null}}`, err.Error(), typ, code)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)
	c.Close()
	now := time.Now().UnixNano()
	if last := g.stats.lastWarn.Load(); now-last > int64(time.Minute) && g.stats.lastWarn.CompareAndSwap(last, now) {
		g.log.Warn("HTTP connection refused (further refusals this minute logged at debug level)", "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	g.log.Debug("HTTP connection refused", "peer", c.RemoteAddr().String(), "err", err)
}

// guardConn is an admitted connection; closing it gives its place back.
type guardConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *guardConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
