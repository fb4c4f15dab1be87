// CUDA twins of cnn_train's CPU element-wise kernels and conv1's direct
// kernels (see kernels.h; conv2's tensor-core kernels are conv2_tc.cu's).
// Grid-stride loops; one thread per output element, except log-softmax
// (one thread per row: k is 10 here), the optimizers (one per parameter)
// and the bias gradient (a block per chunk of images and channel).  The activation kernels
// are templates over their storage type (float, or bf16 for --precision
// bf16); they compute in float either way, so the bf16 instance is the
// float one with a rounding at each store.
#include "kernels_common.cuh"

static char where_host[64];
static int where_rank = -1;

extern "C" void cnn_cuda_where_set(const char *host, int rank)
{
	snprintf(where_host, sizeof(where_host), "%s", host ? host : "");
	where_rank = rank;
}
extern "C" const char *cnn_cuda_where_host(void) { return where_host; }
extern "C" int cnn_cuda_where_rank(void) { return where_rank; }

static char last_error[512];
static int fail_quiet;

extern "C" void cnn_cuda_fail(const char *file, int line, const char *call, const char *msg)
{
	const char *base = strrchr(file, '/');
	snprintf(last_error, sizeof(last_error), "%s:%d: %s: %s", base ? base + 1 : file, line, call,
		 msg);
	if (!fail_quiet)
		fprintf(stderr, "cnn_train: %s rank %d: %s\n", where_host, where_rank, last_error);
}

extern "C" int cnn_cuda_fail_quiet(int on)
{
	int was = fail_quiet;
	fail_quiet = on;
	return was;
}

extern "C" const char *cnn_cuda_last_error(void) { return last_error; }

namespace {

template <typename T>
__global__ void bias_relu(T *y, const float *b, int oc, int n, size_t total)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = ld(y + i) + b[(i / n) % oc];
		st(y + i, v > 0.f ? v : 0.f);
	}
}

// The window at p0..p3 (pool_window).
template <typename T>
__device__ __forceinline__ void pool4(const T *p0, const T *p1, const T *p2, const T *p3,
				      const PoolEp &ep, uint64_t key, float bc, size_t i, float *y,
				      uint8_t *arg)
{
	float v[4] = { ld(p0), ld(p1), ld(p2), ld(p3) };
	pool_window<T>(v, ep, key, bc, i, y, arg);
}

// Two adjacent elements at an even index of a tensor that starts aligned,
// in one load (PAIR), or two.
__device__ __forceinline__ void ld_pair(const float *p, float *v)
{
	float2 t = *reinterpret_cast<const float2 *>(p);
	v[0] = t.x;
	v[1] = t.y;
}
__device__ __forceinline__ void ld_pair(const bf16 *p, float *v)
{
	__nv_bfloat162 t = *reinterpret_cast<const __nv_bfloat162 *>(p);
	v[0] = __bfloat162float(t.x);
	v[1] = __bfloat162float(t.y);
}

// Output i's window in x (planes of h x w pooled to pp = ph x pw): its top
// left element, and its plane in *plane.
template <typename T, typename I>
__device__ __forceinline__ const T *window_at(const T *x, I i, I pp, int h, int w, int pw,
					      I *plane)
{
	I pl = i / pp, r = i - pl * pp, py = r / pw, px = r - py * pw;
	*plane = pl;
	return x + (size_t)pl * h * w + (size_t)(2 * py) * w + 2 * px;
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

// The pool's forward, a thread per window (kEach: each element its own
// load; kPair: w even, so each row of a window is one aligned load of two)
// or per four windows of an output row (kQuad, pool_quads: pw a multiple of
// 4, rows of x 16-byte aligned: its 2 x 8 inputs in 16-byte loads, one
// dropout draw for the four, kept's group of 4 being exactly theirs, y in
// one 16-byte store, arg in one of 4 bytes, yb in one of 8).  Each
// window's value and arg are pool_window's, bit for bit, whichever.  At
// batch 1024 kPair moved 8 bytes a load and drew each group's 64 bits four
// times.  I: the index type, 32 bits where the tensor allows (64-bit
// division is tens of instructions a thread on a GPU); n: windows, or
// groups of four (kQuad).
enum PoolLoad { kEach, kPair, kQuad };

template <typename T, typename I, PoolLoad L>
__global__ void maxpool2_fwd(const T *x, PoolEp ep, int c, int h, int w, int ph, int pw, I n,
			     float *y, uint8_t *arg)
{
	pdl_enter();
	const float *b = ep.b;
	uint64_t key = ep.keyp ? *ep.keyp : 0;
	I pp = (I)ph * pw;
	for (I q = blockIdx.x * (I)blockDim.x + threadIdx.x; q < n;
	     q += (I)gridDim.x * blockDim.x) {
		I i = L == kQuad ? 4 * q : q, plane;
		const T *r0 = window_at(x, i, pp, h, w, pw, &plane), *r1 = r0 + w;
		float bc = b ? b[plane % c] : 0.f;
		if (L == kEach) {
			pool4(r0, r0 + 1, r1, r1 + 1, ep, key, bc, i, y + i, arg + i);
			continue;
		}
		if (L == kPair) {
			float v[4];
			ld_pair(r0, v);
			ld_pair(r1, v + 2);
			pool_window<T>(v, ep, key, bc, i, y + i, arg + i);
			continue;
		}
		float t[8], u[8], m[4];
		uint8_t a[4];
		ld8(r0, t);
		ld8(r1, u);
		for (int k = 0; k < 4; k++) {
			float v[4] = { t[2 * k], t[2 * k + 1], u[2 * k], u[2 * k + 1] };
			m[k] = pool_max<T>(v, ep, bc, &a[k]);
		}
		if (ep.keyp) {
			uint64_t d = mix64(key + i);
			for (int k = 0; k < 4; k++)
				m[k] = kept_in(d, (unsigned)k, ep.thresh) ? m[k] * ep.scale : 0.f;
		}
		*reinterpret_cast<float4 *>(y + i) = make_float4(m[0], m[1], m[2], m[3]);
		*reinterpret_cast<uchar4 *>(arg + i) = make_uchar4(a[0], a[1], a[2], a[3]);
		if (ep.yb) {
			__nv_bfloat162 h2[2] = { __floats2bfloat162_rn(m[0], m[1]),
						 __floats2bfloat162_rn(m[2], m[3]) };
			uint2 t2;
			memcpy(&t2, h2, sizeof(t2));
			*reinterpret_cast<uint2 *>(ep.yb + i) = t2;
		}
	}
}

// A thread per 2x2 block of dx (plane, ry, cx), rows 2 ry and 2 ry + 1,
// columns 2 cx and 2 cx + 1 (those inside dx): its window's gradient at
// the pixel arg names where the pool's output is positive, 0 elsewhere
// (and in an odd last row or column, which no window covers).  y, arg and
// dy read once a window; every element of dx written once, no atomics.
template <typename T, typename I>
__global__ void maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg, int h,
				  int w, int ph, int pw, I total, T *dx)
{
	pdl_enter();
	I bh = (I)(h + 1) / 2, bw = (I)(w + 1) / 2, bb = bh * bw;
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total;
	     i += (I)gridDim.x * blockDim.x) {
		I plane = i / bb, r = i - plane * bb, ry = r / bw, cx = r - ry * bw;
		int hit = -1;   // which of the four gets the gradient
		float g = 0.f;
		if (ry < (I)ph && cx < (I)pw) {
			size_t o = (size_t)plane * ph * pw + (size_t)ry * pw + cx;
			if (y[o] > 0.f) {
				hit = arg[o];
				g = dy[o];
			}
		}
		T *d0 = dx + (size_t)plane * h * w + (size_t)(2 * ry) * w + 2 * cx;
		bool right = 2 * cx + 1 < (I)w, down = 2 * ry + 1 < (I)h;
		st(d0, hit == 0 ? g : 0.f);
		if (right)
			st(d0 + 1, hit == 1 ? g : 0.f);
		if (down) {
			st(d0 + w, hit == 2 ? g : 0.f);
			if (right)
				st(d0 + w + 1, hit == 3 ? g : 0.f);
		}
	}
}

template <typename T>
__global__ void relu_bwd(T *dx, const T *y, size_t n, bf16 *xb)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = ld(dx + i);
		if (!(ld(y + i) > 0.f) && v != 0.f)
			st(dx + i, v = 0.f);
		if (xb)
			xb[i] = __float2bfloat16_rn(v);
	}
}

// db[o] = sum of channel o over nimg images of n pixels, in two passes so
// that the whole GPU reads dy (one block per channel would leave most SMs
// idle: 32 or 64 blocks for this Net): bias_grad_part sums channel o over
// a chunk of ipc images (about kBiasChunk values) into part[o][chunk],
// bias_grad_sum adds a channel's chunks.  Every sum has a fixed order (a
// thread's stride, then a fixed tree), so the result does not depend on
// scheduling: the same bits at every replay.
constexpr int kBiasThreads = 256;
constexpr int kBiasChunk = 4096;

int bias_ipc(int n)
{
	int k = (kBiasChunk + n - 1) / n;
	return k < 1 ? 1 : k;
}

__device__ float block_sum(float s, float *red)
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

// dy[q] where gate[q] > 0, else 0 (no gate: dy[q]); with relu the zeros
// are also stored into dy (relu_bwd in the same pass).  Each element is
// one thread's, once.
template <typename T, typename G>
__device__ __forceinline__ float gated(T *dy, const G *gate, int relu, size_t q)
{
	float v = ld(dy + q);
	if (gate && !(ld(gate + q) > 0.f)) {
		if (relu && v != 0.f)
			st(dy + q, 0.f);
		v = 0.f;
	}
	return v;
}

template <typename T, typename G>
__global__ void __launch_bounds__(kBiasThreads)
bias_grad_part(T *dy, const G *gate, int relu, int nimg, int oc, int n, int ipc, float *part)
{
	pdl_enter();
	__shared__ float red[kBiasThreads];
	int c = blockIdx.x, o = blockIdx.y, i0 = c * ipc;
	int i1 = i0 + ipc < nimg ? i0 + ipc : nimg;
	// a chunk's count in 32 bits (bias_ipc: about kBiasChunk values)
	unsigned cnt = (unsigned)(i1 - i0) * n;
	float s = 0.f;
	DivStep at(threadIdx.x, kBiasThreads, n);   // (image in the chunk, pixel)
#pragma unroll 4
	for (unsigned k = threadIdx.x; k < cnt; k += kBiasThreads, at.next())
		s += gated(dy, gate, relu, ((size_t)(i0 + at.q) * oc + o) * n + at.r);
	s = block_sum(s, red);
	if (threadIdx.x == 0)
		part[(size_t)o * gridDim.x + c] = s;
}

__global__ void __launch_bounds__(kBiasThreads)
bias_grad_sum(const float *part, int chunks, float *db)
{
	pdl_enter();
	__shared__ float red[kBiasThreads];
	int o = blockIdx.x;
	float s = 0.f;
	for (int c = threadIdx.x; c < chunks; c += kBiasThreads)
		s += part[(size_t)o * chunks + c];
	s = block_sum(s, red);
	if (threadIdx.x == 0)
		db[o] = s;
}

// ---- conv1 direct: one input channel, 3x3, stride 1, no padding ----------
// The first convolution has one input channel: 9 products per output, too
// little work for cuDNN's GEMM-shaped kernels, and its bias, ReLU, and on
// the way back the ReLU's gate and the bias gradient, ride along.  x is the
// batch (n x h x w, fp32 or the bf16 operand), w the 9 weights per output
// channel (fp32, or bf16 operands), y conv1's output in T, NCHW or (nhwc)
// channels-last.  Sums in fp32; with bf16, the sum rounded as cuDNN stores
// its output, then bias_relu_as.
// With GATHER (cnn_cuda_conv1_fwd_gather), the batch is not read from x:
// each image comes from the data set's bytes at its index and is
// normalized as cnn_cuda_gather does it, and the threads of channel 0 also
// store what the gather stores (the image in fp32, its bf16 copy, the
// label), each pixel once: the interior's by the output pixel at its top
// left, the last two rows and columns by the last output row and column.
struct Gather1 {
	const uint8_t *xs, *ys;   // the data set's images (h x w bytes) and labels
	const uint32_t *idx;      // the batch's indices into them
	float scale, off;         // x = byte * scale - off (one channel)
	float *x;                 // the batch, n x h x w
	bf16 *xb;                 // NULL, or its bf16 copy
	uint8_t *y;               // the labels
};

// A thread per output pixel (image n, pixel p; the pixels' index in 32
// bits, launch_conv1_fwd's check), all oc channels of it: the 3x3 window
// read (or gathered) once, the weights and biases from shared memory, each
// channel's sum in the order ky, kx as before.  In NCHW a warp's stores of
// one channel are consecutive pixels.  nhwc: 0 NCHW, 1 channels-last, 2
// channels-last in groups of 8 channels.
constexpr int kConv1MaxOc = 256;

// Output pixel i's 3x3 window into v: read from x, or (GATHER) gathered
// from the data set and normalized, with what the gather stores.
template <typename T, bool GATHER>
__device__ __forceinline__ void conv1_window(const T *x, int h, int wd, unsigned ow, unsigned pix,
					     unsigned i, const Gather1 &gs, float v[9])
{
	unsigned n = i / pix, p = i - n * pix, py = p / ow, px = p - py * ow;
	size_t at = (size_t)py * wd + px;   // the window's top left in the image
	if (GATHER) {
		uint32_t src = gs.idx[n];
		const uint8_t *img = gs.xs + (size_t)src * h * wd;
		for (int ky = 0; ky < 3; ky++)
			for (int kx = 0; kx < 3; kx++)
				v[ky * 3 + kx] = stored_as((const T *)0,
							   (float)img[at + ky * wd + kx] * gs.scale - gs.off);
		int r1 = (int)py == h - 3 ? h - 1 : (int)py, c1 = px == ow - 1 ? wd - 1 : (int)px;
		for (int r = py; r <= r1; r++)
			for (int c = px; c <= c1; c++) {
				size_t q = (size_t)r * wd + c;
				float u = (float)img[q] * gs.scale - gs.off;
				gs.x[(size_t)n * h * wd + q] = u;
				if (gs.xb)
					st(gs.xb + (size_t)n * h * wd + q, u);
			}
		if (p == 0)
			gs.y[n] = gs.ys[src];
	} else {
		const T *xi = x + (size_t)n * h * wd + at;
		for (int ky = 0; ky < 3; ky++)
			for (int kx = 0; kx < 3; kx++)
				v[ky * 3 + kx] = ld(xi + ky * wd + kx);
	}
}

// The block's copy of conv1's oc x 9 weights (ws, fp32) and oc biases.
template <typename T>
__device__ __forceinline__ void conv1_params(const T *w, const float *b, int oc, float *ws,
					     float *bs)
{
	for (int e = threadIdx.x; e < oc * 9; e += blockDim.x)
		ws[e] = ld(w + e);
	for (int e = threadIdx.x; e < oc; e += blockDim.x)
		bs[e] = b[e];
	__syncthreads();
}

// Channel o of a pixel from its window: the sum in the order ky, kx, then
// as the output stores it (bias and ReLU).
template <typename T>
__device__ __forceinline__ float conv1_out(const T *y, const float *ws, const float *bs, int o,
					   const float v[9])
{
	const float *wo = ws + o * 9;
	float s = 0.f;
	for (int k = 0; k < 9; k++)
		s += wo[k] * v[k];
	return bias_relu_as(y, stored_as(y, s), bs[o]);
}

template <typename T, bool GATHER>
__global__ void __launch_bounds__(kThreads)
conv1_fwd(const T *x, const T *w, const float *b, int h, int wd, int oc, int nhwc,
	  unsigned total, T *y, Gather1 gs)
{
	pdl_enter();
	__shared__ float ws[kConv1MaxOc * 9], bs[kConv1MaxOc];
	conv1_params(w, b, oc, ws, bs);
	unsigned ow = (unsigned)wd - 2, pix = ((unsigned)h - 2) * ow;
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += gridDim.x * blockDim.x) {
		float v[9];
		conv1_window<T, GATHER>(x, h, wd, ow, pix, i, gs, v);
		if (nhwc == 2) {
			// channels-last, 8 channels a 16-byte store (launch_conv1_fwd:
			// oc a multiple of 8, y aligned): one store a channel put each
			// of a warp's 32 in a different sector, 8 times over
			T *yq = y + (size_t)i * oc;
			for (int o = 0; o < oc; o += 8) {
				float a[8];
#pragma unroll
				for (int c = 0; c < 8; c++)
					a[c] = conv1_out(y, ws, bs, o + c, v);
				st8(yq + o, a);
			}
			continue;
		}
		unsigned n = i / pix, p = i - n * pix;
		size_t q = nhwc ? (size_t)i * oc : (size_t)n * oc * pix + p;
		size_t step = nhwc ? 1 : pix;
		for (int o = 0; o < oc; o++, q += step)
			st(y + q, conv1_out(y, ws, bs, o, v));
	}
}

// Channels-last through shared memory (launch_conv1_fwd: oc a multiple of
// 4, at most kConv1StageOc, y aligned to 4 elements).  A block's pixels
// are consecutive, so their outputs are one run of y: each thread's
// channels go to shared memory (rows of oc + 1 floats: no two threads of a
// warp on one bank), then the block writes the run in 16-byte stores,
// consecutive threads on consecutive addresses, where a thread writing its
// own pixel's channels puts a warp's 32 stores in 32 sectors, half each
// (ncu at 1024: 89 us in NHWC, 40 in NCHW).  The same values, bit for bit.
constexpr int kConv1StageOc = 32;

template <typename T, bool GATHER>
__global__ void __launch_bounds__(kThreads)
conv1_fwd_nhwc_staged(const T *x, const T *w, const float *b, int h, int wd, int oc,
		      unsigned total, T *y, Gather1 gs)
{
	pdl_enter();
	__shared__ float ws[kConv1StageOc * 9], bs[kConv1StageOc];
	__shared__ float out[kThreads * (kConv1StageOc + 1)];
	conv1_params(w, b, oc, ws, bs);
	unsigned ow = (unsigned)wd - 2, pix = ((unsigned)h - 2) * ow;
	int row = oc + 1;
	// the loop's condition is the block's: every thread reaches each barrier
	for (unsigned base = blockIdx.x * blockDim.x; base < total; base += gridDim.x * blockDim.x) {
		unsigned i = base + threadIdx.x;
		if (i < total) {
			float v[9];
			conv1_window<T, GATHER>(x, h, wd, ow, pix, i, gs, v);
			for (int o = 0; o < oc; o++)
				out[threadIdx.x * row + o] = conv1_out(y, ws, bs, o, v);
		}
		__syncthreads();
		unsigned left = total - base;
		int cnt = (int)(left < blockDim.x ? left : blockDim.x) * oc;
		T *yb = y + (size_t)base * oc;
		DivStep po(threadIdx.x * 4, blockDim.x * 4, oc);
		for (int f = threadIdx.x * 4; f < cnt; f += blockDim.x * 4, po.next()) {
			const float *src = out + po.q * row + po.r;
			float a[4] = { src[0], src[1], src[2], src[3] };
			st4(yb + f, a);
		}
		__syncthreads();   // out read before the next pixels' writes
	}
}

// conv1's weight and bias gradients from dy gated where y > 0 (the ReLU's
// backward) and x: a block per (chunk of ipc images, output channel) adds
// its 9 + 1 sums into part[((o * chunks) + chunk) * 10 + j] (j < 9: weight
// ky * 3 + kx; 9: the bias); the last of a group's chunks to finish (its
// counter in count, after a fence) adds the group's chunks into dw and db
// and sets the counter back to 0: a fixed order, the same bits each run,
// and no second launch on the backward's chain.
// A block per (chunk, group of kConv1WgCh output channels), the groups of
// a chunk adjacent in the grid (they run together: in channels-last a
// pixel's channels, which the groups read a quarter sector each, come
// from DRAM once, not once a group): each pixel's window of x read once
// for the group's channels.  nhwc: 0 NCHW, 1
// channels-last, 2 channels-last with oc a multiple of 4 and y, dy aligned
// (a group's y, and dy, in one load).  Each channel's sums
// take its pixels in the order one channel a block took them (thread t:
// t, t + 256, ...) and the same tree: the same bits.
constexpr int kConv1WgCh = 4;
// the ways the last block splits the chunks' sums over (its threads, 40 a way)
constexpr int kConv1WgWays = kBiasThreads / (kConv1WgCh * 10);
static_assert(kConv1WgWays >= 1, "conv1_wgrad_part: a way of 40 threads at least");
// conv1_wgrad's scratch: a counter a group, then the partial sums (16-byte aligned)
inline size_t conv1_wgrad_counters(int oc)
{
	return ((size_t)(oc + kConv1WgCh - 1) / kConv1WgCh + 3) / 4 * 4;
}

template <typename T>
__global__ void __launch_bounds__(kBiasThreads)
conv1_wgrad_part(const T *x, const T *dy, const T *y, int h, int wd, int oc, int nhwc, int nimg,
		 int ipc, int chunks, float *part, unsigned *count, float *dw, float *db)
{
	pdl_enter();
	__shared__ float red[10][kBiasThreads];
	int groups = (oc + kConv1WgCh - 1) / kConv1WgCh;
	int c = blockIdx.x / groups, o0 = (blockIdx.x - c * groups) * kConv1WgCh, i0 = c * ipc;
	int i1 = i0 + ipc < nimg ? i0 + ipc : nimg;
	unsigned ow = wd - 2;
	// a chunk's count in 32 bits (conv1_ipc: about kBiasChunk pixels)
	unsigned pix = (unsigned)(h - 2) * ow, cnt = (unsigned)(i1 - i0) * pix;
	float s[kConv1WgCh][10];
#pragma unroll
	for (int g = 0; g < kConv1WgCh; g++)
#pragma unroll
		for (int j = 0; j < 10; j++)
			s[g][j] = 0.f;
	for (unsigned k = threadIdx.x; k < cnt; k += kBiasThreads) {
		unsigned dn = k / pix, p = k - dn * pix, py = p / ow;
		size_t n = i0 + dn;
		const T *xi = x + n * h * wd + (size_t)py * wd + (p - py * ow);
		float xv[9];
#pragma unroll
		for (int j = 0; j < 9; j++)
			xv[j] = ld(xi + j / 3 * wd + j % 3);
		size_t q = nhwc ? (n * pix + p) * oc + o0 : (n * oc + o0) * pix + p;
		size_t step = nhwc ? 1 : pix;
		// the group's y and dy loaded before any is used, dy whatever the
		// gate: all eight loads in flight at once, not dy's after y's
		float yv[kConv1WgCh], gv[kConv1WgCh];
		if (nhwc == 2) {   // the group's 4 channels adjacent: one load each
			ld4(y + q, yv);
			ld4(dy + q, gv);
		} else {
#pragma unroll
			for (int g = 0; g < kConv1WgCh; g++) {
				bool in = o0 + g < oc;
				yv[g] = in ? ld(y + q + g * step) : 0.f;
				gv[g] = in ? ld(dy + q + g * step) : 0.f;
			}
		}
#pragma unroll
		for (int g = 0; g < kConv1WgCh; g++) {
			if (!(yv[g] > 0.f))
				continue;   // also a channel past oc (yv 0)
#pragma unroll
			for (int j = 0; j < 9; j++)
				s[g][j] += gv[g] * xv[j];
			s[g][9] += gv[g];
		}
	}
	// each channel's 10 sums over the block in one tree, block_sum's: the
	// same order for each, 8 barriers for all of them
	int t = threadIdx.x;
#pragma unroll
	for (int g = 0; g < kConv1WgCh; g++) {
		if (o0 + g >= oc)
			break;   // uniform over the block
#pragma unroll
		for (int j = 0; j < 10; j++)
			red[j][t] = s[g][j];
		__syncthreads();
		for (int half = kBiasThreads / 2; half > 0; half /= 2) {
			if (t < half)
				for (int j = 0; j < 10; j++)
					red[j][t] += red[j][t + half];
			__syncthreads();
		}
		if (t < 10)
			part[((size_t)(o0 + g) * chunks + c) * 10 + t] = red[t][0];
		__syncthreads();   // red[t][0] read before the next channel's writes
	}
	// the group's last chunk to finish: its 4 channels' 40 sums over the
	// chunks, way w (of kConv1WgWays) every kConv1WgWays-th chunk from w,
	// then the ways in order
	__shared__ bool last;
	__threadfence();
	__syncthreads();
	int grp = blockIdx.x - c * groups;
	if (t == 0)
		last = atomicAdd(count + grp, 1u) == (unsigned)chunks - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	constexpr int S = kConv1WgCh * 10;
	const volatile float *all = part;
	float *ways = &red[0][0];
	int e = t % S, w = t / S, o = o0 + e / 10;
	float acc = 0.f;
	if (w < kConv1WgWays && o < oc)
		for (int k = w; k < chunks; k += kConv1WgWays)
			acc += all[((size_t)o * chunks + k) * 10 + e % 10];
	ways[t] = acc;
	__syncthreads();
	if (t < S && o < oc) {
		float sum = 0.f;
		for (int k = 0; k < kConv1WgWays; k++)
			sum += ways[k * S + t];
		if (e % 10 < 9)
			dw[o * 9 + e % 10] = sum;
		else
			db[o] = sum;
	}
	if (t == 0)
		count[grp] = 0;
}

// A block per (output channel, sum j): the chunks' part in a fixed order.
__global__ void __launch_bounds__(kBiasThreads)
conv1_wgrad_sum(const float *part, int chunks, float *dw, float *db)
{
	pdl_enter();
	__shared__ float red[kBiasThreads];
	int o = blockIdx.x / 10, j = blockIdx.x % 10;
	float s = 0.f;
	for (int c = threadIdx.x; c < chunks; c += kBiasThreads)
		s += part[((size_t)o * chunks + c) * 10 + j];
	s = block_sum(s, red);
	if (threadIdx.x == 0) {
		if (j < 9)
			dw[o * 9 + j] = s;
		else
			db[o] = s;
	}
}

// ---- NHWC (channels-last) twins, for --conv-layout nhwc -------------------
// The same computations on activations stored image by image, pixel by
// pixel, with a pixel's channels contiguous (cuDNN's CUDNN_TENSOR_NHWC);
// the pool's output (the flattened input of fc1) stays in NCHW order, so
// the linear layers and the checkpoints do not see the layout.

template <typename T>
__global__ void bias_relu_nhwc(T *y, const float *b, int oc, size_t total)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = ld(y + i) + b[i % oc];
		st(y + i, v > 0.f ? v : 0.f);
	}
}

// One thread per output, in the pool's NCHW output order.
template <typename T>
__global__ void maxpool2_fwd_nhwc(const T *x, PoolEp ep, int c, int h, int w, int ph, int pw,
				  size_t total, float *y, uint8_t *arg)
{
	pdl_enter();
	const float *b = ep.b;
	uint64_t key = ep.keyp ? *ep.keyp : 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t plane = i / ((size_t)ph * pw), img = plane / c;
		int ch = (int)(plane % c);
		int r = (int)(i % ((size_t)ph * pw)), py = r / pw, px = r % pw;
		const T *r0 = x + ((img * h + 2 * py) * w + 2 * px) * c + ch, *r1 = r0 + (size_t)w * c;
		pool4(r0, r0 + c, r1, r1 + c, ep, key, b ? b[ch] : 0.f, i, y + i, arg + i);
	}
}

// One thread per input element, in NHWC order; dy, y and arg in the
// pool's NCHW order.
template <typename T>
__global__ void maxpool2_relu_bwd_nhwc(const float *dy, const float *y, const uint8_t *arg, int c,
				       int h, int w, int ph, int pw, size_t total, T *dx)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int ch = (int)(i % c);
		size_t pix = i / c, img = pix / ((size_t)h * w);
		int r = (int)(pix % ((size_t)h * w)), iy = r / w, ix = r % w;
		int py = iy >> 1, px = ix >> 1;
		float v = 0.f;
		if (py < ph && px < pw) {
			size_t o = ((img * c + ch) * ph + py) * pw + px;
			if (y[o] > 0.f && arg[o] == (uint8_t)(((iy & 1) << 1) | (ix & 1)))
				v = dy[o];
		}
		st(dx + i, v);
	}
}

// The pool on channels-last input, through shared memory: its input NHWC,
// its output and arg in NCHW order (fc1's flat rows, PyTorch's order).
// A thread per output element, as the two kernels above, reads its window
// (forward) or its output (backward) 2c elements away from the next
// thread's: a sector a value.  The tile kernels take a block per (image,
// band of pb pooled rows): the NHWC side read or written with consecutive
// threads on consecutive channels, the NCHW side with consecutive threads
// along a channel's pb rows, and the band's outputs in between in shared
// memory as [channel][pooled pixel of the band], rows of an odd length (no
// two threads of a warp on one bank either way).  Values, arg, dropout and
// rounding as the kernels above, bit for bit.
constexpr int kPoolTile = 4096;   // a band's outputs, all channels


template <typename T>
__global__ void __launch_bounds__(kThreads)
maxpool2_fwd_nhwc_tile(const T *x, PoolEp ep, int c, int h, int w, int ph, int pw, int pb,
		       int bands, int quad, float *y, uint8_t *arg)
{
	pdl_enter();
	__shared__ float tm[kPoolTile];
	__shared__ uint8_t ta[kPoolTile];
	const float *b = ep.b;
	int img = blockIdx.x / bands, py0 = (blockIdx.x - img * bands) * pb;
	int rows = ph - py0 < pb ? ph - py0 : pb, span = rows * pw, ts = span | 1, n = span * c;
	const T *xi = x + ((size_t)img * h + 2 * py0) * w * c;
	if (quad) {
		// as the backward's quad stores: 4 channels of a window a
		// thread, each of its 4 pixels one load, the window stepped
		int lanes = c >> 2, ch = (threadIdx.x % lanes) * 4, per = blockDim.x / lanes;
		int r = threadIdx.x / lanes;
		float bc[4];
		for (int j = 0; j < 4; j++)
			bc[j] = b ? b[ch + j] : 0.f;
		for (DivStep at(r, per, pw); r < span; r += per, at.next()) {
			const T *r0 = xi + ((size_t)(2 * at.q) * w + 2 * at.r) * c + ch;
			const T *r1 = r0 + (size_t)w * c;
			float q[4][4];
			ld4(r0, q[0]);
			ld4(r0 + c, q[1]);
			ld4(r1, q[2]);
			ld4(r1 + c, q[3]);
			for (int j = 0; j < 4; j++) {
				float v[4] = { q[0][j], q[1][j], q[2][j], q[3][j] };
				uint8_t a;
				tm[(ch + j) * ts + r] = pool_max<T>(v, ep, bc[j], &a);
				ta[(ch + j) * ts + r] = a;
			}
		}
	} else {
		for (int k = threadIdx.x; k < n; k += blockDim.x) {
			int ch = k % c, r = k / c, pyl = r / pw, px = r - pyl * pw;
			const T *r0 = xi + ((size_t)(2 * pyl) * w + 2 * px) * c + ch;
			const T *r1 = r0 + (size_t)w * c;
			float v[4] = { ld(r0), ld(r0 + c), ld(r1), ld(r1 + c) };
			uint8_t a;
			tm[ch * ts + r] = pool_max<T>(v, ep, b ? b[ch] : 0.f, &a);
			ta[ch * ts + r] = a;
		}
	}
	__syncthreads();
	uint64_t key = ep.keyp ? *ep.keyp : 0;
	size_t base = ((size_t)img * c * ph + py0) * pw, plane = (size_t)ph * pw;
	DivStep cr(threadIdx.x, blockDim.x, span);
	for (int k = threadIdx.x; k < n; k += blockDim.x, cr.next()) {
		int ch = cr.q, r = cr.r;
		size_t i = base + ch * plane + r;
		float m = tm[ch * ts + r];
		if (ep.keyp)
			m = kept(key, i, ep.thresh) ? m * ep.scale : 0.f;
		y[i] = m;
		arg[i] = ta[ch * ts + r];
		if (ep.yb)
			ep.yb[i] = __float2bfloat16_rn(m);
	}
}

// The backward: the band's dy where its output is positive (else 0) and
// arg (else 4: no pixel's) into shared memory from the NCHW side, then dx's
// rows 2 py0 .. (the band's last, and in the last band up to h: an odd last
// row gets zeros) in NHWC order.  quad (c a multiple of 4, c / 4 dividing
// the block, dx aligned to 4 elements): a thread writes 4 channels of a
// pixel in one store, its channels the same in every pixel it writes and
// its pixel stepped, not divided out of a flat index each time (ncu at
// 1024, the element a thread: 237 us for 240 MB).
template <typename T>
__global__ void __launch_bounds__(kThreads)
maxpool2_relu_bwd_nhwc_tile(const float *dy, const float *y, const uint8_t *arg, int c, int h,
			    int w, int ph, int pw, int pb, int bands, int quad, T *dx)
{
	pdl_enter();
	__shared__ float tg[kPoolTile];
	__shared__ uint8_t ta[kPoolTile];
	int img = blockIdx.x / bands, band = blockIdx.x - img * bands, py0 = band * pb;
	int rows = ph - py0 < pb ? ph - py0 : pb, span = rows * pw, ts = span | 1, n = span * c;
	size_t base = ((size_t)img * c * ph + py0) * pw, plane = (size_t)ph * pw;
	DivStep cr(threadIdx.x, blockDim.x, span);
	for (int k = threadIdx.x; k < n; k += blockDim.x, cr.next()) {
		int ch = cr.q, r = cr.r;
		size_t o = base + ch * plane + r;
		bool on = y[o] > 0.f;
		tg[ch * ts + r] = on ? dy[o] : 0.f;
		ta[ch * ts + r] = on ? arg[o] : (uint8_t)4;
	}
	__syncthreads();
	int iy0 = 2 * py0, iy1 = band == bands - 1 ? h : 2 * (py0 + rows), m = (iy1 - iy0) * w * c;
	T *d = dx + ((size_t)img * h + iy0) * w * c;
	if (quad) {
		int lanes = c >> 2, ch = (threadIdx.x % lanes) * 4, per = blockDim.x / lanes;
		int pix = threadIdx.x / lanes, npix = (iy1 - iy0) * w;
		for (DivStep at(pix, per, w); pix < npix; pix += per, at.next()) {
			int iyl = at.q, ix = at.r;
			float v[4] = { 0.f, 0.f, 0.f, 0.f };
			int pyl = iyl >> 1, px = ix >> 1;
			if (pyl < rows && px < pw) {
				uint8_t want = (uint8_t)(((iyl & 1) << 1) | (ix & 1));
				int t = ch * ts + pyl * pw + px;
				for (int j = 0; j < 4; j++, t += ts)
					if (ta[t] == want)
						v[j] = tg[t];
			}
			st4(d + (size_t)pix * c + ch, v);
		}
		return;
	}
	for (int k = threadIdx.x; k < m; k += blockDim.x) {
		int ch = k % c, pix = k / c, iyl = pix / w, ix = pix - iyl * w;
		int pyl = iyl >> 1, px = ix >> 1;
		float v = 0.f;
		if (pyl < rows && px < pw) {
			int t = ch * ts + pyl * pw + px;
			if (ta[t] == (uint8_t)(((iyl & 1) << 1) | (ix & 1)))
				v = tg[t];
		}
		st(d + k, v);
	}
}

// The tile kernels' band (pooled rows a block) for c channels of rows of
// pw, the most that fits kPoolTile; 0: not even one row fits.
int pool_band(int c, int ph, int pw)
{
	int pb = ph;
	while (pb > 0 && (size_t)c * ((pb * pw) | 1) > (size_t)kPoolTile)
		pb--;
	return pb;
}

// db[o] = sum over rows (image, pixel) of dy[row][o]: a block sums a chunk
// of kBiasRows rows for every channel, lanes of consecutive threads on
// consecutive channels (coalesced) and the block's groups of lanes on
// interleaved rows, then the groups in a fixed order: deterministic, as
// bias_grad_part.  part[o][chunk]; bias_grad_sum finishes.
constexpr int kBiasRows = 256;

template <typename T>
__global__ void __launch_bounds__(kBiasThreads)
bias_grad_part_nhwc(T *dy, const T *gate, int relu, size_t rows, int oc, float *part)
{
	pdl_enter();
	__shared__ float red[kBiasThreads];
	int lanes = oc < kBiasThreads ? oc : kBiasThreads, groups = kBiasThreads / lanes;
	int lane = threadIdx.x % lanes, grp = threadIdx.x / lanes;
	size_t r0 = (size_t)blockIdx.x * kBiasRows, r1 = r0 + kBiasRows < rows ? r0 + kBiasRows : rows;
	for (int o0 = 0; o0 < oc; o0 += lanes) {
		int o = o0 + lane;
		float s = 0.f;
		if (grp < groups && o < oc)
			for (size_t r = r0 + grp; r < r1; r += groups)
				s += gated(dy, gate, relu, r * oc + o);
		red[threadIdx.x] = s;
		__syncthreads();
		if (grp == 0 && o < oc) {
			float t = 0.f;
			for (int k = 0; k < groups; k++)
				t += red[k * lanes + lane];
			part[(size_t)o * gridDim.x + blockIdx.x] = t;
		}
		__syncthreads();
	}
}

// Convolution weights between PyTorch's OIHW (the parameters, fp32) and
// cuDNN's NHWC filter layout OHWI (KRSC), in the convolutions' type.
template <typename T>
__global__ void oihw_to_ohwi(const float *w, int in, int hw, size_t total, T *out)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		// i indexes out: [o][k][ci]
		int ci = (int)(i % in);
		size_t q = i / in;
		int k = (int)(q % hw);
		size_t o = q / hw;
		st(out + i, w[(o * in + ci) * hw + k]);
	}
}

template <typename T>
__global__ void ohwi_to_oihw(const T *w, int in, int hw, size_t total, float *out)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		// i indexes out: [o][ci][k]
		int k = (int)(i % hw);
		size_t q = i / hw;
		int ci = (int)(q % in);
		size_t o = q / in;
		out[i] = ld(w + (o * hw + k) * in + ci);
	}
}

__global__ void to_bf16(const float *x, bf16 *y, size_t n)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void from_bf16(const bf16 *x, float *y, size_t n)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = __bfloat162float(x[i]);
}

// One block: a thread per row (rows strided over the block), the sums in
// a fixed order (the thread's rows, then the tree), written, not added: no
// memset before it, no atomics, the same bits each run.  With b, the
// linear layer's bias is added to the logits on the way in; with d, the
// loss's gradient (logsoftmax_nll_bwd's arithmetic) is written too, and
// with dbias its sum over the rows, the bias's gradient: thread t of the
// first (blockDim / k) * k sums column t % k over the rows t / k, t / k +
// blockDim / k, ..., then thread j < k those partials in order.
constexpr int kLossThreads = 1024;

// One row's log-softmax of its k logits z (the bias added) into lp, its
// NLL into *loss and whether its argmax (first maximum) is the label into
// *good; with d, the loss's gradient (softmax - onehot) * inv, and with db
// that rounded to bf16.
__device__ __forceinline__ void loss_row(const float *z, int k, int label, float *lp, float *d,
					 bf16 *db, float inv, float *loss, float *good)
{
	float mx = -FLT_MAX;
	int am = 0;
	for (int j = 0; j < k; j++)
		if (z[j] > mx) {
			mx = z[j];
			am = j;
		}
	double s = 0;
	for (int j = 0; j < k; j++)
		s += exp((double)(z[j] - mx));
	float lse = mx + (float)log(s);
	for (int j = 0; j < k; j++)
		lp[j] = z[j] - lse;
	*loss += -lp[label];
	*good += am == label ? 1.f : 0.f;
	if (d)
		for (int j = 0; j < k; j++) {
			float v = expf(lp[j]) * inv;
			v = j == label ? v - inv : v;
			d[j] = v;
			if (db)
				db[j] = __float2bfloat16_rn(v);
		}
}

// The rows' loss and correct counts (each thread's in part[0] and part[1])
// summed over the block in a tree, into out; part free again after it.
__device__ __forceinline__ void loss_sums(float (*part)[kLossThreads], float *out)
{
	__syncthreads();
	for (int half = blockDim.x / 2; half > 0; half /= 2) {
		if ((int)threadIdx.x < half) {
			part[0][threadIdx.x] += part[0][threadIdx.x + half];
			part[1][threadIdx.x] += part[1][threadIdx.x + half];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[0] = part[0][0];
		out[1] = part[1][0];
	}
	__syncthreads();
}

__global__ void __launch_bounds__(kLossThreads)
logsoftmax_nll_fwd(const float *logits, const float *b, const uint8_t *label, int n, int k,
		   float *logp, float *out, float *d, bf16 *db, float inv, float *dbias)
{
	pdl_enter();
	__shared__ float part[2][kLossThreads];
	float z[64];
	float loss = 0.f, good = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		for (int j = 0; j < k; j++)
			z[j] = b ? logits[(size_t)i * k + j] + b[j] : logits[(size_t)i * k + j];
		size_t r = (size_t)i * k;
		loss_row(z, k, label[i], logp + r, d ? d + r : NULL, db ? db + r : NULL, inv, &loss,
			 &good);
	}
	part[0][threadIdx.x] = loss;
	part[1][threadIdx.x] = good;
	loss_sums(part, out);
	if (!dbias)
		return;
	// the rows' gradients this block wrote, seen by all its threads after
	// loss_sums' last barrier (after which part is free again)
	int groups = blockDim.x / k, t = threadIdx.x;
	if (t < groups * k) {
		float acc = 0.f;
		for (int i = t / k; i < n; i += groups)
			acc += d[(size_t)i * k + t % k];
		part[0][t] = acc;
	}
	__syncthreads();
	if (t < k) {
		float acc = 0.f;
		for (int g = 0; g < groups; g++)
			acc += part[0][g * k + t];
		dbias[t] = acc;
	}
}

// Group g of 4 elements of x (n in all), as cnn_dropout_fwd draws them
// (one 64-bit draw of key a group); with b, bias_relu's bias (per column
// of rows of k) and ReLU first; drop: apply the mask.
__device__ __forceinline__ void dropout_group(float *x, const float *b, int k, size_t n, size_t g,
					      uint32_t thresh, float scale, bool drop,
					      uint64_t key, bf16 *xb)
{
	size_t i = g * 4;
	uint64_t r = mix64(key + i);
	for (int j = 0; j < 4 && i + j < n; j++) {
		float v = x[i + j];
		if (b)
			v = bias_relu_as(x, v, b[(i + j) % k]);
		if (drop)
			v = ((r >> (16 * j)) & 0xffff) >= thresh ? v * scale : 0.f;
		x[i + j] = v;
		if (xb)
			xb[i + j] = __float2bfloat16_rn(v);
	}
}

// fc2 and the loss, forward and backward, in one launch (cnn_cuda_fc2_head):
// each block takes `rows` consecutive rows of the batch (head_rows), the
// last block what is left.  With b1, fc1's bias, ReLU and dropout on its
// rows of h first (in place, each element as dropout_group draws it: a
// block's rows need not start on a group of 4); its rows of h and fc2's
// weights W then sit in shared memory, rows padded by one float (a warp
// reading one column of several rows hits as many banks).  logits = h W^T
// + b, each a dot product in four interleaved partial sums (q mod 4, then
// (0 + 1) + (2 + 3)), the rows as logsoftmax_nll_fwd computes them (logp
// written by the row's thread, the loss's gradient d to shared memory and
// from there to d); then fc1's output gradient dh = s2 d W through fc1's
// ReLU (0 where h <= 0), each thread one column of the rows g, g +
// groups, ..., and the block's partial sums: fc2's weight gradient d^T h
// (entry (j, q) over its rows in order), its bias gradient, fc1's bias
// gradient (the groups' sums in order), the loss and the correct count.
// One block writes them as the results; with more, each block writes its
// partials to the scratch, and the block that counts itself last on the
// scratch's counter (after a fence) adds every block's in block order and
// sets the counter back to 0: fixed orders throughout, the same bits each
// run for a given n.  One launch for seven of the unfused step's (fc1's
// dropout, fc2's GEMM, the loss, dW4's and dh's GEMMs, the ReLU's
// backward, db3's gemv).
constexpr int kHeadThreads = 512;
constexpr int kHeadW = 4096;        // fc2's weights, k x (hid + 1) floats: 16 KB
constexpr int kHeadH = 4128;        // a block's rows of h, rows x (hid + 1): 32 of 128
constexpr int kHeadRows = 32, kHeadK = 64, kHeadHid = 1024;
constexpr int kHeadCount = 32;      // the scratch's counter, then its partials from here

__host__ __device__ constexpr int head_rows(int hid)
{
	return kHeadH / (hid + 1) < kHeadRows ? kHeadH / (hid + 1) : kHeadRows;
}

__global__ void __launch_bounds__(kHeadThreads)
fc2_head(float *h, const float *b1, uint32_t thresh, float scale, const uint64_t *keyp,
	 const float *w, const float *b, const uint8_t *label, int n, int hid, int k, int rows,
	 float inv, float s2, float *logp, float *out, float *d, float *dw, float *db, float *dh,
	 float *dbh, float *scratch)
{
	pdl_enter();
	__shared__ float ws[kHeadW];               // W, k rows of hid + 1
	__shared__ float hs[kHeadH];               // the block's rows of h, hid + 1 each
	__shared__ float ds[kHeadRows * kHeadK];   // their logits, then the loss's gradient
	__shared__ float red[kHeadHid];            // the column groups' sums of dh
	__shared__ float lsum[2][kHeadRows];       // the rows' loss and correct
	__shared__ int last;
	int t = threadIdx.x, T = blockDim.x, hp = hid + 1;
	int r0 = blockIdx.x * rows, m = n - r0 < rows ? n - r0 : rows;
	size_t e0 = (size_t)r0 * hid, e1 = e0 + (size_t)m * hid;
	for (int e = t; e < k * hid; e += T)
		ws[e / hid * hp + e % hid] = w[e];
	// the block's elements of h, by groups of 4 as dropout_fwd draws them
	bool drop = b1 && keyp;
	uint64_t key = drop ? *keyp : 0;
	for (size_t g = e0 / 4 + t; g < (e1 + 3) / 4; g += T) {
		size_t i = g * 4;
		uint64_t r = mix64(key + i);
		for (int j = 0; j < 4; j++) {
			size_t e = i + j;
			if (e < e0 || e >= e1)
				continue;
			float v = h[e];
			if (b1) {
				v = bias_relu_as(h, v, b1[e % hid]);
				if (drop)
					v = ((r >> (16 * j)) & 0xffff) >= thresh ? v * scale : 0.f;
				h[e] = v;
			}
			size_t l = e - e0;
			hs[l / hid * hp + l % hid] = v;
		}
	}
	__syncthreads();
	for (int e = t; e < m * k; e += T) {
		int j = e / m, i = e % m;
		const float *hi = hs + i * hp, *wj = ws + j * hp;
		float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
		int q = 0;
		for (; q + 4 <= hid; q += 4) {
			a0 += hi[q] * wj[q];
			a1 += hi[q + 1] * wj[q + 1];
			a2 += hi[q + 2] * wj[q + 2];
			a3 += hi[q + 3] * wj[q + 3];
		}
		for (; q < hid; q++)
			a0 += hi[q] * wj[q];
		ds[i * k + j] = ((a0 + a1) + (a2 + a3)) + b[j];
	}
	__syncthreads();
	if (t < m) {
		float z[kHeadK], loss = 0.f, good = 0.f;
		for (int j = 0; j < k; j++)
			z[j] = ds[t * k + j];
		size_t r = (size_t)(r0 + t) * k;
		loss_row(z, k, label[r0 + t], logp + r, ds + t * k, NULL, inv, &loss, &good);
		lsum[0][t] = loss;
		lsum[1][t] = good;
	}
	__syncthreads();
	// the block's sums: the results themselves with one block, else its
	// partials in the scratch (dw, db, dbh, then loss and correct)
	bool one = gridDim.x == 1;
	int P = k * hid + k + hid + 2;
	float *part = scratch + kHeadCount + (size_t)blockIdx.x * P;
	float *pw = one ? dw : part, *pb = one ? db : part + k * hid;
	float *pbh = one ? dbh : part + k * hid + k, *po = one ? out : part + k * hid + k + hid;
	for (int e = t; e < m * k; e += T)
		d[(size_t)r0 * k + e] = ds[e];
	int groups = T / hid > 0 ? T / hid : 1;
	for (int x = t; x < groups * hid; x += T) {
		int q = x % hid;
		float acc = 0.f;
		for (int i = x / hid; i < m; i += groups) {
			const float *di = ds + i * k;
			float v = 0.f;
			for (int j = 0; j < k; j++)
				v += di[j] * ws[j * hp + q];
			v = hs[i * hp + q] > 0.f ? s2 * v : 0.f;
			dh[(size_t)(r0 + i) * hid + q] = v;
			acc += v;
		}
		red[x] = acc;
	}
	for (int e = t; e < k * hid; e += T) {
		int j = e / hid, q = e % hid;
		float acc = 0.f;
		for (int i = 0; i < m; i++)
			acc += ds[i * k + j] * hs[i * hp + q];
		pw[e] = acc;
	}
	if (t < k) {
		float acc = 0.f;
		for (int i = 0; i < m; i++)
			acc += ds[i * k + t];
		pb[t] = acc;
	}
	if (t == 0) {
		float loss = 0.f, good = 0.f;
		for (int i = 0; i < m; i++) {
			loss += lsum[0][i];
			good += lsum[1][i];
		}
		po[0] = loss;
		po[1] = good;
	}
	__syncthreads();
	for (int q = t; q < hid; q += T) {
		float acc = 0.f;
		for (int g = 0; g < groups; g++)
			acc += red[g * hid + q];
		pbh[q] = acc;
	}
	if (one)
		return;
	// the last block to finish adds every block's partials in order
	__threadfence();
	__syncthreads();
	unsigned *count = reinterpret_cast<unsigned *>(scratch);
	if (t == 0)
		last = atomicAdd(count, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	const volatile float *all = scratch + kHeadCount;
	for (int e = t; e < P; e += T) {
		float acc = 0.f;
		for (unsigned bk = 0; bk < gridDim.x; bk++)
			acc += all[(size_t)bk * P + e];
		if (e < k * hid)
			dw[e] = acc;
		else if (e < k * hid + k)
			db[e - k * hid] = acc;
		else if (e < k * hid + k + hid)
			dbh[e - k * hid - k] = acc;
		else
			out[e - k * hid - k - hid] = acc;
	}
	if (t == 0)
		*count = 0;
}

// The updated parameter v at i in the weights' other forms (cnn_cuda_wop:
// conv3_pack's, oihw_to_ohwi's and to_bf16's stores of it).  Ranges by
// unsigned difference: i below off wraps past the size.
__device__ __forceinline__ void wop_put(const cnn_cuda_wop &w, size_t i, float v)
{
	if (w.wb)
		st(reinterpret_cast<bf16 *>(w.wb) + i, v);
	size_t j = i - w.pack.off, pn = 9 * (size_t)w.pack.oc * w.pack.c;
	if (j < pn) {
		int tap = (int)(j % 9), ci = (int)(j / 9 % w.pack.c), o = (int)(j / 9 / w.pack.c);
		size_t f = ((size_t)tap * w.pack.c + ci) * w.pack.oc + o;
		size_t b = ((size_t)tap * w.pack.oc + o) * w.pack.c + ci;
		if (w.pack.f[0]) {
			w.pack.f[0][f] = v;
			w.pack.f[1][b] = v;
		} else {
			st(reinterpret_cast<bf16 *>(w.pack.b[0]) + f, v);
			st(reinterpret_cast<bf16 *>(w.pack.b[1]) + b, v);
		}
	}
	for (int l = 0; l < 2; l++) {
		const auto &t = w.ohwi[l];
		size_t k = i - t.off, per = (size_t)t.in * t.hw;
		if (k >= (size_t)t.out * per)
			continue;
		size_t o = k / per, q = (o * t.hw + k % t.hw) * t.in + k / t.hw % t.in;
		if (t.f)
			t.f[q] = v;
		else
			st(reinterpret_cast<bf16 *>(t.b) + q, v);
	}
}

// SGD's update of one element: its new value from p, g and (momentum)
// buf, which it updates.
__device__ __forceinline__ float sgd_one(float p, float g, float *buf, float lr, float mom,
					 float wd, int first)
{
	float d = g + wd * p;
	if (mom == 0.f)
		return p - lr * d;
	float b = first ? d : mom * *buf + d;
	*buf = b;
	return p - lr * b;
}

// quad (p, g, buf 16-byte aligned): the elements from lo and n rounded in
// to multiples of 4 a group of 4 a thread (16-byte loads and stores), the
// edges outside them an element a thread; the same arithmetic each way.
template <bool WOP>
__global__ void sgd_step(float *p, const float *g, float *buf, size_t lo, size_t n,
			 const float *lrp, float mom, float wd, int first, int quad, cnn_cuda_wop w)
{
	pdl_enter();
	float lr = *lrp;
	size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
	size_t a = quad ? (lo + 3) & ~(size_t)3 : n, z = quad ? n & ~(size_t)3 : n;
	if (a > n)
		a = n;
	if (z < a)
		z = a;
	for (size_t k = t; k < (a - lo) + (n - z); k += stride) {
		size_t i = k < a - lo ? lo + k : z + (k - (a - lo));
		float b = mom != 0.f && !first ? buf[i] : 0.f;
		float v = sgd_one(p[i], g[i], &b, lr, mom, wd, first);
		if (mom != 0.f)
			buf[i] = b;
		p[i] = v;
		if (WOP)
			wop_put(w, i, v);
	}
	for (size_t i = a + 4 * t; i < z; i += 4 * stride) {
		float pv[4], gv[4], bv[4] = { 0.f, 0.f, 0.f, 0.f }, v[4];
		ld4(p + i, pv);
		ld4(g + i, gv);
		if (mom != 0.f && !first)
			ld4(buf + i, bv);
		for (int j = 0; j < 4; j++)
			v[j] = sgd_one(pv[j], gv[j], &bv[j], lr, mom, wd, first);
		st4(p + i, v);
		if (mom != 0.f)
			st4(buf + i, bv);
		if (WOP)
			for (int j = 0; j < 4; j++)
				wop_put(w, i + j, v[j]);
	}
}

template <bool WOP>
__global__ void adadelta_step(float *p, const float *g, float *sq, float *acc, size_t lo,
			      size_t n, const float *lrp, float rho, float eps, float wd,
			      cnn_cuda_wop w)
{
	pdl_enter();
	float lr = *lrp;
	for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float d = g[i] + wd * p[i];
		float s = sq[i] * rho + (1.f - rho) * d * d;
		float delta = sqrtf(acc[i] + eps) / sqrtf(s + eps) * d;
		sq[i] = s;
		acc[i] = acc[i] * rho + (1.f - rho) * delta * delta;
		float v = p[i] - lr * delta;
		p[i] = v;
		if (WOP)
			wop_put(w, i, v);
	}
}

// One thread per group of 4 elements.
__global__ void dropout_fwd(float *x, const float *b, int k, size_t n, uint32_t thresh,
			    float scale, const uint64_t *keyp, bf16 *xb)
{
	pdl_enter();
	uint64_t key = keyp ? *keyp : 0;
	size_t groups = (n + 3) / 4;
	for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < groups;
	     g += (size_t)gridDim.x * blockDim.x)
		dropout_group(x, b, k, n, g, thresh, scale, keyp != NULL, key, xb);
}

// One thread per output pixel; the image and label come from idx.
__global__ void gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx, int c,
		       size_t plane, struct cnn_cuda_norm norm, size_t total, float *x, uint8_t *y,
		       bf16 *xb)
{
	pdl_enter();
	size_t img = (size_t)c * plane;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t row = i / img, r = i % img;
		int ch = (int)(r / plane);
		uint32_t src = idx[row];
		float v = (float)xs[(size_t)src * img + r] * norm.scale[ch] - norm.off[ch];
		x[i] = v;
		if (xb)
			st(xb + i, v);
		if (r == 0)
			y[row] = ys[src];
	}
}

// maxpool2_relu_bwd, four windows of a row of y a thread (pool_quads, h
// and w even: every element of dx under a window): rows 2 py and 2 py + 1
// of dx, 8 columns each, in 16-byte stores; y and dy in one 16-byte load
// each, arg in one of 4 bytes.  The same values as maxpool2_relu_bwd.
template <typename T, typename I>
__global__ void maxpool2_relu_bwd_quad(const float *dy, const float *y, const uint8_t *arg,
				       int w, int pw, I quads, T *dx)
{
	pdl_enter();
	for (I q = blockIdx.x * (I)blockDim.x + threadIdx.x; q < quads;
	     q += (I)gridDim.x * blockDim.x) {
		I i = 4 * q, row = i / pw, px = i - row * pw;   // row: plane * ph + py
		float4 yv = *reinterpret_cast<const float4 *>(y + i);
		float4 gv = *reinterpret_cast<const float4 *>(dy + i);
		uchar4 av = *reinterpret_cast<const uchar4 *>(arg + i);
		float ys[4] = { yv.x, yv.y, yv.z, yv.w }, gs[4] = { gv.x, gv.y, gv.z, gv.w }, t[8],
		      u[8];
		uint8_t as[4] = { av.x, av.y, av.z, av.w };
		for (int k = 0; k < 4; k++) {
			int hit = ys[k] > 0.f ? as[k] : -1;
			t[2 * k] = hit == 0 ? gs[k] : 0.f;
			t[2 * k + 1] = hit == 1 ? gs[k] : 0.f;
			u[2 * k] = hit == 2 ? gs[k] : 0.f;
			u[2 * k + 1] = hit == 3 ? gs[k] : 0.f;
		}
		T *d0 = dx + (size_t)(2 * row) * w + 2 * px;
		st8(d0, t);
		st8(d0 + w, u);
	}
}

} // namespace

namespace {

template <typename T>
int launch_bias_relu(T *y, const float *b, int nimg, int oc, int n, cudaStream_t s)
{
	size_t total = (size_t)nimg * oc * n;
	if (!total)
		return 0;
	bias_relu<<<blocks_for(total), kThreads, 0, s>>>(y, b, oc, n, total);
	LAUNCHED(s);
	return 0;
}

bool aligned(const void *p, size_t to) { return (uintptr_t)p % to == 0; }

// Whether the pool's quad kernels fit: windows in fours along an output
// row of pw, each four's 2 x 8 elements of the h x w side (x, or dx) 16
// bytes aligned: a row of w a multiple of 16 bytes, the tensor aligned.
template <typename T>
bool pool_quads(int pw, int w, const T *x)
{
	return pw % 4 == 0 && (w * sizeof(T)) % 16 == 0 && aligned(x, 16);
}

template <typename T>
int launch_maxpool2_fwd(const T *x, int nimg, int c, int h, int w, const cnn_cuda_pool_ep *ep,
			float *y, uint8_t *arg, cudaStream_t s)
{
	int ph = h / 2, pw = w / 2;
	size_t total = (size_t)nimg * c * ph * pw;
	if (!total)
		return 0;
	PoolEp e = pool_ep(ep);
	bool quad = pool_quads(pw, w, x) && aligned(y, 16) && aligned(arg, 4) && aligned(e.yb, 8);
	// pairs where every row starts at an even element (x itself is aligned)
	bool pair = w % 2 == 0 && (uintptr_t)x % (2 * sizeof(T)) == 0;
	size_t n = quad ? total / 4 : total;
	if (total <= 0x7fffffffu) {
		auto k = quad ? maxpool2_fwd<T, unsigned, kQuad> :
			 pair ? maxpool2_fwd<T, unsigned, kPair> : maxpool2_fwd<T, unsigned, kEach>;
		k<<<blocks_for(n), kThreads, 0, s>>>(x, e, c, h, w, ph, pw, (unsigned)n, y, arg);
	} else {
		auto k = quad ? maxpool2_fwd<T, size_t, kQuad> :
			 pair ? maxpool2_fwd<T, size_t, kPair> : maxpool2_fwd<T, size_t, kEach>;
		k<<<blocks_for(n), kThreads, 0, s>>>(x, e, c, h, w, ph, pw, n, y, arg);
	}
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg, int planes,
			     int h, int w, T *dx, cudaStream_t s)
{
	size_t total = (size_t)planes * ((h + 1) / 2) * ((w + 1) / 2);   // 2x2 blocks of dx
	if (!total)
		return 0;
	if (h % 2 == 0 && pool_quads(w / 2, w, dx) && aligned(dy, 16) && aligned(y, 16) &&
	    aligned(arg, 4)) {
		size_t quads = total / 4;   // total: y's elements here
		if (total <= 0x7fffffffu)
			maxpool2_relu_bwd_quad<<<blocks_for(quads), kThreads, 0, s>>>(
				dy, y, arg, w, w / 2, (unsigned)quads, dx);
		else
			maxpool2_relu_bwd_quad<<<blocks_for(quads), kThreads, 0, s>>>(
				dy, y, arg, w, w / 2, quads, dx);
		LAUNCHED(s);
		return 0;
	}
	if (total <= 0x7fffffffu / 4)
		maxpool2_relu_bwd<<<blocks_for(total), kThreads, 0, s>>>(dy, y, arg, h, w, h / 2,
									   w / 2, (unsigned)total, dx);
	else
		maxpool2_relu_bwd<<<blocks_for(total), kThreads, 0, s>>>(dy, y, arg, h, w, h / 2,
									   w / 2, total, dx);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_relu_bwd(T *dx, const T *y, size_t n, bf16 *xb, cudaStream_t s)
{
	if (!n)
		return 0;
	relu_bwd<<<blocks_for(n), kThreads, 0, s>>>(dx, y, n, xb);
	LAUNCHED(s);
	return 0;
}

template <typename T, typename G>
int launch_bias_grad(T *dy, const G *gate, int relu, int nimg, int oc, int n, float *scratch,
		     float *db, cudaStream_t s)
{
	if (oc <= 0)
		return 0;
	if (nimg < 1 || n < 1 || oc > 65535) {
		char m[96];
		snprintf(m, sizeof(m), "%d images of %d channels of %d pixels: expected >= 1, 1-65535, >= 1",
			 nimg, oc, n);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_bias_grad", m);
		return -1;
	}
	int ipc = bias_ipc(n), chunks = (nimg + ipc - 1) / ipc;
	bias_grad_part<<<dim3(chunks, oc), kBiasThreads, 0, s>>>(dy, gate, relu, nimg, oc, n, ipc,
								 scratch);
	LAUNCHED(s);
	bias_grad_sum<<<oc, kBiasThreads, 0, s>>>(scratch, chunks, db);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_bias_relu_nhwc(T *y, const float *b, int nimg, int oc, int n, cudaStream_t s)
{
	size_t total = (size_t)nimg * oc * n;
	if (!total)
		return 0;
	bias_relu_nhwc<<<blocks_for(total), kThreads, 0, s>>>(y, b, oc, total);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_maxpool2_fwd_nhwc(const T *x, int nimg, int c, int h, int w,
			     const cnn_cuda_pool_ep *ep, float *y, uint8_t *arg, cudaStream_t s)
{
	int ph = h / 2, pw = w / 2;
	size_t total = (size_t)nimg * c * ph * pw;
	if (!total)
		return 0;
	int pb = pool_band(c, ph, pw), bands = pb ? (ph + pb - 1) / pb : 0;
	int quad = c % 4 == 0 && kThreads % (c / 4) == 0 && aligned(x, 4 * sizeof(T));
	if (pb && (size_t)nimg * bands <= 0x7fffffffu)
		maxpool2_fwd_nhwc_tile<<<nimg * bands, kThreads, 0, s>>>(x, pool_ep(ep), c, h, w, ph,
									  pw, pb, bands, quad, y, arg);
	else
		maxpool2_fwd_nhwc<<<blocks_for(total), kThreads, 0, s>>>(x, pool_ep(ep), c, h, w, ph,
									  pw, total, y, arg);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_maxpool2_relu_bwd_nhwc(const float *dy, const float *y, const uint8_t *arg, int nimg,
				  int c, int h, int w, T *dx, cudaStream_t s)
{
	size_t total = (size_t)nimg * c * h * w;
	if (!total)
		return 0;
	int ph = h / 2, pw = w / 2, pb = ph && pw ? pool_band(c, ph, pw) : 0;
	int bands = pb ? (ph + pb - 1) / pb : 0;
	// a band's dx (at most 2 pb + 1 rows) counted in an int
	int quad = c % 4 == 0 && kThreads % (c / 4) == 0 && aligned(dx, 4 * sizeof(T));
	if (pb && (size_t)nimg * bands <= 0x7fffffffu && (size_t)(2 * pb + 1) * w * c <= 0x7fffffffu)
		maxpool2_relu_bwd_nhwc_tile<<<nimg * bands, kThreads, 0, s>>>(dy, y, arg, c, h, w, ph,
									       pw, pb, bands, quad, dx);
	else
		maxpool2_relu_bwd_nhwc<<<blocks_for(total), kThreads, 0, s>>>(dy, y, arg, c, h, w, ph,
									       pw, total, dx);
	LAUNCHED(s);
	return 0;
}

size_t bias_chunks_nhwc(int nimg, int n)
{
	size_t rows = (size_t)nimg * n;
	return (rows + kBiasRows - 1) / kBiasRows;
}

template <typename T>
int launch_bias_grad_nhwc(T *dy, const T *gate, int relu, int nimg, int oc, int n, float *scratch,
			  float *db, cudaStream_t s)
{
	if (oc <= 0)
		return 0;
	size_t chunks = nimg >= 1 && n >= 1 ? bias_chunks_nhwc(nimg, n) : 0;
	if (nimg < 1 || n < 1 || chunks > 0x7fffffffu) {
		char m[96];
		snprintf(m, sizeof(m), "%d images of %d pixels of %d channels: expected >= 1 each",
			 nimg, n, oc);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_bias_grad_nhwc", m);
		return -1;
	}
	bias_grad_part_nhwc<<<(unsigned)chunks, kBiasThreads, 0, s>>>(dy, gate, relu,
									(size_t)nimg * n, oc, scratch);
	LAUNCHED(s);
	bias_grad_sum<<<oc, kBiasThreads, 0, s>>>(scratch, (int)chunks, db);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_oihw_to_ohwi(const float *w, int out, int in, int hw, T *o, cudaStream_t s)
{
	size_t total = (size_t)out * in * hw;
	if (!total)
		return 0;
	oihw_to_ohwi<<<blocks_for(total), kThreads, 0, s>>>(w, in, hw, total, o);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_ohwi_to_oihw(const T *w, int out, int in, int hw, float *o, cudaStream_t s)
{
	size_t total = (size_t)out * in * hw;
	if (!total)
		return 0;
	ohwi_to_oihw<<<blocks_for(total), kThreads, 0, s>>>(w, in, hw, total, o);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_conv1_fwd(const T *x, const T *w, const float *b, int nimg, int h, int wd, int oc,
		     int nhwc, T *y, const Gather1 *gs, cudaStream_t s)
{
	const char *who = gs ? "cnn_cuda_conv1_fwd_gather" : "cnn_cuda_conv1_fwd";
	if (nimg < 0 || oc < 0) {
		char m[96];
		snprintf(m, sizeof(m), "%d images, %d channels: expected 0 or more", nimg, oc);
		cnn_cuda_fail(__FILE__, __LINE__, who, m);
		return -1;
	}
	if (h < 3 || wd < 3) {
		char m[64];
		snprintf(m, sizeof(m), "images of %dx%d: expected 3x3 or larger", h, wd);
		cnn_cuda_fail(__FILE__, __LINE__, who, m);
		return -1;
	}
	size_t total = (size_t)nimg * (h - 2) * (wd - 2);
	if (oc > kConv1MaxOc || total > 0x7fffffffu) {
		char m[160];
		snprintf(m, sizeof(m), "%d channels, %zu output pixels (%d images of %dx%d): expected "
			 "%d channels at most, fewer than 2^31 pixels", oc, total, nimg, h, wd,
			 kConv1MaxOc);
		cnn_cuda_fail(__FILE__, __LINE__, who, m);
		return -1;
	}
	if (!total || !oc)
		return 0;
	if (nhwc && oc % 4 == 0 && oc <= kConv1StageOc && aligned(y, 4 * sizeof(T))) {
		auto staged_k = gs ? conv1_fwd_nhwc_staged<T, true> : conv1_fwd_nhwc_staged<T, false>;
		staged_k<<<blocks_for(total), kThreads, 0, s>>>(x, w, b, h, wd, oc, (unsigned)total, y,
								 gs ? *gs : Gather1());
		LAUNCHED(s);
		return 0;
	}
	auto conv1_fwd_k = gs ? conv1_fwd<T, true> : conv1_fwd<T, false>;
	int mode = nhwc ? (oc % 8 == 0 && aligned(y, 16) ? 2 : 1) : 0;   // conv1_fwd's nhwc
	conv1_fwd_k<<<blocks_for(total), kThreads, 0, s>>>(x, w, b, h, wd, oc, mode, (unsigned)total,
							    y, gs ? *gs : Gather1());
	LAUNCHED(s);
	return 0;
}

int conv1_ipc(int h, int wd)
{
	return bias_ipc((h - 2) * (wd - 2));
}

template <typename T>
int launch_conv1_wgrad(const T *x, const T *dy, const T *y, int nimg, int h, int wd, int oc,
		       int nhwc, float *scratch, float *dw, float *db, cudaStream_t s)
{
	if (oc <= 0 || nimg == 0)
		return 0;
	if (nimg < 0 || h < 3 || wd < 3 || oc > 65535) {
		char m[96];
		snprintf(m, sizeof(m), "%d images of %dx%d, %d channels: expected >= 0, 3x3 or larger, "
			 "1-65535", nimg, h, wd, oc);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_conv1_wgrad", m);
		return -1;
	}
	int ipc = conv1_ipc(h, wd), chunks = (nimg + ipc - 1) / ipc;
	// a block per (chunk, group) in one dimension: chunks * groups < 2^31
	// (oc <= 65535: groups <= 16384; chunks <= nimg / ipc)
	size_t blocks = (size_t)chunks * ((oc + kConv1WgCh - 1) / kConv1WgCh);
	if (blocks > 0x7fffffffu) {
		char m[96];
		snprintf(m, sizeof(m), "%d images, %d channels: %zu blocks, expected < 2^31", nimg, oc,
			 blocks);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_conv1_wgrad", m);
		return -1;
	}
	static_assert(kConv1WgCh == 4, "conv1_wgrad_part's ld4 loads a group");
	if (nhwc && oc % 4 == 0 && aligned(y, 4 * sizeof(T)) && aligned(dy, 4 * sizeof(T)))
		nhwc = 2;
	unsigned *count = reinterpret_cast<unsigned *>(scratch);
	conv1_wgrad_part<<<(unsigned)blocks, kBiasThreads, 0, s>>>(
		x, dy, y, h, wd, oc, nhwc, nimg, ipc, chunks, scratch + conv1_wgrad_counters(oc), count, dw, db);
	LAUNCHED(s);
	return 0;
}


} // namespace

extern "C" int cnn_cuda_bias_relu(float *y, const float *b, int nimg, int oc, int n,
				  cudaStream_t s)
{
	return launch_bias_relu(y, b, nimg, oc, n, s);
}

extern "C" int cnn_cuda_maxpool2_fwd(const float *x, int nimg, int c, int h, int w,
				     const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
				     cudaStream_t s)
{
	return launch_maxpool2_fwd(x, nimg, c, h, w, ep, y, arg, s);
}

extern "C" int cnn_cuda_maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg,
					  int planes, int h, int w, float *dx, cudaStream_t s)
{
	return launch_maxpool2_relu_bwd(dy, y, arg, planes, h, w, dx, s);
}

extern "C" int cnn_cuda_relu_bwd(float *dx, const float *y, size_t n, cnn_bf16 *dxb,
				 cudaStream_t s)
{
	return launch_relu_bwd(dx, y, n, reinterpret_cast<bf16 *>(dxb), s);
}

extern "C" size_t cnn_cuda_bias_grad_scratch(int nimg, int oc, int n)
{
	if (nimg < 1 || oc < 1 || n < 1)
		return 0;
	int ipc = bias_ipc(n);
	return (size_t)oc * ((nimg + ipc - 1) / ipc);
}

extern "C" int cnn_cuda_bias_grad(float *dy, const float *gate, int relu, int nimg, int oc, int n,
				  float *scratch, float *db, cudaStream_t s)
{
	return launch_bias_grad(dy, gate, relu, nimg, oc, n, scratch, db, s);
}

extern "C" int cnn_cuda_bias_relu_bf16(cnn_bf16 *y, const float *b, int nimg, int oc, int n,
				       cudaStream_t s)
{
	return launch_bias_relu(B(y), b, nimg, oc, n, s);
}

extern "C" int cnn_cuda_maxpool2_fwd_bf16(const cnn_bf16 *x, int nimg, int c, int h, int w,
					  const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
					  cudaStream_t s)
{
	return launch_maxpool2_fwd(B(x), nimg, c, h, w, ep, y, arg, s);
}

extern "C" int cnn_cuda_maxpool2_relu_bwd_bf16(const float *dy, const float *y,
					       const uint8_t *arg, int planes, int h, int w,
					       cnn_bf16 *dx, cudaStream_t s)
{
	return launch_maxpool2_relu_bwd(dy, y, arg, planes, h, w, B(dx), s);
}

extern "C" int cnn_cuda_bias_grad_bf16(cnn_bf16 *dy, const cnn_bf16 *gate, int relu, int nimg,
				       int oc, int n, float *scratch, float *db, cudaStream_t s)
{
	return launch_bias_grad(B(dy), B(gate), relu, nimg, oc, n, scratch, db, s);
}

extern "C" int cnn_cuda_bias_relu_nhwc(float *y, const float *b, int nimg, int oc, int n,
				       cudaStream_t s)
{
	return launch_bias_relu_nhwc(y, b, nimg, oc, n, s);
}

extern "C" int cnn_cuda_maxpool2_fwd_nhwc(const float *x, int nimg, int c, int h, int w,
					  const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
					  cudaStream_t s)
{
	return launch_maxpool2_fwd_nhwc(x, nimg, c, h, w, ep, y, arg, s);
}

extern "C" int cnn_cuda_maxpool2_relu_bwd_nhwc(const float *dy, const float *y,
					       const uint8_t *arg, int nimg, int c, int h, int w,
					       float *dx, cudaStream_t s)
{
	return launch_maxpool2_relu_bwd_nhwc(dy, y, arg, nimg, c, h, w, dx, s);
}

extern "C" size_t cnn_cuda_bias_grad_nhwc_scratch(int nimg, int oc, int n)
{
	if (nimg < 1 || oc < 1 || n < 1)
		return 0;
	return (size_t)oc * bias_chunks_nhwc(nimg, n);
}

extern "C" int cnn_cuda_bias_grad_nhwc(float *dy, const float *gate, int relu, int nimg, int oc,
				       int n, float *scratch, float *db, cudaStream_t s)
{
	return launch_bias_grad_nhwc(dy, gate, relu, nimg, oc, n, scratch, db, s);
}

extern "C" int cnn_cuda_oihw_to_ohwi(const float *w, int out, int in, int hw, float *o,
				     cudaStream_t s)
{
	return launch_oihw_to_ohwi(w, out, in, hw, o, s);
}

extern "C" int cnn_cuda_ohwi_to_oihw(const float *w, int out, int in, int hw, float *o,
				     cudaStream_t s)
{
	return launch_ohwi_to_oihw(w, out, in, hw, o, s);
}

extern "C" int cnn_cuda_bias_relu_nhwc_bf16(cnn_bf16 *y, const float *b, int nimg, int oc, int n,
					    cudaStream_t s)
{
	return launch_bias_relu_nhwc(B(y), b, nimg, oc, n, s);
}

extern "C" int cnn_cuda_maxpool2_fwd_nhwc_bf16(const cnn_bf16 *x, int nimg, int c, int h, int w,
					       const struct cnn_cuda_pool_ep *ep, float *y,
					       uint8_t *arg, cudaStream_t s)
{
	return launch_maxpool2_fwd_nhwc(B(x), nimg, c, h, w, ep, y, arg, s);
}

extern "C" int cnn_cuda_maxpool2_relu_bwd_nhwc_bf16(const float *dy, const float *y,
						    const uint8_t *arg, int nimg, int c, int h,
						    int w, cnn_bf16 *dx, cudaStream_t s)
{
	return launch_maxpool2_relu_bwd_nhwc(dy, y, arg, nimg, c, h, w, B(dx), s);
}

extern "C" int cnn_cuda_bias_grad_nhwc_bf16(cnn_bf16 *dy, const cnn_bf16 *gate, int relu,
					    int nimg, int oc, int n, float *scratch, float *db,
					    cudaStream_t s)
{
	return launch_bias_grad_nhwc(B(dy), B(gate), relu, nimg, oc, n, scratch, db, s);
}

extern "C" int cnn_cuda_oihw_to_ohwi_bf16(const float *w, int out, int in, int hw, cnn_bf16 *o,
					  cudaStream_t s)
{
	return launch_oihw_to_ohwi(w, out, in, hw, B(o), s);
}

extern "C" int cnn_cuda_ohwi_to_oihw_bf16(const cnn_bf16 *w, int out, int in, int hw, float *o,
					  cudaStream_t s)
{
	return launch_ohwi_to_oihw(B(w), out, in, hw, o, s);
}

extern "C" int cnn_cuda_to_bf16(const float *x, cnn_bf16 *y, size_t n, cudaStream_t s)
{
	if (!n)
		return 0;
	to_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, B(y), n);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_from_bf16(const cnn_bf16 *x, float *y, size_t n, cudaStream_t s)
{
	if (!n)
		return 0;
	from_bf16<<<blocks_for(n), kThreads, 0, s>>>(B(x), y, n);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_logsoftmax_nll_fwd(const float *logits, const float *b,
					   const uint8_t *label, int n, int k, float *logp,
					   float *out, float *dlogits, cnn_bf16 *dlb, float scale_n,
					   float *dbias, cudaStream_t s)
{
	if (n < 0 || k < 1 || k > 64 || (dlogits && !(scale_n > 0.f)) || (dbias && !dlogits)) {
		char m[160];
		snprintf(m, sizeof(m), "%d rows of %d classes, scale %g%s: expected 0 or more, 1-64, "
			 "> 0%s", n, k, scale_n, dbias && !dlogits ? ", a bias gradient" : "",
			 dbias && !dlogits ? ", the loss's gradient with it" : "");
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_logsoftmax_nll_fwd", m);
		return -1;
	}
	/* a power of two (the tree), enough for a row each up to 1024, and
	 * with dbias a column each at least */
	int threads = 32;
	while ((threads < n || (dbias && threads < k)) && threads < kLossThreads)
		threads *= 2;
	logsoftmax_nll_fwd<<<1, threads, 0, s>>>(logits, b, label, n, k, logp, out, dlogits,
						   dlogits ? reinterpret_cast<bf16 *>(dlb) : NULL,
						   dlogits ? 1.f / scale_n : 0.f, dbias);
	LAUNCHED(s);
	return 0;
}

extern "C" size_t cnn_cuda_fc2_head_scratch(int n, int hid, int k)
{
	if (n < 1 || hid < 1 || hid > kHeadHid || k < 1)
		return 0;
	int rows = head_rows(hid), blocks = (n + rows - 1) / rows;
	return blocks > 1 ? kHeadCount + (size_t)blocks * ((size_t)k * hid + k + hid + 2) : 0;
}

extern "C" int cnn_cuda_fc2_head_fits(int hid, int k)
{
	return hid >= 1 && hid <= kHeadHid && k >= 1 && k <= kHeadK && k * (hid + 1) <= kHeadW;
}

extern "C" int cnn_cuda_fc2_head(float *h, const float *b1, float p, const uint64_t *key,
				 const float *w, const float *b, const uint8_t *label, int n, int hid,
				 int k, float scale_n, float s2, float *logp, float *out,
				 float *dlogits, float *dw, float *db, float *dh, float *dbh,
				 float *scratch, size_t scratch_n, cudaStream_t s)
{
	size_t need = cnn_cuda_fc2_head_scratch(n, hid, k);
	if (n < 1 || !cnn_cuda_fc2_head_fits(hid, k) || !(scale_n > 0.f) || scratch_n < need ||
	    (need && !scratch)) {
		char m[300];
		snprintf(m, sizeof(m), "%d rows, %d hidden units, %d classes, scale %g, scratch of %zu "
			 "floats: expected 1 or more rows, 1-%d hidden, 1-%d classes, classes x "
			 "(hidden + 1) at most %d, scale > 0, a scratch of %zu floats at least",
			 n, hid, k, scale_n, scratch ? scratch_n : 0, kHeadHid, kHeadK, kHeadW, need);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_fc2_head", m);
		return -1;
	}
	int rows = head_rows(hid), blocks = (n + rows - 1) / rows;
	fc2_head<<<blocks, kHeadThreads, 0, s>>>(h, b1, (uint32_t)(p * 65536.f), 1.f / (1.f - p),
						 b1 && p > 0.f ? key : NULL, w, b, label, n, hid, k,
						 rows, 1.f / scale_n, s2, logp, out, dlogits, dw, db,
						 dh, dbh, scratch);
	LAUNCHED(s);
	return 0;
}

// A wop to pass by value: the caller's, or one that writes nothing.
static cnn_cuda_wop wop_of(const cnn_cuda_wop *w)
{
	cnn_cuda_wop none;
	memset(&none, 0, sizeof(none));
	if (!w)
		return none;
	none = *w;
	// a form with no pointer writes nothing, whatever its sizes say
	if (!none.pack.f[0] && !none.pack.b[0])
		none.pack.oc = none.pack.c = 0;
	for (int l = 0; l < 2; l++)
		if (!none.ohwi[l].f && !none.ohwi[l].b)
			none.ohwi[l].out = 0;
	return none;
}

// An update's range of parameters [lo, hi): said where it is backwards.
static bool range_bad(size_t lo, size_t hi, int line, const char *who)
{
	if (lo <= hi)
		return false;
	char m[96];
	snprintf(m, sizeof(m), "parameters %zu to %zu: expected the first at most the end", lo, hi);
	cnn_cuda_fail(__FILE__, line, who, m);
	return true;
}

extern "C" int cnn_cuda_sgd_step_range(float *p, const float *g, float *buf, size_t lo, size_t hi,
				       const float *lr, float momentum, float weight_decay, int first,
				       const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	if (range_bad(lo, hi, __LINE__, "cnn_cuda_sgd_step_range"))
		return -1;
	if (lo == hi)
		return 0;
	cnn_cuda_wop w = wop_of(wop);
	float mom = momentum, wd = weight_decay;
	auto sgd_kernel = wop ? sgd_step<true> : sgd_step<false>;
	int quad = aligned(p, 16) && aligned(g, 16) && (momentum == 0.f || aligned(buf, 16));
	unsigned nb = blocks_for(quad ? (hi - lo) / 4 + 1 : hi - lo);
	sgd_kernel<<<nb, kThreads, 0, s>>>(p, g, buf, lo, hi, lr, mom, wd, first, quad, w);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_sgd_step(float *p, const float *g, float *buf, size_t n, const float *lr,
				 float momentum, float weight_decay, int first,
				 const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	return cnn_cuda_sgd_step_range(p, g, buf, 0, n, lr, momentum, weight_decay, first, wop, s);
}

extern "C" int cnn_cuda_adadelta_step_range(float *p, const float *g, float *sq, float *acc,
					    size_t lo, size_t hi, const float *lr, float rho,
					    float eps, float weight_decay,
					    const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	if (range_bad(lo, hi, __LINE__, "cnn_cuda_adadelta_step_range"))
		return -1;
	if (lo == hi)
		return 0;
	cnn_cuda_wop w = wop_of(wop);
	float wd = weight_decay;
	unsigned nb = blocks_for(hi - lo);
	auto adadelta_kernel = wop ? adadelta_step<true> : adadelta_step<false>;
	adadelta_kernel<<<nb, kThreads, 0, s>>>(p, g, sq, acc, lo, hi, lr, rho, eps, wd, w);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_adadelta_step(float *p, const float *g, float *sq, float *acc, size_t n,
				      const float *lr, float rho, float eps, float weight_decay,
				      const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	return cnn_cuda_adadelta_step_range(p, g, sq, acc, 0, n, lr, rho, eps, weight_decay, wop, s);
}

extern "C" int cnn_cuda_dropout_fwd(float *x, const float *b, int k, size_t n, float p,
				    const uint64_t *key, cnn_bf16 *xb, cudaStream_t s)
{
	if (!n)
		return 0;
	if (b && k < 1) {
		char m[64];
		snprintf(m, sizeof(m), "rows of %d: expected >= 1", k);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_dropout_fwd", m);
		return -1;
	}
	uint32_t thresh = (uint32_t)(p * 65536.f);
	float scale = 1.f / (1.f - p);
	dropout_fwd<<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(x, b, k, n, thresh, scale,
								   p > 0.f ? key : NULL,
								   reinterpret_cast<bf16 *>(xb));
	LAUNCHED(s);
	return 0;
}

extern "C" void cnn_cuda_norm_set(struct cnn_cuda_norm *nm, int c, const float *mean,
				  const float *std)
{
	for (int ch = 0; ch < 4; ch++) {
		nm->scale[ch] = ch < c ? 1.f / (255.f * std[ch]) : 0.f;
		nm->off[ch] = ch < c ? mean[ch] / std[ch] : 0.f;
	}
}

extern "C" int cnn_cuda_gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx, int n,
			       int c, int h, int w, const struct cnn_cuda_norm *norm, float *x,
			       uint8_t *y, cnn_bf16 *xb, cudaStream_t s)
{
	size_t plane = (size_t)h * w, total = (size_t)n * c * plane;
	if (!total)
		return 0;
	if (c < 1 || c > 4) {
		char m[64];
		snprintf(m, sizeof(m), "%d channels: expected 1-4", c);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_gather", m);
		return -1;
	}
	gather<<<blocks_for(total), kThreads, 0, s>>>(xs, ys, idx, c, plane, *norm, total, x, y, B(xb));
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_conv1_wgrad_sum(const float *part, int chunks, int oc, float *dw, float *db,
					cudaStream_t s)
{
	if (oc <= 0)
		return 0;
	if (chunks < 0 || oc > 65535) {
		char m[96];
		snprintf(m, sizeof(m), "%d chunks of %d channels: expected >= 0, 1-65535", chunks, oc);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_conv1_wgrad_sum", m);
		return -1;
	}
	conv1_wgrad_sum<<<oc * 10, kBiasThreads, 0, s>>>(part, chunks, dw, db);
	LAUNCHED(s);
	return 0;
}

extern "C" size_t cnn_cuda_conv1_wgrad_scratch(int nimg, int h, int w, int oc)
{
	if (nimg < 1 || h < 3 || w < 3 || oc < 1)
		return 0;
	int ipc = conv1_ipc(h, w);
	return conv1_wgrad_counters(oc) + (size_t)oc * ((nimg + ipc - 1) / ipc) * 10;
}

extern "C" int cnn_cuda_conv1_fwd(const float *x, const float *w, const float *b, int nimg, int h,
				  int wd, int oc, int nhwc, float *y, cudaStream_t s)
{
	return launch_conv1_fwd(x, w, b, nimg, h, wd, oc, nhwc, y, (const Gather1 *)NULL, s);
}

static Gather1 gather1(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx,
		       const struct cnn_cuda_norm *norm, float *x, bf16 *xb, uint8_t *y)
{
	Gather1 g = { xs, ys, idx, norm->scale[0], norm->off[0], x, xb, y };
	return g;
}

extern "C" int cnn_cuda_conv1_fwd_gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx,
					 const struct cnn_cuda_norm *norm, const float *w,
					 const float *b, int nimg, int h, int wd, int oc, int nhwc,
					 float *y, float *x, uint8_t *labels, cudaStream_t s)
{
	Gather1 g = gather1(xs, ys, idx, norm, x, NULL, labels);
	return launch_conv1_fwd((const float *)NULL, w, b, nimg, h, wd, oc, nhwc, y, &g, s);
}

extern "C" int cnn_cuda_conv1_fwd_gather_bf16(const uint8_t *xs, const uint8_t *ys,
					      const uint32_t *idx, const struct cnn_cuda_norm *norm,
					      const cnn_bf16 *w, const float *b, int nimg, int h,
					      int wd, int oc, int nhwc, cnn_bf16 *y, float *x,
					      cnn_bf16 *xb, uint8_t *labels, cudaStream_t s)
{
	Gather1 g = gather1(xs, ys, idx, norm, x, B(xb), labels);
	return launch_conv1_fwd((const bf16 *)NULL, B(w), b, nimg, h, wd, oc, nhwc, B(y), &g, s);
}

extern "C" int cnn_cuda_conv1_fwd_bf16(const cnn_bf16 *x, const cnn_bf16 *w, const float *b,
				       int nimg, int h, int wd, int oc, int nhwc, cnn_bf16 *y,
				       cudaStream_t s)
{
	return launch_conv1_fwd(B(x), B(w), b, nimg, h, wd, oc, nhwc, B(y), (const Gather1 *)NULL, s);
}

extern "C" int cnn_cuda_conv1_wgrad(const float *x, const float *dy, const float *y, int nimg,
				    int h, int wd, int oc, int nhwc, float *scratch, float *dw,
				    float *db, cudaStream_t s)
{
	return launch_conv1_wgrad(x, dy, y, nimg, h, wd, oc, nhwc, scratch, dw, db, s);
}

extern "C" int cnn_cuda_conv1_wgrad_bf16(const cnn_bf16 *x, const cnn_bf16 *dy, const cnn_bf16 *y,
					 int nimg, int h, int wd, int oc, int nhwc, float *scratch,
					 float *dw, float *db, cudaStream_t s)
{
	return launch_conv1_wgrad(B(x), B(dy), B(y), nimg, h, wd, oc, nhwc, scratch, dw, db, s);
}
