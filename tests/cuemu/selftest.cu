// Kernels that test cuemu itself (test_cuemu.c): the execution model
// test_cuda_kernels_emu relies on, and the mistakes it must report.
// Plain CUDA: nvcc compiles this file as it is.
#include <cuda_runtime_api.h>
#ifdef __CUDACC__
#include <mma.h>
#endif

extern "C" {
#include "selftest.h"
}

namespace {

// Every thread of a 3-D grid of 3-D blocks adds its linear index + 1 to
// its own element: each element ends as its index + 1 only when every
// thread ran exactly once with the right coordinates.
__global__ void coords(int *out)
{
	unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
	unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
	unsigned nt = blockDim.x * blockDim.y * blockDim.z;
	out[b * nt + t] += 1 + (int)(b * nt + t);
}

// A block's sum through shared memory, and a second phase that reads what
// other threads wrote: wrong without barriers that really wait.
__global__ void block_sums(const float *x, float *sums, float *shifted)
{
	__shared__ float red[256];
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	red[threadIdx.x] = x[i];
	__syncthreads();
	shifted[i] = red[(threadIdx.x + 1) % blockDim.x];   // a neighbour's value
	__syncthreads();
	for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
		if (threadIdx.x < half)
			red[threadIdx.x] += red[threadIdx.x + half];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		sums[blockIdx.x] = red[0];
		atomicAdd(&sums[gridDim.x], red[0]);
	}
}

// Only some threads of a block reach the barrier: undefined on a GPU.
__global__ void diverged(float *x)
{
	if (threadIdx.x < 10)
		__syncthreads();
	x[threadIdx.x] = 1.f;
}

// A barrier only in block 1: legal CUDA that cuemu cannot run (it says so).
__global__ void late_barrier(float *x)
{
	if (blockIdx.x == 1)
		__syncthreads();
	x[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

__global__ void touch(float *x) { x[threadIdx.x] = 1.f; }

// touch with a bound of 32 threads a block (and 2 blocks an SM): a launch
// of more is refused, on a GPU as here
__global__ void __launch_bounds__(32, 2)
touch_bounded(float *x, dim3 at)
{
	x[threadIdx.y * at.x + threadIdx.x] = 2.f;
}

// y = a x + b, one block: the streams' tests' unit of work.
__global__ void axpb(const float *x, float *y, float a, float b) { y[threadIdx.x] = a * x[threadIdx.x] + b; }

// axpb that waits for its programmatic predecessors first, as every kernel
// of cnn_train's does (kernels_common.cuh's pdl_enter)
__global__ void axpb_pdl(const float *x, float *y, float a, float b)
{
	cuemu::pdl_enter();
	y[threadIdx.x] = a * x[threadIdx.x] + b;
}

// cp.async: thread t copies x[t] (even t) or zeros (odd t) into its slot
// of shared memory and reads the slot before any wait (where the copy
// lands at the wait: what was there, -1); with wait, it then waits and,
// after a barrier, reads its neighbour's slot; without, it ends with its
// copy not waited for (the launch fails).
__global__ void cp_async(const float *x, float *before, float *after, int wait)
{
	__shared__ float s[64];
	s[threadIdx.x] = -1.f;
	__syncthreads();
	cuemu::cp_async4(&s[threadIdx.x], &x[threadIdx.x], threadIdx.x % 2 == 0);
	cuemu::cp_async_commit();
	before[threadIdx.x] = s[threadIdx.x];
	if (!wait)
		return;
	cuemu::cp_async_wait(0);
	__syncthreads();
	after[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

// Races cuemu's CUEMU_ORDER=check must report, each a launch of 2 blocks
// of 64 threads writing x[0..127]:
// 0: a neighbour's shared value read with no barrier after the write;
// 1: a value read, then overwritten by its neighbour with no barrier
//    between (write after read);
// 2: every thread writing its own index to one place;
// 3: shared memory read before the block wrote it.
// 4 is the same as 0 with the barrier: no race.
__global__ void racy(float *x, int kind)
{
	__shared__ float s[64];
	unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
	switch (kind) {
	case 0:
		s[t] = (float)i;
		x[i] = s[(t + 1) % 64];
		break;
	case 1:
		s[t] = (float)i;
		__syncthreads();
		x[i] = s[(t + 1) % 64];
		s[t] = -(float)i;
		break;
	case 2:
		x[0] = (float)i;
		break;
	case 3:
		x[i] = s[t];
		s[t] = (float)i;
		break;
	default:
		s[t] = (float)i;
		__syncthreads();
		x[i] = s[(t + 1) % 64];
		break;
	}
}

// Each block adds its value to x[0] with atomicAdd: 1e8, 1, -1e8, 1 sum
// to 1 in that order and to 0 the other way round, which is a GPU's
// atomicAdd too: not a race for cuemu's check to report.
__global__ void atomic_order(float *x)
{
	const float v[4] = { 1e8f, 1.f, -1e8f, 1.f };
	atomicAdd(&x[0], v[blockIdx.x]);
}

// One warp: d (16 x 16, column-major, ld 16) = a (16 x 8, row-major, ld
// 8) b (8 x 16, column-major, ld 8) + c (16 x 16, row-major, ld 16), TF32;
// then r[i] = __float_to_tf32(r[i]) in place.
__global__ void wmma_tf32(const float *a, const float *b, const float *c, float *d, float *r, int nr)
{
	using namespace nvcuda;
	wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
	wmma::load_matrix_sync(fa, a, 8);
	wmma::load_matrix_sync(fb, b, 8);
	wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
	wmma::mma_sync(fc, fa, fb, fc);
	wmma::store_matrix_sync(d, fc, 16, wmma::mem_col_major);
	for (int i = threadIdx.x; i < nr; i += 32)
		r[i] = wmma::__float_to_tf32(r[i]);
}

// One warp copies a 16 x 8 tile (row-major) into a 16 x 16 accumulator's
// first 8 columns through fragments: from a + off, with stride ldm, into d
// + doff.  A GPU needs a and d 32-byte aligned and ldm * 4 bytes a
// multiple of 16.
__global__ void wmma_copy(const float *a, unsigned off, unsigned ldm, float *d, unsigned doff)
{
	using namespace nvcuda;
	wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
	wmma::load_matrix_sync(fa, a + off, ldm);
	wmma::fill_fragment(fb, 1.f);
	wmma::fill_fragment(fc, 0.f);
	wmma::mma_sync(fc, fa, fb, fc);
	wmma::store_matrix_sync(d + doff, fc, 16, wmma::mem_row_major);
}

// wmma used wrongly, by mode (a block of 32 threads but where said):
// 0 right: d = a's row sums (b all ones), then a barrier, then each lane
//   reads another lane's element of d into out;
// 1 the same without the barrier: a lane reads what another lane may not
//   have stored yet (a race CUEMU_ORDER=check reports);
// 2 a block of 48 threads: its second warp has 16;
// 3 lane 5 returns before mma_sync, the others wait for it;
// 4 lane 7 takes b in another layout: another mma than its warp's.
__global__ void wmma_wrong(const float *a, float *d, float *out, int mode)
{
	using namespace nvcuda;
	const unsigned lane = threadIdx.x % 32;
	wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
	wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fbc;
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
	wmma::load_matrix_sync(fa, a, 8);
	wmma::fill_fragment(fb, 1.f);
	wmma::fill_fragment(fbc, 1.f);
	wmma::fill_fragment(fc, 0.f);
	if (mode == 3 && lane == 5)
		return;
	if (mode == 4 && lane == 7)
		wmma::mma_sync(fc, fa, fbc, fc);
	else
		wmma::mma_sync(fc, fa, fb, fc);
	if (threadIdx.x >= 32)
		return;
	wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
	if (mode != 1)
		__syncthreads();
	out[lane] = d[(lane * 8 + 100) % 256];
}

// Each warp of each block (2 x 2) sums its own 16 x 8 tile's rows
// (a + 128 * tile, row-major) into d + 256 * tile (b all ones): then each
// lane adds 1000 to one element of that tile.  A warp's load_matrix_sync
// is one read, before any lane goes on: every sum is the tile's as it was.
__global__ void wmma_collective(float *a, float *d)
{
	using namespace nvcuda;
	wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
	const unsigned tile = blockIdx.x * 2 + threadIdx.x / 32, lane = threadIdx.x % 32;
	wmma::load_matrix_sync(fa, a + 128 * tile, 8);
	a[128 * tile + lane * 4] += 1000.f;
	wmma::fill_fragment(fb, 1.f);
	wmma::fill_fragment(fc, 0.f);
	wmma::mma_sync(fc, fa, fb, fc);
	wmma::store_matrix_sync(d + 256 * tile, fc, 16, wmma::mem_row_major);
}

} // namespace

extern "C" int cuemu_selftest_wmma_collective(float *a, float *d)
{
	wmma_collective<<<2, 64>>>(a, d);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_wmma_wrong(const float *a, float *d, float *out, int mode)
{
	wmma_wrong<<<1, mode == 2 ? 48 : 32>>>(a, d, out, mode);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_wmma_copy(const float *a, unsigned off, unsigned ldm, float *d,
					unsigned doff)
{
	wmma_copy<<<1, 32>>>(a, off, ldm, d, doff);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_coords(int *out, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				     unsigned by, unsigned bz)
{
	coords<<<dim3(gx, gy, gz), dim3(bx, by, bz)>>>(out);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_block_sums(const float *x, int blocks, float *sums, float *shifted)
{
	block_sums<<<blocks, 256>>>(x, sums, shifted);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_diverged(float *x)
{
	diverged<<<1, 64>>>(x);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_late_barrier(float *x)
{
	late_barrier<<<2, 32>>>(x);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_wmma_tf32(const float *a, const float *b, const float *c, float *d,
					float *r, int nr)
{
	wmma_tf32<<<1, 32>>>(a, b, c, d, r, nr);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_racy(float *x, int kind)
{
	racy<<<2, 64>>>(x, kind);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_atomic_order(float *x)
{
	atomic_order<<<4, 1>>>(x);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_touch(float *x, unsigned threads)
{
	touch<<<1, threads>>>(x);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_touch_bounded(float *x, unsigned tx, unsigned ty)
{
	touch_bounded<<<1, dim3(tx, ty)>>>(x, dim3(tx, ty));
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_axpb(const float *x, float *y, unsigned n, float a, float b,
				   cudaStream_t s)
{
	axpb<<<1, n, 0, s>>>(x, y, a, b);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_axpb_pdl(const float *x, float *y, unsigned n, float a, float b,
				       cudaStream_t s)
{
	axpb_pdl<<<1, n, 0, s>>>(x, y, a, b);
	return cudaGetLastError();
}

extern "C" int cuemu_selftest_cp_async(const float *x, float *before, float *after, int wait)
{
	cp_async<<<1, 64>>>(x, before, after, wait);
	return cudaGetLastError();
}
