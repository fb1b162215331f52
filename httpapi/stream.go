package httpapi

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// streamWriter writes a streamed response (SSE for OpenAI, NDJSON for
// Ollama). Headers go out with the first event — which the first progress
// report of a prefill, the first token or the keep-alive timer brings, so
// an over-long prompt can still be refused with a plain HTTP 400 — and
// while nothing else is written, a keep-alive event every KeepAlive.
type streamWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	sse       bool
	keepAlive func() any // the keep-alive event (an empty-content delta)
	header    func(http.Header)

	mu        sync.Mutex
	committed bool
	last      time.Time
	err       error
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
}

func newStreamWriter(w http.ResponseWriter, sse bool, every time.Duration, keepAlive func() any) *streamWriter {
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), sse: sse, keepAlive: keepAlive, last: time.Now(), stop: make(chan struct{})}
	sw.done.Add(1)
	go sw.loop(every)
	return sw
}

func (sw *streamWriter) loop(every time.Duration) {
	defer sw.done.Done()
	t := time.NewTicker(every / 4)
	defer t.Stop()
	for {
		select {
		case <-sw.stop:
			return
		case <-t.C:
			sw.mu.Lock()
			idle := time.Since(sw.last) >= every
			sw.mu.Unlock()
			if idle {
				sw.send(sw.keepAlive())
			}
		}
	}
}

// commitLocked sends the headers.
func (sw *streamWriter) commitLocked() {
	if sw.committed {
		return
	}
	sw.committed = true
	h := sw.w.Header()
	if sw.sse {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	if sw.header != nil {
		sw.header(h)
	}
	sw.w.WriteHeader(http.StatusOK)
}

// begin sends the headers now (a prefill has started).
func (sw *streamWriter) begin(first any) {
	sw.mu.Lock()
	committed := sw.committed
	sw.mu.Unlock()
	if !committed {
		sw.send(first)
	}
}

// isCommitted reports whether the headers are out.
func (sw *streamWriter) isCommitted() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.committed
}

// send writes one event and flushes; the error means the client is gone.
func (sw *streamWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return sw.raw(b)
}

func (sw *streamWriter) raw(b []byte) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.err != nil {
		return sw.err
	}
	sw.commitLocked()
	var err error
	if sw.sse {
		_, err = sw.w.Write(append(append([]byte("data: "), b...), '\n', '\n'))
	} else {
		_, err = sw.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = sw.rc.Flush()
	}
	sw.last = time.Now()
	sw.err = err
	return err
}

// close stops the keep-alive timer; it must be called before the handler
// returns, and may be called again.
func (sw *streamWriter) close() {
	sw.stopOnce.Do(func() { close(sw.stop) })
	sw.done.Wait()
}
