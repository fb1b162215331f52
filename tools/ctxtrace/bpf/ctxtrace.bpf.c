// ctxtrace's eBPF programs: log2 latency histograms of one process (ctxd).
//
// Self-contained (no libbpf headers): the few helper declarations and map
// macros it needs are written out below. Compiled by bpf2go with clang-14
// (`make generate`); the object and its Go bindings are committed.
//
// Every histogram lives in the per-CPU array `hist`: key probe*64 + k
// counts observations v (nanoseconds) with 2^k <= v < 2^(k+1) (k = 0 also
// holds 0 and 1); `sum_ns` holds each probe's sum. Probe numbers are
// listed in probes.go (ProbeNames) and must match the enum below.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
};
#define BPF_ANY 0

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// Probe numbers (ProbeNames in probes.go).
enum {
	P_READ = 0,
	P_WRITE = 1,
	P_PREAD64 = 2,
	P_PWRITE64 = 3,
	P_FSYNC = 4,
	P_FDATASYNC = 5,
	P_BLOCK_RQ = 6,     // block requests issued by the target's threads
	P_BLOCK_RQ_ALL = 7, // every block request on the machine
	P_PF_READ = 8,      // user page faults (read) inside the arena
	P_PF_WRITE = 9,     // user page faults (write) inside the arena
	P_PHASE = 10,       // fetch phase p (1..6) is probe P_PHASE + p - 1
	NPROBES = 16,
	NBUCKETS = 64,
	MAX_PHASE = 6,
	MAX_RANGES = 32,
};

// target_tgid is the traced process; set before loading.
const volatile u32 target_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES * NBUCKETS);
	__type(key, u32);
	__type(value, u64);
} hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES);
	__type(key, u32);
	__type(value, u64);
} sum_ns SEC(".maps");

static __always_inline u32 log2_u64(u64 v)
{
	u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline void observe(u32 probe, u64 v)
{
	if (probe >= NPROBES)
		return;
	u32 k = probe * NBUCKETS + log2_u64(v);
	u64 *c = bpf_map_lookup_elem(&hist, &k);
	if (c)
		__sync_fetch_and_add(c, 1);
	u64 *s = bpf_map_lookup_elem(&sum_ns, &probe);
	if (s)
		__sync_fetch_and_add(s, v);
}

static __always_inline int is_target(void)
{
	return (u32)(bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

// ---- syscalls: raw tracepoints sys_enter / sys_exit ----

struct bpf_raw_tracepoint_args {
	u64 args[0];
};

struct sys_start {
	u64 ts;
	u32 probe;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u64); // pid_tgid: a thread runs one syscall at a time
	__type(value, struct sys_start);
} sys_start SEC(".maps");

static __always_inline int syscall_probe(u64 nr)
{
	switch (nr) { // x86_64 syscall numbers
	case 0: return P_READ;
	case 1: return P_WRITE;
	case 17: return P_PREAD64;
	case 18: return P_PWRITE64;
	case 74: return P_FSYNC;
	case 75: return P_FDATASYNC;
	}
	return -1;
}

SEC("raw_tracepoint/sys_enter")
int sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if ((u32)(id >> 32) != target_tgid)
		return 0;
	int p = syscall_probe(ctx->args[1]);
	if (p < 0)
		return 0;
	struct sys_start s = {.ts = bpf_ktime_get_ns(), .probe = p};
	bpf_map_update_elem(&sys_start, &id, &s, BPF_ANY);
	return 0;
}

SEC("raw_tracepoint/sys_exit")
int sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if ((u32)(id >> 32) != target_tgid)
		return 0;
	struct sys_start *s = bpf_map_lookup_elem(&sys_start, &id);
	if (!s)
		return 0;
	u64 d = bpf_ktime_get_ns() - s->ts;
	u32 p = s->probe;
	bpf_map_delete_elem(&sys_start, &id);
	observe(p, d);
	return 0;
}

// ---- block requests: tracepoints block_rq_issue -> block_rq_complete ----

// The records' first fields (tracefs events/block/*/format): an 8-byte
// common header, dev_t dev at 8, sector_t sector at 16.
struct block_rq_args {
	u64 common;
	u32 dev;
	u32 pad;
	u64 sector;
};

struct rq_key {
	u32 dev;
	u32 pad;
	u64 sector;
};

struct rq_start {
	u64 ts;
	u32 target;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct rq_key);
	__type(value, struct rq_start);
} rq_start SEC(".maps");

SEC("tracepoint/block/block_rq_issue")
int block_rq_issue(struct block_rq_args *ctx)
{
	struct rq_key k = {.dev = ctx->dev, .sector = ctx->sector};
	struct rq_start s = {.ts = bpf_ktime_get_ns(), .target = is_target()};
	bpf_map_update_elem(&rq_start, &k, &s, BPF_ANY);
	return 0;
}

SEC("tracepoint/block/block_rq_complete")
int block_rq_complete(struct block_rq_args *ctx)
{
	struct rq_key k = {.dev = ctx->dev, .sector = ctx->sector};
	struct rq_start *s = bpf_map_lookup_elem(&rq_start, &k);
	if (!s)
		return 0;
	u64 d = bpf_ktime_get_ns() - s->ts;
	u32 target = s->target;
	bpf_map_delete_elem(&rq_start, &k);
	observe(P_BLOCK_RQ_ALL, d);
	if (target)
		observe(P_BLOCK_RQ, d);
	return 0;
}

// ---- page faults inside the arena: tracepoint exceptions/page_fault_user ----

struct page_fault_args {
	u64 common;
	u64 address;
	u64 ip;
	u64 error_code;
};

// An arena region's mapping [start, end); end 0 ends the list.
struct range {
	u64 start;
	u64 end;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RANGES);
	__type(key, u32);
	__type(value, struct range);
} arena_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} last_fault SEC(".maps");

SEC("tracepoint/exceptions/page_fault_user")
int page_fault_user(struct page_fault_args *ctx)
{
	if (!is_target())
		return 0;
	u64 a = ctx->address;
	int hit = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < MAX_RANGES; i++) {
		u32 key = i;
		struct range *r = bpf_map_lookup_elem(&arena_ranges, &key);
		if (!r || r->end == 0)
			break;
		if (a >= r->start && a < r->end) {
			hit = 1;
			break;
		}
	}
	if (!hit)
		return 0;
	// The kernel has no fault-exit event to time a fault with: the value
	// is the time since the previous arena fault of the process (0 for
	// the first), so the histogram shows the fault rate and its bursts.
	u32 zero = 0;
	u64 now = bpf_ktime_get_ns(), d = 0;
	u64 *last = bpf_map_lookup_elem(&last_fault, &zero);
	if (last) {
		if (*last)
			d = now - *last;
		*last = now;
	}
	observe((ctx->error_code & 2) ? P_PF_WRITE : P_PF_READ, d);
	return 0;
}

// ---- fetch phases: uprobes on ctxd's marker functions ----
//
// sidecar.fetchPhaseBegin(phase int, block uint64) and
// sidecar.fetchPhaseEnd(phase, block) are empty //go:noinline functions;
// Go's register ABI passes phase in RAX and block in RBX. The probes sit
// at their entries (after any stack-check prologue), never at returns.

struct pt_regs_x86_64 { // the kernel's struct pt_regs on x86_64
	u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct phase_key {
	u64 block;
	u32 phase;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct phase_key);
	__type(value, u64);
} phase_start SEC(".maps");

SEC("uprobe/fetch_phase_begin")
int fetch_phase_begin(struct pt_regs_x86_64 *ctx)
{
	if (!is_target())
		return 0;
	struct phase_key k = {.block = ctx->bx, .phase = (u32)ctx->ax};
	u64 ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&phase_start, &k, &ts, BPF_ANY);
	return 0;
}

SEC("uprobe/fetch_phase_end")
int fetch_phase_end(struct pt_regs_x86_64 *ctx)
{
	if (!is_target())
		return 0;
	struct phase_key k = {.block = ctx->bx, .phase = (u32)ctx->ax};
	u64 *ts = bpf_map_lookup_elem(&phase_start, &k);
	if (!ts)
		return 0;
	u64 d = bpf_ktime_get_ns() - *ts;
	bpf_map_delete_elem(&phase_start, &k);
	if (k.phase >= 1 && k.phase <= MAX_PHASE)
		observe(P_PHASE + k.phase - 1, d);
	return 0;
}
