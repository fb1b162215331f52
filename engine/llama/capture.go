package llama

import (
	"regexp"
	"strconv"
	"sync"
)

// bufferLine matches llama.cpp's report of each buffer it allocates, e.g.
// "load_tensors:      Vulkan0 model buffer size =     0.50 MiB" or
// "llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB".
var bufferLine = regexp.MustCompile(`^\w+:\s+(\S+) (model|KV|compute) buffer size = +([0-9.]+) MiB`)

// buffers are the sizes llama.cpp reported while a capture was open:
// kind ("model", "KV", "compute") → buffer name ("CPU_Mapped", "Vulkan0") →
// bytes. These are the allocations themselves, so they prove where layers
// went (a device that was skipped allocates nothing).
type buffers map[string]map[string]int64

// capture collects buffer reports; one model load or context creation at a
// time holds it (captureMu), as llama.cpp's log callback is process-wide.
var (
	captureMu sync.Mutex
	captured  struct {
		sync.Mutex
		b buffers
	}
)

// captureBuffers runs f with buffer reports collected, and returns them.
func captureBuffers(f func()) buffers {
	captureMu.Lock()
	defer captureMu.Unlock()
	captured.Lock()
	captured.b = buffers{}
	captured.Unlock()
	f()
	captured.Lock()
	defer captured.Unlock()
	b := captured.b
	captured.b = nil
	return b
}

// noteLogLine records a buffer report when a capture is open.
func noteLogLine(msg string) {
	captured.Lock()
	defer captured.Unlock()
	if captured.b == nil {
		return
	}
	m := bufferLine.FindStringSubmatch(msg)
	if m == nil {
		return
	}
	mib, err := strconv.ParseFloat(m[3], 64)
	if err != nil {
		return
	}
	if captured.b[m[2]] == nil {
		captured.b[m[2]] = map[string]int64{}
	}
	captured.b[m[2]][m[1]] += int64(mib * (1 << 20))
}

// on is the bytes of kind reported for buffer name.
func (b buffers) on(kind, name string) int64 { return b[kind][name] }

// total is the bytes of kind over every buffer.
func (b buffers) total(kind string) int64 {
	var n int64
	for _, v := range b[kind] {
		n += v
	}
	return n
}
