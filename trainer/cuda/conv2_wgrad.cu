// conv2's backward-filter on the tensor cores (see kernels.h,
// cnn_cuda_conv3_wgrad*): the pixels split over one wave of blocks, each
// split's partial sums added in a fixed order; conv2_tc.cuh has what it
// shares with the forward and backward-data (conv2_tc.cu).
#include <atomic>
#include <type_traits>

#include "conv2_tc.cuh"

namespace {

// Backward-filter: the pixels are the reduction.  A block per (split s of
// the pixels, 64 output channels, 32 input channels, tap row ky) sums dw
// of its 3 taps over its pixels, 32 at a time, into part[s][o tile][c
// tile][64][9 * 32] (tap-major, the row's 96 columns); 8 warps each own
// 3 of the 4 x 6 fragments.  dy is matrix A (o, pixel), x at the row's
// taps matrix B (pixel, (kx, c)).  A chunk's operands are read into
// registers during the chunk before, as in conv3_igemm.
constexpr int kWgMinPixels = 256;   // a block's least share of the pixels
// Blocks an SM keeps (its launch bounds): three in TF32 from the pool's
// tensors (the NCHW default's backward-filter), which ptxas fits in 80
// registers without spilling on sm_80 and sm_90, else two (the others
// spill 8 to 124 bytes at three).  The splits fill one wave of the slots
// (conv3_wgrad_slots): at batch 64, 128 splits of 9 chunks on an H200, not
// 83 of 14.
template <typename T, bool NHWC, bool GATE>
constexpr int kWgBlocks = std::is_same<T, float>::value && GATE ? 3 : 2;

#if CNN_TC
// conv3_wgrad_part's tile: dy NCHW [o][p] (row-major A), NHWC [p][o]
// (col-major A); x NCHW [k][p] (col-major B), NHWC [p][k] (row-major B).
// RD and RX: the entries of each a thread reads for a chunk; BS: a
// thread's bias sums, RD + 1 apart (no bank shared in a warp).
template <typename T, bool NHWC> struct WgTile {
	typedef Mma<T> M;
	static constexpr int LD = NHWC ? kWgO + M::PADG : kWgP + M::PAD;
	static constexpr int LX = NHWC ? kWgN + M::PADG : kWgP + M::PAD;
	static constexpr int SD = NHWC ? kWgP * LD : kWgO * LD, SX = NHWC ? kWgP * LX : kWgN * LX;
	static constexpr int RD = kWgP * kWgO / kCvThreads, RX = kWgP * kWgN / kCvThreads;
	static constexpr int BS = RD + 1;
	static_assert(kWgP * kWgO % kCvThreads == 0 && kWgP * kWgN % kCvThreads == 0 &&
		      kCvThreads % kWgP == 0 && kCvThreads % kWgO == 0 && kWgC % (kCvThreads / kWgP) == 0,
		      "conv3_wgrad_part's tile and its threads");
};

// Chunk t's pixels (of p0..p1, tap row ky) into dq, xq and dwin
// (conv3_wgrad_part says what each holds).
template <bool NHWC, bool GATE>
__device__ __forceinline__ void wgrad_pixels(const Conv3 &g, long long p0, long long p1, int t,
					     int ky, int *dq, int *xq, int *dwin)
{
	int opix = g.oh * g.ow, plane = g.h * g.w;
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
}

// The chunk wgrad_pixels described, into this thread's registers rd and
// rx; with bias, the gated values also summed into its entries of bs.
template <typename T, bool NHWC, bool GATE>
__device__ __forceinline__ void wgrad_fetch(const T *x, const T *dy, const Conv3 &g, const Gate &gt,
					    const int *dq, const int *xq, const int *dwin, int o0,
					    int c0, bool bias, float *bs,
					    T (&rd)[WgTile<T, NHWC>::RD], T (&rx)[WgTile<T, NHWC>::RX])
{
	typedef Mma<T> M;
	typedef WgTile<T, NHWC> Tl;
	int opix = g.oh * g.ow, plane = g.h * g.w;
	if (NHWC) {
		// dy: a thread's output channel fixed, its pixels step by 4;
		// x: its input channel fixed, (pixel, kx) steps by 8
		int oi = threadIdx.x % kWgO, o = o0 + oi;
#pragma unroll
		for (int j = 0; j < Tl::RD; j++) {
			int q = dq[threadIdx.x / kWgO + j * (kCvThreads / kWgO)];
			rd[j] = q >= 0 && o < g.o ? M::op(dy[q + o]) : M::zero();
		}
		int c = c0 + threadIdx.x % kWgC;
#pragma unroll
		for (int j = 0; j < Tl::RX; j++) {
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
			for (int j = 0; j < Tl::RD; j++) {
				float v = q >= 0 && want < 4 && o0 + ol + j * (kCvThreads / kWgP) < g.o ?
					gatedf(gt, dbase + j * (kCvThreads / kWgP) * pplane, want) : 0.f;
				T t;
				st(&t, v);
				rd[j] = M::op(t);
				if (bias)
					bs[threadIdx.x * Tl::BS + j] += v;
			}
		} else {
			int dbase = q + (o0 + ol) * opix;
#pragma unroll
			for (int j = 0; j < Tl::RD; j++)
				rd[j] = q >= 0 && o0 + ol + j * (kCvThreads / kWgP) < g.o ?
					M::op(dy[dbase + j * (kCvThreads / kWgP) * opix]) : M::zero();
		}
#pragma unroll
		for (int j = 0; j < Tl::RX; j++) {
			// (kx, channel) = ol + 8 j: kx = j / 4, the channel ol + 8 (j % 4)
			constexpr int S = kCvThreads / kWgP, PER = kWgC / S;
			int kx = j / PER, cl = ol + j % PER * S;
			rx[j] = q >= 0 && c0 + cl < g.c ? M::op(x[xbase + j % PER * S * plane + kx]) : M::zero();
		}
	}
}

// This thread's registers of a chunk into the tile's Ds and Xs.
template <typename T, bool NHWC>
__device__ __forceinline__ void wgrad_put(T *Ds, T *Xs, const T (&rd)[WgTile<T, NHWC>::RD],
					  const T (&rx)[WgTile<T, NHWC>::RX])
{
	typedef WgTile<T, NHWC> Tl;
	if (NHWC) {
#pragma unroll
		for (int j = 0; j < Tl::RD; j++)
			Ds[(threadIdx.x / kWgO + j * (kCvThreads / kWgO)) * Tl::LD + threadIdx.x % kWgO] = rd[j];
#pragma unroll
		for (int j = 0; j < Tl::RX; j++) {
			int q = threadIdx.x / kWgC + j * (kCvThreads / kWgC);
			Xs[q / 3 * Tl::LX + q % 3 * kWgC + threadIdx.x % kWgC] = rx[j];
		}
	} else {
#pragma unroll
		for (int j = 0; j < Tl::RD; j++)
			Ds[(threadIdx.x / kWgP + j * (kCvThreads / kWgP)) * Tl::LD + threadIdx.x % kWgP] = rd[j];
#pragma unroll
		for (int j = 0; j < Tl::RX; j++)
			Xs[(threadIdx.x / kWgP + j * (kCvThreads / kWgP)) * Tl::LX + threadIdx.x % kWgP] = rx[j];
	}
}

// The warp's mma over a chunk's kWgP pixels: its fragment row fr, columns
// fc0 .. fc0 + 2.
template <typename T, bool NHWC>
__device__ __forceinline__ void wgrad_mma(const T *Ds, const T *Xs, int fr, int fc0,
					  wmma::fragment<wmma::accumulator, 16, 16, Mma<T>::K, float> (&acc)[3])
{
	typedef Mma<T> M;
	typedef WgTile<T, NHWC> Tl;
	typedef typename std::conditional<NHWC, wmma::col_major, wmma::row_major>::type LayA;
	typedef typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type LayB;
#pragma unroll 2
	for (int k = 0; k < kWgP; k += M::K) {
		wmma::fragment<wmma::matrix_a, 16, 16, M::K, typename M::P, LayA> a;
		wmma::load_matrix_sync(a, NHWC ? Ds + k * Tl::LD + fr * 16 : Ds + fr * 16 * Tl::LD + k, Tl::LD);
		for (int j = 0; j < 3; j++) {
			wmma::fragment<wmma::matrix_b, 16, 16, M::K, typename M::P, LayB> b;
			int kc = (fc0 + j) * 16;
			wmma::load_matrix_sync(b, NHWC ? Xs + k * Tl::LX + kc : Xs + kc * Tl::LX + k, Tl::LX);
			wmma::mma_sync(acc[j], a, b, acc[j]);
		}
	}
}
#endif

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
	typedef WgTile<T, NHWC> Tl;
	constexpr int RD = Tl::RD, BS = Tl::BS;
	__shared__ __align__(128) T Ds[Tl::SD];
	__shared__ __align__(128) T Xs[Tl::SX];
	// the next chunk's pixels: the offsets of their dy and of their x at
	// (row + ky, column), channel 0; dq -1 past the end.  Written before the
	// barrier after which wgrad_fetch reads them, and again only after the
	// next barrier.  Offsets are 32 bits: conv3_args keeps every tensor
	// under 2^31 entries.  GATE: dq the pooled tensors' offset at channel
	// 0, dwin the pixel's position in its window (4: a row or column the
	// pool dropped).
	__shared__ int dq[kWgP], xq[kWgP], dwin[kWgP];
	__shared__ float bs[GATE ? kCvThreads * BS : 1];
	bool bias = GATE && bpart && blockIdx.z == 0;
	if constexpr (GATE) {
		if (bias)
			for (int j = 0; j < RD; j++)
				bs[threadIdx.x * BS + j] = 0.f;
	}
	int to = gridDim.y, tc = gridDim.z / 3, o0 = blockIdx.y * kWgO, c0 = blockIdx.z / 3 * kWgC;
	int ky = blockIdx.z % 3;
	long long p0 = blockIdx.x * ppb, p1 = p0 + ppb < g.m ? p0 + ppb : g.m;
	int chunks = (int)((p1 - p0 + kWgP - 1) / kWgP);
	int warp = threadIdx.x / 32, fr = warp % 4, fc0 = warp / 4 * 3;
	wmma::fragment<wmma::accumulator, 16, 16, Mma<T>::K, float> acc[3];
	for (int j = 0; j < 3; j++)
		wmma::fill_fragment(acc[j], 0.f);
	T rd[RD], rx[Tl::RX];
	wgrad_pixels<NHWC, GATE>(g, p0, p1, 0, ky, dq, xq, dwin);
	__syncthreads();
	if (chunks)
		wgrad_fetch<T, NHWC, GATE>(x, dy, g, gt, dq, xq, dwin, o0, c0, bias, bs, rd, rx);
	__syncthreads();   // every thread has read chunk 0's pixels before the next's
	for (int t = 0; t < chunks; t++) {
		wgrad_put<T, NHWC>(Ds, Xs, rd, rx);
		if (t + 1 < chunks)
			wgrad_pixels<NHWC, GATE>(g, p0, p1, t + 1, ky, dq, xq, dwin);
		__syncthreads();
		if (t + 1 < chunks)
			wgrad_fetch<T, NHWC, GATE>(x, dy, g, gt, dq, xq, dwin, o0, c0, bias, bs, rd, rx);
		wgrad_mma<T, NHWC>(Ds, Xs, fr, fc0, acc);
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

extern "C" int cnn_cuda_conv3_wgrad_tf32(const float *x, const float *dy, int nimg, int c, int h,
					 int wd, int oc, int nhwc, float *scratch, float *dw,
					 cudaStream_t s)
{
	return launch_conv3_wgrad(x, dy, nimg, c, h, wd, oc, nhwc, scratch, dw, (float *)NULL,
				  (const Gate *)NULL, "cnn_cuda_conv3_wgrad", s);
}

extern "C" int cnn_cuda_conv3_wgrad_bf16(const cnn_bf16 *x, const cnn_bf16 *dy, int nimg, int c,
					 int h, int wd, int oc, int nhwc, float *scratch, float *dw,
					 cudaStream_t s)
{
	return launch_conv3_wgrad(B(x), B(dy), nimg, c, h, wd, oc, nhwc, scratch, dw, (float *)NULL,
				  (const Gate *)NULL, "cnn_cuda_conv3_wgrad", s);
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

extern "C" int cnn_cuda_conv3_wgrad_pool_bf16(const cnn_bf16 *x, const float *dp, const float *p,
					      const uint8_t *arg, int nimg, int c, int h, int wd,
					      int oc, float *scratch, float *dw, float *db,
					      cudaStream_t s)
{
	Gate gt = { dp, p, arg };
	return launch_conv3_wgrad(B(x), (const bf16 *)NULL, nimg, c, h, wd, oc, 0, scratch, dw, db, &gt,
				  "cnn_cuda_conv3_wgrad_pool", s);
}
