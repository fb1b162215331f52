package sidecar

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Metrics: every Server keeps its own Prometheus registry (never the
// global one, so servers in one process do not mix), with counters named
// ctxd_*_total, gauges, and timing histograms ctxd_*_seconds. The Metrics
// call returns them (text exposition, values, and the timings as log2
// histograms); Config.MetricsAddr also serves them over HTTP at /metrics.
//
// Timing buckets are powers of two nanoseconds (256 ns … 34 s), so a
// Prometheus histogram converts exactly into the log2 histograms that
// ctxtrace's eBPF probes keep: bucket k of a TimingHistogram counts
// observations in [2^k, 2^(k+1)) ns. Prometheus buckets are inclusive at
// their upper bound, the log2 ones at their lower bound; an observation of
// exactly a power of two lands one bucket apart, nothing else differs.

// Timing bucket layout: upper bounds 2^timingMinLog2 … 2^timingMaxLog2 ns.
const (
	timingMinLog2 = 8
	timingMaxLog2 = 35
)

func timingBuckets() []float64 {
	return prometheus.ExponentialBuckets(math.Ldexp(1, timingMinLog2)/1e9, 2, timingMaxLog2-timingMinLog2+1)
}

// Fetch tiers for ObserveFetch.
const (
	TierArena = "arena" // host-RAM arena (package shm); tiers.Arena's name
	TierSSD   = "ssd"   // the SSD tier (package coldstore); tiers.SSD's name
)

// metrics is one Server's instrumentation. Its methods are safe for
// concurrent use; the Observe* methods are for the code paths that move
// data (the hot set here, the SSD tier's reads and writes).
type metrics struct {
	reg  *prometheus.Registry
	body protoreflect.OneofDescriptor // Request.body, naming methods

	requests      *prometheus.HistogramVec // ctxd_request_seconds{method}
	requestErrors *prometheus.CounterVec   // ctxd_request_errors_total{method,code}

	// Token counts of EnsurePrefix/PrefillSuffix replies, by call.
	promptTokens, reusable, reused, prefilled, dropped *prometheus.CounterVec
	decoded                                            prometheus.Counter

	// Hot set.
	evictions, admissions     prometheus.Counter
	arenaParked, arenaDropped prometheus.Counter

	fetch     *prometheus.HistogramVec // ctxd_fetch_seconds{tier}
	phases    *prometheus.HistogramVec // ctxd_fetch_phase_seconds{phase}
	fetchByID map[string]prometheus.Observer
	phaseByID [tiers.PhaseCount]prometheus.Observer

	// SSD tier I/O.
	coldRead, coldWrite           prometheus.Histogram
	coldReadBytes, coldWriteBytes prometheus.Counter

	// The Unix socket's accept loop: temporary errors (EMFILE...) it
	// backed off from.
	acceptErrors prometheus.Counter
	// Parks refused because the arena's filesystem is full.
	arenaNoSpace prometheus.Counter

	arena atomic.Pointer[shm.Arena] // the loaded model's arena, or nil

	httpMu   sync.Mutex
	httpAddr string // where the HTTP listener is bound, once started
}

// newMetrics builds the registry; sessions reports the open sessions.
func newMetrics(sessions func() int) *metrics {
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		body: (&pb.Request{}).ProtoReflect().Descriptor().Oneofs().ByName("body"),
	}
	f := promFactory{m.reg}
	m.requests = f.histVec("ctxd_request_seconds", "Time to serve a call, by method (Decode includes streaming).", "method")
	m.requestErrors = f.counterVec("ctxd_request_errors_total", "Calls answered with an error, by method and error code.", "method", "code")
	m.promptTokens = f.counterVec("ctxd_prompt_tokens_total", "Prompt tokens sessions held after EnsurePrefix/PrefillSuffix.", "call")
	m.reusable = f.counterVec("ctxd_reusable_tokens_total", "Tokens of the longest common prefix with what sessions held.", "call")
	m.reused = f.counterVec("ctxd_reused_tokens_total", "Tokens kept without recompute (KV reuse).", "call")
	m.prefilled = f.counterVec("ctxd_prefilled_tokens_total", "Tokens prefilled (computed).", "call")
	m.dropped = f.counterVec("ctxd_dropped_tokens_total", "Tokens removed from sessions' KV.", "call")
	m.decoded = f.counter("ctxd_decoded_tokens_total", "Tokens generated or teacher-forced by Decode.")
	m.evictions = f.counter("ctxd_hot_evictions_total", "Hot-set blocks moved out of the engine (parked).")
	m.admissions = f.counter("ctxd_hot_admissions_total", "Parked blocks brought back into the engine.")
	m.arenaParked = f.counter("ctxd_arena_blocks_parked_total", "Sealed blocks whose KV was written to the host-RAM arena.")
	m.arenaDropped = f.counter("ctxd_arena_blocks_dropped_total", "Parked blocks dropped from a full arena (their KV is gone).")
	m.fetch = f.histVec("ctxd_fetch_seconds", "Time to read a parked block's KV from a tier (arena: host RAM; ssd: read and decompress).", "tier")
	m.phases = f.histVec("ctxd_fetch_phase_seconds", "Phases of bringing a block back: arena_lookup, decompress, engine_insert.", "phase")
	m.coldRead = f.hist("ctxd_cold_read_seconds", "SSD-tier reads.")
	m.coldWrite = f.hist("ctxd_cold_write_seconds", "SSD-tier writes (including their sync).")
	m.coldReadBytes = f.counter("ctxd_cold_read_bytes_total", "Bytes read from the SSD tier.")
	m.coldWriteBytes = f.counter("ctxd_cold_write_bytes_total", "Bytes written to the SSD tier.")
	m.arenaNoSpace = f.counter("ctxd_arena_no_space_total", "Blocks the host-RAM arena could not take because its filesystem is full (they go to the SSD tier).")
	m.acceptErrors = f.counter("ctxd_accept_errors_total", "Temporary accept errors on the Unix socket (out of descriptors, EMFILE/ENFILE, ...): the loop backed off and went on.")
	m.fetchByID = map[string]prometheus.Observer{}
	for _, t := range []string{TierArena, TierSSD} {
		m.fetchByID[t] = m.fetch.WithLabelValues(t)
	}
	for p := tiers.Phase(1); p < tiers.PhaseCount; p++ {
		m.phaseByID[p] = m.phases.WithLabelValues(p.String())
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ctxd_sessions", Help: "Open sessions."},
			func() float64 { return float64(sessions()) }),
		newArenaCollector(m),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// promFactory registers metrics as it makes them.
type promFactory struct{ reg *prometheus.Registry }

func (f promFactory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f promFactory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f promFactory) hist(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: timingBuckets()})
	f.reg.MustRegister(h)
	return h
}

func (f promFactory) histVec(name, help string, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: timingBuckets()}, labels)
	f.reg.MustRegister(h)
	return h
}

// arenaCollector reports the arena's figures from one Stats call per
// scrape; nothing when no hot-set model is loaded.
type arenaCollector struct {
	m                                               *metrics
	used, budget, files, kv, blocks, corruptDropped *prometheus.Desc
}

func newArenaCollector(m *metrics) arenaCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return arenaCollector{m: m,
		used:           d("ctxd_arena_used_bytes", "Arena bytes in slabs holding blocks."),
		budget:         d("ctxd_arena_budget_bytes", "Arena budget (all files)."),
		files:          d("ctxd_arena_file_bytes", "Arena file bytes (superblock and regions)."),
		kv:             d("ctxd_arena_kv_bytes", "KV bytes of the parked blocks."),
		blocks:         d("ctxd_arena_blocks", "Blocks in the arena."),
		corruptDropped: d("ctxd_arena_corrupt_dropped_total", "Blocks dropped because their checksum failed."),
	}
}

func (c arenaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.used, c.budget, c.files, c.kv, c.blocks, c.corruptDropped} {
		ch <- d
	}
}

func (c arenaCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.m.arena.Load()
	if a == nil {
		return
	}
	st := a.Stats()
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(st.BytesUsed))
	ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(st.BudgetBytes))
	ch <- prometheus.MustNewConstMetric(c.files, prometheus.GaugeValue, float64(st.FileBytes))
	ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, float64(st.KVBytes))
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(st.Blocks))
	ch <- prometheus.MustNewConstMetric(c.corruptDropped, prometheus.CounterValue, float64(st.CorruptDropped))
}

// setArena records the loaded model's arena (nil after unload).
func (m *metrics) setArena(a *shm.Arena) { m.arena.Store(a) }

// observeCall records one served call: its latency and error code, and
// the token counts of prefix and decode replies. Handle defers it with a
// pointer to its result.
func (m *metrics) observeCall(req *pb.Request, start time.Time, resp **pb.Response) {
	method := "unknown"
	if fd := req.ProtoReflect().WhichOneof(m.body); fd != nil {
		method = string(fd.Name())
	}
	m.requests.WithLabelValues(method).Observe(time.Since(start).Seconds())
	r := *resp
	if r == nil {
		return
	}
	if e := r.GetError(); e != nil {
		code := strings.ToLower(strings.TrimPrefix(e.GetCode().String(), "ERROR_CODE_"))
		m.requestErrors.WithLabelValues(method, code).Inc()
		return
	}
	switch b := r.Body.(type) {
	case *pb.Response_EnsurePrefix:
		m.observePrefix("ensure_prefix", b.EnsurePrefix)
	case *pb.Response_PrefillSuffix:
		m.observePrefix("prefill_suffix", b.PrefillSuffix)
	case *pb.Response_Decode:
		m.decoded.Add(float64(b.Decode.GetTokens()))
	}
}

func (m *metrics) observePrefix(call string, r *pb.PrefixReply) {
	m.promptTokens.WithLabelValues(call).Add(float64(r.GetPromptTokens()))
	m.reusable.WithLabelValues(call).Add(float64(r.GetReusableTokens()))
	m.reused.WithLabelValues(call).Add(float64(r.GetReusedTokens()))
	m.prefilled.WithLabelValues(call).Add(float64(r.GetPrefilledTokens()))
	m.dropped.WithLabelValues(call).Add(float64(r.GetDroppedTokens()))
}

// ObserveFetch records the time to read one block's KV from a tier
// (TierArena, TierSSD).
func (m *metrics) ObserveFetch(tier string, d time.Duration) {
	o, ok := m.fetchByID[tier]
	if !ok {
		o = m.fetch.WithLabelValues(tier)
	}
	o.Observe(d.Seconds())
}

// observePhase records the duration of one fetch phase (beginPhase/end
// records and marks).
func (m *metrics) observePhase(p fetchPhase, d time.Duration) {
	if p > 0 && p < tiers.PhaseCount {
		m.phaseByID[p].Observe(d.Seconds())
	}
}

// ObserveColdRead records one SSD-tier read of n bytes.
func (m *metrics) ObserveColdRead(n int, d time.Duration) {
	m.coldRead.Observe(d.Seconds())
	m.coldReadBytes.Add(float64(n))
}

// Fetched records a fetch from tier (tiers.Observer).
func (m *metrics) Fetched(t tiers.Tier, d time.Duration) { m.ObserveFetch(t.String(), d) }

// SSDRead records an SSD-tier read (tiers.Observer).
func (m *metrics) SSDRead(n int, d time.Duration) { m.ObserveColdRead(n, d) }

// Parked counts a block parked in the arena (tiers.Observer).
func (m *metrics) Parked() { m.arenaParked.Inc() }

// ArenaNoSpace counts a block the arena could not take: its filesystem is
// full (tiers' optional observer method).
func (m *metrics) ArenaNoSpace() { m.arenaNoSpace.Inc() }

// ArenaChanged records the loaded model's arena (tiers.Observer).
func (m *metrics) ArenaChanged(a *shm.Arena) { m.setArena(a) }

// Evicted counts a block leaving the engine (layout.Counters).
func (m *metrics) Evicted() { m.evictions.Inc() }

// Admitted counts a block coming back into the engine (layout.Counters).
func (m *metrics) Admitted() { m.admissions.Inc() }

// ArenaDropped counts a parked block dropped from a full arena
// (layout.Counters).
func (m *metrics) ArenaDropped() { m.arenaDropped.Inc() }

// ObserveColdWrite records one SSD-tier write of n bytes (with its sync).
func (m *metrics) ObserveColdWrite(n int, d time.Duration) {
	m.coldWrite.Observe(d.Seconds())
	m.coldWriteBytes.Add(float64(n))
}

// ---- the Metrics call ----

func (srv *Server) metricsReply(r *pb.MetricsRequest) (*pb.MetricsReply, error) {
	m := srv.metrics
	fams, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	reply := &pb.MetricsReply{Pid: int32(os.Getpid()), Values: map[string]float64{}}
	if exe, err := os.Executable(); err == nil {
		reply.Executable = exe
	}
	var text bytes.Buffer
	for _, mf := range fams {
		if !r.GetNoText() {
			if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
				return nil, fmt.Errorf("encoding metrics: %w", err)
			}
		}
		name := mf.GetName()
		for _, mt := range mf.GetMetric() {
			key := name + labelString(mt.GetLabel())
			switch {
			case mt.GetCounter() != nil:
				reply.Values[key] = mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				reply.Values[key] = mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil && strings.HasPrefix(name, "ctxd_") && strings.HasSuffix(name, "_seconds"):
				reply.Histograms = append(reply.Histograms, timingHistogram(name, mt))
			}
		}
	}
	reply.PrometheusText = text.String()
	if a := m.arena.Load(); a != nil {
		for _, ar := range a.Ranges() {
			reply.ArenaRanges = append(reply.ArenaRanges, &pb.ArenaRange{Start: uint64(ar.Start), End: uint64(ar.End), Path: ar.Path})
		}
	}
	sort.Slice(reply.Histograms, func(i, j int) bool { return reply.Histograms[i].Name < reply.Histograms[j].Name })
	return reply, nil
}

// labelString renders labels as {a="x",b="y"} (empty without labels).
func labelString(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TimingHistogramName names a timing: ctxd_fetch_phase_seconds{phase=
// "decompress"} is "fetch_phase.decompress", ctxd_cold_read_seconds is
// "cold_read".
func TimingHistogramName(family string, labelValues ...string) string {
	n := strings.TrimSuffix(strings.TrimPrefix(family, "ctxd_"), "_seconds")
	for _, v := range labelValues {
		n += "." + v
	}
	return n
}

// timingHistogram converts a Prometheus histogram with power-of-two
// nanosecond bounds into log2 buckets of nanoseconds.
func timingHistogram(family string, mt *dto.Metric) *pb.TimingHistogram {
	var values []string
	for _, l := range mt.GetLabel() {
		values = append(values, l.GetValue())
	}
	h := mt.GetHistogram()
	out := &pb.TimingHistogram{
		Name: TimingHistogramName(family, values...), Count: h.GetSampleCount(),
		SumNs: h.GetSampleSum() * 1e9, Buckets: make([]uint64, 64),
	}
	var prev uint64
	last := 0
	for _, b := range h.GetBucket() {
		ub := b.GetUpperBound() * 1e9
		if math.IsInf(ub, 1) {
			continue
		}
		k := int(math.Round(math.Log2(ub))) - 1 // (2^k, 2^(k+1)] → bucket k
		k = min(max(k, 0), 63)
		out.Buckets[k] += b.GetCumulativeCount() - prev
		prev = b.GetCumulativeCount()
		last = k
	}
	if n := h.GetSampleCount(); n > prev { // above the last bound
		out.Buckets[min(last+1, 63)] += n - prev
	}
	return out
}

// ---- the HTTP listener ----

// serveMetricsHTTP starts the /metrics listener at Config.MetricsAddr
// (nothing when empty); it stops when ctx ends.
func (srv *Server) serveMetricsHTTP(ctx context.Context) error {
	addr := srv.cfg.MetricsAddr
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --metrics-addr %s: %w", ErrConfig, addr, err)
	}
	if ip := net.ParseIP(host); srv.cfg.MetricsKey == "" && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: --metrics-addr %s is not loopback: set an API key (--api-key) to serve /metrics to other hosts", ErrConfig, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: --metrics-addr %s: %w", ErrConfig, addr, err)
	}
	mux := http.NewServeMux()
	var h http.Handler = promhttp.HandlerFor(srv.metrics.reg, promhttp.HandlerOpts{})
	if key := srv.cfg.MetricsKey; key != "" {
		h = requireBearer(key, h)
	}
	mux.Handle("/metrics", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	srv.metrics.httpMu.Lock()
	srv.metrics.httpAddr = ln.Addr().String()
	srv.metrics.httpMu.Unlock()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			srv.log.Warn("metrics listener stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { hs.Close() })
	srv.log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// MetricsListenAddr is the address the /metrics listener is bound to
// (Config.MetricsAddr with its port resolved), or "" when there is none.
func (srv *Server) MetricsListenAddr() string {
	srv.metrics.httpMu.Lock()
	defer srv.metrics.httpMu.Unlock()
	return srv.metrics.httpAddr
}

// sessionCount is the number of open sessions (the ctxd_sessions gauge).
func (srv *Server) sessionCount() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// requireBearer serves h only to requests carrying "Authorization: Bearer
// key"; others get 401.
func requireBearer(key string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(key)) != 1 {
			http.Error(w, "missing or wrong API key: send Authorization: Bearer KEY", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
