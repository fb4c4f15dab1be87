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

#include "layers.h"
#include "net_impl.h"

#include "cuda/errors.h"
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

/* The options that this GPU, this data or each other refuse.  0, else -1
 * with g->err. */
static int init_check(struct cnn_gnet *g, int streams)
{
	const struct cnn_model *M = &g->m;
	if (g->max_batch < 1) {
		snprintf(g->err, sizeof(g->err), "largest batch %d: expected 1 or more images", g->max_batch);
		return -1;
	}
	if (g->conv1 == CNN_CONV_DIRECT && M->in.c != 1) {
		snprintf(g->err, sizeof(g->err), "conv1 direct: the direct kernels take one input channel, "
			 "this data set's images have %d (use auto or cudnn)", M->in.c);
		return -1;
	}
	g->tc = cnn_cuda_tensor_cores();
	if (g->tc < 0) {
		snprintf(g->err, sizeof(g->err), "%s", cnn_cuda_last_error());
		return -1;
	}
	if (g->conv2 == CNN_CONV_DIRECT && !g->tc) {
		int dev = 0, major = 0, minor = 0;
		cudaGetDevice(&dev);
		cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
		cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
		snprintf(g->err, sizeof(g->err), "conv2 direct: the tensor-core kernels need TF32 and bf16 "
			 "(compute capability 8.0 or newer), and GPU %d is sm_%d%d (use --conv2 auto or "
			 "cudnn)", dev, major, minor);
		return -1;
	}
	if (g->conv2 == CNN_CONV_DIRECT && g->precision == CNN_PREC_FP32) {
		snprintf(g->err, sizeof(g->err), "conv2 direct: the tensor-core kernels compute in TF32 "
			 "or bf16, and --precision fp32 takes FMA kernels only (use tf32, bf16, or "
			 "--conv2 auto or cudnn)");
		return -1;
	}
	if (streams != 1 && streams != 2) {
		snprintf(g->err, sizeof(g->err), "%d backward streams: expected 1 or 2", streams);
		return -1;
	}
	return 0;
}

/* cuDNN's and cuBLAS's handles on s, and with two backward streams a
 * second stream, its handles and the events between them. */
static int init_handles(struct cnn_gnet *g, int streams, cudaStream_t s)
{
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
	return cnn_gnet_use_streams(g, streams);
}

/* The convolutions' descriptors: filters in both layouts, and the math. */
static int init_descs(struct cnn_gnet *g)
{
	const struct cnn_model *M = &g->m;
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
	return set_math(g);
}

/* The step's tensors for max_batch images: activations and gradients,
 * the layouts' and bf16's copies. */
static int init_tensors(struct cnn_gnet *g)
{
	const struct cnn_model *M = &g->m;
	size_t N = (size_t)g->max_batch;
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
	size_t nw = M->t[P_W1].n + M->t[P_W2].n;
	if (g->layout != CNN_LAYOUT_NCHW &&
	    (alloc(&g->wt, nw * es) < 0 || alloc(&g->dwt, nw * es) < 0 ||
	     (M->in.c > 1 && alloc(&g->xt, nx * es) < 0)))
		return -1;
	if (bf(g) && (alloc(&g->wb, M->nparams * 2) < 0 || alloc(&g->xb, nx * 2) < 0 ||
		      alloc(&g->pb, np * 2) < 0 || alloc(&g->hb, nh * 2) < 0 ||
		      alloc(&g->dlb, nk * 2) < 0 || alloc(&g->dhb, nh * 2) < 0 ||
		      alloc(&g->dwb, (M->t[P_W1].n + M->t[P_W2].n) * 2) < 0))
		return -1;
	return 0;
}

/* The project's kernels' scratch: the bias gradients', conv1's and
 * conv2's direct kernels', fc2's fused classifier's (counters at 0, where each
 * launch leaves them). */
static int init_scratch(struct cnn_gnet *g)
{
	const struct cnn_model *M = &g->m;
	int max_batch = g->max_batch;
	size_t es = g->esize;
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
	/* conv1's weight gradient by its own kernel, or on conv2's
	 * backward-data (conv2_dgrad_conv1): a scratch each */
	size_t c1w = M->in.c == 1 && g->conv1 != CNN_CONV_CUDNN ?
		     cnn_cuda_conv1_wgrad_scratch(max_batch, M->in.h, M->in.w, M->c1) : 0;
	if (c1w) {
		if (alloc(&g->c1w, c1w * 4) < 0)
			return -1;
		cudaCheck(cudaMemset(g->c1w, 0, c1w * 4));
	}
	int direct2 = cnn_gnet_conv2_possible(g) && g->conv2 != CNN_CONV_CUDNN;
	if (c1w && direct2 &&
	    alloc(&g->c1s, cnn_cuda_conv3_dgrad_conv1_scratch(max_batch, M->c1, M->h1, M->w1) * 4) < 0)
		return -1;
	/* fc2's fused classifier: its blocks' partial sums and their counter */
	g->fhs_n = cnn_cuda_fc2_fused_scratch(max_batch, M->hidden, M->in.classes);
	if (g->fhs_n) {
		if (alloc(&g->fhs, g->fhs_n * 4) < 0)
			return -1;
		cudaCheck(cudaMemset(g->fhs, 0, g->fhs_n * 4));
	}
	if (direct2 &&
	    (alloc(&g->c2s, cnn_cuda_conv3_wgrad_scratch(max_batch, M->c1, M->h1, M->w1, M->c2) * 4) < 0 ||
	     alloc(&g->c2w, 2 * M->t[P_W2].n * es) < 0))
		return -1;
	return 0;
}

/* The ones the bias gradients' GEMVs read, the gradients and the keys at
 * 0, all written before the first step on s. */
static int init_values(struct cnn_gnet *g)
{
	size_t N = (size_t)g->max_batch;
	float *h = calloc(N, sizeof(*h));
	if (!h) {
		snprintf(g->err, sizeof(g->err), "out of host memory for the %zu ones of the bias gradients", N);
		return -1;
	}
	for (size_t i = 0; i < N; i++)
		h[i] = 1.f;
	cudaError_t e = cudaMemcpy(g->ones, h, N * 4, cudaMemcpyHostToDevice);
	free(h);
	cudaCheck(e);
	cudaCheck(cudaMemset(g->grads, 0, g->m.nparams * 4));
	cudaCheck(cudaMemset(g->keys_own, 0, 2 * 8));
	g->keys = g->keys_own;
	/* the legacy stream's work above is not ordered with s's */
	cudaCheck(cudaDeviceSynchronize());
	return 0;
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
	if (init_check(g, streams) < 0 || init_handles(g, streams, s) < 0 || init_descs(g) < 0 ||
	    init_tensors(g) < 0 || init_scratch(g) < 0 || init_values(g) < 0)
		return -1;
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

int cnn_gnet_descs(struct cnn_gnet *g, int n, int nhwc)
{
	const struct cnn_model *M = &g->m;
	cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	cudnnCheck(cudnnSetTensor4dDescriptor(g->tx, f, dtype(g), n, M->in.c, M->in.h, M->in.w));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t1, f, dtype(g), n, M->c1, M->h1, M->w1));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t2, f, dtype(g), n, M->c2, M->h2, M->w2));
	return 0;
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
						  g->ws_bytes, &zero, cnn_gnet_filt(g, l, a->nhwc), dw));
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
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->t1, g->a1, cnn_gnet_filt(g, 1, nh),
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
	cudnnCheck(cudnnConvolutionBackwardData(g->dnn, &one, cnn_gnet_filt(g, 1, nh), conv_w(g, 1, nh), g->t2,
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
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->tx, conv_x(g, nh), cnn_gnet_filt(g, 0, nh),
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

/* Dropout's 1/(1-p) rides on the GEMMs that produce dh and dp: kept
 * elements are > 0 after the ReLU, dropped ones are 0 and gated off. */
static float drop_scale(float p)
{
	return p > 0.f ? 1.f / (1.f - p) : 1.f;
}

/* fc2's classifier for n images on s alone, as auto times it: fused, the one
 * kernel (cnn_cuda_fc2_fused); else the calls it replaces, as the step
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
		return cnn_cuda_fc2_fused(g->h, P + M->t[P_B3].off, M->p_drop2, g->keys + 1,
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

int cnn_gnet_call(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
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

static const struct cnn_gnet_algos *algos_for(struct cnn_gnet *g, int n)
{
	const struct cnn_gnet_algos *a = cnn_gnet_find_algos(g, n);
	if (!a)
		snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	else if (cnn_gnet_descs(g, n, a->nhwc) < 0)
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

/* One forward or backward of the GPU step: what its stages read. */
struct gpu_step {
	struct cnn_gnet *g;
	const struct cnn_gnet_algos *a;
	int n, train;
	int gather;            /* conv1's direct forward gathers the batch */
	float scale_n;
	int (*ready)(void *ctx, int bucket, cudaStream_t on);
	void *ctx;
};

/* The batch, where conv1 does not gather it, with its bf16 copy; the
 * weights as this batch's algorithms read them (bf16, packed, OHWI),
 * where the last update did not write them; bf16: the input as the
 * tensor cores read it; channels-last: the input transposed.  Not a layer:
 * what the stages read. */
static int forward_inputs(struct gpu_step *S)
{
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	int n = S->n, nh = S->a->nhwc, batch = g->batch.set;
	size_t nx = (size_t)n * M->in.c * M->in.h * M->in.w;
	g->batch.set = 0;
	S->gather = batch && (S->a->direct1 & 1) && M->in.c == 1;
	if (batch && !S->gather &&
	    cnn_cuda_gather(g->batch.xs, g->batch.ys, g->batch.idx, n, M->in.c, M->in.h, M->in.w,
			    &g->batch.norm, g->x, g->y, g->xb, g->s) < 0)
		return -1;
	if (batch)
		g->xb_given = g->xb != NULL;
	int xb = g->xb_given;
	g->xb_given = 0;
	if (cnn_gnet_wop_ensure(g, wop_need(g, S->a)) < 0 ||
	    (bf(g) && !xb && !(nh && M->in.c > 1) && cnn_cuda_to_bf16(g->x, g->xb, nx, g->s) < 0) ||
	    (nh && x_to_nhwc(g, n) < 0))
		return -1;
	return 0;
}

/* conv1 with its bias and ReLU (gathering the batch where it may) */
static int fwd_conv1(void *step)
{
	struct gpu_step *S = step;
	return S->gather ? conv1_forward_gather(S->g, S->a, S->n) :
			   conv1_forward(S->g, S->a, S->n, S->a->direct1 & 1);
}

static int fwd_conv2(void *step)
{
	struct gpu_step *S = step;
	return conv2_forward(S->g, S->a, S->n, S->a->direct2 & 1, S->train);
}

/* fc1's GEMM (its bias rides on the next call) */
static int fwd_fc1(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	return linear_fwd(g, bf(g) ? (const void *)g->pb : g->p, S->n, M->flat, W(g, P_W3),
			  M->hidden, g->h);
}

/* fc1's bias, ReLU and (training) dropout, and for bf16 fc2's operand hb,
 * in one pass */
static int fwd_bias3_drop2(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	return cnn_cuda_dropout_fwd(g->h, g->params + M->t[P_B3].off, M->hidden,
				    (size_t)S->n * M->hidden, S->train ? M->p_drop2 : 0.f,
				    g->keys + 1, bf(g) ? g->hb : NULL, g->s);
}

/* fc2's GEMM (its bias rides on the loss) */
static int fwd_fc2(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	return linear_fwd(g, bf(g) ? (const void *)g->hb : g->h, S->n, M->hidden, W(g, P_W4),
			  M->in.classes, g->logits);
}

/* fc2's bias and the loss, and in training the loss's gradient and fc2's
 * bias gradient */
static int fwd_nll(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	int grad = S->scale_n > 0.f;
	return cnn_cuda_logsoftmax_nll_fwd(g->logits, g->params + M->t[P_B4].off, g->y, S->n,
					   M->in.classes, g->logp, g->stats,
					   grad ? g->dlogits : NULL, bf(g) ? g->dlb : NULL,
					   S->scale_n, grad ? g->grads + M->t[P_B4].off : NULL,
					   g->s);
}

/* --fc2 fused: fc1's bias, ReLU and dropout, fc2 and the loss, forward
 * and backward, fc1's ReLU backward and bias gradient, in one launch
 * (the backward starts at fc1's weight gradient) */
static int fwd_fc2_fused(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	const float *P = g->params;
	float *G = g->grads;
	return cnn_cuda_fc2_fused(g->h, P + M->t[P_B3].off, S->train ? M->p_drop2 : 0.f,
				  g->keys + 1, P + M->t[P_W4].off, P + M->t[P_B4].off, g->y, S->n,
				  M->hidden, M->in.classes, S->scale_n, drop_scale(M->p_drop2),
				  g->logp, g->stats, g->dlogits, G + M->t[P_W4].off,
				  G + M->t[P_B4].off, g->dh, G + M->t[P_B3].off, g->fhs, g->fhs_n,
				  g->s);
}

static const struct cnn_stage gpu_forward[] = {
	{ "conv1 with its bias and ReLU (cuDNN + bias_relu, or the direct kernel)", CNN_CONV1,
	  CNN_RELU1, fwd_conv1 },
	{ "conv2 with its bias, ReLU, the pool and dropout1 in one epilogue", CNN_CONV2,
	  CNN_DROP1, fwd_conv2 },
	{ "fc1's GEMM", CNN_FC1, CNN_FC1, fwd_fc1 },
	{ "fc1's bias, relu3 and dropout2 in one pass", CNN_BIAS3, CNN_DROP2, fwd_bias3_drop2 },
	{ "fc2's GEMM", CNN_FC2, CNN_FC2, fwd_fc2 },
	{ "fc2's bias with the loss", CNN_BIAS4, CNN_NLL, fwd_nll },
};

static const struct cnn_stage gpu_forward_fc2_fused[] = {
	{ "conv1 with its bias and ReLU (cuDNN + bias_relu, or the direct kernel)", CNN_CONV1,
	  CNN_RELU1, fwd_conv1 },
	{ "conv2 with its bias, ReLU, the pool and dropout1 in one epilogue", CNN_CONV2,
	  CNN_DROP1, fwd_conv2 },
	{ "fc1's GEMM", CNN_FC1, CNN_FC1, fwd_fc1 },
	{ "fc2 fused: fc1's bias, relu3, dropout2, fc2 and the loss, and their backward",
	  CNN_BIAS3, CNN_NLL, fwd_fc2_fused },
};

#define NSTAGES(t) (sizeof(t) / sizeof((t)[0]))

int cnn_gnet_forward(struct cnn_gnet *g, int n, int train, float scale_n)
{
	struct gpu_step S = { .g = g, .a = algos_for(g, n), .n = n, .train = train,
			      .scale_n = scale_n };
	if (!S.a) {
		g->batch.set = 0;
		return -1;
	}
	if (forward_inputs(&S) < 0)
		return -1;
	if (S.a->fc2 && scale_n > 0.f)
		return cnn_stages_run(gpu_forward_fc2_fused, NSTAGES(gpu_forward_fc2_fused), &S);
	return cnn_stages_run(gpu_forward, NSTAGES(gpu_forward), &S);
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
/* dW4 on sw; dh = dl W4, scaled for dropout2, through relu3's backward */
static int bwd_fc2(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	int n = S->n, K = M->in.classes;
	const void *dl = bf(g) ? (const void *)g->dlb : g->dlogits;
	return fork_w(g, 0) < 0 ||
	       linear_bwd_w(g, bf(g) ? (const void *)g->hb : g->h, n, M->hidden, K, dl, g->dlogits,
			    g->grads + M->t[P_W4].off, NULL) < 0 ||
	       linear_bwd_x(g, n, M->hidden, W(g, P_W4), K, dl, g->dh, drop_scale(M->p_drop2)) < 0 ||
	       cnn_cuda_relu_bwd(g->dh, g->h, (size_t)n * M->hidden, bf(g) ? g->dhb : NULL, g->s) < 0 ?
	       -1 : 0;
}

/* dW3 (and db3, where fc2 is not fused) on sw, then the linear layers'
 * bucket is ready there; dp = dh W3 scaled for dropout1 on s */
static int bwd_fc1(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_model *M = &g->m;
	int n = S->n;
	const void *dh = bf(g) ? (const void *)g->dhb : g->dh;
	if (fork_w(g, 1) < 0 ||
	    linear_bwd_w(g, bf(g) ? (const void *)g->pb : g->p, n, M->flat, M->hidden, dh, g->dh,
			 g->grads + M->t[P_W3].off, S->a->fc2 ? NULL : g->grads + M->t[P_B3].off) < 0 ||
	    (S->ready && S->ready(S->ctx, CNN_BUCKET_FC, g->sw) < 0) ||
	    linear_bwd_x(g, n, M->flat, W(g, P_W3), M->hidden, dh, g->dp, drop_scale(M->p_drop1)) < 0 ||
	    (S->ready && S->ready(S->ctx, CNN_FC_WEIGHTS_READ, g->s) < 0))
		return -1;
	return 0;
}

/* p is the pool's output after dropout: > 0 exactly where a gradient
 * flows back through the ReLU, the pool and the mask.  The pool's
 * backward (where a call reads da2), conv2's weight and bias gradients on
 * sw, its backward-data and conv1's gradients on s; then the streams join
 * and the convolutions' bucket is ready. */
static int bwd_convs(void *step)
{
	struct gpu_step *S = step;
	struct cnn_gnet *g = S->g;
	const struct cnn_gnet_algos *a = S->a;
	if ((needs_da2(a) && maxpool_relu_bwd(g, a->nhwc, S->n) < 0) || fork_w(g, 2) < 0 ||
	    wgrad_bias2(g, a, S->n, 1) < 0 || dgrad_conv1(g, a, S->n) < 0 || join_w(g) < 0 ||
	    (S->ready && S->ready(S->ctx, CNN_BUCKET_CONV, g->s) < 0))
		return -1;
	return 0;
}

static const struct cnn_stage gpu_backward[] = {
	{ "the loss's gradient and fc2's bias gradient: in the forward's loss kernel", CNN_NLL,
	  CNN_BIAS4, NULL },
	{ "fc2's GEMMs (dW4 on sw), dropout2's scale on dh, relu3's backward", CNN_FC2,
	  CNN_RELU3, bwd_fc2 },
	{ "fc1's GEMMs (dW3 and db3 on sw), dropout1's scale on dp", CNN_BIAS3, CNN_DROP1,
	  bwd_fc1 },
	{ "the pool, conv2 (weights on sw) and conv1, their ReLUs and biases", CNN_POOL, CNN_CONV1,
	  bwd_convs },
};

static const struct cnn_stage gpu_backward_fc2_fused[] = {
	{ "fc2 fused (in the forward): the loss, fc2, dropout2, relu3, fc1's bias", CNN_NLL,
	  CNN_BIAS3, NULL },
	{ "fc1's GEMMs (dW3 on sw), dropout1's scale on dp", CNN_FC1, CNN_DROP1, bwd_fc1 },
	{ "the pool, conv2 (weights on sw) and conv1, their ReLUs and biases", CNN_POOL, CNN_CONV1,
	  bwd_convs },
};

int cnn_gnet_backward(struct cnn_gnet *g, int n,
		      int (*ready)(void *ctx, int bucket, cudaStream_t on), void *ctx)
{
	struct gpu_step S = { .g = g, .a = algos_for(g, n), .n = n, .ready = ready, .ctx = ctx };
	if (!S.a)
		return -1;
	if (S.a->fc2)
		return cnn_stages_run(gpu_backward_fc2_fused, NSTAGES(gpu_backward_fc2_fused), &S);
	return cnn_stages_run(gpu_backward, NSTAGES(gpu_backward), &S);
}

const struct cnn_stage *cnn_gnet_stages(int fc2_fused, int backward, size_t *n)
{
	static const struct {
		const struct cnn_stage *s;
		size_t n;
	} t[2][2] = {
		{ { gpu_forward, NSTAGES(gpu_forward) }, { gpu_backward, NSTAGES(gpu_backward) } },
		{ { gpu_forward_fc2_fused, NSTAGES(gpu_forward_fc2_fused) },
		  { gpu_backward_fc2_fused, NSTAGES(gpu_backward_fc2_fused) } },
	};
	*n = t[!!fc2_fused][!!backward].n;
	return t[!!fc2_fused][!!backward].s;
}
