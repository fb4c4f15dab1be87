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
#include "pdl.h"

// Each kernel's first statement (tests/tools/pdl_lint checks it): wait
// for the grids this launch depends on programmatically, then let those
// that depend on it launch (pdl.h; no-ops on a launch without a
// programmatic edge, and before sm_90).  Waiting before anything else
// keeps every read and write of the kernel after its predecessors', as an
// ordinary edge does.
#ifdef CUEMU_H
#define pdl_enter() cuemu::pdl_enter()
#else
__device__ __forceinline__ void pdl_enter()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif

// After each launch: its error, as cudaCheck, and its node where a graph's
// capture records them (pdl.h).
#define LAUNCHED(s)                                                                  \
	do {                                                                         \
		cudaCheck(cudaGetLastError());                                       \
		cnn_cuda_note((s), CNN_NODE_OURS);                                   \
	} while (0)

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


// cp.async (compute capability 8.0 and newer): a 4-byte copy from global
// to shared memory that the thread does not wait for, or zeros where ok is
// false (src is then not read); cp_async_commit closes the thread's group
// of copies so far; cp_async_wait<N>() returns once all but the N newest
// groups have landed (in this thread's view: a barrier after it makes
// them the block's).  cuemu lands each copy late, at that wait (cuemu.h).
#ifdef CUEMU_H
inline void cp_async4(float *dst, const float *src, bool ok) { cuemu::cp_async4(dst, src, ok); }
inline void cp_async_commit() { cuemu::cp_async_commit(); }
template <int N> inline void cp_async_wait() { cuemu::cp_async_wait(N); }
#else
__device__ __forceinline__ void cp_async4(float *dst, const float *src, bool ok)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0)
		     : "memory");
#else
	*dst = ok ? *src : 0.f;
#endif
}
__device__ __forceinline__ void cp_async_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
#endif

// The CPU twin's cnn_mix64 (rng.h), for the dropout masks.
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// Whether dropout keeps element i of the mask of key (cnn_dropout_fwd's:
// each group of 4 elements shares one draw of 64 bits, 16 per element).
// kept_in: element k (0..3) of the group whose draw is r.
__device__ __forceinline__ bool kept_in(uint64_t r, unsigned k, uint32_t thresh)
{
	return ((r >> (16 * k)) & 0xffff) >= thresh;
}
__device__ __forceinline__ bool kept(uint64_t key, size_t i, uint32_t thresh)
{
	return kept_in(mix64(key + (i & ~(size_t)3)), (unsigned)(i & 3), thresh);
}

// A sum as a kernel stores it in T and reads it back: itself, or rounded
// to bf16 (nearest even).
__device__ __forceinline__ float stored_as(const float *, float v) { return v; }
__device__ __forceinline__ float stored_as(const bf16 *, float v)
{
	return __bfloat162float(__float2bfloat16_rn(v));
}

// relu(x + b) as bias_relu stores it in T: the pool applies the bias and
// the ReLU of conv2 on its way in, so they cost no pass over conv2's
// output, and its maxima and arg are those of bias_relu then maxpool2_fwd.
__device__ __forceinline__ float bias_relu_as(const float *, float x, float b)
{
	float v = x + b;
	return v > 0.f ? v : 0.f;
}
__device__ __forceinline__ float bias_relu_as(const bf16 *, float x, float b)
{
	float v = x + b;
	return __bfloat162float(__float2bfloat16_rn(v > 0.f ? v : 0.f));
}

// What the pool does besides the max (kernels.h cnn_cuda_pool_ep): the
// bias (NULL: none), and dropout (keyp NULL: none) with thresh and scale
// as cnn_dropout_fwd computes them.
struct PoolEp {
	const float *b;
	uint32_t thresh;
	float scale;
	const uint64_t *keyp;
	bf16 *yb;                   // also the output rounded to bf16 (NULL: not)
};

inline PoolEp pool_ep(const cnn_cuda_pool_ep *ep)
{
	PoolEp e = { NULL, 0, 1.f, NULL, NULL };
	if (ep) {
		e.b = ep->bias;
		e.yb = reinterpret_cast<bf16 *>(ep->yb);
		if (ep->p > 0.f && ep->key) {
			e.thresh = (uint32_t)(ep->p * 65536.f);
			e.scale = 1.f / (1.f - ep->p);
			e.keyp = ep->key;
		}
	}
	return e;
}

// Pool window i of values v (as stored in T: conv2's output without its
// bias): with ep.b, each through bias_relu_as first; the maximum (strict >
// keeps the first, as PyTorch and the CPU twin) and its position 0..3 to
// *y and *arg, the maximum through dropout as output i of the mask.  The
// pool kernels (kernels.cu) and conv2's forward with the pool in its
// epilogue (conv2_tc.cu) share it: the same bits either way.
// pool_max: the first half, the maximum (returned) and its position (*a),
// before dropout.
template <typename T>
__device__ __forceinline__ float pool_max(float v[4], const PoolEp &ep, float bc, uint8_t *a)
{
	if (ep.b)
		for (int k = 0; k < 4; k++)
			v[k] = bias_relu_as((const T *)0, v[k], bc);
	float m = v[0];
	*a = 0;
	for (int k = 1; k < 4; k++)
		if (v[k] > m) {
			m = v[k];
			*a = (uint8_t)k;
		}
	return m;
}
template <typename T>
__device__ __forceinline__ void pool_window(float v[4], const PoolEp &ep, uint64_t key, float bc,
					    size_t i, float *y, uint8_t *arg)
{
	uint8_t a;
	float m = pool_max<T>(v, ep, bc, &a);
	if (ep.keyp)
		m = kept(key, i, ep.thresh) ? m * ep.scale : 0.f;
	*y = m;
	*arg = a;
	if (ep.yb)
		ep.yb[i] = __float2bfloat16_rn(m);
}

} // namespace

#endif
