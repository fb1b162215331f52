package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Client is a connection to ctxd.
type Client struct {
	ch            *protocol.Channel
	version       uint32
	serverVersion string

	mu        sync.Mutex
	calls     map[uint32]*call
	next      uint32
	err       error // why the connection ended; set once, with closed
	closed    chan struct{}
	closeOnce sync.Once

	// reader is the right to read the connection (a one-slot semaphore).
	// There is no reader goroutine: a call waiting for its reply takes the
	// role, reads and dispatches frames until one of its own arrives, and
	// hands the role back. The caller thus reads its own reply without a
	// goroutine hand-off (leader/follower).
	reader chan struct{}
	// tokens decodes streamed tokens; used by the reader role's holder.
	tokens tokenDecoder
}

// call is one request in flight; the reader feeds it DATA events and the
// final RESPONSE in order.
type call struct {
	frames chan frame
}

// frame is what the reader hands a call: an event, or the RESPONSE.
type frame struct {
	event
	resp *pb.Response
}

// event is one DATA frame's event: a token decoded on the fast path
// (tokenwire.go; msg is nil), or any other StreamEvent in msg.
type event struct {
	token Token
	msg   *pb.StreamEvent
}

// Options tune Dial.
type Options struct {
	// Name identifies the client in the daemon's logs.
	Name string
	// MaxFrame bounds frames read from the server; 0 = protocol default.
	MaxFrame uint32
}

// Dial connects to the ctxd socket at path and performs the version
// handshake.
func Dial(ctx context.Context, path string, opts ...Options) (*Client, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxFrame == 0 {
		o.MaxFrame = protocol.DefaultMaxFrame
	}
	if err := protocol.CheckSocketPath(path); err != nil {
		return nil, fmt.Errorf("ctxd client: %w", err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("ctxd client: dial %s: %w", path, err)
	}
	c := &Client{ch: protocol.NewClientChannel(nc, o.MaxFrame), calls: map[uint32]*call{}, closed: make(chan struct{}), reader: make(chan struct{}, 1)}
	c.reader <- struct{}{}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	err = c.handshake(o.Name)
	stop()
	nc.SetDeadline(time.Time{})
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return c, nil
}

func (c *Client) handshake(name string) error {
	hello := &pb.Request{Body: &pb.Request_Hello{Hello: &pb.HelloRequest{
		MinVersion: protocol.MinProtocolVersion, MaxVersion: protocol.ProtocolVersion, ClientName: name,
	}}}
	if err := c.ch.WriteMessage(1, protocol.TypeRequest, 0, hello); err != nil {
		// A server that refuses us answers on stream 0 and closes, maybe
		// before our hello arrives; its reason is still there to read.
		if h, payload, rerr := c.ch.ReadFrame(); rerr == nil && h.Type == protocol.TypeResponse {
			resp := new(pb.Response)
			if protocol.Unmarshal(h, payload, resp) == nil && resp.Error != nil {
				return remoteError(resp.Error)
			}
		}
		return fmt.Errorf("ctxd client: handshake: %w", err)
	}
	c.next = 1
	h, payload, err := c.ch.ReadFrame()
	if err != nil {
		return fmt.Errorf("ctxd client: handshake: %w", err)
	}
	resp := new(pb.Response)
	if h.Type != protocol.TypeResponse || protocol.Unmarshal(h, payload, resp) != nil {
		return fmt.Errorf("%w: bad handshake reply %v", ErrProtocol, h)
	}
	if resp.Error != nil {
		return remoteError(resp.Error)
	}
	hr := resp.GetHello()
	if hr == nil {
		return fmt.Errorf("%w: handshake reply without hello", ErrProtocol)
	}
	c.version, c.serverVersion = hr.GetVersion(), hr.GetServerVersion()
	return nil
}

// ServerVersion is the daemon's version string from the handshake.
func (c *Client) ServerVersion() string { return c.serverVersion }

// readUntil reads and dispatches frames until cl has one waiting and no
// further whole frame is already read ahead, or cl's queue is full, or the
// connection ends. The caller holds the reader role. Taking every frame a
// write brought (a streamed decode's coalesced tokens) in one turn costs
// the call one hand-off of the role per write instead of one per frame.
func (c *Client) readUntil(cl *call) {
	for len(cl.frames) == 0 || (len(cl.frames) < cap(cl.frames) && c.ch.FrameBuffered()) {
		if err := c.readOne(); err != nil {
			c.fail(err)
			return
		}
	}
}

// readOne reads one frame and hands it to its call.
func (c *Client) readOne() error {
	h, payload, err := c.ch.ReadFrame()
	if err != nil {
		return err
	}
	var f frame
	switch h.Type {
	case protocol.TypeData:
		if t, ok := c.tokens.decode(payload); ok {
			f.token = t
			break
		}
		ev := new(pb.StreamEvent)
		if err := protocol.Unmarshal(h, payload, ev); err != nil {
			return err
		}
		f.msg = ev
	case protocol.TypeResponse:
		resp := new(pb.Response)
		if err := protocol.Unmarshal(h, payload, resp); err != nil {
			return err
		}
		if h.StreamID == 0 { // connection-level error: the server closes
			return remoteError(resp.Error)
		}
		f.resp = resp
	default:
		return fmt.Errorf("%w: server sent a %s frame", ErrProtocol, protocol.TypeName(h.Type))
	}
	c.mu.Lock()
	cl := c.calls[h.StreamID]
	if f.resp != nil {
		delete(c.calls, h.StreamID)
	}
	c.mu.Unlock()
	if cl != nil {
		cl.frames <- f
	}
	return nil
}

// fail ends the connection: every pending and later call gets ErrClosed.
func (c *Client) fail(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.err = fmt.Errorf("%w: %w", ErrClosed, err)
		c.mu.Unlock()
		close(c.closed)
		c.ch.Close()
	})
}

// Close closes the connection; the daemon closes this client's sessions.
func (c *Client) Close() error {
	err := c.ch.Close()
	c.fail(errors.New("closed by the client"))
	return err
}

// cancelGrace is how long a cancelled call waits for the server's answer
// before giving up on it.
const cancelGrace = 5 * time.Second

// do sends req and waits for its response, handing DATA events to onEvent.
// When ctx ends it sends CANCEL and waits (briefly) for the server to
// finish the call, so the session is consistent when do returns.
func (c *Client) do(ctx context.Context, req *pb.Request, onEvent func(*event) error) (*pb.Response, error) {
	// A call's queue holds what the reader role dispatched but the call has
	// not consumed: one RESPONSE, or a few DATA frames of a stream.
	depth := 1
	if onEvent != nil {
		depth = 64
	}
	cl := &call{frames: make(chan frame, depth)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	id := c.next
	c.calls[id] = cl
	c.mu.Unlock()
	if err := c.ch.WriteMessage(id, protocol.TypeRequest, 0, req); err != nil {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		var fe *protocol.FrameError
		if errors.As(err, &fe) && fe.Local {
			// Refused before sending (too large, invalid UTF-8): the
			// connection is intact.
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	// Cancelling sends CANCEL from whichever goroutine notices; the call
	// keeps reading until the server's RESPONSE ends it. A server that does
	// not answer within cancelGrace has the connection closed under it.
	var cancelSent atomic.Bool
	sendCancel := func() {
		if !cancelSent.CompareAndSwap(false, true) {
			return
		}
		c.ch.WriteFrame(protocol.Header{StreamID: id, Type: protocol.TypeCancel}, nil)
		time.AfterFunc(cancelGrace, func() {
			c.mu.Lock()
			_, pending := c.calls[id]
			c.mu.Unlock()
			if pending {
				c.fail(fmt.Errorf("no answer %v after cancelling stream %d", cancelGrace, id))
			}
		})
	}
	stop := context.AfterFunc(ctx, sendCancel)
	defer stop()
	var cbErr error
	var f frame // one for the whole call: onEvent takes its address
	for {
		select {
		case f = <-cl.frames: // what the reader queued, without a wait
		default:
			select {
			case f = <-cl.frames:
			case <-c.reader:
				c.readUntil(cl)
				c.reader <- struct{}{}
				continue
			case <-c.closed:
				// Frames delivered before the end still count.
				select {
				case f = <-cl.frames:
				default:
					c.mu.Lock()
					delete(c.calls, id)
					err := c.err
					c.mu.Unlock()
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					return nil, err
				}
			}
		}
		if f.resp != nil {
			switch {
			case cbErr != nil:
				return f.resp, cbErr
			case ctx.Err() != nil && f.resp.Error != nil:
				return f.resp, ctx.Err()
			case f.resp.Error != nil:
				return f.resp, remoteError(f.resp.Error)
			}
			return f.resp, nil
		}
		// After cancellation no more events reach the caller; those
		// already in flight are dropped.
		if onEvent != nil && cbErr == nil && ctx.Err() == nil {
			if err := onEvent(&f.event); err != nil {
				cbErr = err
				sendCancel()
			}
		}
	}
}

// Ping measures a round trip.
func (c *Client) Ping(ctx context.Context, payload []byte) error {
	_, err := c.do(ctx, &pb.Request{Body: &pb.Request_Ping{Ping: &pb.PingRequest{Payload: payload}}}, nil)
	return err
}

// Status reports the daemon, its model and capacity.
func (c *Client) Status(ctx context.Context) (Status, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_Status{Status: &pb.StatusRequest{}}}, nil)
	if err != nil {
		return Status{}, err
	}
	return status(r.GetStatus()), nil
}

// LoadModel loads (or switches to) the model at path, a GGUF file on the
// daemon's machine. contextTokens 0 derives the context from capacity.
// It fails with ErrModelBusy while sessions are open.
func (c *Client) LoadModel(ctx context.Context, path string, contextTokens int) (ModelLoad, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_LoadModel{LoadModel: &pb.LoadModelRequest{Path: path, ContextTokens: int64(contextTokens)}}}, nil)
	if err != nil {
		return ModelLoad{}, err
	}
	l := r.GetLoadModel()
	return ModelLoad{Model: modelInfo(l.GetModel()), Capacity: capacity(l.GetCapacity())}, nil
}

// UnloadModel frees the model; ErrModelBusy while sessions are open.
func (c *Client) UnloadModel(ctx context.Context) error {
	_, err := c.do(ctx, &pb.Request{Body: &pb.Request_UnloadModel{UnloadModel: &pb.UnloadModelRequest{}}}, nil)
	return err
}

// Explain reports what session id holds (0: the most recently used
// session of any client).
func (c *Client) Explain(ctx context.Context, id uint64) (Explanation, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_Explain{Explain: &pb.ExplainRequest{SessionId: id}}}, nil)
	if err != nil {
		return Explanation{}, err
	}
	return explanation(r.GetExplain()), nil
}
