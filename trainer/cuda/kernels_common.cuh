// What the kernel files of the GPU path share (kernels.cu: the element-wise
// kernels of the activations; conv1.cu: conv1's direct kernels; classifier.cu:
// the gather, the classifier's fused kernels and the optimizers; conv2_tc.cu:
// conv2 on the tensor cores): the headers, the grid size of a grid-stride
// loop, the loads and stores that widen and round bf16, the bias
// gradients' reductions.  cuemu compiles the same files for the CPU.
#ifndef CNN_KERNELS_COMMON_CUH
#define CNN_KERNELS_COMMON_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "errors.h"
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

// Eight adjacent elements at a 16-byte aligned address, in 16-byte loads
// (two of float, one of bf16), and stores.
__device__ __forceinline__ void ld8(const float *p, float *v)
{
	const float4 *q = reinterpret_cast<const float4 *>(p);
	float4 a = q[0], b = q[1];
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
	v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void ld8(const bf16 *p, float *v)
{
	// a bf16 is a float's top 16 bits (__bfloat162float's conversion);
	// memcpy, the one type pun C++ defines, is register moves on a GPU
	uint4 t = *reinterpret_cast<const uint4 *>(p);
	uint32_t u[4] = { t.x, t.y, t.z, t.w };
	for (int k = 0; k < 4; k++) {
		uint32_t lo = u[k] << 16, hi = u[k] & 0xffff0000u;
		memcpy(&v[2 * k], &lo, 4);
		memcpy(&v[2 * k + 1], &hi, 4);
	}
}
// Four adjacent elements at an address aligned to four of them, in one load.
__device__ __forceinline__ void ld4(const float *p, float *v)
{
	float4 a = *reinterpret_cast<const float4 *>(p);
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ __forceinline__ void ld4(const bf16 *p, float *v)
{
	uint2 t = *reinterpret_cast<const uint2 *>(p);
	uint32_t u[2] = { t.x, t.y };
	for (int k = 0; k < 2; k++) {
		uint32_t lo = u[k] << 16, hi = u[k] & 0xffff0000u;
		memcpy(&v[2 * k], &lo, 4);
		memcpy(&v[2 * k + 1], &hi, 4);
	}
}
// Four adjacent elements at an address aligned to four of them, in one
// store (16 bytes of float, 8 of bf16).
__device__ __forceinline__ void st4(float *p, const float *v)
{
	*reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void st4(bf16 *p, const float *v)
{
	__nv_bfloat162 h[2] = { __floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3]) };
	uint2 t;
	memcpy(&t, h, sizeof(t));
	*reinterpret_cast<uint2 *>(p) = t;
}
__device__ __forceinline__ void st8(float *p, const float *v)
{
	float4 *q = reinterpret_cast<float4 *>(p);
	q[0] = make_float4(v[0], v[1], v[2], v[3]);
	q[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void st8(bf16 *p, const float *v)
{
	__nv_bfloat162 h[4];
	for (int k = 0; k < 4; k++)
		h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
	uint4 t;
	memcpy(&t, h, sizeof(t));
	*reinterpret_cast<uint4 *>(p) = t;
}

// k / d (q) and k % d (r) as k goes k0, k0 + s, k0 + 2 s, ...: one
// division at the start, adds after (the tiles' loops, a division or two
// an element where each is a few loads).
struct DivStep {
	int q, r, sq, sr, d;
	__device__ DivStep(int k0, int s, int d_) : q(k0 / d_), r(k0 % d_), sq(s / d_), sr(s % d_), d(d_) {}
	__device__ void next()
	{
		q += sq;
		r += sr;
		if (r >= d) {
			r -= d;
			q++;
		}
	}
};

// The bias gradients' reductions (kernels.cu: bias_grad_part; conv1.cu:
// conv1's weight and bias gradients): a block of kBiasThreads sums about
// kBiasChunk values (bias_ipc: images of n pixels a chunk), then its
// threads' sums in one fixed tree (block_sum): the same bits at every
// replay.
constexpr int kBiasThreads = 256;
constexpr int kBiasChunk = 4096;

inline int bias_ipc(int n)
{
	int k = (kBiasChunk + n - 1) / n;
	return k < 1 ? 1 : k;
}

__device__ inline float block_sum(float s, float *red)
{
	red[threadIdx.x] = s;
	__syncthreads();
	for (int half = kBiasThreads / 2; half > 0; half /= 2) {
		if ((int)threadIdx.x < half)
			red[threadIdx.x] += red[threadIdx.x + half];
		__syncthreads();
	}
	return red[0];
}

// gate_dy: dy[q] where gate[q] > 0, else 0 (no gate: dy[q]); with relu the zeros
// are also stored into dy (relu_bwd in the same pass).  Each element is
// one thread's, once.
template <typename T, typename G>
__device__ __forceinline__ float gate_dy(T *dy, const G *gate, int relu, size_t q)
{
	float v = ld(dy + q);
	if (gate && !(ld(gate + q) > 0.f)) {
		if (relu && v != 0.f)
			st(dy + q, 0.f);
		v = 0.f;
	}
	return v;
}

// Whether p is aligned to `to` bytes (a kernel's vector loads and stores).
inline bool aligned(const void *p, size_t to) { return (uintptr_t)p % to == 0; }

} // namespace

#endif
