/* The Net on the GPU (see net.h).  Layouts are the CPU path's: NCHW
 * activations, OIHW conv weights, [out][in] linear weights, row-major.
 * cuBLAS is column-major, so a row-major Y = X W^T is computed as the
 * column-major Y^T = W^T' X^T with W read transposed (see linear_*).
 *
 * --precision bf16 is mixed precision as PyTorch's autocast does it: the
 * convolutions and GEMMs read bf16 operands (the weights cast from the
 * fp32 master copy at each forward) and accumulate in fp32; the
 * convolutions' activations and their gradients are stored in bf16 (cuDNN
 * writes its output in its input's type), the linear layers' outputs,
 * the loss, the bias gradients, the all-reduced gradients and the
 * optimizer stay fp32.  Needs sm_80 or newer (bf16 tensor cores).
 *
 * --conv-layout nhwc keeps the convolutions' activations and their
 * gradients channels-last (NHWC), the layout cuDNN's tensor-core kernels
 * read, where NCHW makes cuDNN convert (nchwToNhwcKernel) or pick its FMA
 * kernels: the weights go to OHWI (KRSC) before each forward and their
 * gradients back to OIHW, so parameters, checkpoints and the linear layers
 * (the pool writes fc1's input in NCHW order) never see the layout.  auto
 * takes, per batch size, the layout whose convolutions cudnnFind times
 * faster.
 *
 * cuDNN 9 marks its legacy convolution API (cudnnConvolutionForward and
 * friends) deprecated in favour of the graph API; it is still shipped and
 * supported in every 9.x, and it is what this file uses: one fixed 3x3
 * convolution per layer needs none of the graph API's fusion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

#include "cuda/check.h"
#include "cuda/kernels.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static const float one = 1.f, zero = 0.f;

static int alloc(void *pp, size_t bytes)
{
	cudaCheck(cudaMalloc((void **)pp, bytes ? bytes : 16));
	return 0;
}

static int bf(const struct cnn_gnet *g)
{
	return g->precision == CNN_PREC_BF16;
}

/* The activations' storage type in cuDNN's terms. */
static cudnnDataType_t dtype(const struct cnn_gnet *g)
{
	return bf(g) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static int set_math(struct cnn_gnet *g)
{
	/* TF32 on tensor cores where allowed; fp32: FMA kernels only; bf16:
	 * tensor cores (GemmEx takes them for bf16 operands by default). */
	cublasMath_t bm = g->precision == CNN_PREC_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH :
			  g->precision == CNN_PREC_FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
	cudnnMathType_t cm = g->precision == CNN_PREC_TF32 ? CUDNN_DEFAULT_MATH :
			     g->precision == CNN_PREC_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
	cublasCheck(cublasSetMathMode(g->blas, bm));
	if (g->blasw_made != g->blas)
		cublasCheck(cublasSetMathMode(g->blasw_made, bm));
	for (int l = 0; l < 2; l++)
		cudnnCheck(cudnnSetConvolutionMathType(g->cv[l], cm));
	return 0;
}

/* A cuBLAS handle on stream s with a workspace of its own: cuBLAS must
 * not allocate inside a captured graph.  Its size is what cuBLAS's
 * documentation of cublasSetWorkspace recommends: 32 MiB on Hopper and
 * newer, 4 MiB before. */
static int blas_open(struct cnn_gnet *g, cublasHandle_t *h, void **ws, cudaStream_t s)
{
	int dev = 0, major = 0;
	cudaCheck(cudaGetDevice(&dev));
	cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	size_t bws = (size_t)(major >= 9 ? 32 : 4) << 20;
	cublasCheck(cublasCreate(h));
	cublasCheck(cublasSetStream(*h, s));
	if (alloc(ws, bws) < 0)
		return -1;
	cublasCheck(cublasSetWorkspace(*h, *ws, bws));
	cublasCheck(cublasSetPointerMode(*h, CUBLAS_POINTER_MODE_HOST));
	(void)g;
	return 0;
}

/* Whether conv2's tensor-core kernels can run: TF32 or bf16, on a GPU that
 * has them (cnn_gnet_init sets tc). */
static int conv2_possible(const struct cnn_gnet *g)
{
	return g->precision != CNN_PREC_FP32 && g->tc == 1;
}

int cnn_gnet_init(struct cnn_gnet *g, const struct cnn_model *m, int max_batch,
		  enum cnn_precision precision, enum cnn_layout layout, int streams,
		  enum cnn_conv_impl conv1, enum cnn_conv_impl conv2, cudaStream_t s)
{
	memset(g, 0, sizeof(*g));
	g->m = *m;
	g->m.params = g->m.grads = NULL;
	g->max_batch = max_batch;
	g->precision = precision;
	g->layout = layout;
	g->conv1 = conv1;
	g->conv2 = conv2;
	g->s = s;
	const struct cnn_model *M = &g->m;
	size_t N = (size_t)max_batch;

	if (conv1 == CNN_CONV_DIRECT && m->in.c != 1) {
		snprintf(g->err, sizeof(g->err), "conv1 direct: the direct kernels take one input channel, "
			 "this data set's images have %d (use auto or cudnn)", m->in.c);
		return -1;
	}
	g->tc = cnn_cuda_tensor_cores();
	if (g->tc < 0) {
		snprintf(g->err, sizeof(g->err), "%s", cnn_cuda_last_error());
		return -1;
	}
	if (conv2 == CNN_CONV_DIRECT && !g->tc) {
		int dev = 0, major = 0, minor = 0;
		cudaGetDevice(&dev);
		cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
		cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
		snprintf(g->err, sizeof(g->err), "conv2 direct: the tensor-core kernels need TF32 and bf16 "
			 "(compute capability 8.0 or newer), and GPU %d is sm_%d%d (use --conv2 auto or "
			 "cudnn)", dev, major, minor);
		return -1;
	}
	if (conv2 == CNN_CONV_DIRECT && precision == CNN_PREC_FP32) {
		snprintf(g->err, sizeof(g->err), "conv2 direct: the tensor-core kernels compute in TF32 "
			 "or bf16, and --precision fp32 takes FMA kernels only (use tf32, bf16, or "
			 "--conv2 auto or cudnn)");
		return -1;
	}
	if (streams != 1 && streams != 2) {
		snprintf(g->err, sizeof(g->err), "%d backward streams: expected 1 or 2", streams);
		return -1;
	}
	g->streams = g->streams_made = streams;
	cudnnCheck(cudnnCreate(&g->dnn));
	cudnnCheck(cudnnSetStream(g->dnn, s));
	if (blas_open(g, &g->blas, &g->blas_ws, s) < 0)
		return -1;
	if (streams == 2) {
		cudaCheck(cudaStreamCreateWithFlags(&g->sw_made, cudaStreamNonBlocking));
		cudnnCheck(cudnnCreate(&g->dnnw_made));
		cudnnCheck(cudnnSetStream(g->dnnw_made, g->sw_made));
		if (blas_open(g, &g->blasw_made, &g->blasw_ws, g->sw_made) < 0)
			return -1;
		for (int i = 0; i < 4; i++)
			cudaCheck(cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
	} else {
		g->sw_made = s;
		g->dnnw_made = g->dnn;
		g->blasw_made = g->blas;
	}
	if (cnn_gnet_use_streams(g, streams) < 0)
		return -1;

	cudnnCheck(cudnnCreateTensorDescriptor(&g->tx));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->t1));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->t2));
	int cin[2] = { M->in.c, M->c1 }, cout[2] = { M->c1, M->c2 };
	for (int l = 0; l < 2; l++) {
		cudnnCheck(cudnnCreateFilterDescriptor(&g->fw[l]));
		cudnnCheck(cudnnSetFilter4dDescriptor(g->fw[l], dtype(g), CUDNN_TENSOR_NCHW,
						      cout[l], cin[l], 3, 3));
		cudnnCheck(cudnnCreateFilterDescriptor(&g->fwh[l]));
		cudnnCheck(cudnnSetFilter4dDescriptor(g->fwh[l], dtype(g), CUDNN_TENSOR_NHWC,
						      cout[l], cin[l], 3, 3));
		cudnnCheck(cudnnCreateConvolutionDescriptor(&g->cv[l]));
		/* PyTorch's conv is a cross-correlation, as the CPU path's;
		 * fp32 accumulation in every precision */
		cudnnCheck(cudnnSetConvolution2dDescriptor(g->cv[l], 0, 0, 1, 1, 1, 1,
							   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	}
	if (set_math(g) < 0)
		return -1;

	size_t n1 = N * M->c1 * M->h1 * M->w1, n2 = N * M->c2 * M->h2 * M->w2;
	size_t np = N * M->flat, nh = N * M->hidden, nk = N * M->in.classes;
	size_t nx = N * M->in.c * M->in.h * M->in.w, es = g->esize = bf(g) ? 2 : 4;
	if (alloc(&g->params, M->nparams * 4) < 0 || alloc(&g->grads, M->nparams * 4) < 0 ||
	    alloc(&g->x, nx * 4) < 0 || alloc(&g->a1, n1 * es) < 0 ||
	    alloc(&g->a2, n2 * es) < 0 || alloc(&g->p, np * 4) < 0 || alloc(&g->h, nh * 4) < 0 ||
	    alloc(&g->logits, nk * 4) < 0 || alloc(&g->logp, nk * 4) < 0 ||
	    alloc(&g->dlogits, nk * 4) < 0 || alloc(&g->dh, nh * 4) < 0 || alloc(&g->dp, np * 4) < 0 ||
	    alloc(&g->da2, n2 * es) < 0 || alloc(&g->da1, n1 * es) < 0 || alloc(&g->ones, N * 4) < 0 ||
	    alloc(&g->arg, np) < 0 || alloc(&g->y, N) < 0 || alloc(&g->stats, 2 * 4) < 0 ||
	    alloc(&g->keys_own, 2 * 8) < 0)
		return -1;
	/* conv1's in either layout; conv2's from the pool's gradient (bias_grad) */
	size_t bs[3] = { cnn_cuda_bias_grad_scratch(max_batch, M->c1, M->h1 * M->w1),
			 cnn_cuda_bias_grad_nhwc_scratch(max_batch, M->c1, M->h1 * M->w1),
			 cnn_cuda_bias_grad_scratch(max_batch, M->c2, M->flat / M->c2) }, bsmax = 0;
	for (int i = 0; i < 3; i++)
		bsmax = bs[i] > bsmax ? bs[i] : bsmax;
	/* two streams may run both layers' bias gradients at once */
	g->bgs_off = bsmax;
	if (alloc(&g->bgs, 2 * bsmax * 4) < 0)
		return -1;
	/* conv1's weight gradient by its own kernel (its counters at 0, where
	 * each call leaves them), or on conv2's backward-data
	 * (conv2_dgrad_conv1): a scratch each */
	size_t c1w = M->in.c == 1 && conv1 != CNN_CONV_CUDNN ?
		     cnn_cuda_conv1_wgrad_scratch(max_batch, M->in.h, M->in.w, M->c1) : 0;
	if (c1w) {
		if (alloc(&g->c1w, c1w * 4) < 0)
			return -1;
		cudaCheck(cudaMemset(g->c1w, 0, c1w * 4));
	}
	if (c1w && conv2_possible(g) && conv2 != CNN_CONV_CUDNN &&
	    alloc(&g->c1s, cnn_cuda_conv3_dgrad_conv1_scratch(max_batch, M->c1, M->h1, M->w1) * 4) < 0)
		return -1;
	/* fc2's fused head: its blocks' partial sums and their counter, which
	 * starts at 0 and which each launch leaves at 0 */
	g->fhs_n = cnn_cuda_fc2_head_scratch(max_batch, M->hidden, M->in.classes);
	if (g->fhs_n) {
		if (alloc(&g->fhs, g->fhs_n * 4) < 0)
			return -1;
		cudaCheck(cudaMemset(g->fhs, 0, g->fhs_n * 4));
	}
	if (conv2_possible(g) && conv2 != CNN_CONV_CUDNN &&
	    (alloc(&g->c2s, cnn_cuda_conv3_wgrad_scratch(max_batch, M->c1, M->h1, M->w1, M->c2) * 4) < 0 ||
	     alloc(&g->c2w, 2 * M->t[P_W2].n * es) < 0))
		return -1;
	size_t nw = M->t[P_W1].n + M->t[P_W2].n;
	if (layout != CNN_LAYOUT_NCHW &&
	    (alloc(&g->wt, nw * es) < 0 || alloc(&g->dwt, nw * es) < 0 ||
	     (M->in.c > 1 && alloc(&g->xt, nx * es) < 0)))
		return -1;
	if (bf(g) && (alloc(&g->wb, M->nparams * 2) < 0 || alloc(&g->xb, nx * 2) < 0 ||
		      alloc(&g->pb, np * 2) < 0 || alloc(&g->hb, nh * 2) < 0 ||
		      alloc(&g->dlb, nk * 2) < 0 || alloc(&g->dhb, nh * 2) < 0 ||
		      alloc(&g->dwb, (M->t[P_W1].n + M->t[P_W2].n) * 2) < 0))
		return -1;
	float *h = malloc(N * 4);
	if (!h) {
		snprintf(g->err, sizeof(g->err), "out of host memory");
		return -1;
	}
	for (size_t i = 0; i < N; i++)
		h[i] = 1.f;
	cudaError_t e = cudaMemcpy(g->ones, h, N * 4, cudaMemcpyHostToDevice);
	free(h);
	cudaCheck(e);
	cudaCheck(cudaMemset(g->grads, 0, M->nparams * 4));
	cudaCheck(cudaMemset(g->keys_own, 0, 2 * 8));
	g->keys = g->keys_own;
	/* the legacy stream's work above is not ordered with s's */
	cudaCheck(cudaDeviceSynchronize());
	return 0;
}

void cnn_gnet_free(struct cnn_gnet *g)
{
	void *bufs[] = { g->params, g->grads, g->x, g->a1, g->a2, g->p, g->h, g->logits, g->logp,
			 g->dlogits, g->dh, g->dp, g->da2, g->da1, g->ones, g->arg, g->y, g->stats,
			 g->keys_own, g->ws, g->blas_ws, g->wb, g->xb, g->pb, g->hb, g->dlb, g->dhb,
			 g->dwb, g->bgs, g->wt, g->dwt, g->xt, g->wsw, g->blasw_ws, g->c1s, g->c1w,
			 g->c2s, g->c2w, g->fhs };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			cudaFree(bufs[i]);
	for (int l = 0; l < 2; l++) {
		if (g->fw[l])
			cudnnDestroyFilterDescriptor(g->fw[l]);
		if (g->fwh[l])
			cudnnDestroyFilterDescriptor(g->fwh[l]);
		if (g->cv[l])
			cudnnDestroyConvolutionDescriptor(g->cv[l]);
	}
	cudnnTensorDescriptor_t t[] = { g->tx, g->t1, g->t2 };
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i])
			cudnnDestroyTensorDescriptor(t[i]);
	if (g->streams_made == 2) {
		if (g->blasw_made)
			cublasDestroy(g->blasw_made);
		if (g->dnnw_made)
			cudnnDestroy(g->dnnw_made);
		for (int i = 0; i < 4; i++)
			if (g->ev[i])
				cudaEventDestroy(g->ev[i]);
		if (g->sw_made)
			cudaStreamDestroy(g->sw_made);
	}
	if (g->blas)
		cublasDestroy(g->blas);
	if (g->dnn)
		cudnnDestroy(g->dnn);
	memset(g, 0, sizeof(*g));
}

/* The activations' descriptors for a batch of n in either layout. */
static int set_batch(struct cnn_gnet *g, int n, int nhwc)
{
	const struct cnn_model *M = &g->m;
	cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	cudnnCheck(cudnnSetTensor4dDescriptor(g->tx, f, dtype(g), n, M->in.c, M->in.h, M->in.w));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t1, f, dtype(g), n, M->c1, M->h1, M->w1));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t2, f, dtype(g), n, M->c2, M->h2, M->w2));
	return 0;
}

/* Convolution l's filter descriptor in a layout. */
static cudnnFilterDescriptor_t filt(const struct cnn_gnet *g, int l, int nhwc)
{
	return nhwc ? g->fwh[l] : g->fw[l];
}

/* fp32 takes only FMA kernels; TF32 and bf16 take the fastest of any kind. */
static int math_ok(const struct cnn_gnet *g, cudnnMathType_t t)
{
	return g->precision != CNN_PREC_FP32 || t == CUDNN_FMA_MATH || t == CUDNN_DEFAULT_MATH;
}

static const struct cnn_gnet_algos *find_algos(struct cnn_gnet *g, int n)
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n)
			return &g->algos[i];
	return NULL;
}

#define PICK(perf, cnt, out, math, what)                                                     \
	do {                                                                                 \
		int k_ = 0;                                                                  \
		while (k_ < (cnt) && ((perf)[k_].status != CUDNN_STATUS_SUCCESS ||           \
				      !math_ok(g, (perf)[k_].mathType) ||                    \
				      (g->ws_frozen && (perf)[k_].memory > g->ws_bytes)))    \
			k_++;                                                                \
		if (k_ == (cnt)) {                                                           \
			snprintf(g->err, sizeof(g->err), "cuDNN has no %s algorithm for a "  \
				 "batch of %d in %s (%s)", what, n, nhwc ? "NHWC" : "NCHW",  \
				 cnn_precision_name(g->precision));                          \
			return -1;                                                           \
		}                                                                            \
		(out) = (perf)[k_].algo;                                                     \
		(math) = (perf)[k_].mathType;                                                \
		ms += (perf)[k_].time;                                                       \
		if ((perf)[k_].memory > need)                                                \
			need = (perf)[k_].memory;                                            \
	} while (0)

/* conv2's call c: the results PICK would take (its pick first) that
 * cudnnFind timed within CNN_CUDNN_SLACK of that pick, each one's
 * workspace within room; the workspace the call needs grows to theirs. */
#define CANDS(perf, cnt, c, room)                                                            \
	do {                                                                                 \
		float t0_ = -1.f;                                                            \
		a->ncand[c] = 0;                                                             \
		for (int k_ = 0; k_ < (cnt) && a->ncand[c] < CNN_CUDNN_CANDS; k_++) {       \
			if ((perf)[k_].status != CUDNN_STATUS_SUCCESS ||                     \
			    !math_ok(g, (perf)[k_].mathType) || (perf)[k_].memory > (room))  \
				continue;                                                    \
			if (t0_ < 0.f)                                                       \
				t0_ = (perf)[k_].time;                                       \
			else if (!((perf)[k_].time <= t0_ * CNN_CUDNN_SLACK))                \
				break;                                                       \
			a->cand[c][a->ncand[c]] = (int)(perf)[k_].algo;                      \
			a->cand_math[c][a->ncand[c]] = (perf)[k_].mathType;                  \
			a->cand_ms[c][a->ncand[c]++] = 0.f;                                  \
			if ((perf)[k_].memory > need)                                        \
				need = (perf)[k_].memory;                                    \
		}                                                                            \
	} while (0)

/* The workspace conv2's other candidates may take: what is allocated once
 * a graph holds it, else 64 MiB or what the picks already need. */
static size_t cand_room(const struct cnn_gnet *g, size_t need)
{
	size_t cap = (size_t)64 << 20;
	return g->ws_frozen ? g->ws_bytes : need > cap ? need : cap;
}

/* cudnnFind's own failure (NOT_SUPPORTED for a layout, say) goes to
 * g->err without printing: under --conv-layout auto the other layout may
 * still do, and a forced layout's caller reports g->err. */
#define FIND(call, what)                                                                     \
	do {                                                                                 \
		cudnnStatus_t s_ = (call);                                                   \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                            \
			snprintf(g->err, sizeof(g->err), "cudnnFind of the %s convolution for a " \
				 "batch of %d in %s (%s): %s", what, n, nhwc ? "NHWC" : "NCHW", \
				 cnn_precision_name(g->precision), cudnnGetErrorString(s_));  \
			return -1;                                                           \
		}                                                                            \
	} while (0)

/* The five convolution calls' algorithms for batch n in one layout into
 * a, their workspace into *need and cudnnFind's total time into *total. */
static int find_layout(struct cnn_gnet *g, int n, int nhwc, struct cnn_gnet_algos *a,
		       size_t *need_out, float *total)
{
	size_t need = 0;
	float ms = 0.f;
	int cnt;
	cudnnConvolutionFwdAlgoPerf_t fp[16];
	cudnnConvolutionBwdDataAlgoPerf_t dp[16];
	cudnnConvolutionBwdFilterAlgoPerf_t wp[16];
	cudnnTensorDescriptor_t in[2] = { g->tx, g->t1 }, out[2] = { g->t1, g->t2 };

	if (set_batch(g, n, nhwc) < 0)
		return -1;
	for (int l = 0; l < 2; l++) {
		FIND(cudnnFindConvolutionForwardAlgorithm(g->dnn, in[l], filt(g, l, nhwc), g->cv[l],
							  out[l], 16, &cnt, fp),
		     "forward");
		PICK(fp, cnt, a->fwd[l], a->fwd_math[l], "forward");
		if (l)
			CANDS(fp, cnt, 0, cand_room(g, need));
		FIND(cudnnFindConvolutionBackwardFilterAlgorithm(g->dnn, in[l], out[l], g->cv[l],
								 filt(g, l, nhwc), 16, &cnt, wp),
		     "backward-filter");
		PICK(wp, cnt, a->bwd_filter[l], a->bwd_filter_math[l], "backward-filter");
		if (l)
			CANDS(wp, cnt, 2, cand_room(g, need));
	}
	FIND(cudnnFindConvolutionBackwardDataAlgorithm(g->dnn, filt(g, 1, nhwc), g->t2, g->cv[1],
						       g->t1, 16, &cnt, dp),
	     "backward-data");
	PICK(dp, cnt, a->bwd_data, a->bwd_data_math, "backward-data");
	CANDS(dp, cnt, 1, cand_room(g, need));
	*need_out = need;
	*total = ms;
	return 0;
}

static int choose_convs(struct cnn_gnet *g, struct cnn_gnet_algos *a);
static int choose_fc2(struct cnn_gnet *g, struct cnn_gnet_algos *a);
static int retime_cudnn(struct cnn_gnet *g, struct cnn_gnet_algos *a);

int cnn_gnet_prepare(struct cnn_gnet *g, int n)
{
	if (find_algos(g, n))
		return 0;
	if (n < 1 || n > g->max_batch) {
		snprintf(g->err, sizeof(g->err), "batch of %d images: expected 1 to %d", n, g->max_batch);
		return -1;
	}
	struct cnn_gnet_algos a = { .n = n }, b = { .n = n, .nhwc = 1 };
	size_t need = 0, needb = 0;
	char why[sizeof(a.why)] = "";
	int oka = g->layout != CNN_LAYOUT_NHWC && find_layout(g, n, 0, &a, &need, &a.ms[0]) == 0;
	if (!oka && g->layout == CNN_LAYOUT_AUTO)
		snprintf(why, sizeof(why), "%s", g->err);
	int okb = g->layout != CNN_LAYOUT_NCHW && find_layout(g, n, 1, &b, &needb, &b.ms[1]) == 0;
	/* auto: a layout cuDNN has no algorithm for loses to the other (its
	 * time -1, its reason kept for the log); neither is the error */
	if (!oka && !okb) {
		if (why[0]) {
			char last[sizeof(g->err)];
			snprintf(last, sizeof(last), "%s", g->err);
			snprintf(g->err, sizeof(g->err), "%s; %s", why, last);
		}
		return -1;
	}
	if (!okb && g->layout == CNN_LAYOUT_AUTO)
		snprintf(why, sizeof(why), "%s", g->err);
	g->err[0] = '\0';
	float ms[2] = { oka ? a.ms[0] : -1.f, okb ? b.ms[1] : -1.f };
	/* the batch whose step replays as a graph keeps both layouts' (where
	 * both have algorithms): graph.c times the step's replay in each */
	int both = g->layout == CNN_LAYOUT_AUTO && oka && okb && n == g->graph_batch;
	int pick_b = okb && (!oka || ms[1] < ms[0]);
	struct cnn_gnet_algos other = pick_b ? a : b;
	size_t need_a = pick_b ? needb : need, need_o = pick_b ? need : needb;
	if (pick_b)
		a = b;
	need = both && need_o > need_a ? need_o : need_a;
	a.ms[0] = other.ms[0] = ms[0];
	a.ms[1] = other.ms[1] = ms[1];
	snprintf(a.why, sizeof(a.why), "%s", why);
	if (need > g->ws_bytes && !g->ws_frozen) {
		/* with two streams, sw's backward-filter calls have their own */
		void **ws[2] = { &g->ws, &g->wsw };
		for (int i = 0; i < g->streams_made && i < 2; i++) {
			if (*ws[i])
				cudaCheck(cudaFree(*ws[i]));
			*ws[i] = NULL;
			if (alloc(ws[i], need) < 0)
				return -1;
		}
		g->ws_bytes = need;
	}
	if (retime_cudnn(g, &a) < 0 || (both && retime_cudnn(g, &other) < 0) ||
	    choose_convs(g, &a) < 0 || choose_fc2(g, &a) < 0 || (both && choose_convs(g, &other) < 0))
		return -1;
	/* fc2's head does not depend on the layout */
	other.fc2 = a.fc2;
	memcpy(other.ms_fc2, a.ms_fc2, sizeof(a.ms_fc2));
	if (!both)
		memset(&other, 0, sizeof(other));
	if (g->nalgos == 8) {
		memmove(g->algos, g->algos + 1, 7 * sizeof(a));
		memmove(g->others, g->others + 1, 7 * sizeof(a));
	}
	int i = g->nalgos < 8 ? g->nalgos++ : 7;
	g->algos[i] = a;
	g->others[i] = other;
	return 0;
}

int cnn_gnet_layouts(const struct cnn_gnet *g, int n, int nhwc[2])
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n) {
			nhwc[0] = g->algos[i].nhwc;
			nhwc[1] = g->others[i].nhwc;
			return g->others[i].n == n ? 2 : 1;
		}
	return 0;
}

int cnn_gnet_set_layout(struct cnn_gnet *g, int n, int nhwc)
{
	for (int i = 0; i < g->nalgos; i++) {
		if (g->algos[i].n != n)
			continue;
		if (g->algos[i].nhwc == !!nhwc)
			return 0;
		if (g->others[i].n != n) {
			snprintf(g->err, sizeof(g->err), "batch of %d: no algorithms prepared in %s "
				 "(only the batch whose step replays as a graph has both layouts', "
				 "under --conv-layout auto)", n, nhwc ? "NHWC" : "NCHW");
			return -1;
		}
		struct cnn_gnet_algos t = g->algos[i];
		g->algos[i] = g->others[i];
		g->others[i] = t;
		return 0;
	}
	snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	return -1;
}

/* Column-major C (m x n, fp32) = alpha op(A) op(B): Sgemm, or for bf16
 * GemmEx on bf16 A and B with fp32 accumulation and output. */
static int gemm(struct cnn_gnet *g, cublasHandle_t h, cublasOperation_t ta,
		cublasOperation_t tb, int m, int n, int k, float alpha, const void *a, int lda,
		const void *b, int ldb, float *c, int ldc)
{
	if (bf(g))
		cublasCheck(cublasGemmEx(h, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b,
					 CUDA_R_16BF, ldb, &zero, c, CUDA_R_32F, ldc,
					 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	else
		cublasCheck(cublasSgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &zero, c, ldc));
	return 0;
}

/* Y (n x out, fp32) = X (n x in) W^T, row-major; X and W in the GEMMs'
 * operand type (see gemm). */
static int linear_fwd(struct cnn_gnet *g, const void *x, int n, int in, const void *w, int out,
		      float *y)
{
	return gemm(g, g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, 1.f, w, in, x, in, y, out);
}

/* dW = dY^T X and (db not NULL) db = colsum(dY) on sw (the weight-gradient
 * stream); dy is dY in the GEMMs' operand type, dyf the same in fp32 for
 * the bias. */
static int linear_bwd_w(struct cnn_gnet *g, const void *x, int n, int in, int out, const void *dy,
			const float *dyf, float *dw, float *db)
{
	if (gemm(g, g->blasw, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, 1.f, x, in, dy, out, dw, in) < 0)
		return -1;
	if (db)
		cublasCheck(cublasSgemv(g->blasw, CUBLAS_OP_N, out, n, &one, dyf, out, g->ones, 1,
					&zero, db, 1));
	return 0;
}

/* dX = scale * dY W on s. */
static int linear_bwd_x(struct cnn_gnet *g, int n, int in, const void *w, int out, const void *dy,
			float *dx, float scale)
{
	return gemm(g, g->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, scale, w, in, dy, out, dx, in);
}

int cnn_gnet_use_streams(struct cnn_gnet *g, int streams)
{
	if (streams != 1 && (streams != 2 || g->streams_made != 2)) {
		snprintf(g->err, sizeof(g->err), "%d backward streams: expected 1%s", streams,
			 g->streams_made == 2 ? " or 2" : " (the second stream was not made)");
		return -1;
	}
	g->streams = streams;
	g->sw = streams == 2 ? g->sw_made : g->s;
	g->dnnw = streams == 2 ? g->dnnw_made : g->dnn;
	g->blasw = streams == 2 ? g->blasw_made : g->blas;
	return 0;
}

/* Two streams: sw waits for what s has enqueued so far (event k). */
static int fork_w(struct cnn_gnet *g, int k)
{
	if (g->streams == 1)
		return 0;
	cudaCheck(cudaEventRecord(g->ev[k], g->s));
	cudaCheck(cudaStreamWaitEvent(g->sw, g->ev[k], 0));
	return 0;
}

/* Two streams: s waits for what sw has enqueued so far. */
static int join_w(struct cnn_gnet *g)
{
	if (g->streams == 1)
		return 0;
	cudaCheck(cudaEventRecord(g->ev[3], g->sw));
	cudaCheck(cudaStreamWaitEvent(g->s, g->ev[3], 0));
	return 0;
}

/* Parameter tensor t as the convolutions and GEMMs read it. */
static const void *W(const struct cnn_gnet *g, int t)
{
	size_t off = g->m.t[t].off;
	return bf(g) ? (const void *)(g->wb + off) : (const void *)(g->params + off);
}

/* The activation kernels in the convolutions' storage type and layout. */
static int bias_relu(struct cnn_gnet *g, int nhwc, void *y, const float *b, int n, int oc, int pix)
{
	if (nhwc)
		return bf(g) ? cnn_cuda_bias_relu_nhwc_bf16(y, b, n, oc, pix, g->s) :
			       cnn_cuda_bias_relu_nhwc(y, b, n, oc, pix, g->s);
	return bf(g) ? cnn_cuda_bias_relu_bf16(y, b, n, oc, pix, g->s) :
		       cnn_cuda_bias_relu(y, b, n, oc, pix, g->s);
}

/* conv2's output before its bias (n x c2 x h2 x w2, either layout) through
 * its bias, the ReLU, the pool and (training) the first dropout into p and
 * arg, NCHW order, and for bf16 into pb, fc1's operand: one pass */
static int maxpool(struct cnn_gnet *g, int nhwc, int n, int train)
{
	const struct cnn_model *M = &g->m;
	struct cnn_cuda_pool_ep ep = { g->params + M->t[P_B2].off, train ? M->p_drop1 : 0.f,
				       g->keys, bf(g) ? g->pb : NULL };
	if (nhwc)
		return bf(g) ? cnn_cuda_maxpool2_fwd_nhwc_bf16(g->a2, n, M->c2, M->h2, M->w2, &ep, g->p,
							       g->arg, g->s) :
			       cnn_cuda_maxpool2_fwd_nhwc(g->a2, n, M->c2, M->h2, M->w2, &ep, g->p,
							  g->arg, g->s);
	return bf(g) ? cnn_cuda_maxpool2_fwd_bf16(g->a2, n, M->c2, M->h2, M->w2, &ep, g->p, g->arg,
						  g->s) :
		       cnn_cuda_maxpool2_fwd(g->a2, n, M->c2, M->h2, M->w2, &ep, g->p, g->arg, g->s);
}

static int maxpool_relu_bwd(struct cnn_gnet *g, int nhwc, int n)
{
	const struct cnn_model *M = &g->m;
	if (nhwc)
		return bf(g) ? cnn_cuda_maxpool2_relu_bwd_nhwc_bf16(g->dp, g->p, g->arg, n, M->c2,
								    M->h2, M->w2, g->da2, g->s) :
			       cnn_cuda_maxpool2_relu_bwd_nhwc(g->dp, g->p, g->arg, n, M->c2, M->h2,
							       M->w2, g->da2, g->s);
	return bf(g) ? cnn_cuda_maxpool2_relu_bwd_bf16(g->dp, g->p, g->arg, n * M->c2, M->h2, M->w2,
						       g->da2, g->s) :
		       cnn_cuda_maxpool2_relu_bwd(g->dp, g->p, g->arg, n * M->c2, M->h2, M->w2, g->da2,
						  g->s);
}

/* Channels-last: does convolution l read OHWI weights of its own (conv1's
 * OIHW is already OHWI for one input channel), and the batch transposed? */
static int own_ohwi(const struct cnn_gnet *g, int l)
{
	return l == 1 || g->m.in.c > 1;
}

/* Convolution l's weights as it reads them in a layout. */
static const void *conv_w(const struct cnn_gnet *g, int l, int nhwc)
{
	if (!nhwc || !own_ohwi(g, l))
		return W(g, l ? P_W2 : P_W1);
	return (const char *)g->wt + (l ? g->m.t[P_W1].n : 0) * g->esize;
}

/* The batch as conv1 reads it (after the forward's conversions). */
static const void *conv_x(const struct cnn_gnet *g, int nhwc)
{
	if (nhwc && g->m.in.c > 1)
		return g->xt;
	return bf(g) ? (const void *)g->xb : (const void *)g->x;
}

/* The convolutions' bias gradients, with our kernel: cuDNN's
 * cudnnConvolutionBackwardBias (calc_bias_diff_nchw_packed) took 42% of a
 * batch-1024 TF32 step's GPU time on an H100 (ncu, 2026-11-22).  conv1's
 * from da1 where a1 > 0, storing the ReLU's zeros into da1 on the way (the
 * ReLU's backward in the same pass); conv2's from the pool's output
 * gradient dp where p > 0 (fp32, NCHW order in every layout and
 * precision): each window's gradient reaches exactly one of conv2's
 * outputs (maxpool2_relu_bwd), so the channel sums are da2's, read from a
 * quarter of the memory. */
static int bias_grad(struct cnn_gnet *g, int nhwc, int l, int n, float *db, float *scratch,
		     cudaStream_t s)
{
	const struct cnn_model *M = &g->m;
	if (l == 1)
		return cnn_cuda_bias_grad(g->dp, g->p, 0, n, M->c2, M->flat / M->c2, scratch, db, s);
	int pix = M->h1 * M->w1;
	if (nhwc)
		return bf(g) ? cnn_cuda_bias_grad_nhwc_bf16(g->da1, g->a1, 1, n, M->c1, pix, scratch,
							    db, s) :
			       cnn_cuda_bias_grad_nhwc(g->da1, g->a1, 1, n, M->c1, pix, scratch, db, s);
	return bf(g) ? cnn_cuda_bias_grad_bf16(g->da1, g->a1, 1, n, M->c1, pix, scratch, db, s) :
		       cnn_cuda_bias_grad(g->da1, g->a1, 1, n, M->c1, pix, scratch, db, s);
}

/* cuDNN's backward-filter of convolution l into grads (through the bf16
 * scratch dwb at boff, then widened, for bf16; channels-last, through the
 * OHWI scratch dwt at boff, then transposed), on stream w: 0 s, 1 sw. */
static int cudnn_filter(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int l, int w,
			cudnnTensorDescriptor_t tin, const void *in, cudnnTensorDescriptor_t tout,
			const void *dout, size_t boff)
{
	const struct cnn_model *M = &g->m;
	cudaStream_t s = w ? g->sw : g->s;
	int co = l ? M->c2 : M->c1, ci = l ? M->c1 : M->in.c;
	size_t off = M->t[l ? P_W2 : P_W1].off, count = M->t[l ? P_W2 : P_W1].n;
	int t = a->nhwc && own_ohwi(g, l);
	void *dw = t ? (void *)((char *)g->dwt + boff * g->esize) :
		   bf(g) ? (void *)(g->dwb + boff) : (void *)(g->grads + off);
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[l], a->bwd_filter_math[l]));
	cudnnCheck(cudnnConvolutionBackwardFilter(w ? g->dnnw : g->dnn, &one, tin, in, tout, dout,
						  g->cv[l], a->bwd_filter[l],
						  w && g->streams == 2 ? g->wsw : g->ws,
						  g->ws_bytes, &zero, filt(g, l, a->nhwc), dw));
	if (t)
		return bf(g) ? cnn_cuda_ohwi_to_oihw_bf16(dw, co, ci, 9, g->grads + off, s) :
			       cnn_cuda_ohwi_to_oihw(dw, co, ci, 9, g->grads + off, s);
	return bf(g) ? cnn_cuda_from_bf16(g->dwb + boff, g->grads + off, count, s) : 0;
}

/* conv2's packed weights: the forward's ([tap][c][o]) and the
 * backward-data's ([tap][o][c]), in the convolutions' type. */
static void *c2w(const struct cnn_gnet *g, int bwd)
{
	return (char *)g->c2w + (bwd ? g->m.t[P_W2].n * g->esize : 0);
}

/* conv2 through its bias, ReLU, pool and (training) first dropout into p
 * and arg (and pb): cuDNN's call into a2 then the pool (maxpool), or
 * (direct) the tensor-core kernel with the pool in its epilogue, which
 * writes p and arg itself (the same bits; a2 is not written). */
static int conv2_forward(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int direct,
			 int train)
{
	const struct cnn_model *M = &g->m;
	int nh = a->nhwc;
	if (direct) {
		struct cnn_cuda_pool_ep ep = { g->params + M->t[P_B2].off, train ? M->p_drop1 : 0.f,
					       g->keys, bf(g) ? g->pb : NULL };
		return bf(g) ? cnn_cuda_conv3_fwd_pool_bf16(g->a1, c2w(g, 0), n, M->c1, M->h1, M->w1,
							    M->c2, nh, &ep, g->p, g->arg, g->s) :
			       cnn_cuda_conv3_fwd_pool_tf32(g->a1, c2w(g, 0), n, M->c1, M->h1, M->w1,
							    M->c2, nh, &ep, g->p, g->arg, g->s);
	}
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[1], a->fwd_math[1]));
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->t1, g->a1, filt(g, 1, nh),
					   conv_w(g, 1, nh), g->cv[1], a->fwd[1], g->ws,
					   g->ws_bytes, &zero, g->t2, g->a2));
	return maxpool(g, nh, n, train);
}

/* Whether conv2's output gradient da2 is written (maxpool_relu_bwd): for
 * cuDNN's calls, and for the tensor-core kernels in NHWC; in NCHW those
 * read the pool's backward from dp, p and arg themselves. */
static int needs_da2(const struct cnn_gnet_algos *a)
{
	return a->nhwc || (a->direct2 & 6) != 6;
}

/* conv2's backward-data, da2 into da1, on s; direct in NCHW, from the
 * pool's tensors (no da2). */
static int conv2_dgrad(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int direct)
{
	const struct cnn_model *M = &g->m;
	int nh = a->nhwc;
	if (direct && !nh)
		return bf(g) ? cnn_cuda_conv3_dgrad_pool_bf16(g->dp, g->p, g->arg, c2w(g, 1), n, M->c1,
							      M->h1, M->w1, M->c2, g->da1, g->s) :
			       cnn_cuda_conv3_dgrad_pool_tf32(g->dp, g->p, g->arg, c2w(g, 1), n, M->c1,
							      M->h1, M->w1, M->c2, g->da1, g->s);
	if (direct)
		return bf(g) ? cnn_cuda_conv3_dgrad_bf16(g->da2, c2w(g, 1), n, M->c1, M->h1, M->w1,
							 M->c2, nh, g->da1, g->s) :
			       cnn_cuda_conv3_dgrad_tf32(g->da2, c2w(g, 1), n, M->c1, M->h1, M->w1,
							 M->c2, nh, g->da1, g->s);
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[1], a->bwd_data_math));
	cudnnCheck(cudnnConvolutionBackwardData(g->dnn, &one, filt(g, 1, nh), conv_w(g, 1, nh), g->t2,
						g->da2, g->cv[1], a->bwd_data, g->ws, g->ws_bytes,
						&zero, g->t1, g->da1));
	return 0;
}

/* Whether conv2's bias gradient rides on its backward-filter (the
 * tensor-core kernels reading the pool's tensors, NCHW). */
static int bias2_on_wgrad(const struct cnn_gnet_algos *a)
{
	return !a->nhwc && (a->direct2 & 4);
}

/* conv2's weight gradient on stream w (0 s, 1 sw): cuDNN's, or (direct)
 * the tensor-core kernels, which write the fp32 OIHW gradient themselves
 * in every layout and precision, and in NCHW read the pool's tensors in
 * place of da2 and give the bias's gradient too (bias2_on_wgrad). */
static int conv2_wgrad(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int w, int direct)
{
	const struct cnn_model *M = &g->m;
	if (!direct)
		return cudnn_filter(g, a, 1, w, g->t1, g->a1, g->t2, g->da2, M->t[P_W1].n);
	float *dw = g->grads + M->t[P_W2].off;
	cudaStream_t s = w ? g->sw : g->s;
	if (!a->nhwc) {
		float *db = g->grads + M->t[P_B2].off;
		return bf(g) ? cnn_cuda_conv3_wgrad_pool_bf16(g->a1, g->dp, g->p, g->arg, n, M->c1, M->h1,
							      M->w1, M->c2, g->c2s, dw, db, s) :
			       cnn_cuda_conv3_wgrad_pool_tf32(g->a1, g->dp, g->p, g->arg, n, M->c1, M->h1,
							      M->w1, M->c2, g->c2s, dw, db, s);
	}
	return bf(g) ? cnn_cuda_conv3_wgrad_bf16(g->a1, g->da2, n, M->c1, M->h1, M->w1, M->c2, a->nhwc,
						 g->c2s, dw, s) :
		       cnn_cuda_conv3_wgrad_tf32(g->a1, g->da2, n, M->c1, M->h1, M->w1, M->c2, a->nhwc,
						 g->c2s, dw, s);
}

/* Channels-last with an input of more than one channel: the batch
 * transposed, as conv1 reads it. */
static int x_to_nhwc(struct cnn_gnet *g, int n)
{
	const struct cnn_model *M = &g->m;
	if (M->in.c == 1)
		return 0;
	int hw = M->in.h * M->in.w;
	return bf(g) ? cnn_cuda_oihw_to_ohwi_bf16(g->x, n, M->in.c, hw, g->xt, g->s) :
		       cnn_cuda_oihw_to_ohwi(g->x, n, M->in.c, hw, g->xt, g->s);
}

/* The weights' forms (CNN_WOP_*) that a batch's algorithms read. */
static unsigned wop_need(const struct cnn_gnet *g, const struct cnn_gnet_algos *a)
{
	unsigned m = bf(g) ? CNN_WOP_BF16 : 0;
	if (a->direct2 & 3)
		m |= CNN_WOP_PACK2;
	if (a->nhwc && own_ohwi(g, 0))
		m |= CNN_WOP_OHWI1;
	if (a->nhwc && own_ohwi(g, 1))
		m |= CNN_WOP_OHWI2;
	return m;
}

/* The forms of mask, from the fp32 master copy, on s: the separate
 * kernels whose stores the optimizer's wop repeats. */
static int wop_make(struct cnn_gnet *g, unsigned mask)
{
	const struct cnn_model *M = &g->m;
	const float *P = g->params;
	if ((mask & CNN_WOP_BF16) && cnn_cuda_to_bf16(P, g->wb, M->nparams, g->s) < 0)
		return -1;
	if (mask & CNN_WOP_PACK2) {
		const float *w = P + M->t[P_W2].off;
		if ((bf(g) ? cnn_cuda_conv3_pack_bf16(w, M->c2, M->c1, c2w(g, 0), c2w(g, 1), g->s) :
			     cnn_cuda_conv3_pack_tf32(w, M->c2, M->c1, c2w(g, 0), c2w(g, 1), g->s)) < 0)
			return -1;
	}
	for (int l = 0; l < 2; l++) {
		if (!(mask & (l ? CNN_WOP_OHWI2 : CNN_WOP_OHWI1)))
			continue;
		int co = l ? M->c2 : M->c1, ci = l ? M->c1 : M->in.c;
		const float *w = P + M->t[l ? P_W2 : P_W1].off;
		void *o = (void *)conv_w(g, l, 1);
		if ((bf(g) ? cnn_cuda_oihw_to_ohwi_bf16(w, co, ci, 9, o, g->s) :
			     cnn_cuda_oihw_to_ohwi(w, co, ci, 9, o, g->s)) < 0)
			return -1;
	}
	return 0;
}

unsigned cnn_gnet_wop(const struct cnn_gnet *g, struct cnn_cuda_wop *w)
{
	const struct cnn_model *M = &g->m;
	unsigned mask = 0;
	for (int i = 0; i < g->nalgos; i++)
		mask |= wop_need(g, &g->algos[i]);
	memset(w, 0, sizeof(*w));
	if (mask & CNN_WOP_BF16)
		w->wb = g->wb;
	if (mask & CNN_WOP_PACK2) {
		w->pack.off = M->t[P_W2].off;
		w->pack.oc = M->c2;
		w->pack.c = M->c1;
		for (int k = 0; k < 2; k++) {
			if (bf(g))
				w->pack.b[k] = c2w(g, k);
			else
				w->pack.f[k] = c2w(g, k);
		}
	}
	for (int l = 0; l < 2; l++) {
		if (!(mask & (l ? CNN_WOP_OHWI2 : CNN_WOP_OHWI1)))
			continue;
		w->ohwi[l].off = M->t[l ? P_W2 : P_W1].off;
		w->ohwi[l].out = l ? M->c2 : M->c1;
		w->ohwi[l].in = l ? M->c1 : M->in.c;
		w->ohwi[l].hw = 9;
		if (bf(g))
			w->ohwi[l].b = (cnn_bf16 *)conv_w(g, l, 1);
		else
			w->ohwi[l].f = (float *)conv_w(g, l, 1);
	}
	return mask;
}

int cnn_gnet_wop_ensure(struct cnn_gnet *g, unsigned mask)
{
	unsigned miss = mask & ~g->wfresh;
	if (miss && wop_make(g, miss) < 0)
		return -1;
	g->wfresh |= miss;
	return 0;
}

/* conv1 with its bias and ReLU into a1: cuDNN's call then bias_relu, or
 * (direct, one input channel) the direct kernel. */
static int conv1_forward(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int direct)
{
	const struct cnn_model *M = &g->m;
	const float *b = g->params + M->t[P_B1].off;
	int nh = a->nhwc;
	if (direct)
		return bf(g) ? cnn_cuda_conv1_fwd_bf16(conv_x(g, nh), conv_w(g, 0, nh), b, n, M->in.h,
						       M->in.w, M->c1, nh, g->a1, g->s) :
			       cnn_cuda_conv1_fwd(conv_x(g, nh), conv_w(g, 0, nh), b, n, M->in.h,
						  M->in.w, M->c1, nh, g->a1, g->s);
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[0], a->fwd_math[0]));
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->tx, conv_x(g, nh), filt(g, 0, nh),
					   conv_w(g, 0, nh), g->cv[0], a->fwd[0], g->ws,
					   g->ws_bytes, &zero, g->t1, g->a1));
	return bias_relu(g, nh, g->a1, b, n, M->c1, M->h1 * M->w1);
}

/* conv1's weight and bias gradients from da1 gated by a1 (the ReLU's
 * backward), on s: the fused bias gradient then cuDNN's backward-filter,
 * or (direct) the direct kernels, which leave da1 as it is. */
static int conv1_backward(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int direct)
{
	const struct cnn_model *M = &g->m;
	int nh = a->nhwc;
	if (!direct)
		return bias_grad(g, nh, 0, n, g->grads + M->t[P_B1].off, g->bgs, g->s) < 0 ? -1 :
		       cudnn_filter(g, a, 0, 0, g->tx, conv_x(g, nh), g->t1, g->da1, 0);
	float *dw = g->grads + M->t[P_W1].off, *db = g->grads + M->t[P_B1].off;
	return bf(g) ? cnn_cuda_conv1_wgrad_bf16(conv_x(g, nh), g->da1, g->a1, n, M->in.h, M->in.w,
						 M->c1, nh, g->c1w, dw, db, g->s) :
		       cnn_cuda_conv1_wgrad(conv_x(g, nh), g->da1, g->a1, n, M->in.h, M->in.w, M->c1,
					    nh, g->c1w, dw, db, g->s);
}

/* Whether conv1's weight and bias gradients ride on conv2's backward-data
 * (both by the project's kernels, NCHW): no da1 in memory, one launch
 * fewer. */
static int conv1_on_conv2(const struct cnn_gnet_algos *a)
{
	return !a->nhwc && (a->direct2 & 2) && (a->direct1 & 2);
}

/* conv2's backward-data from the pool's tensors with conv1's weight and
 * bias gradients in its epilogue (conv1_on_conv2), on s. */
static int conv2_dgrad_conv1(struct cnn_gnet *g, int n)
{
	const struct cnn_model *M = &g->m;
	float *dw = g->grads + M->t[P_W1].off, *db = g->grads + M->t[P_B1].off;
	return bf(g) ? cnn_cuda_conv3_dgrad_conv1_bf16(g->dp, g->p, g->arg, c2w(g, 1), n, M->c1, M->h1,
						       M->w1, M->c2, conv_x(g, 0), g->a1, g->c1s, dw, db,
						       g->s) :
		       cnn_cuda_conv3_dgrad_conv1_tf32(g->dp, g->p, g->arg, c2w(g, 1), n, M->c1, M->h1,
						       M->w1, M->c2, conv_x(g, 0), g->a1, g->c1s, dw, db,
						       g->s);
}

/* conv2's backward-data and conv1's weight and bias gradients, on s, as
 * the step runs them: fused where conv1_on_conv2, else each by its own. */
static int dgrad_conv1(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n)
{
	if (conv1_on_conv2(a))
		return conv2_dgrad_conv1(g, n);
	return conv2_dgrad(g, a, n, a->direct2 & 2) < 0 || conv1_backward(g, a, n, a->direct1 & 2) < 0 ?
		       -1 : 0;
}

/* conv2's weight and bias gradients on stream w (0 s, 1 sw), as the step
 * runs them: the bias's by its own kernel unless it rides on the
 * backward-filter (bias2_on_wgrad). */
static int wgrad_bias2(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n, int w)
{
	const struct cnn_model *M = &g->m;
	if (!bias2_on_wgrad(a) && bias_grad(g, a->nhwc, 1, n, g->grads + M->t[P_B2].off,
					    g->bgs + g->bgs_off, w ? g->sw : g->s) < 0)
		return -1;
	return conv2_wgrad(g, a, n, w, a->direct2 & 4);
}

int cnn_gnet_pick_bwd(const float dg[2][2], const float wg[2], float pool_bwd, int *conv1)
{
	int best = -1;
	float least = 0.f;
	/* the project's kernels first: a tie goes to fewer launches */
	for (int c1 = 1; c1 >= 0; c1--)
		for (int d = 1; d >= 0; d--)
			for (int w = 1; w >= 0; w--) {
				if (dg[c1][d] < 0.f || wg[w] < 0.f)
					continue;
				float t = dg[c1][d] + wg[w] + (d && w ? 0.f : pool_bwd);
				if (best < 0 || t < least) {
					least = t;
					best = c1 << 3 | d << 1 | w << 2;
				}
			}
	if (best < 0)
		return -1;
	*conv1 = best >> 3;
	return best & 6;
}

/* Dropout's 1/(1-p) rides on the GEMMs that produce dh and dp: kept
 * elements are > 0 after the ReLU, dropped ones are 0 and gated off. */
static float drop_scale(float p)
{
	return p > 0.f ? 1.f / (1.f - p) : 1.f;
}

/* fc2's head for n images on s alone, as auto times it: fused, the one
 * kernel (cnn_cuda_fc2_head); else the calls it replaces, as the step
 * makes them (fc1's dropout, fc2's GEMM, the loss with its gradient and
 * fc2's bias gradient, dW4's and dh's GEMMs, the ReLU's backward, db3's
 * gemv; the step runs dW4 and db3 on sw where there are two streams). */
static int fc2_call(struct cnn_gnet *g, int n, int fused)
{
	const struct cnn_model *M = &g->m;
	const float *P = g->params;
	float *G = g->grads;
	int K = M->in.classes, H = M->hidden;
	if (fused)
		return cnn_cuda_fc2_head(g->h, P + M->t[P_B3].off, M->p_drop2, g->keys + 1,
					 P + M->t[P_W4].off, P + M->t[P_B4].off, g->y, n, H, K, (float)n,
					 drop_scale(M->p_drop2), g->logp, g->stats, g->dlogits,
					 G + M->t[P_W4].off, G + M->t[P_B4].off, g->dh, G + M->t[P_B3].off,
					 g->fhs, g->fhs_n, g->s);
	if (cnn_cuda_dropout_fwd(g->h, P + M->t[P_B3].off, H, (size_t)n * H, M->p_drop2, g->keys + 1,
				 NULL, g->s) < 0 ||
	    linear_fwd(g, g->h, n, H, P + M->t[P_W4].off, K, g->logits) < 0 ||
	    cnn_cuda_logsoftmax_nll_fwd(g->logits, P + M->t[P_B4].off, g->y, n, K, g->logp, g->stats,
					g->dlogits, NULL, (float)n, G + M->t[P_B4].off, g->s) < 0 ||
	    gemm(g, g->blas, CUBLAS_OP_N, CUBLAS_OP_T, H, K, n, 1.f, g->h, H, g->dlogits, K,
		 G + M->t[P_W4].off, H) < 0 ||
	    linear_bwd_x(g, n, H, P + M->t[P_W4].off, K, g->dlogits, g->dh, drop_scale(M->p_drop2)) < 0 ||
	    cnn_cuda_relu_bwd(g->dh, g->h, (size_t)n * H, NULL, g->s) < 0)
		return -1;
	cublasCheck(cublasSgemv(g->blas, CUBLAS_OP_N, H, n, &one, g->dh, H, g->ones, 1, &zero,
				G + M->t[P_B3].off, 1));
	return 0;
}

/* One call of a convolution by cuDNN or the project's kernels, with what
 * the step runs beside it: conv1's (layer 0) forward or weight gradient
 * (calls 0, 1); conv2's (layer 1) forward (with the pool and dropout,
 * which the direct kernel fuses), backward-data or backward-filter with
 * the bias's gradient (0, 1, 2); "layer" 2, the pool's backward into da2
 * (direct ignored); "layer" 3, conv2's backward-data (direct bit 1) with
 * conv1's weight gradient (bit 0), fused where both are direct in NCHW;
 * "layer" 4, fc2's head (direct: fused; fc2_call). */
static int conv_call(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		     int direct)
{
	struct cnn_gnet_algos t;
	if (layer == 4)
		return fc2_call(g, a->n, direct);
	if (!layer)
		return call ? conv1_backward(g, a, a->n, direct) : conv1_forward(g, a, a->n, direct);
	if (layer == 2)
		return maxpool_relu_bwd(g, a->nhwc, a->n);
	if (layer == 3 || call == 2) {
		/* the bits this call runs with (dgrad_conv1, wgrad_bias2 read them) */
		t = *a;
		if (layer == 3) {
			t.direct1 = (t.direct1 & ~2) | (direct & 1) << 1;
			t.direct2 = (t.direct2 & ~2) | (direct & 2);
			return dgrad_conv1(g, &t, a->n);
		}
		t.direct2 = (t.direct2 & ~4) | (direct ? 4 : 0);
		return wgrad_bias2(g, &t, a->n, 0);
	}
	return call == 0 ? conv2_forward(g, a, a->n, direct, 1) : conv2_dgrad(g, a, a->n, direct);
}

/* That call timed on s: CNN_TIME_WARMUP runs, then the mean of
 * CNN_TIME_RUNS, in *ms.  The buffers' contents do not matter (timing
 * only, before any step).  cuemu's build (tests/Makefile) times one run:
 * its clock is a model, the same each run, and every emulated run costs
 * the CPU what a real one costs a GPU a thousand times over. */
#ifndef CNN_TIME_WARMUP
#define CNN_TIME_WARMUP 3
#endif
#ifndef CNN_TIME_RUNS
#define CNN_TIME_RUNS 10
#endif
/* A call of the project's kernels failed while auto timed it: when the
 * failure was the launch's alone (a GPU refusing a kernel it cannot hold:
 * too many resources, no image for it) and the context is sound, cuDNN
 * keeps that call, said once on stderr and in the `# GPU:` line (1);
 * else 0, the failure stands (a fault inside a kernel leaves the context
 * unusable).  --conv1/--conv2 direct never get here: asked for, a
 * failure is an error. */
static int fall_back(struct cnn_gnet *g, const char *what)
{
	char why[sizeof(g->fallback) - 64];
	snprintf(why, sizeof(why), "%s", g->err[0] ? g->err : cnn_cuda_last_error());
	(void)cudaGetLastError();
	if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
		if (!g->err[0])
			snprintf(g->err, sizeof(g->err), "%s, timed at start-up: %s", what, why);
		return 0;
	}
	g->err[0] = 0;
	if (!g->fallback[0]) {
		snprintf(g->fallback, sizeof(g->fallback), "%s: %s", what, why);
		fprintf(stderr, "cnn_train: %s rank %d: warning: the project's kernels for %s failed "
			"to launch at start-up (%s): cuDNN's calls there instead\n",
			cnn_cuda_where_host(), cnn_cuda_where_rank(), what, why);
	}
	return 1;
}

/* That call timed (time_call); 0, or 1 where the project's kernels in it
 * could not launch here and cuDNN stands in (fall_back: *ms -1), or -1. */
/* The call's CNN_TIME_WARMUP runs on the stream (its first runs: lazy
 * loading, cuDNN's plans, as the training step's two eager steps before
 * its capture), then CNN_TIME_RUNS captured as one CUDA graph, uploaded,
 * and replayed once between ev[0] and ev[1]: the GPU's time alone, as
 * the step's replay runs it.  -1 where a run, the capture or a launch
 * failed, the stream out of capture and the error cleared (the caller
 * times it on the stream, where a failure is handled as there). */
static int time_graph(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		      int direct, cudaEvent_t ev[2], float *ms)
{
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	int rv = -1, bad = 0;
	for (int i = 0; i < CNN_TIME_WARMUP; i++)
		if (conv_call(g, a, layer, call, direct) < 0)
			goto out;
	if (cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
		goto out;
	for (int i = 0; i < CNN_TIME_RUNS && !bad; i++)
		bad = conv_call(g, a, layer, call, direct) < 0;
	if (cudaStreamEndCapture(g->s, &graph) != cudaSuccess || bad ||
	    cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
	    cudaGraphUpload(exec, g->s) != cudaSuccess || cudaEventRecord(ev[0], g->s) != cudaSuccess ||
	    cudaGraphLaunch(exec, g->s) != cudaSuccess || cudaEventRecord(ev[1], g->s) != cudaSuccess ||
	    cudaEventSynchronize(ev[1]) != cudaSuccess ||
	    cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess)
		goto out;
	rv = 0;
out:
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	if (rv < 0) {
		enum cudaStreamCaptureStatus st;
		graph = NULL;
		if (cudaStreamIsCapturing(g->s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone &&
		    cudaStreamEndCapture(g->s, &graph) == cudaSuccess && graph)
			cudaGraphDestroy(graph);
		(void)cudaGetLastError();
		g->err[0] = 0;
	}
	return rv;
}

static int time_call(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		     int direct, float *ms)
{
	cudaEvent_t ev[2] = { NULL, NULL };
	int rv = -1;
	/* a failure here is reported by the caller, or recovered from */
	int quiet = cnn_cuda_fail_quiet(1);
	static const char *calls[2][3] = {
		{ "conv1's forward", "conv1's weight gradient" },
		{ "conv2's forward", "conv2's backward-data", "conv2's backward-filter" }
	};
	const char *what = layer == 4 ? "fc2's head" :
			   layer == 3 ? "conv2's backward-data with conv1's weight gradient" :
			   layer == 2 ? "the pool's backward" : calls[layer][call];
	if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
		snprintf(g->err, sizeof(g->err), "timing %s: cudaEventCreate failed", what);
		goto out;
	}
	if (a->n == g->graph_batch) {
		if (time_graph(g, a, layer, call, direct, ev, ms) == 0) {
			g->graph_timed++;
			*ms /= (float)CNN_TIME_RUNS;
			rv = 0;
			goto out;
		}
		g->graph_refused++;
	}
	for (int i = 0; i < CNN_TIME_WARMUP + CNN_TIME_RUNS; i++) {
		if (i == CNN_TIME_WARMUP && cudaEventRecord(ev[0], g->s) != cudaSuccess)
			goto out;
		if (conv_call(g, a, layer, call, direct) < 0)
			goto out;
	}
	if (cudaEventRecord(ev[1], g->s) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
	    cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess) {
		snprintf(g->err, sizeof(g->err), "timing %s: %s", what,
			 cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	*ms /= (float)CNN_TIME_RUNS;
	rv = 0;
out:
	cnn_cuda_fail_quiet(quiet);
	/* (fc2's fused head has no cuDNN to fall back on: its failure stands) */
	if (rv < 0 && direct && layer != 2 && layer != 4 && fall_back(g, what)) {
		*ms = -1.f;
		rv = 1;
	}
	for (int i = 0; i < 2; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	return rv;
}

/* Whether conv1's weight gradient and conv2's backward pair are chosen
 * together (choose_bwd): in NCHW, where conv2's tensor-core kernels can
 * run and a choice is left, since there they read the pool's tensors (a
 * cuDNN call needs the pool's backward written first) and carry conv1's
 * weight gradient (conv1_on_conv2). */
static int joint_bwd(const struct cnn_gnet *g, int nhwc)
{
	int auto1 = g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1;
	return !nhwc && conv2_possible(g) &&
	       (g->conv2 == CNN_CONV_AUTO || (g->conv2 == CNN_CONV_DIRECT && auto1));
}

/* A layer's calls for batch a->n (those in the mask time): cuDNN's or the
 * project's kernels as asked (impl), or (auto) each call the faster of the
 * two, timed here, into the bits of *direct and ms[call][direct]; possible
 * 0 (the kernels do not apply: conv1's take one input channel, conv2's
 * TF32 or bf16). */
static int choose_conv(struct cnn_gnet *g, struct cnn_gnet_algos *a, int layer, int calls,
		       int mask, enum cnn_conv_impl impl, int possible, int *direct, float ms[][2])
{
	*direct = 0;
	if (!possible || impl == CNN_CONV_CUDNN)
		return 0;
	if (impl == CNN_CONV_DIRECT) {
		*direct = (1 << calls) - 1;
		return 0;
	}
	if (set_batch(g, a->n, a->nhwc) < 0)
		return -1;
	for (int call = 0; call < calls; call++) {
		if (!(mask >> call & 1))
			continue;
		for (int d = 0; d < 2; d++)
			if (time_call(g, a, layer, call, d, &ms[call][d]) < 0)
				return -1;
		/* ms[call][1] -1: the project's kernels could not launch */
		*direct |= ms[call][1] >= 0.f && ms[call][1] < ms[call][0] ? 1 << call : 0;
	}
	return 0;
}

/* joint_bwd: every pair of conv1's weight gradient (where auto) and conv2's
 * backward-data timed together as the step runs them (fused where both
 * are the project's), conv2's backward-filter with its bias's, and the
 * pool's backward; the least of the sums (cnn_gnet_pick_bwd). */
static int choose_bwd(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	/* the values each bit may take: 1 (0 only), 2 (1 only), 3 (either) */
	int c1 = g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1 ? 3 : 1 << ((a->direct1 >> 1) & 1);
	int c2 = g->conv2 == CNN_CONV_AUTO ? 3 : 1 << ((a->direct2 >> 1) & 1);
	float dg[2][2] = { { -1.f, -1.f }, { -1.f, -1.f } }, wg[2] = { -1.f, -1.f };
	if (set_batch(g, a->n, a->nhwc) < 0)
		return -1;
	for (int d1 = 0; d1 < 2; d1++)
		for (int d = 0; d < 2; d++)
			if ((c1 >> d1 & 1) && (c2 >> d & 1) &&
			    time_call(g, a, 3, 0, d1 | d << 1, &dg[d1][d]) < 0)
				return -1;
	for (int w = 0; w < 2; w++)
		if ((c2 >> w & 1) && time_call(g, a, 1, 2, w, &wg[w]) < 0)
			return -1;
	if (c2 != 2 && time_call(g, a, 2, 0, 0, &a->ms_da2) < 0)
		return -1;
	int d1 = 0;
	int bits = cnn_gnet_pick_bwd((const float (*)[2])dg, wg, a->ms_da2, &d1);
	if (bits < 0) {
		snprintf(g->err, sizeof(g->err), "batch of %d: no backward pair timed (internal)", a->n);
		return -1;
	}
	a->direct1 = (a->direct1 & 1) | d1 << 1;
	a->direct2 = (a->direct2 & 1) | bits;
	for (int i = 0; i < 2; i++) {
		/* -1 where conv2 is auto: its kernels could not launch */
		a->ms2[2][i] = wg[i] > 0.f || c2 == 3 ? wg[i] : 0.f;
		for (int j = 0; j < 2; j++)
			a->msb[i][j] = dg[i][j] > 0.f ? dg[i][j] : 0.f;
	}
	return 0;
}

/* Candidate i of conv2's call c as that call's algorithm. */
static void set_cand(struct cnn_gnet_algos *a, int c, int i)
{
	if (c == 0) {
		a->fwd[1] = (cudnnConvolutionFwdAlgo_t)a->cand[0][i];
		a->fwd_math[1] = a->cand_math[0][i];
	} else if (c == 1) {
		a->bwd_data = (cudnnConvolutionBwdDataAlgo_t)a->cand[1][i];
		a->bwd_data_math = a->cand_math[1][i];
	} else {
		a->bwd_filter[1] = (cudnnConvolutionBwdFilterAlgo_t)a->cand[2][i];
		a->bwd_filter_math[1] = a->cand_math[2][i];
	}
}

/* conv2's cuDNN calls at the graph's batch: each of cudnnFind's
 * candidates timed again as time_call times the calls there (a graph of
 * its runs, the least of them), the fastest kept, before the calls are
 * weighed against the project's kernels.  cudnnFind's pick fails as ever;
 * another candidate that fails to run is left out. */
static int retime_cudnn(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	if (a->n != g->graph_batch || g->conv2 == CNN_CONV_DIRECT)
		return 0;
	if (set_batch(g, a->n, a->nhwc) < 0)
		return -1;
	for (int c = 0; c < 3; c++) {
		if (a->ncand[c] < 2)
			continue;
		int best = 0;
		for (int i = 0; i < a->ncand[c]; i++) {
			set_cand(a, c, i);
			if (time_call(g, a, 1, c, 0, &a->cand_ms[c][i]) < 0) {
				if (!i || cudaDeviceSynchronize() != cudaSuccess)
					return -1;
				(void)cudaGetLastError();
				g->err[0] = '\0';
				a->cand_ms[c][i] = -1.f;
				continue;
			}
			if (a->cand_ms[c][i] < a->cand_ms[c][best])
				best = i;
		}
		set_cand(a, c, best);
	}
	return 0;
}

static int choose_convs(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	/* with joint_bwd, conv1's weight gradient and conv2's backward pair
	 * are not timed alone */
	int j = joint_bwd(g, a->nhwc);
	if (choose_conv(g, a, 0, 2, j ? 1 : 3, g->conv1, g->m.in.c == 1, &a->direct1, a->ms1) < 0 ||
	    choose_conv(g, a, 1, 3, j ? 1 : 7, g->conv2, conv2_possible(g), &a->direct2, a->ms2) < 0)
		return -1;
	return j ? choose_bwd(g, a) : 0;
}

/* fc2's head for batch a->n: as asked, or (auto) the faster of cuBLAS's
 * calls and the fused kernel, timed as the convolutions' (time_call). */
static int choose_fc2(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	a->fc2 = g->fc2 == CNN_FC2_FUSED;
	if (g->fc2 != CNN_FC2_AUTO)
		return 0;
	/* shapes the fused kernel does not take: cuBLAS's calls, untimed */
	if (!cnn_cuda_fc2_head_fits(g->m.hidden, g->m.in.classes)) {
		a->ms_fc2[0] = a->ms_fc2[1] = 0.f;
		return 0;
	}
	/* the loss reads logp at each row's label: labels in range (the
	 * batch's own, gathered later in s's order, overwrite them) */
	cudaCheck(cudaMemsetAsync(g->y, 0, (size_t)a->n, g->s));
	for (int f = 0; f < 2; f++)
		if (time_call(g, a, 4, 0, f, &a->ms_fc2[f]) < 0)
			return -1;
	a->fc2 = a->ms_fc2[1] < a->ms_fc2[0];
	return 0;
}

int cnn_gnet_conv2_variants(const struct cnn_gnet *g, int n,
			    int direct1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES],
			    int direct2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES])
{
	const struct cnn_gnet_algos *a = NULL;
	for (int i = 0; i < g->nalgos && !a; i++)
		a = g->algos[i].n == n ? &g->algos[i] : NULL;
	if (!a || g->conv2 != CNN_CONV_AUTO || !conv2_possible(g))
		return 0;
	/* conv1's weight gradient timed beside each backward-data (msb) */
	int c1 = joint_bwd(g, a->nhwc) && g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1;
	for (int k = 0; k < CNN_CONV2_VARIANTS + CNN_CONV2_MIXES; k++) {
		/* a mix's bits, or all direct's (7) */
		int b = k < CNN_CONV2_VARIANTS ? 7 : k - CNN_CONV2_VARIANTS + 1;
		direct1[k] = a->direct1;
		direct2[k] = k == 0 ? a->direct2 : k == 1 ? 0 : g->fallback[0] ? b & a->direct2 : b;
		int d = direct2[k] >> 1 & 1;
		if (k && c1 && a->msb[0][d] > 0.f && a->msb[1][d] > 0.f)
			direct1[k] = (a->direct1 & 1) | (a->msb[1][d] < a->msb[0][d]) << 1;
	}
	return CNN_CONV2_VARIANTS;
}

int cnn_gnet_set_conv2(struct cnn_gnet *g, int n, int direct1, int direct2)
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n) {
			g->algos[i].direct1 = direct1;
			g->algos[i].direct2 = direct2;
			return 0;
		}
	snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	return -1;
}

static const struct cnn_gnet_algos *algos_for(struct cnn_gnet *g, int n)
{
	const struct cnn_gnet_algos *a = find_algos(g, n);
	if (!a)
		snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	else if (set_batch(g, n, a->nhwc) < 0)
		return NULL;
	return a;
}

void cnn_gnet_set_batch(struct cnn_gnet *g, const uint8_t *xs, const uint8_t *ys,
			const uint32_t *idx, const struct cnn_cuda_norm *norm)
{
	g->batch.xs = xs;
	g->batch.ys = ys;
	g->batch.idx = idx;
	g->batch.norm = *norm;
	g->batch.set = 1;
}

/* conv1's direct forward on the batch of cnn_gnet_set_batch, gathered by
 * the same launch. */
static int conv1_forward_gather(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int n)
{
	const struct cnn_model *M = &g->m;
	const float *b = g->params + M->t[P_B1].off;
	int nh = a->nhwc;
	return bf(g) ? cnn_cuda_conv1_fwd_gather_bf16(g->batch.xs, g->batch.ys, g->batch.idx,
						      &g->batch.norm, conv_w(g, 0, nh), b, n,
						      M->in.h, M->in.w, M->c1, nh, g->a1, g->x,
						      g->xb, g->y, g->s) :
		       cnn_cuda_conv1_fwd_gather(g->batch.xs, g->batch.ys, g->batch.idx,
						 &g->batch.norm, conv_w(g, 0, nh), b, n, M->in.h,
						 M->in.w, M->c1, nh, g->a1, g->x, g->y, g->s);
}

int cnn_gnet_forward(struct cnn_gnet *g, int n, int train, float scale_n)
{
	const struct cnn_model *M = &g->m;
	const struct cnn_gnet_algos *a = algos_for(g, n);
	const float *P = g->params;
	size_t nx = (size_t)n * M->in.c * M->in.h * M->in.w;
	int batch = g->batch.set;
	g->batch.set = 0;
	if (!a)
		return -1;
	int nh = a->nhwc;
	/* the batch: gathered by conv1's direct forward (one input channel),
	 * else first, with its bf16 copy */
	int fused = batch && (a->direct1 & 1) && M->in.c == 1;
	if (batch && !fused &&
	    cnn_cuda_gather(g->batch.xs, g->batch.ys, g->batch.idx, n, M->in.c, M->in.h, M->in.w,
			    &g->batch.norm, g->x, g->y, g->xb, g->s) < 0)
		return -1;
	if (batch)
		g->xb_given = g->xb != NULL;
	/* the weights as this batch's algorithms read them (bf16, packed,
	 * OHWI), where the last update did not write them; bf16: the input as
	 * the tensor cores read it; channels-last: the input transposed */
	int xb = g->xb_given;
	g->xb_given = 0;
	if (cnn_gnet_wop_ensure(g, wop_need(g, a)) < 0 ||
	    (bf(g) && !xb && !(nh && M->in.c > 1) && cnn_cuda_to_bf16(g->x, g->xb, nx, g->s) < 0) ||
	    (nh && x_to_nhwc(g, n) < 0))
		return -1;
	if ((fused ? conv1_forward_gather(g, a, n) : conv1_forward(g, a, n, a->direct1 & 1)) < 0)
		return -1;
	if (conv2_forward(g, a, n, a->direct2 & 1, train) < 0)
		return -1;
	if (linear_fwd(g, bf(g) ? (const void *)g->pb : g->p, n, M->flat, W(g, P_W3), M->hidden,
		       g->h) < 0)
		return -1;
	/* --fc2 fused: fc1's bias, ReLU and dropout, fc2 and the loss, forward
	 * and backward, fc1's ReLU backward and bias gradient, in one launch
	 * (cnn_gnet_backward starts at fc1's weight gradient) */
	if (a->fc2 && scale_n > 0.f) {
		float *G = g->grads;
		return cnn_cuda_fc2_head(g->h, P + M->t[P_B3].off, train ? M->p_drop2 : 0.f,
					 g->keys + 1, P + M->t[P_W4].off, P + M->t[P_B4].off, g->y,
					 n, M->hidden, M->in.classes, scale_n, drop_scale(M->p_drop2),
					 g->logp, g->stats, g->dlogits, G + M->t[P_W4].off,
					 G + M->t[P_B4].off, g->dh, G + M->t[P_B3].off, g->fhs,
					 g->fhs_n, g->s);
	}
	/* fc1's bias and ReLU, in training its dropout, and for bf16 fc2's
	 * operand hb, in one pass */
	if (cnn_cuda_dropout_fwd(g->h, P + M->t[P_B3].off, M->hidden, (size_t)n * M->hidden,
				 train ? M->p_drop2 : 0.f, g->keys + 1, bf(g) ? g->hb : NULL, g->s) < 0)
		return -1;
	/* fc2's bias rides on the loss, and in training its gradient */
	if (linear_fwd(g, bf(g) ? (const void *)g->hb : g->h, n, M->hidden, W(g, P_W4),
		       M->in.classes, g->logits) < 0)
		return -1;
	return cnn_cuda_logsoftmax_nll_fwd(g->logits, P + M->t[P_B4].off, g->y, n, M->in.classes,
					   g->logp, g->stats, scale_n > 0.f ? g->dlogits : NULL,
					   bf(g) ? g->dlb : NULL, scale_n,
					   scale_n > 0.f ? g->grads + M->t[P_B4].off : NULL, g->s);
}

/* With two streams the weight gradients run on sw as their inputs are
 * final (fork_w), the data gradients on s, so the critical path is s's
 * chain (the GEMMs' dX, the pool, conv2's backward-data, conv1's
 * backward-filter) while conv2's backward-filter, the largest of the
 * weight-gradient calls, runs beside it:
 *
 *   s:  nll' -+- dh = dl W4, relu' -+- dp = dh W3, pool' -+- conv2 data', relu' + db1, conv1 filter' -+- join
 *   sw:       +- dW4                +- dW3, db3 [FC]      +- db2 (from dp), conv2 filter' -----------+
 *
 * (pool' writes da2 only where a call reads it: needs_da2; conv1's filter'
 * and db1 ride on conv2's data' where both are the project's kernels in
 * NCHW: conv1_on_conv2.)
 * Nothing s writes after a fork is read by sw: each buffer sw reads is
 * written once per step, before the fork that hands it over, and the next
 * step's writes wait for the join (and with a graph for the whole replay).
 * The two layers' bias gradients have scratch of their own (bgs_off). */
int cnn_gnet_backward(struct cnn_gnet *g, int n,
		      int (*ready)(void *ctx, int bucket, cudaStream_t on), void *ctx)
{
	const struct cnn_model *M = &g->m;
	const struct cnn_gnet_algos *a = algos_for(g, n);
	float *G = g->grads;
	int K = M->in.classes;
	float s1 = drop_scale(M->p_drop1), s2 = drop_scale(M->p_drop2);
	const void *dl = bf(g) ? (const void *)g->dlb : g->dlogits;
	const void *dh = bf(g) ? (const void *)g->dhb : g->dh;
	if (!a)
		return -1;

	/* dlogits (and for bf16 dlb) and fc2's bias gradient: the forward's
	 * (cnn_gnet_forward with scale_n, the loss's kernel); with --fc2 fused
	 * also fc2's weight gradient, dh through fc1's ReLU and fc1's bias
	 * gradient (cnn_cuda_fc2_head) */
	int fused = a->fc2;
	if ((!fused &&
	     (fork_w(g, 0) < 0 ||
	      linear_bwd_w(g, bf(g) ? (const void *)g->hb : g->h, n, M->hidden, K, dl, g->dlogits,
			   G + M->t[P_W4].off, NULL) < 0 ||
	      linear_bwd_x(g, n, M->hidden, W(g, P_W4), K, dl, g->dh, s2) < 0 ||
	      cnn_cuda_relu_bwd(g->dh, g->h, (size_t)n * M->hidden, bf(g) ? g->dhb : NULL,
				g->s) < 0)) ||
	    fork_w(g, 1) < 0 ||
	    linear_bwd_w(g, bf(g) ? (const void *)g->pb : g->p, n, M->flat, M->hidden, dh, g->dh,
			 G + M->t[P_W3].off, fused ? NULL : G + M->t[P_B3].off) < 0)
		return -1;
	if (ready && ready(ctx, CNN_BUCKET_FC, g->sw) < 0)
		return -1;
	/* p is the pool's output after dropout: > 0 exactly where a gradient
	 * flows back through the ReLU, the pool and the mask. */
	int nh = a->nhwc;
	if (linear_bwd_x(g, n, M->flat, W(g, P_W3), M->hidden, dh, g->dp, s1) < 0 ||
	    (ready && ready(ctx, CNN_FC_WEIGHTS_READ, g->s) < 0) ||
	    (needs_da2(a) && maxpool_relu_bwd(g, nh, n) < 0) || fork_w(g, 2) < 0 ||
	    wgrad_bias2(g, a, n, 1) < 0 || dgrad_conv1(g, a, n) < 0 || join_w(g) < 0)
		return -1;
	if (ready && ready(ctx, CNN_BUCKET_CONV, g->s) < 0)
		return -1;
	return 0;
}

/* Times of the pairs choose_bwd timed, the chosen first: ", backward-data
 * with conv1's weight gradient direct/cuDNN 0.200 ms (cuDNN/cuDNN 0.300)",
 * each pair named conv2's call/conv1's call. */
static int describe_pair(const struct cnn_gnet_algos *a, char *buf, size_t len, int k)
{
	static const char *impl[2] = { "cuDNN", "direct" };
	int c1 = (a->direct1 >> 1) & 1, c2 = (a->direct2 >> 1) & 1, more = 0;
	if (k < 0 || (size_t)k >= len)
		return k;
	k += snprintf(buf + k, len - k, ", backward-data with conv1's weight gradient %s/%s %.3f ms",
		      impl[c2], impl[c1], a->msb[c1][c2]);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			if ((i == c1 && j == c2) || a->msb[i][j] <= 0.f || k < 0 || (size_t)k >= len)
				continue;
			k += snprintf(buf + k, len - k, "%s%s/%s %.3f", more++ ? ", " : " (", impl[j],
				      impl[i], a->msb[i][j]);
		}
	if (more && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ")");
	return k;
}

/* ", conv1 direct", or with auto each batch size's choice per call and
 * the times that made it; nothing where cuDNN does it all.  The calls
 * choose_bwd chose together (not timed alone) print as a pair, with
 * conv2's where it is auto, else with conv1's. */
static int describe_conv(const struct cnn_gnet *g, char *buf, size_t len, int k, int layer)
{
	static const char *names[2][3] = {
		{ "forward", "weight gradient" },
		{ "forward and pool", "backward-data", "backward-filter and bias gradient" }
	};
	int calls = layer ? 3 : 2;
	enum cnn_conv_impl impl = layer ? g->conv2 : g->conv1;
	int possible = layer ? conv2_possible(g) : g->m.in.c == 1;
	if (!possible || impl == CNN_CONV_CUDNN || k < 0 || (size_t)k >= len)
		return k;
	if (impl == CNN_CONV_DIRECT)
		return k + snprintf(buf + k, len - k, ", conv%d direct%s", layer + 1,
				    layer ? " (tensor cores)" : "");
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		int direct = layer ? a->direct2 : a->direct1;
		k += snprintf(buf + k, len - k, ", batch %d conv%d", a->n, layer + 1);
		for (int c = 0; c < calls && k >= 0 && (size_t)k < len; c++) {
			const float *ms = layer ? a->ms2[c] : a->ms1[c];
			int d = (direct >> c) & 1;
			if (ms[0] > 0.f && ms[1] < 0.f)
				k += snprintf(buf + k, len - k, "%s %s cuDNN %.3f ms (direct could not launch)",
					      c ? "," : "", names[layer][c], ms[0]);
			else if (ms[0] > 0.f || ms[1] > 0.f)
				k += snprintf(buf + k, len - k, "%s %s %s %.3f ms (%s %.3f)", c ? "," : "",
					      names[layer][c], d ? "direct" : "cuDNN", ms[d],
					      d ? "cuDNN" : "direct", ms[!d]);
			else if (layer)
				k = describe_pair(a, buf, len, k);
			else if (g->conv2 == CNN_CONV_AUTO)
				k += snprintf(buf + k, len - k, ", weight gradient %s (with conv2's backward-data)",
					      d ? "direct" : "cuDNN");
			else
				k = describe_pair(a, buf, len, k);
		}
		/* NCHW: the pool's backward, which only cuDNN's calls need */
		if (layer && a->ms_da2 > 0.f && k >= 0 && (size_t)k < len)
			k += snprintf(buf + k, len - k, ", pool backward %.3f ms (%s)", a->ms_da2,
				      (direct & 6) == 6 ? "skipped" : "run");
	}
	return k;
}

/* ", batch N conv2 cuDNN forward A kept (cudnnFind's candidates timed
 * as graphs: A1 t1 ms, A2 t2, ...)" for each of conv2's calls that had
 * candidates timed (retime_cudnn), in cudnnFind's order. */
static int describe_cands(const struct cnn_gnet *g, char *buf, size_t len, int k)
{
	static const char *names[3] = { "forward", "backward-data", "backward-filter" };
	for (int i = 0; i < g->nalgos; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		int kept[3] = { a->fwd[1], a->bwd_data, a->bwd_filter[1] };
		for (int c = 0; c < 3; c++) {
			if (a->ncand[c] < 2 || a->cand_ms[c][0] <= 0.f || k < 0 || (size_t)k >= len)
				continue;
			k += snprintf(buf + k, len - k, ", batch %d conv2 cuDNN %s %d kept "
				      "(cudnnFind's candidates timed as graphs:", a->n, names[c], kept[c]);
			for (int j = 0; j < a->ncand[c] && k >= 0 && (size_t)k < len; j++) {
				if (a->cand_ms[c][j] < 0.f)
					k += snprintf(buf + k, len - k, "%s %d failed", j ? "," : "",
						      a->cand[c][j]);
				else
					k += snprintf(buf + k, len - k, "%s %d %.3f%s", j ? "," : "",
						      a->cand[c][j], a->cand_ms[c][j], j ? "" : " ms");
			}
			if (k >= 0 && (size_t)k < len)
				k += snprintf(buf + k, len - k, ")");
		}
	}
	return k;
}

/* cuDNN's algorithm names (cudnn_cnn.h's enums, their prefix dropped) */
static const char *fwd_algo_name(int a)
{
	static const char *n[] = { "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
				   "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *bwd_data_algo_name(int a)
{
	static const char *n[] = { "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
				   "WINOGRAD_NONFUSED" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *bwd_filter_algo_name(int a)
{
	static const char *n[] = { "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
				   "WINOGRAD_NONFUSED", "FFT_TILING" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *math_name(cudnnMathType_t m)
{
	return m == CUDNN_TENSOR_OP_MATH ? "tensor ops" :
	       m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? "tensor ops, converting" :
	       m == CUDNN_FMA_MATH ? "FMA" : "default math";
}

/* ", batch N cuDNN: conv2 forward IMPLICIT_PRECOMP_GEMM (FMA), ..." for
 * each batch size: the algorithm and math of each call cuDNN makes, as
 * kept (cudnnFind's pick, or the candidate retime_cudnn kept), so that
 * two runs' steps can be told apart by what cuDNN ran. */
static int describe_cudnn(const struct cnn_gnet *g, char *buf, size_t len, int k)
{
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		struct {
			int on;
			const char *call, *algo;
			cudnnMathType_t math;
		} c[5] = {
			{ !(a->direct1 & 1), "conv1 forward", fwd_algo_name(a->fwd[0]), a->fwd_math[0] },
			{ !(a->direct1 & 2), "conv1 weight gradient", bwd_filter_algo_name(a->bwd_filter[0]),
			  a->bwd_filter_math[0] },
			{ !(a->direct2 & 1), "conv2 forward", fwd_algo_name(a->fwd[1]), a->fwd_math[1] },
			{ !(a->direct2 & 2), "conv2 backward-data", bwd_data_algo_name(a->bwd_data),
			  a->bwd_data_math },
			{ !(a->direct2 & 4), "conv2 backward-filter", bwd_filter_algo_name(a->bwd_filter[1]),
			  a->bwd_filter_math[1] },
		};
		int n = 0;
		for (int j = 0; j < 5 && k >= 0 && (size_t)k < len; j++) {
			if (!c[j].on)
				continue;
			if (!n++)
				k += snprintf(buf + k, len - k, ", batch %d cuDNN:", a->n);
			if (k >= 0 && (size_t)k < len)
				k += snprintf(buf + k, len - k, "%s %s %s (%s)", n > 1 ? "," : "",
					      c[j].call, c[j].algo, math_name(c[j].math));
		}
	}
	return k;
}

void cnn_gnet_describe(const struct cnn_gnet *g, char *buf, size_t len)
{
	size_t v = cudnnGetVersion();
	int bv = 0;
	cublasGetVersion(g->blas, &bv);
	int k = snprintf(buf, len, "cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d, %s", v / 10000, v / 100 % 100,
			 v % 100, bv / 10000, bv / 100 % 100, bv % 100,
			 g->precision == CNN_PREC_TF32 ?
				 (g->tc ? "TF32" : "TF32 asked, fp32 math (no TF32 before compute capability 8.0)") :
			 g->precision == CNN_PREC_FP32 ? "fp32" : "bf16 with fp32 master weights");
	k = describe_conv(g, buf, len, k, 0);
	k = describe_conv(g, buf, len, k, 1);
	k = describe_cands(g, buf, len, k);
	k = describe_cudnn(g, buf, len, k);
	if (g->fc2 == CNN_FC2_FUSED && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ", fc2 fused");
	/* auto: each batch size's head and the times that chose it */
	for (int i = 0; g->fc2 == CNN_FC2_AUTO && i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		if (!cnn_cuda_fc2_head_fits(g->m.hidden, g->m.in.classes)) {
			k += snprintf(buf + k, len - k, ", batch %d fc2 cuBLAS (the fused head does "
				      "not take %d hidden units and %d classes)", a->n, g->m.hidden,
				      g->m.in.classes);
			continue;
		}
		k += snprintf(buf + k, len - k, ", batch %d fc2 %s %.3f ms (%s %.3f)", a->n,
			      a->fc2 ? "fused" : "cuBLAS", a->ms_fc2[a->fc2], a->fc2 ? "cuBLAS" : "fused",
			      a->ms_fc2[!a->fc2]);
	}
	/* how auto timed the replayed batch's calls (time_call) */
	if (g->graph_timed + g->graph_refused && k >= 0 && (size_t)k < len) {
		k += snprintf(buf + k, len - k, ", batch %d's calls timed as CUDA graphs", g->graph_batch);
		if (g->graph_refused && k >= 0 && (size_t)k < len)
			k += snprintf(buf + k, len - k, " (%d of %d on the stream: no graph of them ran)",
				      g->graph_refused, g->graph_timed + g->graph_refused);
	}
	if (g->fallback[0] && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ", the project's kernels failed to launch here (%s): "
			      "cuDNN there", g->fallback);
	/* the layout; with auto, each batch size's and the times that chose it */
	if (g->layout != CNN_LAYOUT_AUTO) {
		if (k >= 0 && (size_t)k < len)
			snprintf(buf + k, len - k, ", %s", g->layout == CNN_LAYOUT_NHWC ? "NHWC" : "NCHW");
		return;
	}
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		char other[sizeof(a->why) + 8];
		if (a->ms[!a->nhwc] < 0.f)
			snprintf(other, sizeof(other), "%s", a->why);
		else
			snprintf(other, sizeof(other), "%s %.3f ms", a->nhwc ? "NCHW" : "NHWC",
				 a->ms[!a->nhwc]);
		k += snprintf(buf + k, len - k, ", batch %d %s (convolutions %.3f ms, %s%s)", a->n,
			      a->nhwc ? "NHWC" : "NCHW", a->ms[a->nhwc], other,
			      g->others[i].n == a->n ?
				      "; the step's graph timed in each layout at its capture" : "");
	}
}
