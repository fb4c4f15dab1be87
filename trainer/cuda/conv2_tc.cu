// conv2 (a 3x3 convolution of many input channels) on the tensor cores:
// its weights packed for the kernels, the forward and backward-data as one
// implicit GEMM (see kernels.h, cnn_cuda_conv3_*); the backward-filter is
// conv2_wgrad.cu's, what both share conv2_tc.cuh's.
#include "conv2_tc.cuh"

namespace {

// conv2's weights for its tensor-core kernels, from the fp32 OIHW
// parameters in one pass: wf [tap][c][o] for the forward, wb [tap][o][c]
// for the backward-data, so that the 64 (or 32) outputs a block stages
// are consecutive in memory: a warp's loads one or two 128-byte lines,
// where OIHW (and OHWI) put an output's weights 9 c entries apart.
template <typename T>
__global__ void conv3_pack(const float *w, int oc, int c, size_t total, T *wf, T *wb)
{
	pdl_enter();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		// i indexes w: [o][ci][tap]
		int tap = (int)(i % 9), ci = (int)(i / 9 % c), o = (int)(i / 9 / c);
		float v = w[i];
		st(wf + ((size_t)tap * c + ci) * oc + o, v);
		st(wb + ((size_t)tap * oc + o) * c + ci, v);
	}
}

template <typename T>
int launch_conv3_pack(const float *w, int oc, int c, T *wf, T *wb, cudaStream_t s)
{
	if (oc < 1 || c < 1 || 9LL * oc * c >= 0x7fffffffLL) {
		char m[96];
		snprintf(m, sizeof(m), "%d x %d x 3 x 3 weights: expected 1 or more of each, under 2^31 in all",
			 oc, c);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_conv3_pack", m);
		return -1;
	}
	size_t total = 9 * (size_t)oc * c;
	conv3_pack<<<blocks_for(total), kThreads, 0, s>>>(w, oc, c, total, wf, wb);
	LAUNCHED(s);
	return 0;
}

// ---- conv2 on the tensor cores: 3x3 implicit GEMM ------------------------
// The output pixels (image, row, column) are the GEMM's rows, the output
// channels its columns, (tap, input channel) its reduction: a block stages
// a tile of 128 pixels by 32 input channels of one tap, and those channels'
// weights for 64 output channels (32 where there are no more), in shared
// memory; its 8 warps each own 32 x 32 (or 32 x 16) of the output tile,
// 2 x 2 (2 x 1) wmma fragments (m16n16k8 TF32, or m16n16k16 bf16)
// accumulating in fp32.  While the tensor cores work on one step's tile, each
// thread already reads its share of the next step's into registers
// (software pipelining through registers), so memory latency hides behind
// the mma; 128 registers at most, two blocks an SM (three with 32-output
// tiles: kCvBlocks).
// The backward-data is the same kernel on dy, padded by 2 with the weights
// flipped and transposed; the backward-filter makes the pixels the
// reduction, split over one wave of blocks with partial sums added in a
// fixed order.  Operands are staged in the layout
// that lets a warp's 32 loads hit consecutive addresses in memory and
// distinct banks in shared memory: pixel-major for NCHW, channel-major for
// NHWC; wmma reads either (row_major or col_major fragments).

// Blocks of conv3_igemm an SM keeps (its launch bounds): three with
// 32-output tiles, which ptxas fits in 80 registers without spilling (sm_80
// and sm_90, both types and layouts), else two (128 registers; the 64-output
// tiles spill at three).  A small batch is a wave or two of blocks: at batch
// 64 conv2's backward-data makes 338 blocks of 32 outputs, two waves of an
// H100's or H200's 264 slots at two an SM, one of 396 at three.
// tests/tools/spill_check fails the tests' build where a kernel that asks
// for three blocks an SM spills.
template <int BN> constexpr int kCvBlocks = BN == 32 ? 3 : 2;

// conv1's weight gradient on conv2's backward-data (C1): x conv1's input
// (one channel, (oh + 2) x (ow + 2) of the backward-data's oh x ow), y
// conv1's output a1 (NCHW, the ReLU's gate), part its partial sums
// [o][block][10] (9 weights, the bias) for cnn_cuda_conv1_wgrad_sum.
template <typename T>
struct C1Args {
	const T *x, *y;
	float *part;
};

#if CNN_TC
// The tile's 128 pixels from m0 into pn, py, px (pn -1 past the end):
// with POOL the 4 pixels of each 2x2 window consecutive (g.m counting the
// pooled windows' pixels alone), else row-major.
template <bool POOL>
__device__ __forceinline__ void igemm_pixels(const Conv3 &g, long long m0, int *pn, int *py, int *px)
{
	int opix = g.oh * g.ow, pw = g.ow / 2, wins = g.oh / 2 * pw;
	for (int i = threadIdx.x; i < kCvBM; i += kCvThreads) {
		long long m = m0 + i;
		if (POOL) {
			// window m / 4 of the image, its pixel m % 4 (row-major)
			int r = (int)(m / 4 % wins), k = (int)(m % 4);
			pn[i] = m < g.m ? (int)(m / 4 / wins) : -1;
			py[i] = r / pw * 2 + k / 2;
			px[i] = r % pw * 2 + k % 2;
		} else {
			int r = (int)(m % opix);
			pn[i] = m < g.m ? (int)(m / opix) : -1;
			py[i] = r / g.ow;
			px[i] = r % g.ow;
		}
	}
}

// A block's output tile in accumulators: warp w's 32 pixels from wm, its
// outputs from wn (2 x FN fragments of 16 x 16), zeroed; and stored to C
// (NHWC [m][o], NCHW [o][m], rows ldc apart).
template <int FN, int K>
__device__ __forceinline__ void acc_zero(wmma::fragment<wmma::accumulator, 16, 16, K, float> (&acc)[2][FN])
{
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < FN; j++)
			wmma::fill_fragment(acc[i][j], 0.f);
}
template <bool NHWC, int FN, int K>
__device__ __forceinline__ void acc_store(float *Cs, int LC, int wm, int wn,
					  const wmma::fragment<wmma::accumulator, 16, 16, K, float> (&acc)[2][FN])
{
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < FN; j++)
			wmma::store_matrix_sync(NHWC ? Cs + (wm + 16 * i) * LC + wn + 16 * j :
						       Cs + (wn + 16 * j) * LC + wm + 16 * i,
						acc[i][j], LC, NHWC ? wmma::mem_row_major : wmma::mem_col_major);
}

// A block's start: its tile's pixels (block x's 128), its warp's place in
// the tile, its accumulators zeroed; after the barrier, every thread's
// pixels are the block's.
template <bool POOL, int BN, int FN, int K>
__device__ __forceinline__ void igemm_begin(const Conv3 &g, int *pn, int *py, int *px, int *wm, int *wn,
					    wmma::fragment<wmma::accumulator, 16, 16, K, float> (&acc)[2][FN])
{
	igemm_pixels<POOL>(g, (long long)blockIdx.x * kCvBM, pn, py, px);
	int warp = threadIdx.x / 32;
	*wm = warp % 4 * 32;
	*wn = warp / 4 * (BN / 2);
	acc_zero(acc);
	__syncthreads();
}

// The output tile C (in shared memory, floats: NHWC [m][o], NCHW [o][m],
// rows ldc apart) to y, or with POOL through the pool's epilogue to p and
// arg (NCHW order).
template <typename T, bool NHWC, int BN, bool POOL>
__device__ __forceinline__ void igemm_store(const float *Cs, int LC, const int *pn, const int *py,
					    const int *px, const Conv3 &g, int o0, T *y, const PoolEp &ep,
					    float *p, uint8_t *arg)
{
	if (POOL) {
		int pw = g.ow / 2, wins = g.oh / 2 * pw;
		// a thread per (window, output channel): NCHW, consecutive threads
		// on consecutive windows (their p entries consecutive, their
		// pixels' sums 4 consecutive floats of C); NHWC, on consecutive
		// outputs (C's banks distinct)
		constexpr int NW = kCvBM / 4;
		uint64_t key = ep.keyp ? *ep.keyp : 0;
		for (int e = threadIdx.x; e < NW * BN; e += kCvThreads) {
			int wi = NHWC ? e / BN : e % NW, oi = NHWC ? e % BN : e / NW;
			int n = pn[4 * wi], o = o0 + oi;
			if (n < 0 || o >= g.o)
				continue;
			float v[4];
#pragma unroll
			for (int k = 0; k < 4; k++)
				v[k] = stored_as((const T *)0, NHWC ? Cs[(4 * wi + k) * LC + oi] :
								      Cs[oi * LC + 4 * wi + k]);
			size_t i = ((size_t)n * g.o + o) * wins + py[4 * wi] / 2 * pw + px[4 * wi] / 2;
			pool_window<T>(v, ep, key, ep.b ? ep.b[o] : 0.f, i, p + i, arg + i);
		}
	} else {
		for (int e = threadIdx.x; e < kCvBM * BN; e += kCvThreads) {
			int mi = NHWC ? e / BN : e % kCvBM, oi = NHWC ? e % BN : e / kCvBM;
			int n = pn[mi], o = o0 + oi;
			if (n < 0 || o >= g.o)
				continue;
			size_t q = NHWC ? (((size_t)n * g.oh + py[mi]) * g.ow + px[mi]) * g.o + o :
					  (((size_t)n * g.o + o) * g.oh + py[mi]) * g.ow + px[mi];
			st(y + q, NHWC ? Cs[mi * LC + oi] : Cs[oi * LC + mi]);
		}
	}
}
#endif

#if CNN_TC
// conv3_igemm's tile in shared memory and registers.  A (pixel, channel):
// NHWC [m][k], NCHW [k][m]; B (channel, output) [k][o]; the output tile C
// in floats: NHWC [m][o], NCHW [o][m].  A warp owns 32 pixels by BN / 2
// outputs: 2 x FN fragments.  RA and RB: the entries of A and B a thread
// reads for a step.
template <typename T, bool NHWC, int BN> struct IgemmTile {
	typedef Mma<T> M;
	static constexpr int FN = BN / 32, LA = NHWC ? kCvBK + M::PAD : kCvBM + M::PADG;
	static constexpr int LB = BN + M::PADG, LC = NHWC ? BN + 4 : kCvBM + 4;
	static constexpr int SA = NHWC ? kCvBM * LA : kCvBK * LA;
	static constexpr int SAB = (SA + kCvBK * LB) * (int)sizeof(T);
	static constexpr int SC = (NHWC ? kCvBM : BN) * LC * 4;
	static constexpr int RA = kCvBM * kCvBK / kCvThreads, RB = kCvBK * BN / kCvThreads;
	static_assert(FN >= 1 && RB >= 1 && kCvBM * kCvBK % kCvThreads == 0 &&
		      kCvBK * BN % kCvThreads == 0, "conv3_igemm's tile and its threads");
};

// A step's operands (tap step / nc, channels from step % nc * kCvBK) from
// memory into this thread's registers ra and rb.  With GATE, A's entries
// come from gt, not x.
template <typename T, bool NHWC, int BN, bool GATE>
__device__ __forceinline__ void igemm_fetch(const T *x, const T *wt, const Conv3 &g, const Gate &gt,
					    const int *pn, const int *py, const int *px, int o0,
					    int nc, int plane, int step,
					    T (&ra)[IgemmTile<T, NHWC, BN>::RA],
					    T (&rb)[IgemmTile<T, NHWC, BN>::RB])
{
	typedef Mma<T> M;
	constexpr int RA = IgemmTile<T, NHWC, BN>::RA, RB = IgemmTile<T, NHWC, BN>::RB;
	int tap = step / nc, c0 = step % nc * kCvBK, ky = tap / 3, kx = tap % 3;
	if (NHWC) {
		// a thread's channel is fixed, its pixels step by 8
		int c = c0 + threadIdx.x % kCvBK;
#pragma unroll
		for (int j = 0; j < RA; j++) {
			int mi = threadIdx.x / kCvBK + j * (kCvThreads / kCvBK);
			int n = pn[mi], iy = py[mi] + ky - g.pad, ix = px[mi] + kx - g.pad;
			bool ok = n >= 0 && c < g.c && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
			ra[j] = ok ? M::op(x[((n * g.h + iy) * g.w + ix) * g.c + c]) : M::zero();
		}
	} else {
		// a thread's pixel is fixed, its channels step by 2
		int mi = threadIdx.x % kCvBM, n = pn[mi], kl = threadIdx.x / kCvBM;
		int iy = py[mi] + ky - g.pad, ix = px[mi] + kx - g.pad;
		if (GATE) {
			int ph = g.h / 2, pw = g.w / 2, want = (iy & 1) << 1 | (ix & 1);
			bool ok = n >= 0 && iy >= 0 && iy < 2 * ph && ix >= 0 && ix < 2 * pw;
			int q = ((n * g.c + c0 + kl) * ph + (iy >> 1)) * pw + (ix >> 1);
#pragma unroll
			for (int j = 0; j < RA; j++)
				ra[j] = ok && c0 + kl + j * (kCvThreads / kCvBM) < g.c ?
					M::op(gated<T>(gt, q + j * (kCvThreads / kCvBM) * ph * pw, want)) :
					M::zero();
		} else {
			bool ok = n >= 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
			int q = ((n * g.c + c0 + kl) * g.h + iy) * g.w + ix;
#pragma unroll
			for (int j = 0; j < RA; j++)
				ra[j] = ok && c0 + kl + j * (kCvThreads / kCvBM) < g.c ?
					M::op(x[q + j * (kCvThreads / kCvBM) * plane]) : M::zero();
		}
	}
	int wtap = (g.flip ? 2 - ky : ky) * g.wy + (g.flip ? 2 - kx : kx) * g.wx;
	int oi = threadIdx.x % BN, o = o0 + oi;
#pragma unroll
	for (int j = 0; j < RB; j++) {
		int c = c0 + threadIdx.x / BN + j * (kCvThreads / BN);
		rb[j] = o < g.o && c < g.c ? M::op(wt[o * g.wo + c * g.wc + wtap]) : M::zero();
	}
}

// This thread's registers of a step's operands into the tile's A and B.
template <typename T, bool NHWC, int BN>
__device__ __forceinline__ void igemm_put(T *As, T *Bs, const T (&ra)[IgemmTile<T, NHWC, BN>::RA],
					  const T (&rb)[IgemmTile<T, NHWC, BN>::RB])
{
	typedef IgemmTile<T, NHWC, BN> Tl;
#pragma unroll
	for (int j = 0; j < Tl::RA; j++) {
		if (NHWC)
			As[(threadIdx.x / kCvBK + j * (kCvThreads / kCvBK)) * Tl::LA + threadIdx.x % kCvBK] = ra[j];
		else
			As[(threadIdx.x / kCvBM + j * (kCvThreads / kCvBM)) * Tl::LA + threadIdx.x % kCvBM] = ra[j];
	}
#pragma unroll
	for (int j = 0; j < Tl::RB; j++)
		Bs[(threadIdx.x / BN + j * (kCvThreads / BN)) * Tl::LB + threadIdx.x % BN] = rb[j];
}

// The warp's mma over one step's kCvBK channels of the tile.
template <typename T, bool NHWC, int BN>
__device__ __forceinline__ void igemm_mma(const T *As, const T *Bs, int wm, int wn,
					  wmma::fragment<wmma::accumulator, 16, 16, Mma<T>::K, float>
					  (&acc)[2][IgemmTile<T, NHWC, BN>::FN])
{
	typedef Mma<T> M;
	typedef IgemmTile<T, NHWC, BN> Tl;
	typedef typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type LayA;
	for (int k = 0; k < kCvBK; k += M::K) {
		wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::P, LayA> a[2];
		wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::P, wmma::row_major> b[Tl::FN];
		for (int i = 0; i < 2; i++)
			wmma::load_matrix_sync(a[i], NHWC ? As + (wm + 16 * i) * Tl::LA + k :
							  As + k * Tl::LA + wm + 16 * i, Tl::LA);
		for (int j = 0; j < Tl::FN; j++)
			wmma::load_matrix_sync(b[j], Bs + k * Tl::LB + wn + 16 * j, Tl::LB);
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < Tl::FN; j++)
				wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
	}
}

// C1's epilogue (NCHW, the backward-data): for each of the block's
// channels, conv1's 9 weight and 1 bias gradient terms over its pixels
// where conv1's output is > 0, into c1.part (red: the warps' lanes' sums).
template <typename T, int BN>
__device__ __forceinline__ void igemm_c1(const float *Cs, int LC, const int *pn, const int *py,
					 const int *px, const Conv3 &g, int o0, const C1Args<T> &c1,
					 float *red)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, xw = g.ow + 2;
	// warp w's channels w, w + 8, ..., 4 at a time
	for (int k0 = 0; k0 < BN / 8; k0 += 4) {
		float sum[4][10];
		for (int k = 0; k < 4; k++)
			for (int j = 0; j < 10; j++)
				sum[k][j] = 0.f;
		for (int mi = lane; mi < kCvBM; mi += 32) {
			int n = pn[mi];
			if (n < 0)
				continue;
			const T *xi = c1.x + ((size_t)n * (g.oh + 2) + py[mi]) * xw + px[mi];
			float xv[9];
#pragma unroll
			for (int t = 0; t < 9; t++)
				xv[t] = ld(xi + t / 3 * xw + t % 3);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				int oi = warp + 8 * (k0 + k), o = o0 + oi;
				if (o >= g.o ||
				    !(ld(c1.y + (((size_t)n * g.o + o) * g.oh + py[mi]) * g.ow + px[mi]) > 0.f))
					continue;
				float v = stored_as((const T *)0, Cs[oi * LC + mi]);
#pragma unroll
				for (int t = 0; t < 9; t++)
					sum[k][t] += v * xv[t];
				sum[k][9] += v;
			}
		}
		for (int k = 0; k < 4; k++) {
			for (int j = 0; j < 10; j++)
				red[threadIdx.x * 11 + j] = sum[k][j];
			__syncthreads();
			int o = o0 + warp + 8 * (k0 + k);
			if (lane < 10 && o < g.o) {
				float t = 0.f;
				for (int l = 0; l < 32; l++)
					t += red[(warp * 32 + l) * 11 + lane];
				c1.part[((size_t)o * gridDim.x + blockIdx.x) * 10 + lane] = t;
			}
			__syncthreads();
		}
	}
}
#endif

// With POOL, the forward with conv2's pool in its epilogue (bias, ReLU,
// 2x2 max-pool, dropout: pool_window, as maxpool2_fwd applies them to y):
// the tile's pixels run window by window (the 4 pixels of a 2x2 window
// consecutive, g.m counting the pooled windows' pixels alone), and the
// block writes the pool's output p and arg (NCHW order) in place of y, so
// conv2's output never goes to memory (151 MB written and read back per
// TF32 step at batch 1024).
// With GATE (NCHW only: the backward-data), x is not read: its entries
// come from gt.  With C1 (NCHW, the backward-data), y (conv1's output
// gradient) is not written: the block adds, for each of its channels,
// conv1's 9 weight and 1 bias gradient terms over its 128 pixels where
// conv1's output is > 0 (the ReLU's backward; each pixel's sum as stored
// in T, as conv1_wgrad reads it back) into c1.part, in a fixed order: 4
// pixels a thread, then its warp's 32 threads in lane order.
// In TF32 it runs the gated backward-data alone (GATE, with or without
// C1): conv3_igemm_tf32 (below) brings an input read as it is to shared
// memory with cp.async.
template <typename T, bool NHWC, int BN, bool POOL, bool GATE, bool C1>
__global__ void __launch_bounds__(kCvThreads, kCvBlocks<BN>)
conv3_igemm(const T *x, const T *wt, Conv3 g, T *y, PoolEp ep, float *p, uint8_t *arg, Gate gt,
	    C1Args<T> c1)
{
	pdl_enter();
	static_assert(!(NHWC && GATE) && !(NHWC && C1), "the gated input and conv1's gradient are NCHW");
#if CNN_TC
	typedef IgemmTile<T, NHWC, BN> Tl;
	constexpr int FN = Tl::FN, LC = Tl::LC, SA = Tl::SA, SAB = Tl::SAB, SC = Tl::SC;
	__shared__ __align__(128) unsigned char smem[SAB > SC ? SAB : SC];
	__shared__ int pn[kCvBM], py[kCvBM], px[kCvBM];   // the tile's pixels; pn -1 past the end
	// C1: each warp's lanes' 10 sums of one channel (11 apart: no two lanes
	// of a store on one bank)
	__shared__ float red[C1 ? kCvThreads * 11 : 1];
	T *As = reinterpret_cast<T *>(smem), *Bs = As + SA;
	float *Cs = reinterpret_cast<float *>(smem);
	int o0 = blockIdx.y * BN, wm, wn;
	wmma::fragment<wmma::accumulator, 16, 16, Mma<T>::K, float> acc[2][FN];
	igemm_begin<POOL, BN>(g, pn, py, px, &wm, &wn, acc);
	// The reduction runs over (tap, 32 channels) steps; each step's operands
	// are read from memory into registers during the one before (ra, rb),
	// so their latency hides behind that step's mma.
	int nc = (g.c + kCvBK - 1) / kCvBK, steps = 9 * nc;
	int plane = g.h * g.w;   // offsets in 32 bits: conv3_args keeps tensors under 2^31 entries
	T ra[Tl::RA], rb[Tl::RB];
	igemm_fetch<T, NHWC, BN, GATE>(x, wt, g, gt, pn, py, px, o0, nc, plane, 0, ra, rb);
	for (int step = 0; step < steps; step++) {
		igemm_put<T, NHWC, BN>(As, Bs, ra, rb);
		__syncthreads();
		if (step + 1 < steps)
			igemm_fetch<T, NHWC, BN, GATE>(x, wt, g, gt, pn, py, px, o0, nc, plane, step + 1, ra, rb);
		igemm_mma<T, NHWC, BN>(As, Bs, wm, wn, acc);
		__syncthreads();
	}
	acc_store<NHWC>(Cs, LC, wm, wn, acc);
	__syncthreads();
	if (POOL || !C1)
		igemm_store<T, NHWC, BN, POOL>(Cs, LC, pn, py, px, g, o0, y, ep, p, arg);
	else
		igemm_c1<T, BN>(Cs, LC, pn, py, px, g, o0, c1, red);
#else
	(void)kCvBK;   // the tile constants the body uses
	__trap();      // never launched: the launchers refuse a GPU older than 8.0
#endif
}

// conv3_igemm in TF32 where its input is read as it is (the forward, with
// or without the pool, and the backward-data of a dy in memory): the same
// tiles, the same k order, the same bits, its operands brought to shared
// memory by cp.async (4 bytes an entry, zeros where the tile overhangs) in
// a ring of kAsS stages of kAsBK channels, issued two stages ahead of the
// mma, where conv3_igemm reads one step ahead through registers.  The
// copies hold no registers: 80 a thread (tests/tools/spill_check) with 64
// outputs a tile too, so three blocks an SM; at batch 64 the pooled
// forward's 288 blocks are one wave of an H100's or H200's 396 slots, not
// two of 264.  The operands are rounded to TF32 (cvt.rna) in the fragments,
// as conv3_igemm rounds them on their way into shared memory.
constexpr int kAsBK = 16, kAsS = 3;

template <bool NHWC, int BN, bool POOL>
__global__ void __launch_bounds__(kCvThreads, 3)
conv3_igemm_tf32(const float *x, const float *wt, Conv3 g, float *y, PoolEp ep, float *p, uint8_t *arg)
{
	pdl_enter();
#if CNN_TC
	typedef Mma<float> M;
	typedef typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type LayA;
	// as conv3_igemm's: A NHWC [m][k], NCHW [k][m]; B [k][o]; C NHWC [m][o],
	// NCHW [o][m]
	constexpr int FN = BN / 32, LA = NHWC ? kAsBK + M::PAD : kCvBM + M::PADG, LB = BN + M::PADG;
	constexpr int LC = NHWC ? BN + 4 : kCvBM + 4;
	constexpr int SA = NHWC ? kCvBM * LA : kAsBK * LA, STAGE = SA + kAsBK * LB;
	constexpr int SC = (NHWC ? kCvBM : BN) * LC;
	constexpr int RA = kCvBM * kAsBK / kCvThreads, RB = kAsBK * BN / kCvThreads;
	static_assert(FN >= 1 && RB >= 1 && kCvBM * kAsBK % kCvThreads == 0 &&
		      kAsBK * BN % kCvThreads == 0 && kAsBK % M::K == 0 && STAGE % 8 == 0 && SA % 8 == 0,
		      "conv3_igemm_tf32's tile, its stages (32-byte aligned) and its threads");
	__shared__ __align__(128) float smem[kAsS * STAGE > SC ? kAsS * STAGE : SC];
	__shared__ int pn[kCvBM], py[kCvBM], px[kCvBM];   // the tile's pixels; pn -1 past the end
	float *Cs = smem;
	int o0 = blockIdx.y * BN, wm, wn;
	wmma::fragment<wmma::accumulator, 16, 16, M::K, float> acc[2][FN];
	igemm_begin<POOL, BN>(g, pn, py, px, &wm, &wn, acc);
	// The reduction runs over (tap, 16 channels) steps: step's operands into
	// stage step % kAsS, a group of copies a step (an empty one past the
	// last, so that every wait below counts the same groups).
	int nc = (g.c + kAsBK - 1) / kAsBK, steps = 9 * nc;
	int plane = g.h * g.w;   // offsets in 32 bits: conv3_args keeps tensors under 2^31 entries
	auto issue = [&](int step) {
		if (step < steps) {
			float *As = smem + step % kAsS * STAGE, *Bs = As + SA;
			int tap = step / nc, c0 = step % nc * kAsBK, ky = tap / 3, kx = tap % 3;
			if (NHWC) {
				// a thread's channel is fixed, its pixels step by 16
				int cl = threadIdx.x % kAsBK, c = c0 + cl;
#pragma unroll
				for (int j = 0; j < RA; j++) {
					int mi = threadIdx.x / kAsBK + j * (kCvThreads / kAsBK);
					int n = pn[mi], iy = py[mi] + ky - g.pad, ix = px[mi] + kx - g.pad;
					bool ok = n >= 0 && c < g.c && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
					cp_async4(As + mi * LA + cl, ok ? x + ((n * g.h + iy) * g.w + ix) * g.c + c : x, ok);
				}
			} else {
				// a thread's pixel is fixed, its channels step by 2
				int mi = threadIdx.x % kCvBM, n = pn[mi], kl = threadIdx.x / kCvBM;
				int iy = py[mi] + ky - g.pad, ix = px[mi] + kx - g.pad;
				bool in = n >= 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
				int q = in ? ((n * g.c + c0 + kl) * g.h + iy) * g.w + ix : 0;
#pragma unroll
				for (int j = 0; j < RA; j++) {
					int k = kl + j * (kCvThreads / kCvBM);
					bool ok = in && c0 + k < g.c;
					cp_async4(As + k * LA + mi, ok ? x + q + j * (kCvThreads / kCvBM) * plane : x, ok);
				}
			}
			int wtap = (g.flip ? 2 - ky : ky) * g.wy + (g.flip ? 2 - kx : kx) * g.wx;
			int oi = threadIdx.x % BN, o = o0 + oi;
#pragma unroll
			for (int j = 0; j < RB; j++) {
				int k = threadIdx.x / BN + j * (kCvThreads / BN), c = c0 + k;
				bool ok = o < g.o && c < g.c;
				cp_async4(Bs + k * LB + oi, ok ? wt + o * g.wo + c * g.wc + wtap : wt, ok);
			}
		}
		cp_async_commit();
	};
	for (int st = 0; st < kAsS - 1; st++)
		issue(st);
	for (int step = 0; step < steps; step++) {
		// this thread's copies of step have landed; after the barrier,
		// every thread's have, and every thread is done with step - 1's
		// stage, which step + kAsS - 1 then fills
		cp_async_wait<kAsS - 2>();
		__syncthreads();
		issue(step + kAsS - 1);
		const float *As = smem + step % kAsS * STAGE, *Bs = As + SA;
#pragma unroll
		for (int k = 0; k < kAsBK; k += M::K) {
			wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::P, LayA> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::P, wmma::row_major> b[FN];
			for (int i = 0; i < 2; i++) {
				wmma::load_matrix_sync(a[i], NHWC ? As + (wm + 16 * i) * LA + k :
								  As + k * LA + wm + 16 * i, LA);
				for (int t = 0; t < a[i].num_elements; t++)
					a[i].x[t] = M::op(a[i].x[t]);
			}
			for (int j = 0; j < FN; j++) {
				wmma::load_matrix_sync(b[j], Bs + k * LB + wn + 16 * j, LB);
				for (int t = 0; t < b[j].num_elements; t++)
					b[j].x[t] = M::op(b[j].x[t]);
			}
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < FN; j++)
					wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
	}
	cp_async_wait<0>();   // the empty groups past the last step
	__syncthreads();      // every warp's last mma read its stage before C overwrites it
	acc_store<NHWC>(Cs, LC, wm, wn, acc);
	__syncthreads();
	igemm_store<float, NHWC, BN, POOL>(Cs, LC, pn, py, px, g, o0, y, ep, p, arg);
#else
	(void)kAsBK, (void)kAsS;   // the tile constants the body uses
	__trap();   // never launched: the launchers refuse a GPU older than 8.0
#endif
}

// y, or with pool (g.m the pooled windows' pixels) p and arg through ep;
// with gt (NCHW), x's entries from the pool's tensors; with c1 (and gt),
// conv1's partial weight gradients in place of y.
template <typename T>
int launch_conv3_igemm(const T *x, const T *w, const Conv3 &g, int nhwc, T *y, int pool,
		       const PoolEp &ep, float *p, uint8_t *arg, const Gate *gt, const C1Args<T> *c1,
		       cudaStream_t s)
{
	if (!g.m)
		return 0;
	// 32 outputs a block where there are no more (conv2's backward-data):
	// no half-empty tiles; the pooled forward always 64
	int bn = g.o <= 32 && !pool ? 32 : kCvBN;
	dim3 grid((unsigned)((g.m + kCvBM - 1) / kCvBM), (unsigned)((g.o + bn - 1) / bn));
	// (named as cuemu, and so its graph's nodes, name a launch)
	// TF32 with the input as it is: the cp.async kernel
	if constexpr (std::is_same<T, float>::value) {
		if (!gt && !c1) {
			void (*conv3_igemm_tf32_k)(const float *, const float *, Conv3, float *, PoolEp, float *,
						   uint8_t *) =
				pool ? (nhwc ? conv3_igemm_tf32<true, kCvBN, true> :
					       conv3_igemm_tf32<false, kCvBN, true>) :
				bn == 32 ? (nhwc ? conv3_igemm_tf32<true, 32, false> :
						   conv3_igemm_tf32<false, 32, false>) :
					   (nhwc ? conv3_igemm_tf32<true, kCvBN, false> :
						   conv3_igemm_tf32<false, kCvBN, false>);
			conv3_igemm_tf32_k<<<grid, kCvThreads, 0, s>>>(x, w, g, y, ep, p, arg);
			LAUNCHED(s);
			return 0;
		}
	}
	// the gated backward-data, with conv1's weight gradient or not; in bf16
	// also the input as it is
	void (*conv3_igemm_k)(const T *, const T *, Conv3, T *, PoolEp, float *, uint8_t *, Gate,
			      C1Args<T>) = NULL;
	if (c1)
		conv3_igemm_k = bn == 32 ? conv3_igemm<T, false, 32, false, true, true> :
					   conv3_igemm<T, false, kCvBN, false, true, true>;
	else if (gt)
		conv3_igemm_k = bn == 32 ? conv3_igemm<T, false, 32, false, true, false> :
					   conv3_igemm<T, false, kCvBN, false, true, false>;
	else if constexpr (!std::is_same<T, float>::value)
		conv3_igemm_k =
			pool ? (nhwc ? conv3_igemm<T, true, kCvBN, true, false, false> :
				       conv3_igemm<T, false, kCvBN, true, false, false>) :
			bn == 32 ? (nhwc ? conv3_igemm<T, true, 32, false, false, false> :
					   conv3_igemm<T, false, 32, false, false, false>) :
				   (nhwc ? conv3_igemm<T, true, kCvBN, false, false, false> :
					   conv3_igemm<T, false, kCvBN, false, false, false>);
	Gate none = { NULL, NULL, NULL };
	C1Args<T> no1 = { NULL, NULL, NULL };
	conv3_igemm_k<<<grid, kCvThreads, 0, s>>>(x, w, g, y, ep, p, arg, gt ? *gt : none, c1 ? *c1 : no1);
	LAUNCHED(s);
	return 0;
}

template <typename T>
int launch_conv3_fwd(const T *x, const T *w, int nimg, int c, int h, int wd, int oc, int nhwc,
		     T *y, cudaStream_t s)
{
	if (!conv3_args("cnn_cuda_conv3_fwd", nimg, c, h, wd, oc) ||
	    tc_device("cnn_cuda_conv3_fwd") != 1)
		return -1;
	return launch_conv3_igemm(x, w, conv3_geom(nimg, c, h, wd, oc), nhwc, y, 0, pool_ep(NULL),
				  (float *)NULL, (uint8_t *)NULL, (const Gate *)NULL, (const C1Args<T> *)NULL,
				  s);
}

// The forward with the pool in its epilogue: only the pixels of whole 2x2
// windows (an odd last row or column the pool drops is not computed).
template <typename T>
int launch_conv3_fwd_pool(const T *x, const T *w, int nimg, int c, int h, int wd, int oc, int nhwc,
			  const cnn_cuda_pool_ep *ep, float *p, uint8_t *arg, cudaStream_t s)
{
	if (!conv3_args("cnn_cuda_conv3_fwd_pool", nimg, c, h, wd, oc) ||
	    tc_device("cnn_cuda_conv3_fwd_pool") != 1)
		return -1;
	Conv3 g = conv3_geom(nimg, c, h, wd, oc);
	g.m = (long long)nimg * (g.oh / 2) * (g.ow / 2) * 4;
	return launch_conv3_igemm(x, w, g, nhwc, (T *)NULL, 1, pool_ep(ep), p, arg, (const Gate *)NULL,
				  (const C1Args<T> *)NULL, s);
}

// dx = the "full" convolution of dy with the flipped, transposed weights:
// input oc channels of (h-2) x (w-2) padded by 2, output c channels of h x w;
// the weights packed [tap][o][c] (conv3_pack's wb), the GEMM's outputs (the
// input channels c) consecutive.  With gt (NCHW), dy from the pool's
// tensors; with c1 too, conv1's partial weight gradients in place of dx
// (call names the caller).
template <typename T>
int launch_conv3_dgrad(const T *dy, const T *w, int nimg, int c, int h, int wd, int oc, int nhwc,
		       T *dx, const Gate *gt, const C1Args<T> *c1, const char *call, cudaStream_t s)
{
	if (!conv3_args(call, nimg, c, h, wd, oc) || tc_device(call) != 1)
		return -1;
	Conv3 g;
	g.c = oc, g.h = h - 2, g.w = wd - 2, g.o = c, g.oh = h, g.ow = wd, g.pad = 2, g.flip = 1;
	g.wo = 1, g.wc = c, g.wy = 3 * oc * c, g.wx = oc * c;
	g.m = (long long)nimg * h * wd;
	return launch_conv3_igemm(dy, w, g, nhwc, dx, 0, pool_ep(NULL), (float *)NULL,
				  (uint8_t *)NULL, gt, c1, s);
}

// The backward-data from the pool's tensors with conv1's weight and bias
// gradients in its epilogue: partial sums per block into scratch, then
// cnn_cuda_conv1_wgrad_sum adds the blocks in order; da1 is not written.
template <typename T>
int launch_conv3_dgrad_conv1(const float *dp, const float *p, const uint8_t *arg, const T *w,
			     int nimg, int c, int h, int wd, int oc, const T *x1, const T *a1,
			     float *scratch, float *dw1, float *db1, cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	C1Args<T> c1 = { x1, a1, scratch };
	if (launch_conv3_dgrad((const T *)NULL, w, nimg, c, h, wd, oc, 0, (T *)NULL, &gt, &c1,
			       "cnn_cuda_conv3_dgrad_conv1", s) < 0)
		return -1;
	long long blocks = ((long long)nimg * h * wd + kCvBM - 1) / kCvBM;
	return cnn_cuda_conv1_wgrad_sum(scratch, (int)blocks, c, dw1, db1, s);
}

} // namespace

extern "C" int cnn_cuda_tensor_cores(void)
{
	return tc_device(NULL);
}

extern "C" int cnn_cuda_conv3_pack_tf32(const float *w, int oc, int c, float *wf, float *wb,
					cudaStream_t s)
{
	return launch_conv3_pack(w, oc, c, wf, wb, s);
}

extern "C" int cnn_cuda_conv3_pack_bf16(const float *w, int oc, int c, cnn_bf16 *wf, cnn_bf16 *wb,
					cudaStream_t s)
{
	return launch_conv3_pack(w, oc, c, B(wf), B(wb), s);
}

extern "C" int cnn_cuda_conv3_fwd_tf32(const float *x, const float *w, int nimg, int c, int h,
				       int wd, int oc, int nhwc, float *y, cudaStream_t s)
{
	return launch_conv3_fwd(x, w, nimg, c, h, wd, oc, nhwc, y, s);
}

extern "C" int cnn_cuda_conv3_fwd_pool_tf32(const float *x, const float *w, int nimg, int c, int h,
					    int wd, int oc, int nhwc, const struct cnn_cuda_pool_ep *ep,
					    float *p, uint8_t *arg, cudaStream_t s)
{
	return launch_conv3_fwd_pool(x, w, nimg, c, h, wd, oc, nhwc, ep, p, arg, s);
}

extern "C" int cnn_cuda_conv3_dgrad_tf32(const float *dy, const float *w, int nimg, int c, int h,
					 int wd, int oc, int nhwc, float *dx, cudaStream_t s)
{
	return launch_conv3_dgrad(dy, w, nimg, c, h, wd, oc, nhwc, dx, (const Gate *)NULL,
				  (const C1Args<float> *)NULL, "cnn_cuda_conv3_dgrad", s);
}

extern "C" int cnn_cuda_conv3_fwd_bf16(const cnn_bf16 *x, const cnn_bf16 *w, int nimg, int c,
				       int h, int wd, int oc, int nhwc, cnn_bf16 *y, cudaStream_t s)
{
	return launch_conv3_fwd(B(x), B(w), nimg, c, h, wd, oc, nhwc, B(y), s);
}

extern "C" int cnn_cuda_conv3_fwd_pool_bf16(const cnn_bf16 *x, const cnn_bf16 *w, int nimg, int c,
					    int h, int wd, int oc, int nhwc,
					    const struct cnn_cuda_pool_ep *ep, float *p, uint8_t *arg,
					    cudaStream_t s)
{
	return launch_conv3_fwd_pool(B(x), B(w), nimg, c, h, wd, oc, nhwc, ep, p, arg, s);
}

extern "C" int cnn_cuda_conv3_dgrad_bf16(const cnn_bf16 *dy, const cnn_bf16 *w, int nimg, int c,
					 int h, int wd, int oc, int nhwc, cnn_bf16 *dx,
					 cudaStream_t s)
{
	return launch_conv3_dgrad(B(dy), B(w), nimg, c, h, wd, oc, nhwc, B(dx), (const Gate *)NULL,
				  (const C1Args<bf16> *)NULL, "cnn_cuda_conv3_dgrad", s);
}

extern "C" int cnn_cuda_conv3_dgrad_pool_tf32(const float *dp, const float *p, const uint8_t *arg,
					      const float *w, int nimg, int c, int h, int wd, int oc,
					      float *dx, cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_dgrad((const float *)NULL, w, nimg, c, h, wd, oc, 0, dx, &gt,
				  (const C1Args<float> *)NULL, "cnn_cuda_conv3_dgrad_pool", s);
}

extern "C" size_t cnn_cuda_conv3_dgrad_conv1_scratch(int nimg, int c, int h, int wd)
{
	if (nimg < 1 || c < 1 || h < 1 || wd < 1)
		return 0;
	return (size_t)c * (size_t)(((long long)nimg * h * wd + kCvBM - 1) / kCvBM) * 10;
}

extern "C" int cnn_cuda_conv3_dgrad_conv1_tf32(const float *dp, const float *p, const uint8_t *arg,
					       const float *w, int nimg, int c, int h, int wd, int oc,
					       const float *x1, const float *a1, float *scratch,
					       float *dw1, float *db1, cudaStream_t s)
{
	return launch_conv3_dgrad_conv1(dp, p, arg, w, nimg, c, h, wd, oc, x1, a1, scratch, dw1, db1, s);
}

extern "C" int cnn_cuda_conv3_dgrad_conv1_bf16(const float *dp, const float *p, const uint8_t *arg,
					       const cnn_bf16 *w, int nimg, int c, int h, int wd,
					       int oc, const cnn_bf16 *x1, const cnn_bf16 *a1,
					       float *scratch, float *dw1, float *db1, cudaStream_t s)
{
	return launch_conv3_dgrad_conv1(dp, p, arg, B(w), nimg, c, h, wd, oc, B(x1), B(a1), scratch,
					dw1, db1, s);
}

extern "C" int cnn_cuda_conv3_dgrad_pool_bf16(const float *dp, const float *p, const uint8_t *arg,
					      const cnn_bf16 *w, int nimg, int c, int h, int wd,
					      int oc, cnn_bf16 *dx, cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_dgrad((const bf16 *)NULL, B(w), nimg, c, h, wd, oc, 0, B(dx), &gt,
				  (const C1Args<bf16> *)NULL, "cnn_cuda_conv3_dgrad_pool", s);
}
