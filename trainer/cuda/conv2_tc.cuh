// conv2 on the tensor cores: what its kernel files share (conv2_tc.cu: the
// weights packed, the forward and backward-data as one implicit GEMM;
// conv2_wgrad.cu: the backward-filter): wmma's operand types, the tiles,
// the convolution's geometry, the pool's gate, the arguments' and the
// GPU's checks.
#ifndef CNN_CONV2_TC_CUH
#define CNN_CONV2_TC_CUH

#ifdef __CUDACC__
#include <mma.h>
#endif

#include "kernels_common.cuh"

// conv2's tensor-core kernels use TF32 and bf16 wmma, compute capability
// 8.0 and newer; the build also carries code for older GPUs (sm_75: T4,
// Quadro RTX), where cnn_train runs on cuDNN alone: those kernels' bodies
// are a trap there, and their launchers refuse such a GPU (tc_device)
// before any launch.  The host pass, and cuemu, see them whole.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CNN_TC 1
#else
#define CNN_TC 0
#endif

namespace {

namespace wmma = nvcuda::wmma;

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
// The backward-filter's tile (conv2_wgrad.cu): kWgP pixels a chunk, kWgO
// outputs by kWgC input channels of a tap row's three taps (kWgN columns).
constexpr int kWgP = 32, kWgO = 64, kWgC = 32, kWgN = 3 * kWgC, kWgK = 9 * kWgC;

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

inline bool conv3_args(const char *call, int nimg, int c, int h, int wd, int oc)
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
inline int tc_device(const char *call)
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
inline Conv3 conv3_geom(int nimg, int c, int h, int wd, int oc)
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

} // namespace

#endif
