// cuemu: the cuDNN calls of cnn_train's GPU path, on the CPU: 4-d tensor,
// filter and 2-d convolution descriptors (NCHW or NHWC, fp32 or bf16),
// cudnnFind* for the three convolution calls, and the calls themselves,
// enqueued on the handle's stream (streams.cc), so a graph captures them.
//
// The arithmetic is a direct convolution summed in fp32: fp32 operands
// rounded to TF32 where the math type lets cuDNN take tensor cores
// (CUDNN_DEFAULT_MATH or CUDNN_TENSOR_OP_MATH, unless NVIDIA_TF32_OVERRIDE
// is 0), bf16 ones widened, the result rounded to the output's type; alpha
// scales it, beta 0 never reads the output.  A descriptor set to shapes
// that do not make the convolution, a data type other than fp32 or bf16, a
// workspace smaller than the algorithm asked for or outside device memory,
// a tensor outside device memory: refused with CUDNN_STATUS_BAD_PARAM and
// a message naming it, where a GPU would fail or read out of bounds.
//
// cudnnFind* returns one algorithm per call: the convolution descriptor's
// math type, a workspace of one image's im2col, and for its time the
// clock model's (rt.h: the call's multiply-adds at 1 TFLOP/s, the same in
// either layout, so --conv-layout auto keeps NCHW here), which the call
// itself adds to the clock: a model, not a measurement.  Like
// the real one it allocates, so a capture forbids it.
#include "rt.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cudnn.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct cudnnContext {
	cudaStream_t s = nullptr;
};

struct cudnnTensorStruct {
	bool set = false;
	cudnnDataType_t t = CUDNN_DATA_FLOAT;
	bool nhwc = false;
	int n = 0, c = 0, h = 0, w = 0;
};

struct cudnnFilterStruct {
	bool set = false;
	cudnnDataType_t t = CUDNN_DATA_FLOAT;
	bool nhwc = false;   // KRSC
	int k = 0, c = 0, r = 0, s = 0;
};

struct cudnnConvolutionStruct {
	bool set = false;
	int ph = 0, pw = 0, u = 1, v = 1, dh = 1, dw = 1;
	bool flip = false;   // CUDNN_CONVOLUTION; cross-correlation otherwise
	cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

// One convolution's shapes, checked: x (n c h w), w (k c r s), y (n k oh ow).
struct Conv {
	cudnnTensorStruct x, y;
	cudnnFilterStruct f;
	cudnnConvolutionStruct cv;
	bool tf32;
};

size_t esize(cudnnDataType_t t)
{
	return t == CUDNN_DATA_FLOAT ? 4 : t == CUDNN_DATA_BFLOAT16 ? 2 : 0;
}

size_t elems(const cudnnTensorStruct &t)
{
	return (size_t)t.n * t.c * t.h * t.w;
}

size_t toff(const cudnnTensorStruct &t, int n, int c, int h, int w)
{
	return t.nhwc ? (((size_t)n * t.h + h) * t.w + w) * t.c + c :
			(((size_t)n * t.c + c) * t.h + h) * t.w + w;
}

size_t foff(const cudnnFilterStruct &f, int k, int c, int r, int s)
{
	return f.nhwc ? (((size_t)k * f.r + r) * f.s + s) * f.c + c :
			(((size_t)k * f.c + c) * f.r + r) * f.s + s;
}

float get(const void *p, cudnnDataType_t t, size_t i, bool tf32)
{
	if (t == CUDNN_DATA_BFLOAT16)
		return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
	float v = static_cast<const float *>(p)[i];
	return tf32 ? cuemu::to_tf32(v) : v;
}

void put(void *p, cudnnDataType_t t, size_t i, float v)
{
	if (t == CUDNN_DATA_BFLOAT16)
		static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16(v);
	else
		static_cast<float *>(p)[i] = v;
}

cudnnStatus_t refuse(const char *call, const char *why)
{
	fprintf(stderr, "cuemu: %s: %s\n", call, why);
	return CUDNN_STATUS_BAD_PARAM;
}

// The descriptors make one convolution?  (c.tf32 from the math type.)
cudnnStatus_t shapes(const char *call, const cudnnTensorStruct *x, const cudnnFilterStruct *f,
		     const cudnnConvolutionStruct *cv, const cudnnTensorStruct *y, Conv &c)
{
	if (!x || !f || !cv || !y || !x->set || !f->set || !cv->set || !y->set)
		return refuse(call, "a descriptor that was never set");
	char m[300];
	if (x->t != f->t || x->t != y->t || !esize(x->t)) {
		snprintf(m, sizeof(m), "data types %d (x), %d (w), %d (y): emulated for all fp32 or "
			 "all bf16", (int)x->t, (int)f->t, (int)y->t);
		return refuse(call, m);
	}
	int er = (f->r - 1) * cv->dh + 1, es = (f->s - 1) * cv->dw + 1;
	int oh = (x->h + 2 * cv->ph - er) / cv->u + 1, ow = (x->w + 2 * cv->pw - es) / cv->v + 1;
	if (x->c != f->c || y->n != x->n || y->c != f->k || y->h != oh || y->w != ow) {
		snprintf(m, sizeof(m), "x %dx%dx%dx%d, w %dx%dx%dx%d and the convolution make y "
			 "%dx%dx%dx%d, the descriptor says %dx%dx%dx%d", x->n, x->c, x->h, x->w, f->k,
			 f->c, f->r, f->s, x->n, f->k, oh, ow, y->n, y->c, y->h, y->w);
		return refuse(call, m);
	}
	c.x = *x;
	c.f = *f;
	c.cv = *cv;
	c.y = *y;
	c.tf32 = x->t == CUDNN_DATA_FLOAT && cv->math != CUDNN_FMA_MATH && cuemu::tf32_allowed();
	return CUDNN_STATUS_SUCCESS;
}

double macs(const Conv &c)
{
	return (double)elems(c.y) * c.f.c * c.f.r * c.f.s;
}

// What the one algorithm asks for: one image's im2col in fp32.
size_t workspace(const Conv &c)
{
	return (size_t)c.f.c * c.f.r * c.f.s * c.y.h * c.y.w * 4;
}

cudnnStatus_t buffers(const char *call, const Conv &c, const void *x, const void *w, const void *y,
		      const void *ws, size_t ws_bytes)
{
	char m[300];
	size_t es = esize(c.x.t);
	const struct {
		const char *name;
		const void *p;
		size_t bytes;
	} b[] = { { "x (or dx)", x, elems(c.x) * es },
		  { "w (or dw)", w, (size_t)c.f.k * c.f.c * c.f.r * c.f.s * es },
		  { "y (or dy)", y, elems(c.y) * es } };
	for (const auto &t : b)
		if (t.bytes && !cuemu::inside(t.p, t.bytes)) {
			snprintf(m, sizeof(m), "%s: %zu bytes at %p are not inside one cudaMalloc "
				 "allocation", t.name, t.bytes, t.p);
			return refuse(call, m);
		}
	size_t need = workspace(c);
	if (ws_bytes < need || (need && !cuemu::inside(ws, need))) {
		snprintf(m, sizeof(m), "workspace of %zu bytes at %p: the algorithm asked for %zu bytes "
			 "of device memory (cudnnFind's memory)", ws_bytes, ws, need);
		return refuse(call, m);
	}
	return CUDNN_STATUS_SUCCESS;
}

// The tap (r, s) of the filter a convolution reads at filter position
// (r, s): flipped for CUDNN_CONVOLUTION.
int tap(const Conv &c, int r, int R)
{
	return c.cv.flip ? R - 1 - r : r;
}

// The output columns ow whose input column ow*v - pw + s*dw is inside
// [0, W): [lo, hi).
void cols(const Conv &c, int s, int &lo, int &hi)
{
	lo = 0;
	hi = c.y.w;
	int off = -c.cv.pw + s * c.cv.dw;
	while (lo < hi && lo * c.cv.v + off < 0)
		lo++;
	while (hi > lo && (hi - 1) * c.cv.v + off >= c.x.w)
		hi--;
}

// x and w widened (and rounded) into NCHW / KCRS fp32.
std::vector<float> widen_x(const Conv &c, const void *x)
{
	std::vector<float> o(elems(c.x));
	size_t i = 0;
	for (int n = 0; n < c.x.n; n++)
		for (int ch = 0; ch < c.x.c; ch++)
			for (int h = 0; h < c.x.h; h++)
				for (int w = 0; w < c.x.w; w++)
					o[i++] = get(x, c.x.t, toff(c.x, n, ch, h, w), c.tf32);
	return o;
}

std::vector<float> widen_y(const Conv &c, const void *y)
{
	std::vector<float> o(elems(c.y));
	size_t i = 0;
	for (int n = 0; n < c.y.n; n++)
		for (int ch = 0; ch < c.y.c; ch++)
			for (int h = 0; h < c.y.h; h++)
				for (int w = 0; w < c.y.w; w++)
					o[i++] = get(y, c.y.t, toff(c.y, n, ch, h, w), c.tf32);
	return o;
}

std::vector<float> widen_w(const Conv &c, const void *w)
{
	const cudnnFilterStruct &f = c.f;
	std::vector<float> o((size_t)f.k * f.c * f.r * f.s);
	size_t i = 0;
	for (int k = 0; k < f.k; k++)
		for (int ch = 0; ch < f.c; ch++)
			for (int r = 0; r < f.r; r++)
				for (int s = 0; s < f.s; s++)
					o[i++] = get(w, f.t, foff(f, k, ch, r, s), c.tf32);
	return o;
}

float blend(float alpha, float beta, float acc, const void *out, cudnnDataType_t t, size_t i)
{
	return beta == 0.f ? alpha * acc : alpha * acc + beta * get(out, t, i, false);
}

void forward(const Conv &c, float alpha, const void *x, const void *w, float beta, void *y)
{
	std::vector<float> X = widen_x(c, x), Wt = widen_w(c, w);
	int H = c.x.h, Wd = c.x.w, OH = c.y.h, OW = c.y.w, R = c.f.r, S = c.f.s, C = c.x.c;
	std::vector<float> acc((size_t)OH * OW);
	for (int n = 0; n < c.x.n; n++)
		for (int k = 0; k < c.f.k; k++) {
			std::fill(acc.begin(), acc.end(), 0.f);
			for (int ch = 0; ch < C; ch++)
				for (int r = 0; r < R; r++)
					for (int s = 0; s < S; s++) {
						float wv = Wt[(((size_t)k * C + ch) * R + tap(c, r, R)) * S +
							      tap(c, s, S)];
						int lo, hi;
						cols(c, s, lo, hi);
						for (int oh = 0; oh < OH; oh++) {
							int ih = oh * c.cv.u - c.cv.ph + r * c.cv.dh;
							if (ih < 0 || ih >= H)
								continue;
							const float *xr = &X[(((size_t)n * C + ch) * H + ih) * Wd];
							float *ar = &acc[(size_t)oh * OW];
							int off = -c.cv.pw + s * c.cv.dw;
							if (c.cv.v == 1)
								cuemu::axpy(ar + lo, wv, xr + lo + off, hi - lo);
							else
								for (int ow = lo; ow < hi; ow++)
									ar[ow] += wv * xr[ow * c.cv.v + off];
						}
					}
			for (int oh = 0; oh < OH; oh++)
				for (int ow = 0; ow < OW; ow++) {
					size_t i = toff(c.y, n, k, oh, ow);
					put(y, c.y.t, i, blend(alpha, beta, acc[(size_t)oh * OW + ow], y, c.y.t, i));
				}
		}
}

void backward_data(const Conv &c, float alpha, const void *w, const void *dy, float beta, void *dx)
{
	std::vector<float> DY = widen_y(c, dy), Wt = widen_w(c, w);
	int H = c.x.h, Wd = c.x.w, OH = c.y.h, OW = c.y.w, R = c.f.r, S = c.f.s, C = c.x.c, K = c.f.k;
	std::vector<float> acc((size_t)H * Wd);
	for (int n = 0; n < c.x.n; n++)
		for (int ch = 0; ch < C; ch++) {
			std::fill(acc.begin(), acc.end(), 0.f);
			for (int k = 0; k < K; k++)
				for (int r = 0; r < R; r++)
					for (int s = 0; s < S; s++) {
						float wv = Wt[(((size_t)k * C + ch) * R + tap(c, r, R)) * S +
							      tap(c, s, S)];
						int lo, hi;
						cols(c, s, lo, hi);
						int off = -c.cv.pw + s * c.cv.dw;
						for (int oh = 0; oh < OH; oh++) {
							int ih = oh * c.cv.u - c.cv.ph + r * c.cv.dh;
							if (ih < 0 || ih >= H)
								continue;
							const float *g = &DY[(((size_t)n * K + k) * OH + oh) * OW];
							float *ar = &acc[(size_t)ih * Wd];
							if (c.cv.v == 1)
								cuemu::axpy(ar + lo + off, wv, g + lo, hi - lo);
							else
								for (int ow = lo; ow < hi; ow++)
									ar[ow * c.cv.v + off] += wv * g[ow];
						}
					}
			for (int h = 0; h < H; h++)
				for (int w_ = 0; w_ < Wd; w_++) {
					size_t i = toff(c.x, n, ch, h, w_);
					put(dx, c.x.t, i, blend(alpha, beta, acc[(size_t)h * Wd + w_], dx, c.x.t, i));
				}
		}
}

// Each filter tap's sum over (n, oh, ow) in that order, as a dot product
// would give it (the same bits), for all K filters at once: dy transposed
// to K innermost, each x value scales a row of K (axpy), which vectorizes
// where the dot products were K * C * R * S serial chains of adds.
void backward_filter(const Conv &c, float alpha, const void *x, const void *dy, float beta, void *dw)
{
	std::vector<float> X = widen_x(c, x), DY = widen_y(c, dy);
	int H = c.x.h, Wd = c.x.w, OH = c.y.h, OW = c.y.w, R = c.f.r, S = c.f.s, C = c.x.c, K = c.f.k;
	std::vector<float> DYt(DY.size()), acc((size_t)K);
	for (int n = 0; n < c.x.n; n++)
		for (int k = 0; k < K; k++)
			for (int p = 0; p < OH * OW; p++)
				DYt[((size_t)n * OH * OW + p) * K + k] = DY[((size_t)n * K + k) * OH * OW + p];
	for (int ch = 0; ch < C; ch++)
		for (int r = 0; r < R; r++)
			for (int s = 0; s < S; s++) {
				std::fill(acc.begin(), acc.end(), 0.f);
				int lo, hi;
				cols(c, s, lo, hi);
				int off = -c.cv.pw + s * c.cv.dw;
				for (int n = 0; n < c.x.n; n++)
					for (int oh = 0; oh < OH; oh++) {
						int ih = oh * c.cv.u - c.cv.ph + r * c.cv.dh;
						if (ih < 0 || ih >= H)
							continue;
						const float *g = &DYt[((size_t)n * OH + oh) * OW * K];
						const float *xr = &X[(((size_t)n * C + ch) * H + ih) * Wd];
						for (int ow = lo; ow < hi; ow++)
							cuemu::axpy(acc.data(), xr[ow * c.cv.v + off], g + (size_t)ow * K, K);
					}
				for (int k = 0; k < K; k++) {
					size_t i = foff(c.f, k, ch, tap(c, r, R), tap(c, s, S));
					put(dw, c.f.t, i, blend(alpha, beta, acc[(size_t)k], dw, c.f.t, i));
				}
			}
}

// cudnnFind: one algorithm (algo, the call's modelled time), or with
// CUEMU_DNN_ALGOS=N (1 to 8) N of them, algo and the next ones (modulo
// count, the number of the call's algorithms), each timed 10% above the
// one before: cuDNN's order, fastest first.  Every algorithm computes the
// same sums here; CUEMU_SLOW_KERNELS names one as its call and number
// ("cudnnConvolutionForward:1") to make it slow when it runs (conv_ms).
template <class Perf, class Algo>
cudnnStatus_t find(const char *call, const Conv &c, Algo algo, int count, int requested,
		   int *returned, Perf *perf)
{
	if (!returned || !perf || requested < 1)
		return refuse(call, "no room for a result");
	if (cuemu::capture_forbids(call) != cudaSuccess)
		return CUDNN_STATUS_BAD_PARAM;
	const char *env = getenv("CUEMU_DNN_ALGOS");
	int n = env && *env ? atoi(env) : 1;
	if (n < 1 || n > 8 || n > count)
		n = 1;
	if (n > requested)
		n = requested;
	for (int j = 0; j < n; j++) {
		memset(&perf[j], 0, sizeof(perf[j]));
		perf[j].algo = (Algo)(((int)algo + j) % count);
		perf[j].status = CUDNN_STATUS_SUCCESS;
		perf[j].time = (float)(cuemu::macs_ms(macs(c)) * (1 + 0.1 * j));
		perf[j].memory = workspace(c);
		perf[j].determinism = CUDNN_DETERMINISTIC;
		perf[j].mathType = c.cv.math;
	}
	*returned = n;
	return CUDNN_STATUS_SUCCESS;
}

// A convolution call's modelled time with algorithm algo: its
// multiply-adds', or 100 times that where CUEMU_SLOW_KERNELS names
// "call:algo".
double conv_ms(const char *call, int algo, const Conv &c)
{
	char name[96];
	snprintf(name, sizeof(name), "%s:%d", call, algo);
	double ms = cuemu::macs_ms(macs(c));
	return cuemu::named_in("CUEMU_SLOW_KERNELS", name) ? cuemu::slowed_ms(ms) : ms;
}

float scalar(const void *p)
{
	return *static_cast<const float *>(p);
}

} // namespace

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
	if (!handle)
		return CUDNN_STATUS_BAD_PARAM;
	*handle = new cudnnContext;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
	delete handle;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t s)
{
	if (!handle)
		return CUDNN_STATUS_BAD_PARAM;
	handle->s = s;
	return CUDNN_STATUS_SUCCESS;
}

size_t cudnnGetVersion(void)
{
	return CUDNN_VERSION;
}

const char *cudnnGetErrorString(cudnnStatus_t status)
{
	switch (status) {
	case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
	case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM (cuemu: see its message above)";
	case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
	default: return "CUDNN_STATUS_INTERNAL_ERROR";
	}
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
	if (!d)
		return CUDNN_STATUS_BAD_PARAM;
	*d = new cudnnTensorStruct;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
	delete d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
					 cudnnDataType_t dataType, int n, int c, int h, int w)
{
	if (!d || n < 1 || c < 1 || h < 1 || w < 1 ||
	    (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
		return CUDNN_STATUS_BAD_PARAM;
	if (!esize(dataType))
		return CUDNN_STATUS_NOT_SUPPORTED;
	d->set = true;
	d->t = dataType;
	d->nhwc = format == CUDNN_TENSOR_NHWC;
	d->n = n, d->c = c, d->h = h, d->w = w;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
	if (!d)
		return CUDNN_STATUS_BAD_PARAM;
	*d = new cudnnFilterStruct;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
	delete d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
					 cudnnTensorFormat_t format, int k, int c, int h, int w)
{
	if (!d || k < 1 || c < 1 || h < 1 || w < 1 ||
	    (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
		return CUDNN_STATUS_BAD_PARAM;
	if (!esize(dataType))
		return CUDNN_STATUS_NOT_SUPPORTED;
	d->set = true;
	d->t = dataType;
	d->nhwc = format == CUDNN_TENSOR_NHWC;
	d->k = k, d->c = c, d->r = h, d->s = w;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
	if (!d)
		return CUDNN_STATUS_BAD_PARAM;
	*d = new cudnnConvolutionStruct;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
	delete d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
					      int u, int v, int dilation_h, int dilation_w,
					      cudnnConvolutionMode_t mode, cudnnDataType_t computeType)
{
	if (!d || pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1 ||
	    (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
		return CUDNN_STATUS_BAD_PARAM;
	if (computeType != CUDNN_DATA_FLOAT)
		return CUDNN_STATUS_NOT_SUPPORTED;
	d->set = true;
	d->ph = pad_h, d->pw = pad_w, d->u = u, d->v = v, d->dh = dilation_h, d->dw = dilation_w;
	d->flip = mode == CUDNN_CONVOLUTION;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t mathType)
{
	if (!d)
		return CUDNN_STATUS_BAD_PARAM;
	d->math = mathType;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle,
						   const cudnnTensorDescriptor_t xDesc,
						   const cudnnFilterDescriptor_t wDesc,
						   const cudnnConvolutionDescriptor_t convDesc,
						   const cudnnTensorDescriptor_t yDesc,
						   const int requestedAlgoCount, int *returnedAlgoCount,
						   cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
	const char *call = "cudnnFindConvolutionForwardAlgorithm";
	Conv c;
	cudnnStatus_t st = shapes(call, xDesc, wDesc, convDesc, yDesc, c);
	return st ? st : find(call, c, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
			      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, requestedAlgoCount,
			      returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t handle,
							const cudnnFilterDescriptor_t wDesc,
							const cudnnTensorDescriptor_t dyDesc,
							const cudnnConvolutionDescriptor_t convDesc,
							const cudnnTensorDescriptor_t dxDesc,
							const int requestedAlgoCount, int *returnedAlgoCount,
							cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
	const char *call = "cudnnFindConvolutionBackwardDataAlgorithm";
	Conv c;
	cudnnStatus_t st = shapes(call, dxDesc, wDesc, convDesc, dyDesc, c);
	return st ? st : find(call, c, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
			      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, requestedAlgoCount,
			      returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t handle,
							  const cudnnTensorDescriptor_t xDesc,
							  const cudnnTensorDescriptor_t dyDesc,
							  const cudnnConvolutionDescriptor_t convDesc,
							  const cudnnFilterDescriptor_t dwDesc,
							  const int requestedAlgoCount,
							  int *returnedAlgoCount,
							  cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
	const char *call = "cudnnFindConvolutionBackwardFilterAlgorithm";
	Conv c;
	cudnnStatus_t st = shapes(call, xDesc, dwDesc, convDesc, dyDesc, c);
	return st ? st : find(call, c, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
			      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, requestedAlgoCount,
			      returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
				      const cudnnTensorDescriptor_t xDesc, const void *x,
				      const cudnnFilterDescriptor_t wDesc, const void *w,
				      const cudnnConvolutionDescriptor_t convDesc,
				      cudnnConvolutionFwdAlgo_t algo, void *workSpace,
				      size_t workSpaceSizeInBytes, const void *beta,
				      const cudnnTensorDescriptor_t yDesc, void *y)
{
	const char *call = "cudnnConvolutionForward";
	Conv c;
	cudnnStatus_t st = shapes(call, xDesc, wDesc, convDesc, yDesc, c);
	if (!st)
		st = buffers(call, c, x, w, y, workSpace, workSpaceSizeInBytes);
	if (st || !handle || !alpha || !beta)
		return st ? st : CUDNN_STATUS_BAD_PARAM;
	float a = scalar(alpha), b = scalar(beta);
	cuemu::enqueue(handle->s, call, [=]() { forward(c, a, x, w, b, y); },
		       conv_ms(call, algo, c));
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
					   const cudnnFilterDescriptor_t wDesc, const void *w,
					   const cudnnTensorDescriptor_t dyDesc, const void *dy,
					   const cudnnConvolutionDescriptor_t convDesc,
					   cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
					   size_t workSpaceSizeInBytes, const void *beta,
					   const cudnnTensorDescriptor_t dxDesc, void *dx)
{
	const char *call = "cudnnConvolutionBackwardData";
	Conv c;
	cudnnStatus_t st = shapes(call, dxDesc, wDesc, convDesc, dyDesc, c);
	if (!st)
		st = buffers(call, c, dx, w, dy, workSpace, workSpaceSizeInBytes);
	if (st || !handle || !alpha || !beta)
		return st ? st : CUDNN_STATUS_BAD_PARAM;
	float a = scalar(alpha), b = scalar(beta);
	cuemu::enqueue(handle->s, call, [=]() { backward_data(c, a, w, dy, b, dx); },
		       conv_ms(call, algo, c));
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
					     const cudnnTensorDescriptor_t xDesc, const void *x,
					     const cudnnTensorDescriptor_t dyDesc, const void *dy,
					     const cudnnConvolutionDescriptor_t convDesc,
					     cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
					     size_t workSpaceSizeInBytes, const void *beta,
					     const cudnnFilterDescriptor_t dwDesc, void *dw)
{
	const char *call = "cudnnConvolutionBackwardFilter";
	Conv c;
	cudnnStatus_t st = shapes(call, xDesc, dwDesc, convDesc, dyDesc, c);
	if (!st)
		st = buffers(call, c, x, dw, dy, workSpace, workSpaceSizeInBytes);
	if (st || !handle || !alpha || !beta)
		return st ? st : CUDNN_STATUS_BAD_PARAM;
	float a = scalar(alpha), b = scalar(beta);
	cuemu::enqueue(handle->s, call, [=]() { backward_filter(c, a, x, dy, b, dw); },
		       conv_ms(call, algo, c));
	return CUDNN_STATUS_SUCCESS;
}

} // extern "C"
