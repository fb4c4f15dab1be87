// conv1's direct kernels (see kernels.h: cnn_cuda_conv1_*): one input
// channel, 3x3, stride 1, no padding; the forward with its bias and ReLU
// (and the batch's gather), the weight and bias gradients from the ReLU's
// gated output gradient.
#include "kernels_common.cuh"

namespace {

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
