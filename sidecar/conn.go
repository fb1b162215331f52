package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// conn is one client connection: a reader loop that starts a goroutine per
// call and cancels calls on CANCEL frames or disconnect.
type conn struct {
	id uint64
	// lastStream is the highest REQUEST stream id seen; ids must increase.
	lastStream uint32
	ch         *protocol.Channel
	mu         sync.Mutex
	inf        map[uint32]context.CancelFunc // calls in flight by stream id
	wg         sync.WaitGroup
}

func (srv *Server) serveConn(ctx context.Context, nc net.Conn) {
	srv.mu.Lock()
	srv.nextConn++
	c := &conn{id: srv.nextConn, ch: protocol.NewChannel(nc, srv.cfg.MaxFrame), inf: map[uint32]context.CancelFunc{}}
	full := len(srv.conns) >= srv.cfg.MaxConns
	if !full {
		srv.conns[c.id] = c
	}
	srv.mu.Unlock()
	log := srv.log.With("conn", c.id)
	if full {
		log.Warn("connection refused: too many connections", "max_conns", srv.cfg.MaxConns)
		err := fmt.Errorf("%w: %d connections are open, the most this ctxd serves (--max-conns)", protocol.ErrResourceExhausted, srv.cfg.MaxConns)
		c.ch.WriteMessage(0, protocol.TypeResponse, 0, &pb.Response{Error: protocol.ToWire(err)})
		c.ch.Close()
		return
	}

	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.wg.Wait()
		c.ch.Close()
		srv.mu.Lock()
		delete(srv.conns, c.id)
		var owned []*session
		for _, s := range srv.sessions {
			if s.connID == c.id {
				owned = append(owned, s)
			}
		}
		srv.mu.Unlock()
		// Clean-up outlives the connection's context, not the server's.
		for _, s := range owned {
			if err := srv.dropSession(context.WithoutCancel(ctx), s); err != nil {
				log.Warn("client gone; closing its session", "session", s.id, "err", err)
			}
		}
		if len(owned) > 0 {
			log.Debug("client gone; sessions closed", "sessions", len(owned))
		}
	}()

	if err := srv.checkPeer(nc); err != nil {
		log.Warn("peer refused", "err", err)
		c.ch.WriteMessage(0, protocol.TypeResponse, 0, &pb.Response{Error: protocol.ToWire(err)})
		return
	}
	if err := srv.handshake(c); err != nil {
		if !errors.Is(err, io.EOF) {
			log.Debug("handshake failed", "err", err)
		}
		return
	}
	for {
		h, payload, err := c.ch.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			srv.protocolError(c, err)
			return
		}
		switch h.Type {
		case protocol.TypeRequest:
			req := new(pb.Request)
			if err := protocol.Unmarshal(h, payload, req); err != nil {
				srv.protocolError(c, err)
				return
			}
			if h.StreamID <= c.lastStream {
				srv.protocolError(c, fmt.Errorf("%w: stream id %d after %d: ids must increase", protocol.ErrProtocol, h.StreamID, c.lastStream))
				return
			}
			c.lastStream = h.StreamID
			if req.GetHello() != nil {
				srv.protocolError(c, fmt.Errorf("%w: a second hello on stream %d: the handshake is done", protocol.ErrProtocol, h.StreamID))
				return
			}
			if ping := req.GetPing(); ping != nil {
				// Answered inline: a ping touches no state, and skipping the
				// per-call goroutine keeps it the latency floor of the protocol.
				c.ch.WriteMessage(h.StreamID, protocol.TypeResponse, 0, &pb.Response{Body: &pb.Response_Ping{Ping: &pb.PingReply{Payload: ping.GetPayload()}}})
				continue
			}
			if !srv.startCall(ctx, c, h.StreamID, req) {
				srv.protocolError(c, fmt.Errorf("%w: stream %d is already in flight", protocol.ErrProtocol, h.StreamID))
				return
			}
		case protocol.TypeCancel:
			c.mu.Lock()
			if f, ok := c.inf[h.StreamID]; ok {
				f()
			}
			c.mu.Unlock()
		default:
			srv.protocolError(c, fmt.Errorf("%w: a client may not send %s frames", protocol.ErrProtocol, protocol.TypeName(h.Type)))
			return
		}
	}
}

// protocolError answers on stream 0 and lets the caller close the
// connection; other connections are untouched.
func (srv *Server) protocolError(c *conn, err error) {
	srv.log.Warn("protocol error; closing connection", "conn", c.id, "err", err)
	w := protocol.ToWire(err)
	w.Code = pb.ErrorCode_ERROR_CODE_PROTOCOL
	c.ch.WriteMessage(0, protocol.TypeResponse, 0, &pb.Response{Error: w})
}

// handshake reads the hello within HandshakeTimeout.
func (srv *Server) handshake(c *conn) error {
	nc := c.ch.Conn()
	nc.SetReadDeadline(time.Now().Add(srv.cfg.HandshakeTimeout))
	h, payload, err := c.ch.ReadFrame()
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, io.EOF) {
			return err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: no hello within %v", protocol.ErrProtocol, srv.cfg.HandshakeTimeout)
		}
		srv.protocolError(c, err)
		return err
	}
	req := new(pb.Request)
	if h.Type != protocol.TypeRequest || protocol.Unmarshal(h, payload, req) != nil || req.GetHello() == nil {
		err := fmt.Errorf("%w: the first frame must be a hello request", protocol.ErrProtocol)
		srv.protocolError(c, err)
		return err
	}
	c.lastStream = h.StreamID
	hello := req.GetHello()
	v, err := protocol.NegotiateVersion(hello.GetMinVersion(), hello.GetMaxVersion())
	if err != nil {
		c.ch.WriteMessage(h.StreamID, protocol.TypeResponse, 0, &pb.Response{Error: protocol.ToWire(err)})
		return err
	}
	return c.ch.WriteMessage(h.StreamID, protocol.TypeResponse, 0, &pb.Response{Body: &pb.Response_Hello{Hello: &pb.HelloReply{
		Version: v, ServerVersion: srv.cfg.Version, MaxFrameBytes: srv.cfg.MaxFrame,
	}}})
}

// startCall runs req in its own goroutine; false when the stream id is
// already in flight.
func (srv *Server) startCall(ctx context.Context, c *conn, stream uint32, req *pb.Request) bool {
	callCtx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	if _, dup := c.inf[stream]; dup {
		c.mu.Unlock()
		cancel()
		return false
	}
	c.inf[stream] = cancel
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.inf, stream)
			c.mu.Unlock()
			cancel()
		}()
		sw := newStreamWriter(c.ch, stream, srv.cfg.StreamCoalesce)
		resp := srv.Handle(withStreamFlush(callCtx, sw), c.id, req, sw.emit)
		// Held DATA frames leave in front of it, in the same write.
		c.ch.WriteMessage(stream, protocol.TypeResponse, 0, resp)
	}()
	return true
}

// checkPeer allows peers with the server's uid or a configured uid.
func (srv *Server) checkPeer(nc net.Conn) error {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return nil // in-memory pipes in tests carry no credentials
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("%w: reading peer credentials: %w", protocol.ErrPermissionDenied, cerr)
	}
	uid := int(cred.Uid)
	if uid == os.Getuid() || slices.Contains(srv.cfg.AllowUIDs, uid) {
		return nil
	}
	return fmt.Errorf("%w: peer uid %d (pid %d) is not allowed", protocol.ErrPermissionDenied, uid, cred.Pid)
}
