// cuemu: run trainer/cuda/'s kernel files (*.cu) on the CPU, for
// machines without a GPU; with streams.cc, dnn.cc, blas.cc and nccl.cc
// (see each), the GPU path's host code too (test_gpu_step_emu).
//
// Not a CUDA implementation: just enough of the execution model for
// element-wise kernels and block reductions, so test_cuda_kernels can
// compare the kernels' own source with their CPU twins where no GPU is
// lent (make check, CI).  tests/Makefile compiles those files with g++ and
// this header forced in front, after one sed that turns each
// `k<<<grid, block, shmem, stream>>>(args)` into a cuemu::launch call.
//
// What is emulated, and how:
// - every thread of a block is a fiber (its own stack); blocks run one after
//   the other, a block's threads round-robin from barrier to barrier, so
//   __syncthreads and __shared__ (static: one block at a time) mean what
//   they mean on a GPU;
// - a barrier that some threads of a block never reach, or a launch
//   configuration a GPU refuses (more than 1024 threads a block, an empty
//   grid, grid.x over 2^31-1, grid.y or .z over 65535) is the launch's
//   error, returned by cudaGetLastError as on the GPU;
// - "device" memory is host memory from malloc, so ASan sees a kernel
//   that reads or writes out of bounds; 256-byte aligned, as a GPU's, and
//   filled with 0xff bytes (NaN) where a GPU leaves whatever was there,
//   so a read of memory nothing wrote shows in the results (initcheck);
// - wmma tiles must start 32-byte aligned with strides a multiple of 16
//   bytes, or the launch fails with cudaErrorMisalignedAddress;
// - CUEMU_FAIL_KERNELS=k1,k2 refuses those kernels' launches (too many
//   resources); CUEMU_FAULT_KERNELS=k1,k2 lets them launch and fault when
//   they run: an illegal address, sticky (every later sync and
//   cudaGetLastError returns it, nothing more runs), as on a GPU;
//   CUEMU_SLOW_KERNELS=k1,k2 runs them as ever at 100 times their modelled
//   time (streams.cc's clock), a cuDNN convolution named as its call and
//   algorithm ("cudnnConvolutionForward:1"); CUEMU_STEP_SLOW_KERNELS=k1,k2
//   the same, only where a graph of a training step's size replays them
//   (a call's cost in the step not its cost alone); CUEMU_DNN_ALGOS=N makes
//   cudnnFind list N algorithms, each 10% slower than the one before;
// - a block of more threads than the kernel's __launch_bounds__ allows
//   fails the launch (cudaErrorLaunchOutOfResources, "too many resources
//   requested for launch", as a GPU's) and runs no thread's body: the
//   Makefile's rewrite moves each kernel's bounds into its body as a
//   cuemu::bounds check;
// - cp.async (cuemu::cp_async4, below) lands late, at the wait that
//   covers it, or early in a check launch's reversed run;
// - a programmatic edge of a graph (cudaGraphAddDependencies) orders its
//   two kernels as any edge does, but the kernel it leads to must call
//   pdl_enter (griddepcontrol.wait) in every thread, or the launch fails;
//   the clock takes the launch's 2 microseconds off the edge (streams.cc);
//   CUEMU_NO_PDL=k1,k2 refuses such an edge into those kernels
//   (cudaErrorNotSupported);
// - atomicAdd is a plain add (one OS thread runs everything); the unsigned
//   one (a counter: exact whatever the order, so its bytes are compared)
//   too, and __threadfence does nothing: blocks run one after the other;
// - a launch is work on its stream (streams.cc): run at once, or as late
//   as the stream's waits allow (CUEMU_STREAMS=lazy), or captured into a
//   graph; a configuration the GPU refuses fails at the launch, a failure
//   while it runs is kept for the next cudaGetLastError, as on a GPU;
// - the device has 16 SMs (cudaDeviceGetAttribute, cudaGetDeviceProperties)
//   and cudaOccupancyMaxActiveBlocksPerMultiprocessor says 2 blocks of
//   any kernel fit on one: numbers for code that sizes its grid by the GPU,
//   not a model of occupancy; its compute capability is 9.0, or what
//   cuemu_set_cc(major, minor) sets (how a test sees the host code on an
//   older GPU: the kernels themselves are always compiled whole);
// - nvcuda::wmma (the tensor-core kernels): a fragment is spread over the
//   warp's 32 lanes as on a GPU (which lane holds which element is
//   cuemu's, below); a load is the warp's one read of the tile, each lane
//   taking its share; mma_sync waits for the warp's 32 lanes (a switch to
//   the next thread) and the last to arrive computes the warp's product
//   (the products of tf32 and bf16 operands are exact in fp32; the sums
//   run in k order); a store writes each lane's share.  A kernel may apply
//   an element-wise operation to all of a fragment's x[] but never rely on
//   which element a thread holds, nor read a tile another lane stored
//   before a barrier: the rules on a GPU too;
// - the order: blocks one after the other and, between two barriers, a
//   block's threads one after the other, from the first to the last, or
//   the other way round (CUEMU_ORDER=reverse, or cuemu_set_order); with
//   CUEMU_ORDER=check each launch runs forward, then again reversed from
//   the memory it started from, and a byte of any allocation that comes
//   out different is the launch's error (bytes an atomicAdd wrote aside:
//   their rounding depends on the order on a GPU too).  That is how a race
//   shows here: a barrier missing between one thread's write and another's
//   read (either way round), shared memory read before its block wrote it
//   (here it holds the previous block's), two threads writing different
//   values to one place.
//
// What it cannot show: the GPU's own float behaviour (nvcc's FMA
// contraction, the device's expf, bf16 conversion instructions: here they
// are g++'s and the CUDA headers' host code), a race whose outcome is the
// same both ways round (two threads writing the same value, a write of the
// value already there), memory ordering, warp-level timing.  The real run
// on a GPU remains the proof; this finds indexing, bounds, reduction,
// barrier and race mistakes.
#ifndef CUEMU_H
#define CUEMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>

#include "rt.h"

// host_defines.h makes __global__, __device__, __shared__ empty outside
// nvcc; shared memory must be one per block, not one per thread.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

extern "C" void cuemu_set_cc(int major, int minor);
// "forward", "reverse" or "check" (see above): 0, or -1 for another name
extern "C" int cuemu_set_order(const char *name);
// "eager" or "lazy" (streams.cc: when a stream's work runs): 0, or -1
extern "C" int cuemu_set_streams(const char *name);
// a kernel's fault (CUEMU_FAULT_KERNELS) is sticky, as on a GPU; a test
// that made one clears it here to go on
extern "C" void cuemu_clear_fault(void);
void __syncthreads(void);
float atomicAdd(float *address, float val);
unsigned atomicAdd(unsigned *address, unsigned val);
void __threadfence(void);

namespace cuemu {
// wmma's fragments are spread over a warp's lanes, as on a GPU: lane L of
// a fragment of R x C elements holds R*C/32 of them (num_elements), those
// from L*R*C/32 on of the tile in row-major order (a GPU's own mapping is
// unspecified; code that only loops over num_elements cannot tell).
// lane(): the running thread's lane in its warp.
unsigned lane();
// load_matrix_sync's tile for this thread's warp: a warp's k-th load is one
// collective read on a GPU (its lanes in step, before any of them writes
// again), so the first lane to make it reads the whole tile (keep records
// its bytes, row-major) and a lane whose k-th load names the same tile (p,
// ldm, shape) takes its share of those bytes: load_tile returns them, or
// null where this lane is the first or names another tile (it reads the
// tile itself).  The first lane's read is checked (ASan, the race check's
// reversed run reads first with the last lane).
struct LoadAt {
	const void *p;
	unsigned ldm, shape;
};
const void *load_tile(const LoadAt &at, size_t tile_bytes);
void load_keep(const LoadAt &at, const void *tile, size_t tile_bytes);
// mma_sync is a warp's one instruction: each lane hands over its fragments
// and waits (a switch to the next thread) until the warp's last lane
// arrives; that one runs compute over the 32 lanes' fragments (each d
// written after every a, b and c is read: d may be c) and releases the
// others.  Lanes of one call pass the same compute (the same shapes and
// types).  A warp that is not whole (a block not a multiple of 32
// threads), a lane that never arrives (it ended, or waits at
// __syncthreads), or a block after one that met no barrier (cuemu runs
// those without fibers) is the launch's error, loud, never silent.
struct MmaShare {
	const void *a, *b, *c;
	void *d;
};
typedef void (*MmaCompute)(const MmaShare *lanes);
void mma_arrive(const MmaShare &mine, MmaCompute compute);
// wmma's rule for load_matrix_sync and store_matrix_sync: the tile starts
// on a 256-bit (32-byte) boundary and its stride, ldm elements of esize
// bytes, is a multiple of 16 bytes.  A GPU faults (misaligned address) or
// reads the wrong elements otherwise; here it is the launch's error
// (cudaErrorMisalignedAddress), said once a launch.
void wmma_misaligned(const char *op, const void *p, unsigned ldm, size_t esize);
inline void wmma_check(const char *op, const void *p, unsigned ldm, size_t esize)
{
	if ((uintptr_t)p % 32 != 0 || (size_t)ldm * esize % 16 != 0)
		wmma_misaligned(op, p, ldm, esize);
}
// __launch_bounds__(max_threads, min_blocks, max_cluster), first thing in
// the kernel's body (tests/Makefile puts it there): false, and the
// launch's error, when the block has more threads than max_threads; the
// thread then returns, as every thread of the block does.
bool bounds(unsigned max_threads, unsigned min_blocks = 0, unsigned max_cluster = 0);
// griddepcontrol.wait then .launch_dependents (kernels_common.cuh's
// pdl_enter): counted, so that a kernel a graph's replay reaches through a
// programmatic edge (cudaGraphAddDependencies) and one of whose threads
// never called it is that launch's error (cudaErrorLaunchFailure): on a
// GPU such a kernel may read what its predecessor has not yet written.
void pdl_enter();
// cp.async (kernels_common.cuh): a thread's 4-byte copy from global to
// shared memory, or zeros where ok is false, in the group its next
// cp_async_commit closes; cp_async_wait(n) returns once all but its n
// newest groups have landed.  Each copy lands at the wait that covers it
// (a read of its destination before that wait, or another thread's before
// the barrier after it, sees the bytes that were there), or at once in a
// CUEMU_ORDER=check launch's reversed run (a copy into a stage some thread
// still reads changes what it reads): a pipeline whose waits and barriers
// are right computes the same either way.  A thread that ends with a copy
// not waited for fails the launch.
void cp_async4(float *dst, const float *src, bool ok);
void cp_async_commit();
void cp_async_wait(int n);
} // namespace cuemu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

template <class T> struct elem { typedef T type; };
template <> struct elem<precision::tf32> { typedef float type; };

template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { enum { rows = M, cols = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
	typedef typename elem<T>::type element_type;
	enum { rows = dims<Use, M, N, K>::rows, cols = dims<Use, M, N, K>::cols,
	       num_elements = rows * cols / 32 };
	static_assert(rows * cols % 32 == 0, "a tile spread evenly over a warp's 32 lanes");
	element_type x[num_elements];   // this lane's share (cuemu::lane)
};

// cvt.rna.tf32.f32 (rt.h)
inline float __float_to_tf32(float v)
{
	return cuemu::to_tf32(v);
}

template <class Use, int M, int N, int K, class T, class L, class E>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, const E &v)
{
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

// a tile's shape for cuemu::load_tile: rows, columns, element size, layout
constexpr unsigned load_shape(int rows, int cols, size_t esize, bool col)
{
	return (unsigned)rows << 20 | (unsigned)cols << 8 | (unsigned)esize << 1 | (col ? 1u : 0u);
}

// The tile read whole, row-major (the warp's first lane), then this lane's
// share of it
template <class F> void take_share(F &f, const typename F::element_type *tile)
{
	memcpy(f.x, tile + (size_t)cuemu::lane() * f.num_elements, sizeof(f.x));
}

template <class Use, int M, int N, int K, class T, class L, class E>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const E *p, unsigned ldm)
{
	typedef typename fragment<Use, M, N, K, T, L>::element_type V;
	const bool col = std::is_same<L, col_major>::value;
	cuemu::wmma_check("load_matrix_sync", p, ldm, sizeof(E));
	const cuemu::LoadAt at = { p, ldm, load_shape(f.rows, f.cols, sizeof(E), col) };
	V tile[f.rows * f.cols];
	const V *kept = static_cast<const V *>(cuemu::load_tile(at, sizeof(tile)));
	if (!kept) {
		for (int i = 0; i < f.rows; i++)
			for (int j = 0; j < f.cols; j++)
				tile[i * f.cols + j] = col ? p[i + (size_t)j * ldm] : p[(size_t)i * ldm + j];
		cuemu::load_keep(at, tile, sizeof(tile));
		kept = tile;
	}
	take_share(f, kept);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm,
		      layout_t l)
{
	cuemu::wmma_check("load_matrix_sync", p, ldm, sizeof(float));
	const cuemu::LoadAt at = { p, ldm, load_shape(M, N, sizeof(float), l == mem_col_major) | 1u << 31 };
	float tile[M * N];
	const float *kept = static_cast<const float *>(cuemu::load_tile(at, sizeof(tile)));
	if (!kept) {
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				tile[i * N + j] = l == mem_col_major ? p[i + (size_t)j * ldm] : p[(size_t)i * ldm + j];
		cuemu::load_keep(at, tile, sizeof(tile));
		kept = tile;
	}
	take_share(f, kept);
}

// each lane writes its share (a GPU's store is the warp's, and another
// thread reads it after a barrier)
template <int M, int N, int K>
void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm,
		       layout_t l)
{
	cuemu::wmma_check("store_matrix_sync", p, ldm, sizeof(float));
	const int base = (int)cuemu::lane() * f.num_elements;
	for (int t = 0; t < f.num_elements; t++) {
		const int i = (base + t) / N, j = (base + t) % N;
		(l == mem_col_major ? p[i + (size_t)j * ldm] : p[(size_t)i * ldm + j]) = f.x[t];
	}
}

#define CUEMU_UNCHECKED __attribute__((no_sanitize("address", "undefined")))
// (unchecked like mma_sync, its caller, or g++ does not inline them there)
CUEMU_UNCHECKED inline float as_float(float v) { return v; }
CUEMU_UNCHECKED inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// The warp's product (cuemu::mma_arrive's compute, run by its last lane):
// the 32 lanes' shares gathered into whole tiles, the products summed in k
// order from c, row by row (i, k, j): a loop g++ vectorizes, then each
// lane's share of d.  Not instrumented: it reads and writes only
// fragments, fixed-size arrays on the lanes' stacks, and it is most of the
// emulated tensor-core kernels' time.
template <int M, int N, int K, class T, class LA, class LB> struct Mma {
	typedef fragment<matrix_a, M, N, K, T, LA> A;
	typedef fragment<matrix_b, M, N, K, T, LB> B;
	typedef fragment<accumulator, M, N, K, float> C;

	CUEMU_UNCHECKED static void compute(const cuemu::MmaShare *lanes)
	{
		float fa[M * K], fb[K * N], r[M * N];
		for (int l = 0; l < 32; l++) {
			const A &a = *static_cast<const A *>(lanes[l].a);
			const B &b = *static_cast<const B *>(lanes[l].b);
			const C &c = *static_cast<const C *>(lanes[l].c);
			for (int t = 0; t < A::num_elements; t++)
				fa[l * A::num_elements + t] = as_float(a.x[t]);
			for (int t = 0; t < B::num_elements; t++)
				fb[l * B::num_elements + t] = as_float(b.x[t]);
			memcpy(r + l * C::num_elements, c.x, sizeof(c.x));
		}
		for (int i = 0; i < M; i++)
			for (int k = 0; k < K; k++) {
				const float v = fa[i * K + k];
				for (int j = 0; j < N; j++)
					r[i * N + j] += v * fb[k * N + j];
			}
		for (int l = 0; l < 32; l++) {
			C &d = *static_cast<C *>(lanes[l].d);
			memcpy(d.x, r + l * C::num_elements, sizeof(d.x));
		}
	}
};

template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
	      const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c)
{
	cuemu::mma_arrive(cuemu::MmaShare{ &a, &b, &c, &d }, &Mma<M, N, K, T, LA, LB>::compute);
}

} // namespace wmma
} // namespace nvcuda

namespace cuemu {

struct Cfg {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
	Cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), shmem(s), stream(st)
	{
	}
};

// Run fn once per thread of the grid, on cfg.stream (see streams.cc: now,
// queued, or captured); a refused configuration, or a failure while it
// runs, is kept for cudaGetLastError.
void run(const Cfg &cfg, const char *kernel, std::function<void()> fn);

// k<<<cfg>>>(args): the arguments are copied at the launch, as CUDA does
// (the launch may run later: a queued stream, a graph's replay).
template <class F, class... A> void launch(const Cfg &cfg, const char *kernel, F f, A... a)
{
	run(cfg, kernel, [f, a...]() mutable { f(a...); });
}

} // namespace cuemu

#endif
