// CUDA twins of cnn_train's CPU element-wise kernels on the convolutions'
// activations (see kernels.h): bias and ReLU, the pool's forward and
// backward, the ReLU's backward, the bias gradients, in NCHW and NHWC, the
// weights' layout and precision conversions; and the GPU path's error
// reporting (errors.h).  conv1's direct kernels are conv1.cu's, the
// gather, the classifier and the optimizers classifier.cu's, conv2's tensor-core
// kernels conv2_tc.cu's.  Grid-stride loops, one thread per output
// element, except the bias gradient (a block per chunk of images and
// channel) and the pools' tiled and vectorized kernels.  The kernels are
// templates over their storage type (float, or bf16 for --precision
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
		s += gate_dy(dy, gate, relu, ((size_t)(i0 + at.q) * oc + o) * n + at.r);
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
				s += gate_dy(dy, gate, relu, r * oc + o);
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
