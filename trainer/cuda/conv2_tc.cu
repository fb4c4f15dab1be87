// conv2 (a 3x3 convolution of many input channels) on the tensor cores:
// its weights packed for the kernels, the forward and backward-data as one
// implicit GEMM, the backward-filter split over the pixels and summed in a
// fixed order (see kernels.h, cnn_cuda_conv3_*).
#include <atomic>
#include <type_traits>

#ifdef __CUDACC__
#include <mma.h>
#endif

#include "kernels_common.cuh"

// conv2's tensor-core kernels (below) use TF32 and bf16 wmma, compute
// capability 8.0 and newer; the build also carries code for older GPUs
// (sm_75: T4, Quadro RTX), where cnn_train runs on cuDNN alone: those
// kernels' bodies are a trap there, and their launchers refuse such a GPU
// (tc_device) before any launch.  The host pass, and cuemu, see them whole.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CNN_TC 1
#else
#define CNN_TC 0
#endif

namespace {

namespace wmma = nvcuda::wmma;

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

// Per operand type: the wmma precision and k, the shared-memory padding
// (rows a multiple of 16 bytes, as wmma's ldm must be), and what a staged
// operand is: TF32-rounded (cvt.rna) floats, or the bf16 bits as they are.
// TF32 fragments are loaded a float a lane: lane (g, t) = (lane / 4, lane
// % 4) reads element (g, t) of a row-major A or col-major B tile (g * ldm
// + t: ldm = 4 mod 32 puts the 32 lanes on 32 banks: PAD) and (t, g) of a
// col-major A or row-major B (t * ldm + g: ldm = 8 mod 32: PADG; with 4,
// two lanes share each bank, as ncu counted, 1.5M conflicts a forward
// launch at batch 64).  bf16's stay as they were (PADG = PAD).
template <typename T> struct Mma;
#if CNN_TC
template <> struct Mma<float> {
	typedef wmma::precision::tf32 P;
	enum { K = 8, PAD = 4, PADG = 8 };
	__device__ static float op(float v) { return wmma::__float_to_tf32(v); }
	__device__ static float zero() { return 0.f; }
};
template <> struct Mma<bf16> {
	typedef bf16 P;
	enum { K = 16, PAD = 8, PADG = 8 };
	__device__ static bf16 op(bf16 v) { return v; }
	__device__ static bf16 zero() { return __float2bfloat16_rn(0.f); }
};
#endif

constexpr int kCvThreads = 256, kCvBM = 128, kCvBN = 64, kCvBK = 32;

// Blocks of conv3_igemm an SM keeps (its launch bounds): three with
// 32-output tiles, which ptxas fits in 80 registers without spilling (sm_80
// and sm_90, both types and layouts), else two (128 registers; the 64-output
// tiles spill at three).  A small batch is a wave or two of blocks: at batch
// 64 conv2's backward-data makes 338 blocks of 32 outputs, two waves of an
// H100's or H200's 264 slots at two an SM, one of 396 at three.
// tests/tools/spill_check fails the tests' build where a kernel that asks
// for three blocks an SM spills.
template <int BN> constexpr int kCvBlocks = BN == 32 ? 3 : 2;

// Output pixel m = (n, y, x) of oh x ow reads input (y + ky - pad, x + kx -
// pad) of h x w (zero outside) and weight (o, c, ky', kx') at
// o * wo + c * wc + ky' * wy + kx' * wx, with ky' = 2 - ky when flip.
struct Conv3 {
	int c, h, w, o, oh, ow, pad, flip, wo, wc, wy, wx;
	long long m;
};

// The pool's backward where conv2's backward reads its output's gradient
// (GATE, NCHW): dy at (n, o, y, x) is the pooled gradient dp of window
// (y / 2, x / 2) where the pool's output p there is > 0 and arg names (y,
// x), else 0, as maxpool2_relu_bwd stores it in T; dp, p and arg NCHW
// (the pool's order in every layout).  Rows and columns the pool dropped
// (an odd last one) get 0.  So the backward reads the pool's tensors, a
// quarter of conv2's output each, and conv2's output gradient never goes
// to memory (151 MB written, then read by both calls, per TF32 step at
// batch 1024).
struct Gate {
	const float *dp, *p;
	const uint8_t *arg;
};

#if CNN_TC
// Entry q of the pooled tensors for the pixel at position want (0..3) of
// its window, and that in T.
__device__ __forceinline__ float gatedf(const Gate &gt, int q, int want)
{
	return gt.p[q] > 0.f && gt.arg[q] == want ? gt.dp[q] : 0.f;
}
template <typename T>
__device__ __forceinline__ T gated(const Gate &gt, int q, int want)
{
	T t;
	st(&t, gatedf(gt, q, want));
	return t;
}
#endif

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
	typedef Mma<T> M;
	typedef typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type LayA;
	// A (pixel, channel): NHWC [m][k], NCHW [k][m]; B (channel, output) [k][o];
	// the output tile C in floats: NHWC [m][o], NCHW [o][m].  A warp owns
	// 32 pixels by BN / 2 outputs: 2 x FN fragments.
	constexpr int FN = BN / 32, LA = NHWC ? kCvBK + M::PAD : kCvBM + M::PADG, LB = BN + M::PADG;
	constexpr int LC = NHWC ? BN + 4 : kCvBM + 4;
	constexpr int SA = NHWC ? kCvBM * LA : kCvBK * LA;
	constexpr int SAB = (SA + kCvBK * LB) * (int)sizeof(T);
	constexpr int SC = (NHWC ? kCvBM : BN) * LC * 4;
	constexpr int RA = kCvBM * kCvBK / kCvThreads, RB = kCvBK * BN / kCvThreads;
	static_assert(FN >= 1 && RB >= 1 && kCvBM * kCvBK % kCvThreads == 0 &&
		      kCvBK * BN % kCvThreads == 0, "conv3_igemm's tile and its threads");
	__shared__ __align__(128) unsigned char smem[SAB > SC ? SAB : SC];
	__shared__ int pn[kCvBM], py[kCvBM], px[kCvBM];   // the tile's pixels; pn -1 past the end
	// C1: each warp's lanes' 10 sums of one channel (11 apart: no two lanes
	// of a store on one bank)
	__shared__ float red[C1 ? kCvThreads * 11 : 1];
	T *As = reinterpret_cast<T *>(smem), *Bs = As + SA;
	float *Cs = reinterpret_cast<float *>(smem);
	int o0 = blockIdx.y * BN, wm, wn;
	wmma::fragment<wmma::accumulator, 16, 16, M::K, float> acc[2][FN];
	igemm_begin<POOL, BN>(g, pn, py, px, &wm, &wn, acc);
	// The reduction runs over (tap, 32 channels) steps; each step's operands
	// are read from memory into registers during the one before (ra, rb),
	// so their latency hides behind that step's mma.
	int nc = (g.c + kCvBK - 1) / kCvBK, steps = 9 * nc;
	int plane = g.h * g.w;   // offsets in 32 bits: conv3_args keeps tensors under 2^31 entries
	T ra[RA], rb[RB];
	auto fetch = [&](int step) {
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
	};
	fetch(0);
	for (int step = 0; step < steps; step++) {
#pragma unroll
		for (int j = 0; j < RA; j++) {
			if (NHWC)
				As[(threadIdx.x / kCvBK + j * (kCvThreads / kCvBK)) * LA + threadIdx.x % kCvBK] = ra[j];
			else
				As[(threadIdx.x / kCvBM + j * (kCvThreads / kCvBM)) * LA + threadIdx.x % kCvBM] = ra[j];
		}
#pragma unroll
		for (int j = 0; j < RB; j++)
			Bs[(threadIdx.x / BN + j * (kCvThreads / BN)) * LB + threadIdx.x % BN] = rb[j];
		__syncthreads();
		if (step + 1 < steps)
			fetch(step + 1);
		for (int k = 0; k < kCvBK; k += M::K) {
			wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::P, LayA> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::P, wmma::row_major> b[FN];
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(a[i], NHWC ? As + (wm + 16 * i) * LA + k :
								  As + k * LA + wm + 16 * i, LA);
			for (int j = 0; j < FN; j++)
				wmma::load_matrix_sync(b[j], Bs + k * LB + wn + 16 * j, LB);
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < FN; j++)
					wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
	acc_store<NHWC>(Cs, LC, wm, wn, acc);
	__syncthreads();
	if (POOL || !C1) {
		igemm_store<T, NHWC, BN, POOL>(Cs, LC, pn, py, px, g, o0, y, ep, p, arg);
	} else {
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

// Backward-filter: the pixels are the reduction.  A block per (split s of
// the pixels, 64 output channels, 32 input channels, tap row ky) sums dw
// of its 3 taps over its pixels, 32 at a time, into part[s][o tile][c
// tile][64][9 * 32] (tap-major, the row's 96 columns); 8 warps each own
// 3 of the 4 x 6 fragments.  dy is matrix A (o, pixel), x at the row's
// taps matrix B (pixel, (kx, c)).  A chunk's operands are read into
// registers during the chunk before, as in conv3_igemm.
constexpr int kWgP = 32, kWgO = 64, kWgC = 32, kWgN = 3 * kWgC, kWgK = 9 * kWgC;
constexpr int kWgMinPixels = 256;   // a block's least share of the pixels
// Blocks an SM keeps (its launch bounds): three in TF32 from the pool's
// tensors (the NCHW default's backward-filter), which ptxas fits in 80
// registers without spilling on sm_80 and sm_90, else two (the others
// spill 8 to 124 bytes at three).  The splits fill one wave of the slots
// (conv3_wgrad_slots): at batch 64, 128 splits of 9 chunks on an H200, not
// 83 of 14.
template <typename T, bool NHWC, bool GATE>
constexpr int kWgBlocks = std::is_same<T, float>::value && GATE ? 3 : 2;

// With GATE (NCHW only), dy is not read: its entries come from gt; and
// with bpart, the blocks of the first tap row and input-channel tile also
// sum conv2's bias gradient over their pixels (the gated values in fp32,
// before their rounding), each thread its own entries in shared memory,
// then its warp's 32 threads in lane order, into bpart[split][o tile][64].
template <typename T, bool NHWC, bool GATE>
__global__ void __launch_bounds__(kCvThreads, kWgBlocks<T, NHWC, GATE>)
conv3_wgrad_part(const T *x, const T *dy, Conv3 g, long long ppb, float *part, Gate gt, float *bpart)
{
	pdl_enter();
	static_assert(!(NHWC && GATE), "the gated input is NCHW");
#if CNN_TC
	typedef Mma<T> M;
	// dy: NCHW [o][p] (row-major A), NHWC [p][o] (col-major A); x: NCHW
	// [k][p] (col-major B), NHWC [p][k] (row-major B)
	typedef typename std::conditional<NHWC, wmma::col_major, wmma::row_major>::type LayA;
	typedef typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type LayB;
	constexpr int LD = NHWC ? kWgO + M::PADG : kWgP + M::PAD, LX = NHWC ? kWgN + M::PADG : kWgP + M::PAD;
	constexpr int SD = NHWC ? kWgP * LD : kWgO * LD, SX = NHWC ? kWgP * LX : kWgN * LX;
	constexpr int RD = kWgP * kWgO / kCvThreads, RX = kWgP * kWgN / kCvThreads;
	static_assert(kWgP * kWgO % kCvThreads == 0 && kWgP * kWgN % kCvThreads == 0 &&
		      kCvThreads % kWgP == 0 && kCvThreads % kWgO == 0 && kWgC % (kCvThreads / kWgP) == 0,
		      "conv3_wgrad_part's tile and its threads");
	__shared__ __align__(128) T Ds[SD];
	__shared__ __align__(128) T Xs[SX];
	// the next chunk's pixels: the offsets of their dy and of their x at
	// (row + ky, column), channel 0; dq -1 past the end.  Written before the
	// barrier after which fetch reads them, and again only after the next
	// barrier.  Offsets are 32 bits: conv3_args keeps every tensor under
	// 2^31 entries.  GATE: dq the pooled tensors' offset at channel 0, dwin
	// the pixel's position in its window (4: a row or column the pool
	// dropped).
	__shared__ int dq[kWgP], xq[kWgP], dwin[kWgP];
	constexpr int BS = RD + 1;   // a thread's bias sums, 9 apart: no bank shared in a warp
	__shared__ float bs[GATE ? kCvThreads * BS : 1];
	bool bias = GATE && bpart && blockIdx.z == 0;
	if constexpr (GATE) {
		if (bias)
			for (int j = 0; j < RD; j++)
				bs[threadIdx.x * BS + j] = 0.f;
	}
	int to = gridDim.y, tc = gridDim.z / 3, o0 = blockIdx.y * kWgO, c0 = blockIdx.z / 3 * kWgC;
	int ky = blockIdx.z % 3, opix = g.oh * g.ow, plane = g.h * g.w;
	long long p0 = blockIdx.x * ppb, p1 = p0 + ppb < g.m ? p0 + ppb : g.m;
	int chunks = (int)((p1 - p0 + kWgP - 1) / kWgP);
	int warp = threadIdx.x / 32, fr = warp % 4, fc0 = warp / 4 * 3;
	wmma::fragment<wmma::accumulator, 16, 16, M::K, float> acc[3];
	for (int j = 0; j < 3; j++)
		wmma::fill_fragment(acc[j], 0.f);
	auto pixels = [&](int t) {   // chunk t's pixels
		if (threadIdx.x < kWgP) {
			long long p = p0 + (long long)t * kWgP + threadIdx.x;
			int n = (int)(p / opix), r = (int)(p % opix), y = r / g.ow, xx = r % g.ow;
			if (GATE) {
				int ph = g.oh / 2, pw = g.ow / 2;
				dq[threadIdx.x] = p >= p1 ? -1 : (n * g.o * ph + (y >> 1)) * pw + (xx >> 1);
				dwin[threadIdx.x] = y < 2 * ph && xx < 2 * pw ? (y & 1) << 1 | (xx & 1) : 4;
			} else {
				dq[threadIdx.x] = p >= p1 ? -1 : NHWC ? (n * opix + r) * g.o : n * g.o * opix + r;
			}
			xq[threadIdx.x] = NHWC ? ((n * g.h + y + ky) * g.w + xx) * g.c :
						    n * g.c * plane + (y + ky) * g.w + xx;
		}
	};
	T rd[RD], rx[RX];
	auto fetch = [&]() {   // the chunk pixels() described, into registers
		if (NHWC) {
			// dy: a thread's output channel fixed, its pixels step by 4;
			// x: its input channel fixed, (pixel, kx) steps by 8
			int oi = threadIdx.x % kWgO, o = o0 + oi;
#pragma unroll
			for (int j = 0; j < RD; j++) {
				int q = dq[threadIdx.x / kWgO + j * (kCvThreads / kWgO)];
				rd[j] = q >= 0 && o < g.o ? M::op(dy[q + o]) : M::zero();
			}
			int c = c0 + threadIdx.x % kWgC;
#pragma unroll
			for (int j = 0; j < RX; j++) {
				int k = threadIdx.x / kWgC + j * (kCvThreads / kWgC), pi = k / 3;
				rx[j] = dq[pi] >= 0 && c < g.c ? M::op(x[xq[pi] + k % 3 * g.c + c]) : M::zero();
			}
		} else {
			// a thread's pixel is fixed: dy's output channels step by 8,
			// x's (kx, channel) by 8
			int pi = threadIdx.x % kWgP, ol = threadIdx.x / kWgP, q = dq[pi];
			int xbase = xq[pi] + (c0 + ol) * plane;
			if (GATE) {
				int pplane = g.oh / 2 * (g.ow / 2), want = dwin[pi], dbase = q + (o0 + ol) * pplane;
#pragma unroll
				for (int j = 0; j < RD; j++) {
					float v = q >= 0 && want < 4 && o0 + ol + j * (kCvThreads / kWgP) < g.o ?
						gatedf(gt, dbase + j * (kCvThreads / kWgP) * pplane, want) : 0.f;
					T t;
					st(&t, v);
					rd[j] = M::op(t);
					if (bias)
						bs[threadIdx.x * BS + j] += v;
				}
			} else {
				int dbase = q + (o0 + ol) * opix;
#pragma unroll
				for (int j = 0; j < RD; j++)
					rd[j] = q >= 0 && o0 + ol + j * (kCvThreads / kWgP) < g.o ?
						M::op(dy[dbase + j * (kCvThreads / kWgP) * opix]) : M::zero();
			}
#pragma unroll
			for (int j = 0; j < RX; j++) {
				// (kx, channel) = ol + 8 j: kx = j / 4, the channel ol + 8 (j % 4)
				constexpr int S = kCvThreads / kWgP, PER = kWgC / S;
				int kx = j / PER, cl = ol + j % PER * S;
				rx[j] = q >= 0 && c0 + cl < g.c ? M::op(x[xbase + j % PER * S * plane + kx]) : M::zero();
			}
		}
	};
	pixels(0);
	__syncthreads();
	if (chunks)
		fetch();
	__syncthreads();   // every thread has read chunk 0's pixels before pixels(1)
	for (int t = 0; t < chunks; t++) {
		if (NHWC) {
#pragma unroll
			for (int j = 0; j < RD; j++)
				Ds[(threadIdx.x / kWgO + j * (kCvThreads / kWgO)) * LD + threadIdx.x % kWgO] = rd[j];
#pragma unroll
			for (int j = 0; j < RX; j++) {
				int q = threadIdx.x / kWgC + j * (kCvThreads / kWgC);
				Xs[q / 3 * LX + q % 3 * kWgC + threadIdx.x % kWgC] = rx[j];
			}
		} else {
#pragma unroll
			for (int j = 0; j < RD; j++)
				Ds[(threadIdx.x / kWgP + j * (kCvThreads / kWgP)) * LD + threadIdx.x % kWgP] = rd[j];
#pragma unroll
			for (int j = 0; j < RX; j++)
				Xs[(threadIdx.x / kWgP + j * (kCvThreads / kWgP)) * LX + threadIdx.x % kWgP] = rx[j];
		}
		if (t + 1 < chunks)
			pixels(t + 1);
		__syncthreads();
		if (t + 1 < chunks)
			fetch();
#pragma unroll 2
		for (int k = 0; k < kWgP; k += M::K) {
			wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::P, LayA> a;
			wmma::load_matrix_sync(a, NHWC ? Ds + k * LD + fr * 16 : Ds + fr * 16 * LD + k, LD);
			for (int j = 0; j < 3; j++) {
				wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::P, LayB> b;
				int kc = (fc0 + j) * 16;
				wmma::load_matrix_sync(b, NHWC ? Xs + k * LX + kc : Xs + kc * LX + k, LX);
				wmma::mma_sync(acc[j], a, b, acc[j]);
			}
		}
		__syncthreads();
	}
	if constexpr (GATE) {
		if (bias && threadIdx.x % kWgP < RD) {
			// warp ol's threads are the chunk's 32 pixels of its
			// channels ol + 8 j
			int ol = threadIdx.x / kWgP, j = threadIdx.x % kWgP;
			float t = 0.f;
			for (int l = 0; l < kWgP; l++)
				t += bs[(ol * kWgP + l) * BS + j];
			bpart[((size_t)blockIdx.x * to + blockIdx.y) * kWgO + ol + j * (kCvThreads / kWgP)] = t;
		}
	}
	float *out = part + (((size_t)blockIdx.x * to + blockIdx.y) * tc + blockIdx.z / 3) * kWgO * kWgK +
		     ky * kWgN;
	for (int j = 0; j < 3; j++)
		wmma::store_matrix_sync(out + fr * 16 * kWgK + (fc0 + j) * 16, acc[j], kWgK,
					wmma::mem_row_major);
#else
	(void)kWgN;
	__trap();
#endif
}

// dw[o][c][tap] = the splits' partial sums, in a fixed order: a block per
// 32 entries of a split's part, its 8 warps each summing every 8th split
// from its own (coalesced along the entries), then the 8 sums in order.
constexpr int kWgSumLanes = 32, kWgSumWays = kCvThreads / kWgSumLanes;

// With db, the entries past the weights' are the bias's: bpart (right
// after the splits' weight sums in part) [split][o tile][64], summed the
// same way into db.
__global__ void __launch_bounds__(kCvThreads) conv3_wgrad_sum(const float *part, int splits, int to,
							     int tc, int oc, int c, float *dw, float *db)
{
	pdl_enter();
	__shared__ float sums[kWgSumWays][kWgSumLanes];
	size_t per = (size_t)to * tc * kWgO * kWgK, bper = (size_t)to * kWgO;
	size_t i = (size_t)blockIdx.x * kWgSumLanes + threadIdx.x % kWgSumLanes;
	int way = threadIdx.x / kWgSumLanes;
	const float *bpart = part + (size_t)splits * per;
	float s = 0.f;
	if (i < per)
		for (int p = way; p < splits; p += kWgSumWays)
			s += part[p * per + i];
	else if (db && i < per + bper)
		for (int p = way; p < splits; p += kWgSumWays)
			s += bpart[p * bper + (i - per)];
	sums[way][threadIdx.x % kWgSumLanes] = s;
	__syncthreads();
	if (way || i >= per + (db ? bper : 0))
		return;
	s = 0.f;
	for (int w = 0; w < kWgSumWays; w++)
		s += sums[w][threadIdx.x];
	if (i >= per) {
		if ((int)(i - per) < oc)
			db[i - per] = s;
		return;
	}
	int k = (int)(i % kWgK), ol = (int)(i / kWgK % kWgO);
	int bc = (int)(i / kWgK / kWgO % tc), bo = (int)(i / kWgK / kWgO / tc);
	int o = bo * kWgO + ol, ci = bc * kWgC + k % kWgC, tap = k / kWgC;
	if (o < oc && ci < c)
		dw[((size_t)o * c + ci) * 9 + tap] = s;
}

// How many blocks of conv3_wgrad_part<T, NHWC, GATE> the current GPU runs at once
// (its SMs times the blocks an SM holds): the splits of the pixels fill one
// such wave, so no SM idles through a short last one.  Asked once per
// device and kept (cnn_cuda_conv3_wgrad_scratch asks before any launch), so
// that a launch inside a CUDA graph's stream capture makes no query but
// cudaGetDevice.  A device that cannot say gets 128, not kept (the launch
// then reports what is wrong with it).
template <typename T, bool NHWC, bool GATE>
int conv3_wgrad_slots()
{
	static std::atomic<long long> kept{-1};   // device << 32 | slots
	int dev = 0, sms = 0, per = 0;
	if (cudaGetDevice(&dev) != cudaSuccess) {
		cudaGetLastError();
		return 128;
	}
	long long k = kept.load(std::memory_order_relaxed);
	if (k >= 0 && k >> 32 == dev)
		return (int)(k & 0xffffffffLL);
	if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, (const void *)conv3_wgrad_part<T, NHWC, GATE>,
							  kCvThreads, 0) != cudaSuccess ||
	    sms < 1 || per < 1) {
		cudaGetLastError();
		return 128;
	}
	kept.store((long long)dev << 32 | (long long)sms * per, std::memory_order_relaxed);
	return sms * per;
}

// Pixels a block: one wave of slots / tiles splits, at least kWgMinPixels
// and a whole number of chunks each.  splits = ceil(m / ppb) is then at most
// min(ceil(m / kWgMinPixels), max(1, slots / tiles)), whatever m is: the
// bound cnn_cuda_conv3_wgrad_scratch sizes the scratch for.
long long conv3_wgrad_ppb(long long m, int slots, int tiles)
{
	long long want = slots / tiles > 1 ? slots / tiles : 1, ppb = (m + want - 1) / want;
	ppb = (ppb + kWgP - 1) / kWgP * kWgP;
	return ppb < kWgMinPixels ? kWgMinPixels : ppb;
}

bool conv3_args(const char *call, int nimg, int c, int h, int wd, int oc)
{
	// every tensor, with a tile's overhang, under 2^31 entries: the kernels'
	// offsets are 32-bit
	int cmax = c > oc ? c : oc;
	if (nimg >= 0 && c >= 1 && oc >= 1 && h >= 3 && wd >= 3 && cmax <= 65535 / 3 * kWgC &&
	    (long long)(nimg + 1) * (cmax + kCvBN) * h * wd < 0x7fffffffLL &&
	    9LL * (oc + kCvBN) * (c + kCvBN) < 0x7fffffffLL)
		return true;
	char m[160];
	snprintf(m, sizeof(m), "%d images of %d channels %dx%d, %d outputs: expected >= 0, >= 1, 3x3 "
		 "or larger, >= 1, and fewer than 2^31 entries in each tensor", nimg, c, h, wd, oc);
	cnn_cuda_fail(__FILE__, __LINE__, call, m);
	return false;
}

// Whether the current GPU runs the tensor-core kernels (compute capability
// 8.0 or newer): 1, 0, or -1 if CUDA cannot say; with call, a refusal is
// that call's error, naming the GPU and what it needs.  Asked at each
// launch, also inside a graph's capture: a query of the device's
// attributes, which neither enqueues nor loads anything (cuBLAS makes such
// queries in captured calls too).
int tc_device(const char *call)
{
	int dev = 0, major = 0, minor = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
	char m[200];
	if (e != cudaSuccess) {
		cudaGetLastError();
		if (call) {
			snprintf(m, sizeof(m), "the current GPU's compute capability: %s",
				 cudaGetErrorString(e));
			cnn_cuda_fail(__FILE__, __LINE__, call, m);
		}
		return -1;
	}
	if (major >= 8)
		return 1;
	if (call) {
		snprintf(m, sizeof(m), "GPU %d is sm_%d%d: these tensor-core kernels (TF32 and bf16) need "
			 "compute capability 8.0 or newer; cuDNN does this convolution there (--conv2 "
			 "cudnn)", dev, major, minor);
		cnn_cuda_fail(__FILE__, __LINE__, call, m);
	}
	return 0;
}

// The forward's geometry, its weights packed [tap][c][o] (conv3_pack's wf).
Conv3 conv3_geom(int nimg, int c, int h, int wd, int oc)
{
	Conv3 g;
	g.c = c, g.h = h, g.w = wd, g.o = oc, g.oh = h - 2, g.ow = wd - 2, g.pad = 0, g.flip = 0;
	g.wo = 1;
	g.wc = oc;
	g.wy = 3 * c * oc;
	g.wx = c * oc;
	g.m = (long long)nimg * g.oh * g.ow;
	return g;
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

// With gt (NCHW), dy from the pool's tensors (call names the caller).
template <typename T>
int launch_conv3_wgrad(const T *x, const T *dy, int nimg, int c, int h, int wd, int oc, int nhwc,
		       float *scratch, float *dw, float *db, const Gate *gt, const char *call,
		       cudaStream_t s)
{
	if (!conv3_args(call, nimg, c, h, wd, oc) || tc_device(call) != 1)
		return -1;
	Conv3 g = conv3_geom(nimg, c, h, wd, oc);
	int to = (oc + kWgO - 1) / kWgO, tc = (c + kWgC - 1) / kWgC;
	int slots = gt ? conv3_wgrad_slots<T, false, true>() :
		    nhwc ? conv3_wgrad_slots<T, true, false>() : conv3_wgrad_slots<T, false, false>();
	long long ppb = conv3_wgrad_ppb(g.m, slots, to * tc * 3);
	int splits = (int)((g.m + ppb - 1) / ppb);
	size_t per = (size_t)to * tc * kWgO * kWgK, bper = db ? (size_t)to * kWgO : 0;
	if (splits) {   // no images: the sum of no splits, zeros
		void (*conv3_wgrad_k)(const T *, const T *, Conv3, long long, float *, Gate, float *) =
			gt ? conv3_wgrad_part<T, false, true> :
			nhwc ? conv3_wgrad_part<T, true, false> : conv3_wgrad_part<T, false, false>;
		Gate none = { NULL, NULL, NULL };
		conv3_wgrad_k<<<dim3(splits, to, tc * 3), kCvThreads, 0, s>>>(
			x, dy, g, ppb, scratch, gt ? *gt : none, db ? scratch + (size_t)splits * per : NULL);
		LAUNCHED(s);
	}
	conv3_wgrad_sum<<<(unsigned)((per + bper + kWgSumLanes - 1) / kWgSumLanes), kCvThreads, 0, s>>>(
		scratch, splits, to, tc, oc, c, dw, db);
	LAUNCHED(s);
	return 0;
}

} // namespace

extern "C" int cnn_cuda_tensor_cores(void)
{
	return tc_device(NULL);
}

extern "C" size_t cnn_cuda_conv3_wgrad_scratch(int nimg, int c, int h, int wd, int oc)
{
	if (nimg < 1 || c < 1 || h < 3 || wd < 3 || oc < 1)
		return 0;
	// the most splits any launch for up to nimg images makes, in any type,
	// layout and input (conv3_wgrad_ppb)
	long long m = (long long)nimg * (h - 2) * (wd - 2), tiles = 3LL * ((oc + kWgO - 1) / kWgO) *
		((c + kWgC - 1) / kWgC);
	int slots[] = {conv3_wgrad_slots<float, false, false>(), conv3_wgrad_slots<float, true, false>(),
		       conv3_wgrad_slots<float, false, true>(), conv3_wgrad_slots<bf16, false, false>(),
		       conv3_wgrad_slots<bf16, true, false>(), conv3_wgrad_slots<bf16, false, true>()};
	long long want = 1;
	for (int v : slots)
		want = v / tiles > want ? v / tiles : want;
	long long splits = (m + kWgMinPixels - 1) / kWgMinPixels;
	// the weights' partial sums, then the bias's (the _pool calls')
	return (size_t)(splits < want ? splits : want) * ((tiles / 3) * kWgO * kWgK +
							 (oc + kWgO - 1) / kWgO * kWgO);
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

extern "C" int cnn_cuda_conv3_wgrad_tf32(const float *x, const float *dy, int nimg, int c, int h,
					 int wd, int oc, int nhwc, float *scratch, float *dw,
					 cudaStream_t s)
{
	return launch_conv3_wgrad(x, dy, nimg, c, h, wd, oc, nhwc, scratch, dw, (float *)NULL,
				  (const Gate *)NULL, "cnn_cuda_conv3_wgrad", s);
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

extern "C" int cnn_cuda_conv3_wgrad_bf16(const cnn_bf16 *x, const cnn_bf16 *dy, int nimg, int c,
					 int h, int wd, int oc, int nhwc, float *scratch, float *dw,
					 cudaStream_t s)
{
	return launch_conv3_wgrad(B(x), B(dy), nimg, c, h, wd, oc, nhwc, scratch, dw, (float *)NULL,
				  (const Gate *)NULL, "cnn_cuda_conv3_wgrad", s);
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

extern "C" int cnn_cuda_conv3_wgrad_pool_tf32(const float *x, const float *dp, const float *p,
					      const uint8_t *arg, int nimg, int c, int h, int wd,
					      int oc, float *scratch, float *dw, float *db,
					      cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_wgrad(x, (const float *)NULL, nimg, c, h, wd, oc, 0, scratch, dw, db, &gt,
				  "cnn_cuda_conv3_wgrad_pool", s);
}

extern "C" int cnn_cuda_conv3_dgrad_pool_bf16(const float *dp, const float *p, const uint8_t *arg,
					      const cnn_bf16 *w, int nimg, int c, int h, int wd,
					      int oc, cnn_bf16 *dx, cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_dgrad((const bf16 *)NULL, B(w), nimg, c, h, wd, oc, 0, B(dx), &gt,
				  (const C1Args<bf16> *)NULL, "cnn_cuda_conv3_dgrad_pool", s);
}

extern "C" int cnn_cuda_conv3_wgrad_pool_bf16(const cnn_bf16 *x, const float *dp, const float *p,
					      const uint8_t *arg, int nimg, int c, int h, int wd,
					      int oc, float *scratch, float *dw, float *db,
					      cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_wgrad(B(x), (const bf16 *)NULL, nimg, c, h, wd, oc, 0, scratch, dw, db, &gt,
				  "cnn_cuda_conv3_wgrad_pool", s);
}
