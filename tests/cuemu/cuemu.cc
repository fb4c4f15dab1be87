// cuemu: the CUDA runtime calls test_cuda_kernels makes, and the thread
// scheduler behind cuemu::launch (see cuemu.h for what is emulated and
// what is not).
#include "cuemu.h"
#include "rt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

constexpr unsigned kMaxThreads = 1024;   // per block, as every GPU since Fermi
constexpr size_t kStack = 64 * 1024;     // a fiber's stack: kernels need little
// The device cudaDeviceGetAttribute and the occupancy call describe: a few
// SMs, each holding two blocks of any kernel, so that code sizing its grid
// by them makes several blocks here too (blocks still run one at a time).
constexpr int kSMs = 16, kBlocksPerSM = 2;
// The compute capability it reports: 9.0 (conv2_tc.cu's tensor-core kernels
// are compiled whole here), or what cuemu_set_cc sets, so a test can see
// what the host code does on an older GPU.
int cc_major = 9, cc_minor = 0;

enum State { RUN, WAIT, MMA, DONE };   // MMA: at mma_sync, its warp's other lanes not yet

// A fiber per thread slot of a block, kept for the whole run: it runs a
// thread, says DONE, waits for its next thread.
struct Fiber {
	void *sp;     // its stack pointer while switched away
	char *stack;  // kStack bytes above a guard page
	State state;
	uint3 idx;
	void *fake;   // ASan's fake stack while switched away
};

Fiber fibers[kMaxThreads];
void *sched_sp;
constexpr int kOutside = -1, kDirect = -2;
int cur = kOutside;           // the fiber running, or one of those
unsigned long barriers;       // __syncthreads calls of this launch
bool late_said;               // its late barrier reported
bool misaligned_said;         // its misaligned wmma tile reported
bool bounds_said;             // its block over __launch_bounds__ reported
const char *kernel_name;
void (*body)(void *);
void *body_arg;
#ifdef CUEMU_ASAN
const void *sched_bottom;     // the scheduler's stack
size_t sched_size;
#endif

cudaError_t last_error = cudaSuccess;
// A kernel's fault (CUEMU_FAULT_KERNELS): the context is unusable after
// it, as a GPU's after an illegal address: every later sync and
// cudaGetLastError returns it, nothing runs (cuemu_clear_fault: tests).
cudaError_t sticky_error = cudaSuccess;
std::map<uintptr_t, size_t> allocs;   // "device" allocations: start -> size
#ifndef CUEMU_ASAN
// Freed allocations of 1 MiB or more, by their rounded size, for the next
// cudaMalloc of that size (as CUDA's own and PyTorch's caching allocators
// keep them): malloc maps blocks that large afresh each time, and the
// kernel's page faults on the first touch (the 0xff fill) were a tenth of
// an emulated test's time, a cuBLAS workspace of 32 MiB at every start-up.
// At most kSpareMax bytes are kept; under ASan none are, so a use after
// cudaFree stays a use after free.
// (freed at exit: a leak checker then sees only what the program lost)
constexpr size_t kSpareMin = (size_t)1 << 20, kSpareMax = (size_t)256 << 20;
struct Spare {
	std::multimap<size_t, void *> blocks;
	size_t bytes = 0;
	~Spare()
	{
		for (auto &b : blocks)
			free(b.second);
	}
} spare;
#endif

} // namespace

void cuemu::fail(cudaError_t e, const char *kernel, const char *what)
{
	fprintf(stderr, "cuemu: %s: %s\n", kernel, what);
	if (last_error == cudaSuccess)
		last_error = e;
}

using cuemu::fail;

// cuemu_switch(&save, to): push the callee-saved registers, keep the stack
// pointer in save, take to's and pop its registers.  swapcontext would do
// (and did: twice as slow, a sigprocmask system call per switch, and
// ASan's interceptor clears a stack's shadow at each).  x86-64 System V;
// tests/Makefile builds cuemu on x86-64 only.
extern "C" void cuemu_switch(void **save, void *to);
asm(R"(
	.text
	.globl cuemu_switch
	.hidden cuemu_switch
	.type cuemu_switch, @function
	.p2align 4
cuemu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size cuemu_switch, .-cuemu_switch
)");

namespace {

// A pass of the scheduler over a block's threads (run_grid): the next
// position in its order, its length and direction.  A thread that waits or
// ends hands the CPU straight to the pass's next runnable thread (one
// switch, where going through the scheduler took two); the last one of
// the pass goes back to the scheduler.
unsigned pass_j, pass_nt;
bool pass_reverse;

// The pass's next thread in RUN state, or -1 (pass_j moved past it)
int pass_next()
{
	while (pass_j < pass_nt) {
		unsigned j = pass_j++, i = pass_reverse ? pass_nt - 1 - j : j;
		if (fibers[i].state == RUN)
			return (int)i;
	}
	return -1;
}

// The running fiber waits (at a barrier, at mma_sync) or is done: the
// pass's next runnable thread runs, or the scheduler.
void yield(Fiber &f)
{
	int n = pass_next();
	if (n >= 0) {
		cur = n;
		threadIdx = fibers[n].idx;
	}
#ifdef CUEMU_ASAN
	if (n >= 0)
		__sanitizer_start_switch_fiber(&f.fake, fibers[n].stack, kStack);
	else
		__sanitizer_start_switch_fiber(&f.fake, sched_bottom, sched_size);
#endif
	cuemu_switch(&f.sp, n >= 0 ? fibers[n].sp : sched_sp);
#ifdef CUEMU_ASAN
	__sanitizer_finish_switch_fiber(f.fake, nullptr, nullptr);
#endif
}

[[noreturn]] void fiber_main()
{
	Fiber &f = fibers[cur];
#ifdef CUEMU_ASAN
	// (a fiber's first run may come from another fiber: the scheduler's
	// stack is the one the first fiber ever run came from)
	if (sched_bottom)
		__sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
	else
		__sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
	for (;;) {
		body(body_arg);
		f.state = DONE;
		yield(f);
	}
}

// A pass over the block's nt threads from the first runnable one, each
// running until it waits or ends; back here when the pass is over.
void run_pass(unsigned nt, bool reverse)
{
	pass_j = 0;
	pass_nt = nt;
	pass_reverse = reverse;
	int i = pass_next();
	if (i < 0)
		return;
	cur = i;
	threadIdx = fibers[i].idx;
#ifdef CUEMU_ASAN
	void *fake = nullptr;
	__sanitizer_start_switch_fiber(&fake, fibers[i].stack, kStack);
#endif
	cuemu_switch(&sched_sp, fibers[i].sp);
#ifdef CUEMU_ASAN
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
	cur = kOutside;
}

// A stack whose first switch "returns" into fiber_main as if called
// (16-byte aligned before the call, so 8 mod 16 at its entry).
bool fiber_init(Fiber &f)
{
	if (f.stack)
		return true;
	size_t page = 4096;
	char *m = static_cast<char *>(mmap(nullptr, kStack + page, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (m == MAP_FAILED)
		return false;
	mprotect(m, page, PROT_NONE);   // a fiber overflowing its stack faults
	f.stack = m + page;
	void **top = reinterpret_cast<void **>(f.stack + kStack);
	top[-1] = nullptr;                                    // fiber_main's return address
	top[-2] = reinterpret_cast<void *>(&fiber_main);      // where the ret goes
	for (int r = 3; r <= 8; r++)
		top[-r] = nullptr;                            // rbp rbx r12-r15
	f.sp = top - 8;
	return true;
}

// The launch configurations a GPU (compute capability 8.x/9.x) refuses.
const char *bad_config(const cuemu::Cfg &c)
{
	unsigned long threads = (unsigned long)c.block.x * c.block.y * c.block.z;
	if (!threads || !c.grid.x || !c.grid.y || !c.grid.z)
		return "an empty grid or block";
	if (threads > kMaxThreads || c.block.z > 64)
		return "more than 1024 threads in a block, or block.z over 64";
	if (c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535)
		return "grid.x over 2^31-1, or grid.y or grid.z over 65535";
	if (c.shmem > 48 * 1024)
		return "more than 48 KiB of dynamic shared memory without opting in";
	return nullptr;
}

} // namespace

void __syncthreads(void)
{
	if (cur == kOutside) {
		fprintf(stderr, "cuemu: __syncthreads outside a kernel\n");
		abort();
	}
	if (cur == kDirect) {
		// A barrier where the launch's first block had none: legal CUDA
		// (a condition uniform over each block), but these threads run
		// to completion one by one and cannot wait.  Loud, never silent.
		if (late_said)
			return;
		late_said = true;
		char m[200];
		snprintf(m, sizeof(m),
			 "block (%u,%u,%u) reached __syncthreads, block (0,0,0) did not: cuemu runs "
			 "such a launch's later blocks without fibers and cannot emulate this barrier",
			 blockIdx.x, blockIdx.y, blockIdx.z);
		fail(cudaErrorLaunchFailure, kernel_name, m);
		return;
	}
	barriers++;
	Fiber &f = fibers[cur];
	f.state = WAIT;
	yield(f);
}

namespace {

// The threads' order: every kernel of trainer/cuda gives the same bytes
// whatever order its blocks and threads run in (no atomics; sums in a
// fixed order through shared memory and barriers), which a GPU's
// scheduler never shows the same way twice.  CHECK runs each launch
// forward and again reversed from the same memory, and compares.
enum Order { FORWARD, REVERSE, CHECK };
int order = -1;   // -1: CUEMU_ORDER not read yet

int order_named(const char *name)
{
	return !strcmp(name, "forward") ? FORWARD
	       : !strcmp(name, "reverse") ? REVERSE
	       : !strcmp(name, "check")   ? CHECK
					  : -1;
}

int order_now()
{
	if (order < 0) {
		const char *e = getenv("CUEMU_ORDER");
		order = e && *e ? order_named(e) : FORWARD;
		if (order < 0) {
			fprintf(stderr, "cuemu: CUEMU_ORDER=%s: expected forward, reverse or check\n", e);
			abort();
		}
	}
	return order;
}

// Bytes an atomicAdd wrote during a CHECK launch: their sum's rounding
// depends on the order on a GPU too, so they are not compared.
std::set<uintptr_t> atomic_bytes;
bool recording_atomics;

// mma_sync's lanes per warp of the block running (cuemu.h: mma_arrive):
// the shares of those that arrived, waiting for the rest
struct WarpMma {
	cuemu::MmaShare lane[32];
	cuemu::MmaCompute compute;
	unsigned arrived;
	bool mixed;   // a lane passed another compute than the first
};
std::vector<WarpMma> warp_mma;
bool mma_said;   // the launch's wrong mma_sync reported

// A warp's record of a call, kept from block to block (used: how many
// this block has), so that its buffers are not allocated again for every
// block.
template <class Rec> struct Warp {
	std::vector<Rec> r;
	size_t used;
};

// load_matrix_sync's tiles per warp of the block running, in each lane's
// call order (cuemu.h: load_tile), and each thread's calls so far
struct LoadTile {
	cuemu::LoadAt at;
	std::vector<unsigned char> bytes;
};
std::vector<Warp<LoadTile>> load_tiles;
unsigned load_calls[kMaxThreads];

unsigned linear_thread();

// The running thread's next warp-wide call (mma_sync, load_matrix_sync):
// the record its warp's first lane made of it, to reuse, or null (counted
// in calls either way).
template <class Rec> const Rec *warp_reuse(const std::vector<Warp<Rec>> &warps, unsigned *calls)
{
	unsigned t = linear_thread(), n = calls[t]++;
	if (t / 32 >= warps.size() || n >= warps[t / 32].used)
		return nullptr;
	return &warps[t / 32].r[n];
}

// The record of that call to fill, a new one when this lane is the first
// to make it; null for a lane whose calls differ from the first's (each
// then computes its own).
template <class Rec> Rec *warp_keep(std::vector<Warp<Rec>> &warps, const unsigned *calls)
{
	unsigned t = linear_thread(), n = calls[t] - 1;
	if (t / 32 >= warps.size())
		return nullptr;
	Warp<Rec> &w = warps[t / 32];
	if (n > w.used)
		return nullptr;
	if (n == w.used) {
		if (w.used == w.r.size())
			w.r.emplace_back();
		w.used++;
	}
	return &w.r[n];
}

void mma_block(unsigned nt)
{
	const size_t warps = (nt + 31) / 32;
	if (warp_mma.size() < warps)
		warp_mma.resize(warps);
	for (auto &w : warp_mma)
		w.arrived = 0;
	if (load_tiles.size() < warps)
		load_tiles.resize(warps);
	for (auto &w : load_tiles)
		w.used = 0;
	memset(load_calls, 0, nt * sizeof(load_calls[0]));
}

unsigned linear_thread()
{
	return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}

// cp.async: each thread's copies not yet landed, committed groups oldest
// first, then the open one (cuemu.h); at_issue: land each at once.
struct CpCopy {
	float *dst;
	const float *src;   // NULL: zeros
};
struct CpThread {
	std::vector<std::vector<CpCopy>> groups;
	std::vector<CpCopy> open;
};
CpThread cp_threads[kMaxThreads];
bool cp_at_issue;

void cp_land(const std::vector<CpCopy> &g)
{
	for (const CpCopy &c : g)
		*c.dst = c.src ? *c.src : 0.f;
}

// After a block: a thread that ended with copies not waited for fails
// the launch (a GPU may land them after the block's shared memory is
// another's); every thread's queue is empty for the next block.
void cp_block_end(unsigned nt)
{
	for (unsigned i = 0; i < nt; i++) {
		CpThread &t = cp_threads[i];
		size_t n = t.open.size();
		for (const auto &g : t.groups)
			n += g.size();
		if (n && last_error == cudaSuccess) {
			char m[200];
			snprintf(m, sizeof(m),
				 "block (%u,%u,%u) thread %u ended with %zu cp.async copies no "
				 "cp.async.wait_group covered", blockIdx.x, blockIdx.y, blockIdx.z, i, n);
			fail(cudaErrorLaunchFailure, kernel_name, m);
		}
		t.groups.clear();
		t.open.clear();
	}
}

// One pass over the grid, its blocks and each barrier interval's threads
// in the given order.
// pdl_enter's calls, and whether the launch running now is reached
// through a programmatic edge (set_programmatic)
unsigned long pdl_entered;
bool programmatic;

void run_grid(const cuemu::Cfg &cfg, const char *kernel, bool reverse)
{
	unsigned nt = cfg.block.x * cfg.block.y * cfg.block.z;
	unsigned long nb = (unsigned long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
	unsigned long entered = pdl_entered;
	struct Check {
		const char *kernel;
		unsigned long entered, threads;
		~Check()
		{
			unsigned long n = pdl_entered - entered;
			if (!programmatic || bounds_said || n == threads)
				return;
			char m[240];
			snprintf(m, sizeof(m),
				 "reached through a programmatic edge of a CUDA graph, but %lu of its %lu "
				 "threads called pdl_enter (griddepcontrol.wait): a GPU may run the rest "
				 "before the kernel it depends on has finished", n, threads);
			fail(cudaErrorLaunchFailure, kernel, m);
		}
	} check{ kernel, entered, (unsigned long)nt * nb };
	auto thread_idx = [&](unsigned i) {
		return make_uint3(i % cfg.block.x, i / cfg.block.x % cfg.block.y,
				  i / (cfg.block.x * cfg.block.y));
	};
	barriers = 0;
	cp_at_issue = reverse && order_now() == CHECK;
	late_said = false;
	mma_said = false;
	misaligned_said = false;
	bounds_said = false;
	bool diverged = false, first = true;
	for (unsigned long k = 0; k < nb; k++) {
		mma_block(nt);
		unsigned long b = reverse ? nb - 1 - k : k;
		blockIdx = make_uint3((unsigned)(b % cfg.grid.x), (unsigned)(b / cfg.grid.x % cfg.grid.y),
				      (unsigned)(b / ((unsigned long)cfg.grid.x * cfg.grid.y)));
		// Fibers cost two context switches a thread; when the first
		// block met no barrier (element-wise kernels), the later
		// blocks' threads are plain calls, in the same order.
		if (!first && !barriers) {
			cur = kDirect;
			for (unsigned j = 0; j < nt; j++) {
				threadIdx = thread_idx(reverse ? nt - 1 - j : j);
				body(body_arg);
			}
			cur = kOutside;
			cp_block_end(nt);
			continue;
		}
		first = false;
		for (unsigned i = 0; i < nt; i++) {
			fibers[i].state = RUN;
			fibers[i].idx = thread_idx(i);
		}
		// from barrier to barrier: every thread runs until it waits or
		// ends (a warp's mma_sync lets its lanes go on when the last
		// arrives: passes until none runs); all waiting releases them
		for (;;) {
			unsigned waiting = 0, done = 0, mma = 0, running = 0;
			run_pass(nt, reverse);
			for (unsigned i = 0; i < nt; i++) {
				waiting += fibers[i].state == WAIT;
				done += fibers[i].state == DONE;
				mma += fibers[i].state == MMA;
				running += fibers[i].state == RUN;
			}
			if (running)
				continue;
			if (mma) {
				// lanes at mma_sync whose warp's others ended or
				// wait at __syncthreads: they go on, d as it was
				char m[240];
				snprintf(m, sizeof(m),
					 "block (%u,%u,%u): %u of its %u threads wait at mma_sync for lanes of "
					 "their warp that ended or wait at __syncthreads",
					 blockIdx.x, blockIdx.y, blockIdx.z, mma, nt);
				fail(cudaErrorLaunchFailure, kernel, m);
				for (unsigned i = 0; i < nt; i++)
					if (fibers[i].state == MMA)
						fibers[i].state = RUN;
				for (auto &w : warp_mma)
					w.arrived = 0;
				continue;
			}
			if (!waiting)
				break;
			if (done && !diverged) {
				char m[200];
				snprintf(m, sizeof(m),
					 "block (%u,%u,%u): %u of its %u threads wait at __syncthreads, "
					 "%u ended without reaching it",
					 blockIdx.x, blockIdx.y, blockIdx.z, waiting, nt, done);
				fail(cudaErrorLaunchFailure, kernel, m);
				diverged = true;
			}
			for (unsigned i = 0; i < nt; i++)
				if (fibers[i].state == WAIT)
					fibers[i].state = RUN;
		}
		cp_block_end(nt);
	}
}

// A CHECK launch's copies of the "device" memory: every allocation's bytes
// before it ran (to run it again from them), and the forward run's bytes of
// the allocations that run changed (the reversed run's reference).  Only
// the changed ones are copied back and aside, and both buffers are kept
// from launch to launch: three fresh copies of every allocation a launch
// (and the page faults of new buffers) were most of test_cuda_kernels'
// time, where a launch writes one or two of them.
struct Part {
	uintptr_t at;
	size_t n, before, fwd;   // size; offsets in the buffers
	bool changed;
};

struct Snapshot {
	std::vector<Part> parts;
	std::vector<unsigned char> before, fwd;   // only grown

	static void room(std::vector<unsigned char> &b, size_t n)
	{
		if (b.size() < n)
			b.resize(n);
	}
	const unsigned char *mem(const Part &p) const { return reinterpret_cast<const unsigned char *>(p.at); }

	// before the forward run
	void take()
	{
		size_t total = 0;
		parts.clear();
		for (const auto &a : allocs) {
			parts.push_back(Part{a.first, a.second, total, 0, false});
			total += a.second;
		}
		room(before, total);
		for (const auto &p : parts)
			memcpy(before.data() + p.before, mem(p), p.n);
	}
	// after it: what it changed aside, and back as it was
	void keep_forward_and_restore()
	{
		size_t total = 0;
		for (auto &p : parts) {
			p.changed = memcmp(mem(p), before.data() + p.before, p.n) != 0;
			if (p.changed) {
				p.fwd = total;
				total += p.n;
			}
		}
		room(fwd, total);
		for (const auto &p : parts)
			if (p.changed) {
				memcpy(fwd.data() + p.fwd, mem(p), p.n);
				memcpy(reinterpret_cast<void *>(p.at), before.data() + p.before, p.n);
			}
	}
	// the forward run's bytes of an allocation
	const unsigned char *forward(const Part &p) const
	{
		return p.changed ? fwd.data() + p.fwd : before.data() + p.before;
	}
};

// After the reversed run: the first byte that differs from the forward
// run's, outside atomicAdd's, as the launch's error.
void compare(const Snapshot &snap, const char *kernel)
{
	for (const auto &p : snap.parts) {
		const unsigned char *now = snap.mem(p), *fw = snap.forward(p);
		if (!memcmp(now, fw, p.n))
			continue;
		for (size_t i = 0; i < p.n; i++) {
			if (now[i] == fw[i] || atomic_bytes.count(p.at + i))
				continue;
			size_t at = i & ~(size_t)3;
			float f = 0, r = 0;
			if (at + 4 <= p.n) {
				memcpy(&f, fw + at, 4);
				memcpy(&r, now + at, 4);
			}
			char m[400];
			snprintf(m, sizeof(m),
				 "its result depends on the order its threads run in: byte %zu of the "
				 "%zu-byte allocation %p is 0x%02x with blocks and threads run forward, "
				 "0x%02x reversed (the 4 bytes from %zu as floats: %.9g, %.9g); a barrier "
				 "missing between a write and another thread's read, shared memory read "
				 "before the block wrote it, or two threads writing different values to one place",
				 i, p.n, reinterpret_cast<void *>(p.at), fw[i], now[i],
				 at, (double)f, (double)r);
			fail(cudaErrorLaunchFailure, kernel, m);
			return;
		}
	}
}

} // namespace

void cuemu::wmma_misaligned(const char *op, const void *p, unsigned ldm, size_t esize)
{
	const bool ptr_ok = (uintptr_t)p % 32 == 0;
	if (misaligned_said)
		return;
	misaligned_said = true;
	char m[300];
	if (!ptr_ok)
		snprintf(m, sizeof(m),
			 "block (%u,%u,%u) thread (%u,%u,%u): wmma::%s at %p, %u bytes past a 32-byte "
			 "boundary: a tile must start 256-bit aligned (a GPU: misaligned address)",
			 blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, op, p,
			 (unsigned)((uintptr_t)p % 32));
	else
		snprintf(m, sizeof(m),
			 "block (%u,%u,%u) thread (%u,%u,%u): wmma::%s with ldm %u of %zu-byte elements "
			 "(%zu bytes): the stride must be a multiple of 16 bytes",
			 blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, op, ldm,
			 esize, (size_t)ldm * esize);
	fail(cudaErrorMisalignedAddress, kernel_name, m);
}

bool cuemu::bounds(unsigned max_threads, unsigned min_blocks, unsigned max_cluster)
{
	unsigned nt = blockDim.x * blockDim.y * blockDim.z;
	(void)min_blocks, (void)max_cluster;   // occupancy hints: nothing to check
	if (nt <= max_threads)
		return true;
	if (!bounds_said) {
		bounds_said = true;
		char m[200];
		snprintf(m, sizeof(m),
			 "a block of %u threads (%u,%u,%u), where its __launch_bounds__ allows %u (a GPU: "
			 "too many resources requested for launch)",
			 nt, blockDim.x, blockDim.y, blockDim.z, max_threads);
		fail(cudaErrorLaunchOutOfResources, kernel_name, m);
	}
	return false;
}

void cuemu::pdl_enter()
{
	pdl_entered++;
}

void cuemu::cp_async4(float *dst, const float *src, bool ok)
{
	CpCopy c = { dst, ok ? src : nullptr };
	if (cp_at_issue)
		cp_land({ c });
	else
		cp_threads[linear_thread()].open.push_back(c);
}

void cuemu::cp_async_commit()
{
	CpThread &t = cp_threads[linear_thread()];
	t.groups.push_back(std::move(t.open));
	t.open.clear();
}

void cuemu::cp_async_wait(int n)
{
	CpThread &t = cp_threads[linear_thread()];
	while (t.groups.size() > (size_t)(n > 0 ? n : 0)) {
		cp_land(t.groups.front());
		t.groups.erase(t.groups.begin());
	}
}

void cuemu::set_programmatic(bool on)
{
	programmatic = on;
}

unsigned cuemu::lane()
{
	return linear_thread() % 32;
}

const void *cuemu::load_tile(const LoadAt &at, size_t tile_bytes)
{
	const LoadTile *k = warp_reuse(load_tiles, load_calls);
	if (!k || k->at.p != at.p || k->at.ldm != at.ldm || k->at.shape != at.shape ||
	    k->bytes.size() != tile_bytes)
		return nullptr;
	return k->bytes.data();
}

void cuemu::load_keep(const LoadAt &at, const void *tile, size_t tile_bytes)
{
	LoadTile *k = warp_keep(load_tiles, load_calls);
	if (!k)
		return;
	k->at = at;
	const unsigned char *o = static_cast<const unsigned char *>(tile);
	k->bytes.assign(o, o + tile_bytes);
}

namespace {
// A wrong mma_sync: the launch's error, said once (the lanes go on, their
// d as it was)
void mma_wrong(const char *what)
{
	if (mma_said)
		return;
	mma_said = true;
	char m[300];
	snprintf(m, sizeof(m), "block (%u,%u,%u) thread %u: mma_sync %s", blockIdx.x, blockIdx.y,
		 blockIdx.z, linear_thread(), what);
	fail(cudaErrorLaunchFailure, kernel_name, m);
}

// The warp's product, by the lane that arrived last, and the others let go
void mma_release(unsigned w, unsigned lanes)
{
	WarpMma &m = warp_mma[w];
	if (m.mixed)
		mma_wrong("with other shapes or types than another lane of its warp: a warp's "
			  "fragments are one matrix");
	else
		m.compute(m.lane);
	m.arrived = 0;
	for (unsigned i = 0; i < lanes; i++)
		if (fibers[w * 32 + i].state == MMA)
			fibers[w * 32 + i].state = RUN;
}
} // namespace

void cuemu::mma_arrive(const MmaShare &mine, MmaCompute compute)
{
	if (cur == kOutside) {
		fprintf(stderr, "cuemu: mma_sync outside a kernel\n");
		abort();
	}
	if (cur == kDirect) {
		mma_wrong("where the launch's first block met no barrier or mma_sync: cuemu runs its "
			  "later blocks without fibers and cannot gather a warp");
		return;
	}
	const unsigned nt = blockDim.x * blockDim.y * blockDim.z, t = linear_thread(), w = t / 32;
	const unsigned lanes = nt - w * 32 < 32 ? nt - w * 32 : 32;
	if (lanes < 32) {
		mma_wrong("in a warp of fewer than 32 threads (the block's last): wmma takes the whole warp");
		return;
	}
	barriers++;   // (the launch's later blocks run as fibers)
	WarpMma &m = warp_mma[w];
	if (m.arrived == 0) {
		m.compute = compute;
		m.mixed = false;
	}
	m.mixed |= m.compute != compute;
	m.lane[t % 32] = mine;
	if (++m.arrived < lanes) {
		Fiber &f = fibers[cur];
		f.state = MMA;
		yield(f);
		return;
	}
	mma_release(w, lanes);
}

float atomicAdd(float *address, float val)
{
	if (recording_atomics)
		for (int i = 0; i < 4; i++)
			atomic_bytes.insert(reinterpret_cast<uintptr_t>(address) + i);
	float old = *address;
	*address = old + val;
	return old;
}

unsigned atomicAdd(unsigned *address, unsigned val)
{
	unsigned old = *address;
	*address = old + val;
	return old;
}

void __threadfence(void) {}

namespace {

void run_now(const cuemu::Cfg &cfg, const char *kernel, std::function<void()> &fn)
{
	gridDim = cfg.grid;
	blockDim = cfg.block;
	body = [](void *p) { (*static_cast<std::function<void()> *>(p))(); };
	body_arg = &fn;
	kernel_name = kernel;
	int o = order_now();
	if (o != CHECK) {
		run_grid(cfg, kernel, o == REVERSE);
		return;
	}
	// Forward from the memory as it is, then reversed from the same
	// memory; a launch that failed forward is not run again.
	static Snapshot snap;
	snap.take();
	atomic_bytes.clear();
	recording_atomics = true;
	cudaError_t had = last_error;
	last_error = cudaSuccess;
	run_grid(cfg, kernel, false);
	if (last_error == cudaSuccess) {
		snap.keep_forward_and_restore();
		run_grid(cfg, kernel, true);
		if (last_error == cudaSuccess)
			compare(snap, kernel);
	}
	recording_atomics = false;
	if (had != cudaSuccess)
		last_error = had;
}

} // namespace

// CUEMU_FAIL_KERNELS=k1,k2: launches of those kernels are refused as a GPU
// refuses one that needs more than it has (cudaErrorLaunchOutOfResources):
// how a test sees the host code's answer to a kernel that cannot launch on
// some GPU.  CUEMU_FAULT_KERNELS=k1,k2: those launch, and fault when they
// run (cudaErrorIllegalAddress, sticky).  CUEMU_SLOW_KERNELS=k1,k2: those
// run as ever, and cost the modelled clock 100 times their threads' time
// (how a test makes one choice of code that times its choices lose).  A
// kernel is named as at its launch (`k<<<...>>>`'s k); a cuDNN
// convolution call as its function and algorithm (dnn.cc).
__attribute__((noinline, optimize("tree-vectorize", "vect-cost-model=dynamic"))) void
cuemu::axpy(float *__restrict y, float a, const float *__restrict x, int n)
{
	for (int i = 0; i < n; i++)
		y[i] += a * x[i];
}

bool cuemu::named_in(const char *var, const char *kernel)
{
	const char *list = getenv(var);
	size_t n = strlen(kernel);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, kernel, n))
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

// A configuration the GPU refuses fails at the launch, as there; the
// grid runs when its stream gets to it (streams.cc).
void cuemu::run(const Cfg &cfg, const char *kernel, std::function<void()> fn)
{
	if (sticky_error != cudaSuccess)
		return;   // the context is gone: cudaGetLastError says so
	if (named_in("CUEMU_FAIL_KERNELS", kernel)) {
		fail(cudaErrorLaunchOutOfResources, kernel,
		     "launch refused: named in CUEMU_FAIL_KERNELS (a GPU: too many resources requested "
		     "for launch)");
		return;
	}
	const char *bad = bad_config(cfg);
	if (bad) {
		char m[160];
		snprintf(m, sizeof(m), "launch <<<(%u,%u,%u), (%u,%u,%u)>>> refused: %s", cfg.grid.x,
			 cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z, bad);
		fail(cudaErrorInvalidConfiguration, kernel, m);
		return;
	}
	unsigned nt = cfg.block.x * cfg.block.y * cfg.block.z;
	for (unsigned i = 0; i < nt; i++)
		if (!fiber_init(fibers[i])) {
			fail(cudaErrorMemoryAllocation, kernel, "no memory for the threads' stacks");
			return;
		}
	Cfg c = cfg;
	double threads = (double)nt * cfg.grid.x * cfg.grid.y * cfg.grid.z;
	bool fault = named_in("CUEMU_FAULT_KERNELS", kernel);
	double ms = threads_ms(threads);
	if (named_in("CUEMU_SLOW_KERNELS", kernel))
		ms = slowed_ms(ms);
	enqueue(cfg.stream, kernel,
		[c, kernel, fn, fault]() mutable {
			if (sticky_error != cudaSuccess)
				return;
			if (fault) {
				fprintf(stderr, "cuemu: %s: faulted: named in CUEMU_FAULT_KERNELS (a GPU: an "
					"illegal memory access; the context is unusable after it)\n", kernel);
				sticky_error = cudaErrorIllegalAddress;
				return;
			}
			run_now(c, kernel, fn);
		},
		ms);
}

extern "C" void cuemu_clear_fault(void)
{
	sticky_error = cudaSuccess;
	last_error = cudaSuccess;
}

// ---- the runtime calls test_cuda_kernels makes ----------------------------

// Is [p, p+n) inside one allocation?  (Host pointers given as device ones
// are a bug a GPU reports as an illegal address.)
bool cuemu::inside(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	auto it = allocs.upper_bound(a);
	if (it == allocs.begin())
		return false;
	--it;
	return a >= it->first && a - it->first + n <= it->second;
}

using cuemu::inside;

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	*devPtr = nullptr;
	cudaError_t c = cuemu::capture_forbids("cudaMalloc");
	if (c != cudaSuccess)
		return c;
	// 256-byte aligned, as cudaMalloc's on a GPU: code may rely on it
	// (wmma tiles, vector loads), and malloc's 16 would fail wmma_check
	size_t whole = ((size ? size : 1) + 255) / 256 * 256;
	void *p = nullptr;
#ifndef CUEMU_ASAN
	auto s = spare.blocks.find(whole);
	if (s != spare.blocks.end()) {
		p = s->second;
		spare.bytes -= whole;
		spare.blocks.erase(s);
	}
#endif
	if (!p)
		p = aligned_alloc(256, whole);
	if (!p)
		return cudaErrorMemoryAllocation;
#ifdef CUEMU_ASAN
	// Under ASan the rounding's tail is poisoned: a read or write past
	// the size asked for fails there, as compute-sanitizer's memcheck
	// fails it on a GPU (whose allocations are rounded up too, so the
	// access itself would not fault).
	ASAN_POISON_MEMORY_REGION((char *)p + size, whole - size);
#endif
	// Never zeros: every byte 0xff, a NaN as a float or bf16, -1 as an
	// integer, so a kernel or a library call that reads memory nothing
	// wrote (compute-sanitizer's initcheck) shows in its results.
	memset(p, 0xff, size);
	allocs[(uintptr_t)p] = size;
	*devPtr = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
	if (!devPtr)
		return cudaSuccess;
	cudaError_t c = cuemu::capture_forbids("cudaFree");
	if (c != cudaSuccess)
		return c;
	cuemu::drain_all();   // cudaFree waits for the device, as on a GPU
	auto it = allocs.find((uintptr_t)devPtr);
	if (it == allocs.end())
		return cudaErrorInvalidValue;
	size_t whole = ((it->second ? it->second : 1) + 255) / 256 * 256;   // as cudaMalloc rounded it
#ifdef CUEMU_ASAN
	ASAN_UNPOISON_MEMORY_REGION(devPtr, whole);
#endif
	allocs.erase(it);
#ifndef CUEMU_ASAN
	if (whole >= kSpareMin && spare.bytes + whole <= kSpareMax) {
		spare.blocks.emplace(whole, devPtr);
		spare.bytes += whole;
		return cudaSuccess;
	}
#endif
	free(devPtr);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	if (!count)
		return cudaSuccess;
	bool dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	bool dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	if ((dev_dst && !inside(dst, count)) || (dev_src && !inside(src, count)))
		return cudaErrorInvalidValue;
	cudaError_t c = cuemu::capture_forbids("cudaMemcpy");
	if (c != cudaSuccess)
		return c;
	// the legacy stream's: after its work (and the blocking streams'),
	// not after a non-blocking stream's
	cuemu::drain_legacy();
	memcpy(dst, src, count);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	if (count && !inside(devPtr, count))
		return cudaErrorInvalidValue;
	cudaError_t c = cuemu::capture_forbids("cudaMemset");
	if (c != cudaSuccess)
		return c;
	cuemu::drain_legacy();
	memset(devPtr, value, count);
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t c = cuemu::capture_forbids("cudaDeviceSynchronize");
	if (c != cudaSuccess)
		return c;
	cuemu::drain_all();
	// a failed launch is sticky in the emulation
	return sticky_error != cudaSuccess ? sticky_error : last_error;
}

cudaError_t cudaGetLastError(void)
{
	if (sticky_error != cudaSuccess)
		return sticky_error;
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return sticky_error != cudaSuccess ? sticky_error : last_error;
}

const char *cudaGetErrorName(cudaError_t error)
{
	switch (error) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
	case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
	case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorIllegalState: return "cudaErrorIllegalState";
	case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
	case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
	case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
	case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
	case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
	case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
	default: return "cudaErrorUnknown";
	}
}

const char *cudaGetErrorString(cudaError_t error)
{
	switch (error) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument (cuemu: a pointer outside every cudaMalloc)";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorLaunchFailure: return "unspecified launch failure (cuemu: see its message above)";
	case cudaErrorMisalignedAddress: return "misaligned address (cuemu: see its message above)";
	case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
	case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
	case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
	case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
	case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
	default: return "unknown error";
	}
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = cuemu::devices();
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (device < 0 || device >= cuemu::devices())
		return cudaErrorInvalidValue;
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "cuemu (the kernels' source run on the CPU)");
	prop->maxThreadsPerBlock = kMaxThreads;
	prop->warpSize = 32;
	prop->multiProcessorCount = kSMs;
	prop->major = cc_major;
	prop->minor = cc_minor;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	*device = cuemu::current_device();
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	if (device < 0 || device >= cuemu::devices())
		return last_error = cudaErrorInvalidDevice;
	switch (attr) {
	case cudaDevAttrMultiProcessorCount: *value = kSMs; return cudaSuccess;
	case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreads; return cudaSuccess;
	case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
	case cudaDevAttrComputeCapabilityMajor: *value = cc_major; return cudaSuccess;
	case cudaDevAttrComputeCapabilityMinor: *value = cc_minor; return cudaSuccess;
	default: return last_error = cudaErrorInvalidValue;
	}
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
							  int blockSize, size_t dynamicSMemSize)
{
	if (!func || blockSize < 1 || (unsigned)blockSize > kMaxThreads)
		return last_error = cudaErrorInvalidValue;
	*numBlocks = kBlocksPerSM;
	return cudaSuccess;
}

int cuemu_set_order(const char *name)
{
	int o = name ? order_named(name) : -1;
	if (o < 0)
		return -1;
	order = o;
	return 0;
}

void cuemu_set_cc(int major, int minor)
{
	cc_major = major;
	cc_minor = minor;
}

} // extern "C"
