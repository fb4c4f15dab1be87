// cuemu: run trainer/cuda/kernels.cu on the CPU, for machines without a GPU.
//
// Not a CUDA implementation: just enough of the execution model for
// element-wise kernels and block reductions, so test_cuda_kernels can
// compare the kernels' own source with their CPU twins where no GPU is
// lent (make check, CI).  tests/Makefile compiles kernels.cu with g++ and
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
//   that reads or writes out of bounds;
// - atomicAdd is a plain add (one OS thread runs everything).
//
// What it cannot show: the GPU's own float behaviour (nvcc's FMA
// contraction, the device's expf, bf16 conversion instructions: here they
// are g++'s and the CUDA headers' host code), data races between threads,
// memory ordering, warp-level timing.  The real run on a GPU remains the
// proof; this finds indexing, bounds, reduction and barrier mistakes.
#ifndef CUEMU_H
#define CUEMU_H

#include <stddef.h>

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>

// host_defines.h makes __global__, __device__, __shared__ empty outside
// nvcc; shared memory must be one per block, not one per thread.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

void __syncthreads(void);
float atomicAdd(float *address, float val);

namespace cuemu {

struct Cfg {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
	Cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), shmem(s), stream(st)
	{
	}
};

// Run fn(arg) once per thread of the grid; a failure is kept for
// cudaGetLastError.
void run(const Cfg &cfg, const char *kernel, void (*fn)(void *), void *arg);

// k<<<cfg>>>(args): the arguments are copied at the launch, as CUDA does.
template <class F, class... A> void launch(const Cfg &cfg, const char *kernel, F f, A... a)
{
	auto body = [&]() { f(a...); };
	run(cfg, kernel, [](void *p) { (*static_cast<decltype(body) *>(p))(); }, &body);
}

} // namespace cuemu

#endif
