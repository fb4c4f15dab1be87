// What the kernel files of the GPU path share (kernels.cu: the element-wise
// kernels and conv1's; conv2_tc.cu: conv2 on the tensor cores): the
// headers, the grid size of a grid-stride loop, and the loads and stores
// that widen and round bf16.  cuemu compiles the same files for the CPU.
#ifndef CNN_KERNELS_COMMON_CUH
#define CNN_KERNELS_COMMON_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "check.h"
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n)
{
	size_t b = (n + kThreads - 1) / kThreads;
	if (b < 1)
		b = 1;
	return b > 65535u * 16u ? 65535u * 16u : (unsigned)b;
}

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
// round to nearest even, as cnn_bf16_from_float (bf16.h)
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

// bf16 storage: cnn_bf16 is the bits of a __nv_bfloat16.
inline bf16 *B(cnn_bf16 *p) { return reinterpret_cast<bf16 *>(p); }
inline const bf16 *B(const cnn_bf16 *p) { return reinterpret_cast<const bf16 *>(p); }

} // namespace

#endif
