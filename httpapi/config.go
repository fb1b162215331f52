package httpapi

import (
	"log/slog"
	"time"
)

// Config configures the HTTP front door. Zero values take the defaults of
// fill, defined here only.
type Config struct {
	// Addr is the host:port to listen on (DefaultAddr).
	Addr string
	// APIKey, when set, is required as "Authorization: Bearer KEY" and
	// allows non-loopback peers.
	APIKey string
	// ModelName is the model id the endpoints report and accept; "" is the
	// GGUF file's stem.
	ModelName string
	// MaxBodyBytes bounds a request body (default 32 MiB: agents send
	// prompts of a few hundred KiB; long sessions reach a few MiB).
	MaxBodyBytes int64
	// MaxSessions caps the live sessions the door keeps (default 16); the
	// least recently used idle one is closed first, and while every one is
	// busy a new conversation waits for one to be released.
	MaxSessions int
	// KeepAlive is the longest a streaming response stays silent while a
	// prompt is prefilled (default 5 s; clients give up after 10 s or more
	// of no parsed chunk in the worst case we know of).
	KeepAlive time.Duration
	// MaxConns caps the HTTP connections open at once (default 128) and
	// MaxConnsPerPeer those of one user (default 32: agents keep a few);
	// more are answered 503 and closed at once. ctxd's own uid keeps its
	// share when other users fill the total.
	MaxConns, MaxConnsPerPeer int
	// HeaderTimeout bounds reading a request's headers (default 10 s),
	// BodyTimeout its body (default 60 s), IdleTimeout the wait for the
	// next request on a kept-alive connection (default 60 s). Responses
	// have no deadline: a stream lasts as long as its generation.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// Version is ctxd's version (/api/version's ctxd_version).
	Version string
	Logger  *slog.Logger
}

// DefaultAddr is where ctxd serves HTTP unless told otherwise: loopback,
// one port above Ollama's 11434.
const DefaultAddr = "127.0.0.1:11435"

func (c *Config) fill() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 16
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 128
	}
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = 32
	}
	c.MaxConnsPerPeer = min(c.MaxConnsPerPeer, c.MaxConns)
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 60 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 5 * time.Second
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
