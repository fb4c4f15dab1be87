/* The Net on the GPU (see net.h).  Layouts are the CPU path's: NCHW
 * activations, OIHW conv weights, [out][in] linear weights, row-major.
 * cuBLAS is column-major, so a row-major Y = X W^T is computed as the
 * column-major Y^T = W^T' X^T with W read transposed (see linear_*).
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

static int set_math(struct cnn_gnet *g)
{
	/* TF32 on tensor cores where allowed; fp32: FMA kernels only. */
	cublasCheck(cublasSetMathMode(g->blas, g->precision == CNN_PREC_TF32 ?
					       CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
	for (int l = 0; l < 2; l++)
		cudnnCheck(cudnnSetConvolutionMathType(g->cv[l], g->precision == CNN_PREC_TF32 ?
							       CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
	return 0;
}

int cnn_gnet_init(struct cnn_gnet *g, const struct cnn_model *m, int max_batch,
		  enum cnn_precision precision, cudaStream_t s)
{
	memset(g, 0, sizeof(*g));
	g->m = *m;
	g->m.params = g->m.grads = NULL;
	g->max_batch = max_batch;
	g->precision = precision;
	g->s = s;
	const struct cnn_model *M = &g->m;
	size_t N = (size_t)max_batch;

	cudnnCheck(cudnnCreate(&g->dnn));
	cudnnCheck(cudnnSetStream(g->dnn, s));
	cublasCheck(cublasCreate(&g->blas));
	cublasCheck(cublasSetStream(g->blas, s));
	/* A workspace of our own: cuBLAS must not allocate inside a captured graph. */
	if (alloc(&g->blas_ws, 4u << 20) < 0)
		return -1;
	cublasCheck(cublasSetWorkspace(g->blas, g->blas_ws, 4u << 20));
	cublasCheck(cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_HOST));

	cudnnCheck(cudnnCreateTensorDescriptor(&g->tx));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->t1));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->t2));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->tb1));
	cudnnCheck(cudnnCreateTensorDescriptor(&g->tb2));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->tb1, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, M->c1, 1, 1));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->tb2, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, M->c2, 1, 1));
	int cin[2] = { M->in.c, M->c1 }, cout[2] = { M->c1, M->c2 };
	for (int l = 0; l < 2; l++) {
		cudnnCheck(cudnnCreateFilterDescriptor(&g->fw[l]));
		cudnnCheck(cudnnSetFilter4dDescriptor(g->fw[l], CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
						      cout[l], cin[l], 3, 3));
		cudnnCheck(cudnnCreateConvolutionDescriptor(&g->cv[l]));
		/* PyTorch's conv is a cross-correlation, as the CPU path's */
		cudnnCheck(cudnnSetConvolution2dDescriptor(g->cv[l], 0, 0, 1, 1, 1, 1,
							   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	}
	if (set_math(g) < 0)
		return -1;

	size_t n1 = N * M->c1 * M->h1 * M->w1, n2 = N * M->c2 * M->h2 * M->w2;
	size_t np = N * M->flat, nh = N * M->hidden, nk = N * M->in.classes;
	if (alloc(&g->params, M->nparams * 4) < 0 || alloc(&g->grads, M->nparams * 4) < 0 ||
	    alloc(&g->x, N * M->in.c * M->in.h * M->in.w * 4) < 0 || alloc(&g->a1, n1 * 4) < 0 ||
	    alloc(&g->a2, n2 * 4) < 0 || alloc(&g->p, np * 4) < 0 || alloc(&g->h, nh * 4) < 0 ||
	    alloc(&g->logits, nk * 4) < 0 || alloc(&g->logp, nk * 4) < 0 ||
	    alloc(&g->dlogits, nk * 4) < 0 || alloc(&g->dh, nh * 4) < 0 || alloc(&g->dp, np * 4) < 0 ||
	    alloc(&g->da2, n2 * 4) < 0 || alloc(&g->da1, n1 * 4) < 0 || alloc(&g->ones, N * 4) < 0 ||
	    alloc(&g->arg, np) < 0 || alloc(&g->y, N) < 0 || alloc(&g->stats, 2 * 4) < 0 ||
	    alloc(&g->keys, 2 * 8) < 0)
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
	cudaCheck(cudaMemset(g->keys, 0, 2 * 8));
	/* the legacy stream's work above is not ordered with s's */
	cudaCheck(cudaDeviceSynchronize());
	return 0;
}

void cnn_gnet_free(struct cnn_gnet *g)
{
	void *bufs[] = { g->params, g->grads, g->x, g->a1, g->a2, g->p, g->h, g->logits, g->logp,
			 g->dlogits, g->dh, g->dp, g->da2, g->da1, g->ones, g->arg, g->y, g->stats,
			 g->keys, g->ws, g->blas_ws };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			cudaFree(bufs[i]);
	for (int l = 0; l < 2; l++) {
		if (g->fw[l])
			cudnnDestroyFilterDescriptor(g->fw[l]);
		if (g->cv[l])
			cudnnDestroyConvolutionDescriptor(g->cv[l]);
	}
	cudnnTensorDescriptor_t t[] = { g->tx, g->t1, g->t2, g->tb1, g->tb2 };
	for (size_t i = 0; i < 5; i++)
		if (t[i])
			cudnnDestroyTensorDescriptor(t[i]);
	if (g->blas)
		cublasDestroy(g->blas);
	if (g->dnn)
		cudnnDestroy(g->dnn);
	memset(g, 0, sizeof(*g));
}

/* The activations' descriptors for a batch of n. */
static int set_batch(struct cnn_gnet *g, int n)
{
	const struct cnn_model *M = &g->m;
	cudnnCheck(cudnnSetTensor4dDescriptor(g->tx, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, M->in.c,
					      M->in.h, M->in.w));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t1, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, M->c1,
					      M->h1, M->w1));
	cudnnCheck(cudnnSetTensor4dDescriptor(g->t2, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, M->c2,
					      M->h2, M->w2));
	return 0;
}

/* fp32 takes only FMA kernels; TF32 takes the fastest of any kind. */
static int math_ok(const struct cnn_gnet *g, cudnnMathType_t t)
{
	return g->precision == CNN_PREC_TF32 || t == CUDNN_FMA_MATH || t == CUDNN_DEFAULT_MATH;
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
				 "batch of %d (%s)", what, n,                                \
				 g->precision == CNN_PREC_TF32 ? "tf32" : "fp32");           \
			return -1;                                                           \
		}                                                                            \
		(out) = (perf)[k_].algo;                                                     \
		(math) = (perf)[k_].mathType;                                                \
		if ((perf)[k_].memory > need)                                                \
			need = (perf)[k_].memory;                                            \
	} while (0)

int cnn_gnet_prepare(struct cnn_gnet *g, int n)
{
	if (find_algos(g, n))
		return 0;
	if (n < 1 || n > g->max_batch) {
		snprintf(g->err, sizeof(g->err), "batch of %d images: expected 1 to %d", n, g->max_batch);
		return -1;
	}
	struct cnn_gnet_algos a = { .n = n };
	size_t need = 0;
	int cnt;
	cudnnConvolutionFwdAlgoPerf_t fp[16];
	cudnnConvolutionBwdDataAlgoPerf_t dp[16];
	cudnnConvolutionBwdFilterAlgoPerf_t wp[16];
	cudnnTensorDescriptor_t in[2] = { g->tx, g->t1 }, out[2] = { g->t1, g->t2 };

	if (set_batch(g, n) < 0)
		return -1;
	for (int l = 0; l < 2; l++) {
		cudnnCheck(cudnnFindConvolutionForwardAlgorithm(g->dnn, in[l], g->fw[l], g->cv[l], out[l],
								16, &cnt, fp));
		PICK(fp, cnt, a.fwd[l], a.fwd_math[l], "forward");
		cudnnCheck(cudnnFindConvolutionBackwardFilterAlgorithm(g->dnn, in[l], out[l], g->cv[l],
								       g->fw[l], 16, &cnt, wp));
		PICK(wp, cnt, a.bwd_filter[l], a.bwd_filter_math[l], "backward-filter");
	}
	cudnnCheck(cudnnFindConvolutionBackwardDataAlgorithm(g->dnn, g->fw[1], g->t2, g->cv[1], g->t1,
							     16, &cnt, dp));
	PICK(dp, cnt, a.bwd_data, a.bwd_data_math, "backward-data");
	if (need > g->ws_bytes && !g->ws_frozen) {
		if (g->ws)
			cudaCheck(cudaFree(g->ws));
		g->ws = NULL;
		if (alloc(&g->ws, need) < 0)
			return -1;
		g->ws_bytes = need;
	}
	if (g->nalgos == 8)
		memmove(g->algos, g->algos + 1, 7 * sizeof(a));
	g->algos[g->nalgos < 8 ? g->nalgos++ : 7] = a;
	return 0;
}

/* Y (n x out) = X (n x in) W^T, row-major. */
static int linear_fwd(struct cnn_gnet *g, const float *x, int n, int in, const float *w, int out,
		      float *y)
{
	cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in,
				&zero, y, out));
	return 0;
}

/* dW = dY^T X, db = colsum(dY), dX = scale * dY W (dx may be NULL). */
static int linear_bwd(struct cnn_gnet *g, const float *x, int n, int in, const float *w, int out,
		      const float *dy, float *dw, float *db, float *dx, float scale)
{
	cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy, out,
				&zero, dw, in));
	cublasCheck(cublasSgemv(g->blas, CUBLAS_OP_N, out, n, &one, dy, out, g->ones, 1, &zero, db, 1));
	if (dx)
		cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &scale, w, in, dy,
					out, &zero, dx, in));
	return 0;
}

static const struct cnn_gnet_algos *algos_for(struct cnn_gnet *g, int n)
{
	const struct cnn_gnet_algos *a = find_algos(g, n);
	if (!a)
		snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	else if (set_batch(g, n) < 0)
		return NULL;
	return a;
}

int cnn_gnet_forward(struct cnn_gnet *g, int n, int train)
{
	const struct cnn_model *M = &g->m;
	const struct cnn_gnet_algos *a = algos_for(g, n);
	const float *P = g->params;
	if (!a)
		return -1;
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[0], a->fwd_math[0]));
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->tx, g->x, g->fw[0], P + M->t[P_W1].off,
					   g->cv[0], a->fwd[0], g->ws, g->ws_bytes, &zero, g->t1, g->a1));
	if (cnn_cuda_bias_relu(g->a1, P + M->t[P_B1].off, n, M->c1, M->h1 * M->w1, g->s) < 0)
		return -1;
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[1], a->fwd_math[1]));
	cudnnCheck(cudnnConvolutionForward(g->dnn, &one, g->t1, g->a1, g->fw[1], P + M->t[P_W2].off,
					   g->cv[1], a->fwd[1], g->ws, g->ws_bytes, &zero, g->t2, g->a2));
	if (cnn_cuda_bias_relu(g->a2, P + M->t[P_B2].off, n, M->c2, M->h2 * M->w2, g->s) < 0 ||
	    cnn_cuda_maxpool2_fwd(g->a2, n * M->c2, M->h2, M->w2, g->p, g->arg, g->s) < 0)
		return -1;
	if (train && M->p_drop1 > 0.f &&
	    cnn_cuda_dropout_fwd(g->p, (size_t)n * M->flat, M->p_drop1, g->keys, g->s) < 0)
		return -1;
	if (linear_fwd(g, g->p, n, M->flat, P + M->t[P_W3].off, M->hidden, g->h) < 0 ||
	    cnn_cuda_bias_relu(g->h, P + M->t[P_B3].off, n, M->hidden, 1, g->s) < 0)
		return -1;
	if (train && M->p_drop2 > 0.f &&
	    cnn_cuda_dropout_fwd(g->h, (size_t)n * M->hidden, M->p_drop2, g->keys + 1, g->s) < 0)
		return -1;
	if (linear_fwd(g, g->h, n, M->hidden, P + M->t[P_W4].off, M->in.classes, g->logits) < 0 ||
	    cnn_cuda_bias_add_rows(g->logits, P + M->t[P_B4].off, n, M->in.classes, g->s) < 0)
		return -1;
	return cnn_cuda_logsoftmax_nll_fwd(g->logits, g->y, n, M->in.classes, g->logp, g->stats, g->s);
}

int cnn_gnet_backward(struct cnn_gnet *g, int n, float scale_n,
		      int (*ready)(void *ctx, int bucket), void *ctx)
{
	const struct cnn_model *M = &g->m;
	const struct cnn_gnet_algos *a = algos_for(g, n);
	const float *P = g->params;
	float *G = g->grads;
	int K = M->in.classes;
	/* Dropout's 1/(1-p) rides on the GEMMs that produce dh and dp: kept
	 * elements are > 0 after the ReLU, dropped ones are 0 and gated off. */
	float s1 = M->p_drop1 > 0.f ? 1.f / (1.f - M->p_drop1) : 1.f;
	float s2 = M->p_drop2 > 0.f ? 1.f / (1.f - M->p_drop2) : 1.f;
	if (!a)
		return -1;

	if (cnn_cuda_logsoftmax_nll_bwd(g->logp, g->y, n, K, scale_n, g->dlogits, g->s) < 0 ||
	    linear_bwd(g, g->h, n, M->hidden, P + M->t[P_W4].off, K, g->dlogits, G + M->t[P_W4].off,
		       G + M->t[P_B4].off, g->dh, s2) < 0 ||
	    cnn_cuda_relu_bwd(g->dh, g->h, (size_t)n * M->hidden, g->s) < 0 ||
	    linear_bwd(g, g->p, n, M->flat, P + M->t[P_W3].off, M->hidden, g->dh, G + M->t[P_W3].off,
		       G + M->t[P_B3].off, g->dp, s1) < 0)
		return -1;
	if (ready && ready(ctx, CNN_BUCKET_FC) < 0)
		return -1;
	/* p is the pool's output after dropout: > 0 exactly where a gradient
	 * flows back through the ReLU, the pool and the mask. */
	if (cnn_cuda_maxpool2_relu_bwd(g->dp, g->p, g->arg, n * M->c2, M->h2, M->w2, g->da2, g->s) < 0)
		return -1;
	cudnnCheck(cudnnConvolutionBackwardBias(g->dnn, &one, g->t2, g->da2, &zero, g->tb2,
						G + M->t[P_B2].off));
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[1], a->bwd_filter_math[1]));
	cudnnCheck(cudnnConvolutionBackwardFilter(g->dnn, &one, g->t1, g->a1, g->t2, g->da2, g->cv[1],
						  a->bwd_filter[1], g->ws, g->ws_bytes, &zero,
						  g->fw[1], G + M->t[P_W2].off));
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[1], a->bwd_data_math));
	cudnnCheck(cudnnConvolutionBackwardData(g->dnn, &one, g->fw[1], P + M->t[P_W2].off, g->t2,
						g->da2, g->cv[1], a->bwd_data, g->ws, g->ws_bytes,
						&zero, g->t1, g->da1));
	if (cnn_cuda_relu_bwd(g->da1, g->a1, (size_t)n * M->c1 * M->h1 * M->w1, g->s) < 0)
		return -1;
	cudnnCheck(cudnnConvolutionBackwardBias(g->dnn, &one, g->t1, g->da1, &zero, g->tb1,
						G + M->t[P_B1].off));
	cudnnCheck(cudnnSetConvolutionMathType(g->cv[0], a->bwd_filter_math[0]));
	cudnnCheck(cudnnConvolutionBackwardFilter(g->dnn, &one, g->tx, g->x, g->t1, g->da1, g->cv[0],
						  a->bwd_filter[0], g->ws, g->ws_bytes, &zero,
						  g->fw[0], G + M->t[P_W1].off));
	if (ready && ready(ctx, CNN_BUCKET_CONV) < 0)
		return -1;
	return 0;
}

void cnn_gnet_describe(const struct cnn_gnet *g, char *buf, size_t len)
{
	size_t v = cudnnGetVersion();
	int bv = 0;
	cublasGetVersion(g->blas, &bv);
	snprintf(buf, len, "cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d, %s", v / 10000, v / 100 % 100, v % 100,
		 bv / 10000, bv / 100 % 100, bv % 100,
		 g->precision == CNN_PREC_TF32 ? "TF32" : "fp32");
}
