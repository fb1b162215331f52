package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// wireEvent is one event of a streamed response: SSE "event: name" (none
// when name is "") and data, or one NDJSON line. raw, when set, is written
// as the data as is ("[DONE]").
type wireEvent struct {
	name string
	data any
	raw  []byte
}

// streamWriter writes a streamed response (SSE for OpenAI, Anthropic and
// Responses, NDJSON for Ollama). Headers go out with the first event —
// which the first progress report of a prefill, the first token or the
// keep-alive timer brings, so an over-long prompt can still be refused with
// a plain HTTP error — preceded by the dialect's opening events; while
// nothing else is written, a keep-alive event goes out every KeepAlive.
type streamWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	sse       bool
	numbered  bool               // add "sequence_number" to every JSON event (Responses)
	keepAlive func() wireEvent   // the keep-alive event
	opening   func() []wireEvent // written right after the headers
	header    func(http.Header)

	mu        sync.Mutex
	committed bool
	seq       int
	last      time.Time
	err       error
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
}

func newStreamWriter(w http.ResponseWriter, sse bool, every time.Duration, keepAlive func() wireEvent) *streamWriter {
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

// commitLocked sends the headers and the opening events.
func (sw *streamWriter) commitLocked() error {
	if sw.committed {
		return nil
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
	if sw.opening != nil {
		for _, ev := range sw.opening() {
			if err := sw.writeLocked(ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin sends the headers and the opening events now (a prefill has
// started, or the first text is due).
func (sw *streamWriter) begin() error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.err != nil {
		return sw.err
	}
	if err := sw.commitLocked(); err != nil {
		sw.err = err
		return err
	}
	if err := sw.rc.Flush(); err != nil {
		sw.err = err
	}
	sw.last = time.Now()
	return sw.err
}

// isCommitted reports whether the headers are out.
func (sw *streamWriter) isCommitted() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.committed
}

// send writes events in order and flushes; the error means the client is
// gone.
func (sw *streamWriter) send(evs ...wireEvent) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.err != nil {
		return sw.err
	}
	err := sw.commitLocked()
	for _, ev := range evs {
		if err != nil {
			break
		}
		err = sw.writeLocked(ev)
	}
	if err == nil {
		err = sw.rc.Flush()
	}
	sw.last = time.Now()
	sw.err = err
	return err
}

// writeLocked writes one event without flushing.
func (sw *streamWriter) writeLocked(ev wireEvent) error {
	b := ev.raw
	if b == nil {
		var err error
		if b, err = json.Marshal(ev.data); err != nil {
			return err
		}
		if sw.numbered && len(b) > 1 && b[0] == '{' && b[len(b)-1] == '}' {
			b = append(b[:len(b)-1], fmt.Sprintf(`,"sequence_number":%d}`, sw.seq)...)
			sw.seq++
		}
	}
	var out []byte
	if sw.sse {
		if ev.name != "" {
			out = append(append(append(out, "event: "...), ev.name...), '\n')
		}
		out = append(append(append(out, "data: "...), b...), '\n', '\n')
	} else {
		out = append(b, '\n')
	}
	_, err := sw.w.Write(out)
	return err
}

// close stops the keep-alive timer; it must be called before the handler
// returns, and may be called again.
func (sw *streamWriter) close() {
	sw.stopOnce.Do(func() { close(sw.stop) })
	sw.done.Wait()
}
