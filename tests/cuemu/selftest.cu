// Kernels that test cuemu itself (test_cuemu.c): the execution model
// test_cuda_kernels_emu relies on, and the mistakes it must report.
// Plain CUDA: nvcc compiles this file as it is.
#include <cuda_runtime_api.h>

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

} // namespace

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

extern "C" int cuemu_selftest_touch(float *x, unsigned threads)
{
	touch<<<1, threads>>>(x);
	return cudaGetLastError();
}
