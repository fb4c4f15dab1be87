/* cnn_train's GPU path, whole: the step on cuDNN and cuBLAS against the
 * golden file PyTorch wrote (the same file the CPU path is checked
 * against), in fp32, TF32 and bf16; then training steps through the module's
 * API (data set on the GPU, dropout, SGD, CUDA graph, NCCL at world 1)
 * against the CPU path on the same images and dropout masks.  Both
 * layouts of the convolutions' activations (--conv-layout nchw and nhwc)
 * face the same checks, and auto runs.
 *
 * The bf16 step emulated on the CPU runs first, everywhere.  Without a GPU
 * (or a driver) the rest is skipped, loudly: make check compiles and
 * links it everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "bf16.h"
#include "comm.h"
#include "data.h"
#include "golden.h"
#include "cuda/net.h"
#include "gpu.h"
#include "layers.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"
#include "test.h"
#include "tol.h"

#ifdef CNN_CUEMU
void cuemu_set_cc(int major, int minor);   /* cuemu.cc: the emulated GPU's */
#endif

#ifndef GOLDEN
#define GOLDEN "tests/golden/net_step.golden"
#endif

/* The training runs: on a GPU 20 steps of 32 images; on cuemu (the CPU,
 * CNN_CUEMU: test_gpu_step_emu) 5 of 8, which still replay the CUDA graph
 * (captured at the third step) three times, at a fraction of the time. */
#ifdef CNN_CUEMU
#define STEPS 5
#define STEPS_S "5"
#define BATCH 8
#else
#define STEPS 20
#define STEPS_S "20"
#define BATCH 32
#endif

/* Tolerances, |got - ref| <= atol + rtol * |ref|, one table, and why (tol.h).
 * The "grad" rows' atol is in units of the tensor's mean |gradient| and the
 * "gradsum" rows' in units of the sum of |gradient| (check_scaled): those
 * are the scales rounding errors follow, whatever the cancellation.
 * "measured" numbers come from the step emulated on the CPU with the same
 * roundings (bf16_ref below, which prints them); the GPU's own errors
 * differ by its summation order, which the margin covers.  The tf32 rows:
 * measured 2026-11-24 by this test's cuemu build (test_gpu_step_emu),
 * every convolution in TF32 (operands rounded to 10 mantissa bits as
 * tensor cores do), through cuDNN's calls and through conv2's own
 * tensor-core kernels alike, which agree to two digits; without TF32 the
 * same run is within 1e-5.  ReLU gates and max-pool choices the rounding
 * flips dominate, as in bf16, so the rows are near bf16's.  (The H100's
 * first runs had stayed within rows 8x tighter, set on 2026-11-22 from
 * an emulation that rounded less: cuDNN had picked FMA (fp32) kernels at
 * this batch there, so TF32 convolutions had not run.) */
static const struct tol tols[] = {
	{ "fp32 loss",   1e-5, 1e-5, "float32 sums of 10 logits; cuDNN and cuBLAS block the sums unlike PyTorch's CPU kernels" },
	{ "fp32 grad",   2e-3, 1e-3, "sums of up to 5408 products in another order (cuDNN's FMA algorithms, Winograd included); the CPU's differ by < 1e-5" },
	{ "fp32 gradsum",2e-4, 1e-3, "as fp32 grad, over sums of up to 1.2M gradients" },
	{ "fp32 param",  1e-5, 1e-3, "three optimizer steps compound the gradient differences" },
	{ "tf32 loss",   2e-2, 0,    "measured on cuemu (below): 0.0067 after 3 SGD steps; x3" },
	{ "tf32 grad",   1.5,  0,    "measured on cuemu: conv gradient entries, sums of 5408 cancelling products, move by up to 0.51 mean |grad| (conv2.weight); x3" },
	{ "tf32 gradsum",0.15, 0,    "measured on cuemu up to 0.061 of sum |grad| (conv1.weight); x2.5" },
	{ "tf32 param",  4e-3, 0,    "measured on cuemu up to 1.2e-3 after 3 Adadelta steps; x3.3" },
	{ "bf16 loss",   4e-2, 0,    "measured: 3.6e-6 for one step, 0.015 after 3 SGD steps on the same batch; x2.5" },
	{ "bf16 grad",   1.5,  0,    "measured: conv gradient entries, sums of 5408 cancelling products with 8-bit operands, move by up to 0.63 mean |grad|; x2.4" },
	{ "bf16 gradsum",0.15, 0,    "measured up to 0.061 of sum |grad| (|sum| of conv1.weight); x2.5" },
	{ "bf16 param",  6e-3, 0,    "measured up to 2.6e-3 after 3 Adadelta steps (lr 1 moves each weight ~1e-3 a step whatever its gradient's size); x2.3" },
	{ "bf16 twin",   3e-4, 1e-4, "GPU vs the emulation of the same roundings: the loss moved 3e-5 when 2e-6 noise before each rounding stood in for another summation order; x10" },
	{ "bf16 twin grad", 0.15, 0, "as bf16 twin: gradient entries moved up to 0.05 mean |grad| (a flipped rounding cascades through the cancelling sums); x3" },
	{ "steps",       1e-4, 1e-2, "20 SGD steps with dropout, GPU (fp32) vs the CPU path: differences in summation order compound" },
	{ "bf16 steps",  0,    0.35, "per tensor, |bf16 - fp32| over |fp32's update| after 20 SGD steps with dropout: measured up to 0.134 (fc1.bias) on the emulation; x2.6" },
	{ "bf16 twin steps conv", 0, 0.1, "per tensor, |GPU - emulation| over |the emulation's update| after 20 SGD steps in bf16: the emulation against itself with TWIN_NOISE before each rounding (another summation order; 2e-7 to 2e-5 alike), over 20 noise streams: up to 0.042 (conv2.bias); cuemu's 5 steps up to 0.024; x2.4. A conv2 gradient one step stale in five moved conv2.weight 0.22 here, 0.25 against fp32 (within bf16 steps)" },
	{ "bf16 twin steps fc", 0, 0.2, "as bf16 twin steps conv, for the linear layers: up to 0.083 (fc1.bias); x2.4" },
	{ "cudnn tf32",  1.5e-2, 0,  "as cudnn fp32, TF32 math (operands to 10 mantissa bits): measured on cuemu, which rounds them as the tensor cores do, up to 1.7e-3 of the mean |output|; x9 for FFT's and Winograd's transforms" },
	{ "cudnn fp32",  1e-3, 0,    "conv2 by one cuDNN algorithm on random operands vs the CPU's sums in double, atol in units of the mean |output|: right fp32 algorithms (FFT, Winograd) err ~1e-5 of it, a wrong tile ~1; x100" },
	{ "fp32 steps flip", 0, 0.03, "per tensor, |got - ref| over |ref's update| after 20 fp32 steps whose entries left \"steps\" or \"graph\": a max-pool or ReLU decision flipped by another summation order moved fc1.bias 0.013 (the CPU path against itself, 1 ulp apart); x2.3" },
	{ "graph",       2e-5, 2e-3, "each run times cuDNN's algorithms afresh (cudnnFind) and may pick others, which sum in another order, and 20 SGD steps compound it: measured on an H100 up to 2.1e-6 on a 2.2e-3 weight; x5" },
};

/* What stands for another summation order in the emulation (bf16_ref's
 * noise): a few fp32 ulps (1.2e-7) of each sum before it is rounded */
#define TWIN_NOISE 2e-6f

/* --pdl of the GPUs open_gpu opens (test_pdl_steps sets it) */
static enum cnn_pdl open_pdl = CNN_PDL_OFF;

static struct cnn_gpu *open_gpu(const struct cnn_model *m, int batch, enum cnn_precision prec,
				int graph, const struct cnn_optim *o, enum cnn_layout layout, int streams,
				enum cnn_conv_impl conv1, enum cnn_conv_impl conv2, enum cnn_fc2_impl fc2)
{
	struct cnn_gpu *g = NULL;
	char err[1024];
	struct cnn_gpu_opts go = { m, batch, batch, 0, prec, graph, o, 1, 0, 1, 60000, layout, streams,
				   0, 0, conv1, conv2, NULL, fc2, open_pdl, { 0, 0 } };
	if (cnn_gpu_api.open(&g, &go, err, sizeof(err)) < 0) {
		printf("#   open: %s\n", err);
		cnn_gpu_api.close(g);
		return NULL;
	}
	return g;
}

/* ---- the bf16 step emulated on the CPU ------------------------------------
 * The GPU path's --precision bf16 step (trainer/cuda/net.c) with its
 * roundings at the same points, on the CPU ops (fp32 sums, im2col + GEMM):
 * weights and the input rounded to bf16; each convolution's output rounded
 * (cuDNN writes bf16), bias + ReLU, rounded again; the pool's output and
 * fc1's, after ReLU, rounded as GEMM operands; the logits, loss and the
 * bias gradients fp32; in the backward the GEMMs' dY operands rounded, the
 * convolutions' input gradients rounded per image and their weight
 * gradients rounded once, after the whole batch.  It runs everywhere: it
 * checks that the bf16 tolerances of the golden test hold for bf16
 * arithmetic itself, and on a GPU the bf16 step is compared with it
 * closely ("bf16 twin"). */
struct bf16_ref {
	const struct cnn_model *m;
	int n;
	float *wb, *xb, *a1, *col, *dcol, *p, *pb, *h, *hb, *logits, *logp, *dlog, *dlb, *dh, *dhb,
	      *dp, *da2, *da1;
	uint8_t *arg;
	int exact;     /* 1: no rounding at all, the fp32 step (to test the emulation) */
	float noise;   /* > 0: each sum scaled by 1 + noise * u, u in [-1, 1), before
			* it is rounded: another summation order's few ulps */
	uint64_t nz;   /* the noise's stream */
	int train;     /* dropout with key[0] and key[1], as the GPU's training step */
	uint64_t key[2];
};

/* Round an input (weights, images) to bf16 */
static void rnd_in(const struct bf16_ref *r, float *x, size_t n)
{
	if (!r->exact)
		cnn_bf16_round(x, n);
}

/* Round what a sum gave to bf16, after the noise that stands for another
 * order of its terms */
static void rnd(struct bf16_ref *r, float *x, size_t n)
{
	if (r->noise > 0.f)
		for (size_t i = 0; i < n; i++) {
			double u = (double)(cnn_rng_next(&r->nz) >> 11) * 0x1p-52 - 1.0;
			x[i] *= 1.f + r->noise * (float)u;
		}
	rnd_in(r, x, n);
}

static void bf16_ref_free(struct bf16_ref *r)
{
	float *f[] = { r->wb, r->xb, r->a1, r->col, r->dcol, r->p, r->pb, r->h, r->hb, r->logits,
		       r->logp, r->dlog, r->dlb, r->dh, r->dhb, r->dp, r->da2, r->da1 };
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		free(f[i]);
	free(r->arg);
	memset(r, 0, sizeof(*r));
}

static int bf16_ref_init(struct bf16_ref *r, const struct cnn_model *m, int n)
{
	size_t in = (size_t)m->in.c * m->in.h * m->in.w, a1 = (size_t)m->c1 * m->h1 * m->w1;
	size_t a2 = (size_t)m->c2 * m->h2 * m->w2, k = (size_t)m->in.classes;
	size_t colmax = (size_t)(m->c1 > m->in.c ? m->c1 : m->in.c) * 9 * m->h1 * m->w1;
	memset(r, 0, sizeof(*r));
	r->m = m;
	r->n = n;
	r->wb = malloc(m->nparams * 4);
	r->xb = malloc(n * in * 4);
	r->a1 = malloc(n * a1 * 4);
	r->col = malloc(colmax * 4);
	r->dcol = malloc(colmax * 4);
	r->p = malloc((size_t)n * m->flat * 4);
	r->pb = malloc((size_t)n * m->flat * 4);
	r->h = malloc((size_t)n * m->hidden * 4);
	r->hb = malloc((size_t)n * m->hidden * 4);
	r->logits = malloc(n * k * 4);
	r->logp = malloc(n * k * 4);
	r->dlog = malloc(n * k * 4);
	r->dlb = malloc(n * k * 4);
	r->dh = malloc((size_t)n * m->hidden * 4);
	r->dhb = malloc((size_t)n * m->hidden * 4);
	r->dp = malloc((size_t)n * m->flat * 4);
	r->da2 = malloc(a2 * 4);
	r->da1 = malloc(a1 * 4);
	r->arg = malloc((size_t)n * m->flat);
	return r->wb && r->xb && r->a1 && r->col && r->dcol && r->p && r->pb && r->h && r->hb &&
	       r->logits && r->logp && r->dlog && r->dlb && r->dh && r->dhb && r->dp && r->da2 &&
	       r->da1 && r->arg ? 0 : -1;
}

/* conv3x3 of one image without bias, rounded to bf16, then bias + ReLU, rounded */
static void bf16_conv(struct bf16_ref *r, const float *x, int c, int h, int w, const float *wt,
		      const float *b, int oc, float *y)
{
	int pix = (h - 2) * (w - 2);
	cnn_im2col3(x, c, h, w, r->col);
	cnn_sgemm('N', 'N', oc, pix, c * 9, 1.f, wt, c * 9, r->col, pix, 0.f, y, pix);
	rnd(r, y, (size_t)oc * pix);
	cnn_bias_relu(y, b, oc, pix);
	rnd(r, y, (size_t)oc * pix);
}

/* y (n x out) = relu?(x W^T + b) */
static void bf16_linear(const float *x, int n, int in, const float *wt, const float *b, int out,
			int relu, float *y)
{
	cnn_sgemm('N', 'T', n, out, in, 1.f, x, in, wt, in, 0.f, y, out);
	for (int i = 0; i < n; i++)
		for (int o = 0; o < out; o++) {
			float v = y[(size_t)i * out + o] + b[o];
			y[(size_t)i * out + o] = relu && !(v > 0.f) ? 0.f : v;
		}
}

static float bf16_ref_step(struct bf16_ref *r, const float *params, const float *x,
			   const uint8_t *lab, float *logp0, float *G)
{
	const struct cnn_model *M = r->m;
	int n = r->n, K = M->in.classes;
	size_t in = (size_t)M->in.c * M->in.h * M->in.w, a1n = (size_t)M->c1 * M->h1 * M->w1;
	size_t a2n = (size_t)M->c2 * M->h2 * M->w2, F = (size_t)M->flat, H = (size_t)M->hidden;
	const float *Wb = r->wb;
	float *a2 = malloc(a2n * 4);
	memcpy(r->wb, params, M->nparams * 4);
	rnd_in(r, r->wb, M->nparams);
	memcpy(r->xb, x, n * in * 4);
	rnd_in(r, r->xb, n * in);
	for (int i = 0; i < n; i++) {
		float *a1 = r->a1 + i * a1n;
		bf16_conv(r, r->xb + i * in, M->in.c, M->in.h, M->in.w, Wb + M->t[P_W1].off,
			  params + M->t[P_B1].off, M->c1, a1);
		bf16_conv(r, a1, M->c1, M->h1, M->w1, Wb + M->t[P_W2].off, params + M->t[P_B2].off,
			  M->c2, a2);
		cnn_maxpool2_fwd(a2, M->c2, M->h2, M->w2, r->p + i * F, r->arg + i * F);
	}
	/* dropout in fp32 before the rounding, with the scale applied, as the GPU */
	int d1 = r->train && M->p_drop1 > 0.f, d2 = r->train && M->p_drop2 > 0.f;
	if (d1)
		cnn_dropout_fwd(r->p, n * F, M->p_drop1, r->key[0]);
	memcpy(r->pb, r->p, n * F * 4);
	rnd(r, r->pb, n * F);
	bf16_linear(r->pb, n, M->flat, Wb + M->t[P_W3].off, params + M->t[P_B3].off, M->hidden, 1,
		    r->h);
	if (d2)
		cnn_dropout_fwd(r->h, n * H, M->p_drop2, r->key[1]);
	memcpy(r->hb, r->h, n * H * 4);
	rnd(r, r->hb, n * H);
	bf16_linear(r->hb, n, M->hidden, Wb + M->t[P_W4].off, params + M->t[P_B4].off, K, 0,
		    r->logits);
	float loss = cnn_logsoftmax_nll_fwd(r->logits, lab, n, K, r->logp, NULL);
	memcpy(logp0, r->logp, K * 4);

	/* backward */
	memset(G, 0, M->nparams * 4);
	cnn_logsoftmax_nll_bwd(r->logp, lab, n, K, (float)n, r->dlog);
	memcpy(r->dlb, r->dlog, n * K * 4);
	rnd(r, r->dlb, (size_t)n * K);
	cnn_sgemm('T', 'N', K, M->hidden, n, 1.f, r->dlb, K, r->hb, M->hidden, 0.f,
		  G + M->t[P_W4].off, M->hidden);
	/* dropout's 1/(1-p) on the GEMMs' alpha; its mask through the ReLU's */
	cnn_sgemm('N', 'N', n, M->hidden, K, d2 ? 1.f / (1.f - M->p_drop2) : 1.f, r->dlb, K,
		  Wb + M->t[P_W4].off, M->hidden, 0.f, r->dh, M->hidden);
	for (int i = 0; i < n; i++)
		for (int o = 0; o < K; o++)
			G[M->t[P_B4].off + o] += r->dlog[(size_t)i * K + o];
	cnn_relu_bwd(r->dh, r->h, n * H);
	memcpy(r->dhb, r->dh, n * H * 4);
	rnd(r, r->dhb, n * H);
	cnn_sgemm('T', 'N', M->hidden, M->flat, n, 1.f, r->dhb, M->hidden, r->pb, M->flat, 0.f,
		  G + M->t[P_W3].off, M->flat);
	cnn_sgemm('N', 'N', n, M->flat, M->hidden, d1 ? 1.f / (1.f - M->p_drop1) : 1.f, r->dhb,
		  M->hidden, Wb + M->t[P_W3].off, M->flat, 0.f, r->dp, M->flat);
	for (int i = 0; i < n; i++)
		for (int o = 0; o < M->hidden; o++)
			G[M->t[P_B3].off + o] += r->dh[(size_t)i * H + o];
	/* conv2's bias gradient as the GPU sums it: the pool's output
	 * gradient in fp32 where p > 0, before da2 is rounded */
	float *db2 = calloc(M->c2, 4);   /* conv3_bwd's, from the rounded da2: not used */
	size_t pp = F / M->c2;
	for (int i = 0; i < n; i++)
		for (int o = 0; o < M->c2; o++)
			for (size_t k = 0; k < pp; k++) {
				size_t q = i * F + o * pp + k;
				if (r->p[q] > 0.f)
					G[M->t[P_B2].off + o] += r->dp[q];
			}
	for (int i = 0; i < n; i++) {
		float *a1 = r->a1 + i * a1n;
		cnn_maxpool2_relu_bwd(r->dp + i * F, r->p + i * F, r->arg + i * F, M->c2, M->h2, M->w2,
				      r->da2);
		rnd(r, r->da2, a2n);
		cnn_conv3_bwd(a1, M->c1, M->h1, M->w1, Wb + M->t[P_W2].off, M->c2, r->da2, r->col,
			      r->dcol, G + M->t[P_W2].off, db2, r->da1);
		rnd(r, r->da1, a1n);
		cnn_relu_bwd(r->da1, a1, a1n);
		cnn_conv3_bwd(r->xb + i * in, M->in.c, M->in.h, M->in.w, Wb + M->t[P_W1].off, M->c1,
			      r->da1, r->col, r->dcol, G + M->t[P_W1].off, G + M->t[P_B1].off, NULL);
	}
	rnd(r, G + M->t[P_W1].off, M->t[P_W1].n);
	rnd(r, G + M->t[P_W2].off, M->t[P_W2].n);
	free(a2);
	free(db2);
	return loss;
}

/* ---- one step and three updates, on the GPU or the emulation ------------- */

struct stepper {
	const char *name;          /* in the test descriptions */
	const char *tol;           /* the tolerance rows' prefix: "tf32", "bf16" */
	enum cnn_precision prec;
	enum cnn_layout layout;    /* the GPU's convolutions' activations */
	int streams;               /* the GPU's backward streams (0: 1) */
	enum cnn_conv_impl conv1;  /* the GPU's conv1 (0: auto) */
	enum cnn_conv_impl conv2;  /* the GPU's conv2 (0: auto) */
	enum cnn_fc2_impl fc2;     /* the GPU's fc2 (0: cuBLAS) */
	int emulate;               /* 1: bf16_ref on the CPU; 2: the same without its
				    * roundings (the fp32 step: checks the emulation) */
	struct cnn_gpu *g;
	struct bf16_ref r;
	struct cnn_model *m;       /* params: the state of the emulation */
	struct cnn_optim *o;
};

static int st_open(struct stepper *s, struct cnn_model *m, struct cnn_optim *o, char *err,
		   size_t errlen)
{
	s->m = m;
	s->o = o;
	if (s->emulate) {
		snprintf(err, errlen, "out of memory");
		if (bf16_ref_init(&s->r, m, 8) < 0)
			return -1;
		s->r.exact = s->emulate == 2;
		return 0;
	}
	s->g = open_gpu(m, 8, s->prec, 0, o, s->layout, s->streams, s->conv1, s->conv2, s->fc2);
	if (!s->g) {
		snprintf(err, errlen, "the GPU path does not open");
		return -1;
	}
	return cnn_gpu_api.set_state(s->g, m->params, o, err, errlen);
}

static int st_step(struct stepper *s, const float *x, const uint8_t *lab, float *loss,
		   float *logp0, float *grads, char *err, size_t errlen)
{
	if (s->emulate) {
		*loss = bf16_ref_step(&s->r, s->m->params, x, lab, logp0, grads);
		return 0;
	}
	return cnn_gpu_debug_step(s->g, x, lab, 8, loss, logp0, grads, err, errlen);
}

static int st_update(struct stepper *s, const float *grads, char *err, size_t errlen)
{
	if (s->emulate) {
		cnn_optim_step(s->o, s->m->params, grads, s->o->lr);
		return 0;
	}
	return cnn_gpu_debug_update(s->g, s->o->lr, err, errlen);
}

static int st_params(struct stepper *s, char *err, size_t errlen)
{
	return s->emulate ? 0 : cnn_gpu_api.get_state(s->g, s->m->params, NULL, err, errlen);
}

static void st_close(struct stepper *s)
{
	if (s->emulate)
		bf16_ref_free(&s->r);
	else
		cnn_gpu_api.close(s->g);
	s->g = NULL;
}

/* The golden batch: 8 hashed images, labels 0..7. */
static void golden_batch(float *x, uint8_t *lab)
{
	for (int i = 0; i < 8; i++)
		lab[i] = (uint8_t)(i % 10);
	hashed(x, 8 * 784, 7, 2.f);
}

/* The golden step in one precision, on the GPU or emulated. */
static void test_golden(struct stepper *S)
{
	const char *P = S->name;
	char what[32], desc[192], err[1024];
	FILE *f = golden_open(GOLDEN);
	struct cnn_model m;
	struct cnn_shape sh = { 1, 28, 28, 10 };
	double ref[16], got[16];
	test_cond("golden file " GOLDEN " opens", f != NULL);
	if (!f || cnn_model_init(&m, sh, err, sizeof(err)) < 0)
		return;
	m.p_drop1 = m.p_drop2 = 0;
	struct cnn_optim o0 = { .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f };
	cnn_optim_init(&o0, CNN_SGD, m.nparams);
	float x[8 * 784], loss, logp0[10];
	float *grads = malloc(m.nparams * 4);
	uint8_t lab[8];
	golden_batch(x, lab);
	golden_params(&m);
	int ok = st_open(S, &m, &o0, err, sizeof(err)) == 0 &&
		 st_step(S, x, lab, &loss, logp0, grads, err, sizeof(err)) == 0;
	snprintf(desc, sizeof(desc), "%s: forward and backward of the golden batch run", P);
	test_cond(desc, ok);
	st_close(S);
	if (!ok) {
		printf("#   %s\n", err);
		free(grads);
		goto out;
	}
	snprintf(what, sizeof(what), "%s loss", S->tol);
	got[0] = loss;
	golden_get(f, "loss", NULL, ref, 1);
	printf("#   %s: loss off by %.2g\n", P, fabs(got[0] - ref[0]));
	snprintf(desc, sizeof(desc), "%s golden: loss of the batch", P);
	test_cond(desc, check(what, "loss", got, ref, 1) == 0);
	for (int j = 0; j < 10; j++)
		got[j] = logp0[j];
	snprintf(desc, sizeof(desc), "%s golden: log-probabilities of image 0", P);
	test_cond(desc, golden_get(f, "logp0", NULL, ref, 10) == 10 && check(what, "logp0", got, ref, 10) == 0);
	for (int t = 0; t < P_COUNT; t++) {
		const float *gt = grads + m.t[t].off;
		size_t n = m.t[t].n;
		double v[10], gs[2] = { 0, 0 }, sums[2];
		int have = golden_get(f, "grad", m.t[t].name, v, 10) == 10;
		for (size_t i = 0; i < n; i++) {
			gs[0] += gt[i];
			gs[1] += fabs(gt[i]);
		}
		sums[0] = v[0];
		sums[1] = v[1];
		for (int j = 0; j < 8; j++) {
			got[j] = gt[j * n / 8];
			ref[j] = v[2 + j];
		}
		char w1[32], w2[32], nm[48];
		snprintf(w1, sizeof(w1), "%s gradsum", S->tol);
		snprintf(w2, sizeof(w2), "%s grad", S->tol);
		snprintf(nm, sizeof(nm), "%s sum,|sum|", m.t[t].name);
		snprintf(desc, sizeof(desc), "%s golden: gradient of %s", P, m.t[t].name);
		double mean = sums[1] / (double)n, worst = 0;
		for (int j = 0; j < 8; j++)
			worst = fmax(worst, fabs(got[j] - ref[j]) / mean);
		/* the measured errors, in the units of the table, for calibrating it */
		printf("#   %s %s: entries off by up to %.2g mean |grad|, sum by %.2g and |sum| by "
		       "%.2g of sum |grad|\n", P, m.t[t].name, worst, fabs(gs[0] - sums[0]) / sums[1],
		       fabs(gs[1] - sums[1]) / sums[1]);
		test_cond(desc, have && check_scaled(w1, nm, gs, sums, 2, sums[1]) == 0 &&
				check_scaled(w2, m.t[t].name, got, ref, 8, mean) == 0);
	}
	free(grads);

	/* three steps of each optimizer, as the CPU test does; adadelta in
	 * each precision's default configuration alone: its update is the
	 * same kernel on the same flat gradients whatever computes them (the
	 * layouts, streams and convolutions' kernels, which SGD's three steps
	 * and the gradients above check in each), and it was a sixth of this
	 * test's time on cuemu */
	const char *names[2] = { "sgd", "adadelta" };
	int base = S->layout == CNN_LAYOUT_NCHW && S->streams <= 1 && !S->conv1 && !S->conv2 && !S->fc2;
	for (int k = 0; k < (base ? 2 : 1); k++) {
		struct cnn_optim o = { .lr = k ? 1.0f : 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f };
		cnn_optim_init(&o, k ? CNN_ADADELTA : CNN_SGD, m.nparams);
		float *gr = malloc(m.nparams * 4);
		golden_params(&m);
		ok = gr && st_open(S, &m, &o, err, sizeof(err)) == 0;
		for (int step = 0; ok && step < 3; step++)
			ok = st_step(S, x, lab, &loss, logp0, gr, err, sizeof(err)) == 0 &&
			     st_update(S, gr, err, sizeof(err)) == 0;
		/* the loss after 3 steps is the forward of a 4th */
		ok = ok && st_step(S, x, lab, &loss, logp0, gr, err, sizeof(err)) == 0 &&
		     st_params(S, err, sizeof(err)) == 0;
		st_close(S);
		if (!ok)
			printf("#   %s\n", err);
		char key[32];
		snprintf(key, sizeof(key), "%s_loss3", names[k]);
		snprintf(what, sizeof(what), "%s loss", S->tol);
		got[0] = loss;
		golden_get(f, key, NULL, ref, 1);
		double ref_loss3 = ref[0];
		snprintf(desc, sizeof(desc), "%s golden: %s, loss after 3 steps", P, names[k]);
		test_cond(desc, ok && check(what, key, got, ref, 1) == 0);
		snprintf(key, sizeof(key), "%s_param", names[k]);
		snprintf(what, sizeof(what), "%s param", S->tol);
		int bad = !ok;
		double worst = 0;
		for (int t = 0; t < P_COUNT; t++) {
			size_t n = m.t[t].n;
			if (golden_get(f, key, m.t[t].name, ref, 8) != 8) {
				bad++;
				continue;
			}
			for (int j = 0; j < 8; j++) {
				got[j] = m.params[m.t[t].off + j * n / 8];
				worst = fmax(worst, fabs(got[j] - ref[j]));
			}
			bad += check(what, m.t[t].name, got, ref, 8);
		}
		printf("#   %s %s: loss off by %.2g, parameters by up to %.2g after 3 steps\n", P,
		       names[k], fabs(loss - ref_loss3), worst);
		snprintf(desc, sizeof(desc), "%s golden: %s, parameters after 3 steps", P, names[k]);
		test_cond(desc, bad == 0);
		free(gr);
		cnn_optim_free(&o);
	}
out:
	cnn_optim_free(&o0);
	cnn_model_free(&m);
	fclose(f);
}

/* The GPU's bf16 step against its emulation, element by element. */
static void test_bf16_twin(void)
{
	struct cnn_model m;
	struct cnn_shape sh = { 1, 28, 28, 10 };
	char err[1024];
	float x[8 * 784], lg, le, pg[10], pe[10];
	uint8_t lab[8];
	if (cnn_model_init(&m, sh, err, sizeof(err)) < 0)
		return;
	m.p_drop1 = m.p_drop2 = 0;
	struct cnn_optim o = { .lr = 0.05f, .momentum = 0.9f };
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	golden_params(&m);
	golden_batch(x, lab);
	float *gg = malloc(m.nparams * 4), *ge = malloc(m.nparams * 4);
	struct stepper gpu = { .name = "bf16", .tol = "bf16", .prec = CNN_PREC_BF16, .emulate = 0 };
	struct stepper emu = { .name = "bf16 emulated", .tol = "bf16", .prec = CNN_PREC_BF16, .emulate = 1 };
	int ok = st_open(&gpu, &m, &o, err, sizeof(err)) == 0 &&
		 st_step(&gpu, x, lab, &lg, pg, gg, err, sizeof(err)) == 0;
	st_close(&gpu);
	ok = ok && st_open(&emu, &m, &o, err, sizeof(err)) == 0 &&
	     st_step(&emu, x, lab, &le, pe, ge, err, sizeof(err)) == 0;
	st_close(&emu);
	if (!ok)
		printf("#   %s\n", err);
	test_cond("bf16 twin: the GPU's loss and log-probabilities equal the emulation's",
		  ok && checkf("bf16 twin", "loss", &lg, &le, 1) == 0 &&
		  checkf("bf16 twin", "logp0", pg, pe, 10) == 0);
	int bad = !ok;
	for (int t = 0; ok && t < P_COUNT; t++) {
		size_t n = m.t[t].n;
		double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), mean = 0;
		for (size_t i = 0; i < n; i++) {
			a[i] = gg[m.t[t].off + i];
			b[i] = ge[m.t[t].off + i];
			mean += fabs(b[i]) / (double)n;
		}
		bad += check_scaled("bf16 twin grad", m.t[t].name, a, b, n, mean);
		free(a), free(b);
	}
	test_cond("bf16 twin: every gradient of the GPU's bf16 step equals the emulation's", bad == 0);
	free(gg), free(ge);
	cnn_optim_free(&o);
	cnn_model_free(&m);
}

/* A host backend of two ranks whose other rank computed the same
 * gradients: its sum doubles them (exactly), so the average is the
 * gradients themselves. */
static int twin_sum(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	(void)c, (void)err, (void)errlen;
	for (size_t i = 0; i < n; i++)
		buf[i] += buf[i];
	return 0;
}
static const struct cnn_comm_ops twin_ops = { "twin", twin_sum, NULL, NULL, NULL };

enum { NO_COMM, NCCL_1, HOST_TWIN };

/* the census of gpu_run's last graph (batch 0: none) */
static struct cnn_graph_census run_census;

/* What each run's GPU kept (cnn_train's "# GPU:" line: layout, streams,
 * the convolutions' implementations and cuDNN's algorithms), by its output
 * buffer, for explain_params: a run whose parameters drift names the
 * choices it ran with. */
static struct {
	const float *out;
	char d[3072];
} run_notes[4];
static unsigned run_notes_next;

static void run_note(const float *out, const struct cnn_gpu *g)
{
	unsigned k = run_notes_next++ % 4;
	run_notes[k].out = out;
	run_notes[k].d[0] = '\0';
	if (g)
		cnn_gpu_api.describe(g, run_notes[k].d, sizeof(run_notes[k].d));
}

static const char *run_noted(const float *out)
{
	for (unsigned k = 0; k < 4; k++)
		if (run_notes[k].out == out && out)
			return run_notes[k].d;
	return NULL;
}

/* A failed comparison of parameters, tensor by tensor: how many entries
 * exceed row what and which output channels (rows) hold them; for fc1's
 * weights also which of conv2's channels feed their columns.  Summation
 * order leaves a few entries scattered over a tensor; a wrong or racing
 * kernel leaves a block (a tile of the GEMM that read them, a channel's
 * gradient).  Then what each run kept, where gpu_run noted it. */
static void explain_params(const char *what, const struct cnn_model *m, const float *got,
			   const float *ref)
{
	const struct tol *t = TOL(what);
	const int rows[P_COUNT] = { m->c1, m->c1, m->c2, m->c2, m->hidden, m->hidden,
				    m->in.classes, m->in.classes };
	size_t plane = (size_t)m->hp * m->wp;
	for (int k = 0; k < P_COUNT; k++) {
		size_t off = m->t[k].off, n = m->t[k].n, per = n / (size_t)rows[k], bad = 0;
		long r0 = -1, r1 = -1, c0 = -1, c1 = -1;
		for (size_t i = 0; i < n; i++) {
			double g = got[off + i], r = ref[off + i];
			if (fabs(g - r) <= t->atol + t->rtol * fabs(r))
				continue;
			long row = (long)(i / per), ch = k == P_W3 ? (long)(i % per / plane) : -1;
			bad++;
			r0 = r0 < 0 || row < r0 ? row : r0;
			r1 = row > r1 ? row : r1;
			c0 = c0 < 0 || ch < c0 ? ch : c0;
			c1 = ch > c1 ? ch : c1;
		}
		if (!bad)
			continue;
		printf("#   %s: %zu of %zu entries outside \"%s\", in its rows %ld to %ld of %d", m->t[k].name,
		       bad, n, what, r0, r1, rows[k]);
		if (k == P_W3)
			printf(", columns of conv2's channels %ld to %ld", c0, c1);
		printf("\n");
	}
	const char *dg = run_noted(got), *dr = run_noted(ref);
	if (dg)
		printf("#   the run compared kept: %s\n", dg);
	if (dr)
		printf("#   the run it was compared with kept: %s\n", dr);
}

/* STEPS steps through the module's API (gather on the GPU, dropout, SGD with
 * momentum, the learning rate from device memory); graph: 0 eager, 1
 * captured after 2 eager steps; comm: none, NCCL at world 1 inside the
 * step, or a host backend (the gloo path: through pinned memory). */
static int gpu_run(const struct cnn_dataset *tr, const struct cnn_dataset *te,
		   const struct cnn_model *m0, enum cnn_precision prec, int graph, int comm,
		   enum cnn_layout layout, int streams, enum cnn_conv_impl conv1,
		   enum cnn_conv_impl conv2, enum cnn_fc2_impl fc2, float *out, char *err,
		   size_t errlen)
{
	struct cnn_model m = *m0;
	struct cnn_optim o = { .lr = 0.05f, .momentum = 0.9f };
	struct cnn_comm *c = NULL, twin = { .ops = &twin_ops, .rank = 0, .world = 2 };
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	struct cnn_gpu *g = open_gpu(&m, BATCH, prec, graph, &o, layout, streams, conv1, conv2, fc2);
	if (g && layout == CNN_LAYOUT_AUTO) {
		char d[2400];
		cnn_gpu_api.describe(g, d, sizeof(d));
		printf("#   auto: %s\n", d);
	}
	int ok = g != NULL;
	if (ok && comm == HOST_TWIN)
		cnn_gpu_api.use_comm(g, &twin);
	if (ok && comm == NCCL_1) {
		struct cnn_comm_opts co = { "nccl", "127.0.0.1", 0, 0, 1, NULL, NULL, 60000, cnn_gpu_api.comm,
					    NULL, NULL };
		ok = cnn_comm_open(&c, &co, err, errlen) == 0;
		if (ok)
			cnn_gpu_api.use_comm(g, c);
	}
	ok = ok && cnn_gpu_api.load_data(g, tr, te, err, errlen) == 0 &&
	     cnn_gpu_api.set_state(g, m0->params, &o, err, errlen) == 0;
	uint32_t idx[BATCH];
	for (int step = 0; ok && step < STEPS; step++) {
		for (int i = 0; i < BATCH; i++)
			idx[i] = (uint32_t)((step * BATCH + i) * 7 % tr->n);
		ok = cnn_gpu_api.train_step(g, idx, BATCH, 0.05f, (uint64_t)step, err, errlen) == 0;
	}
	float loss;
	ok = ok && cnn_gpu_api.last_loss(g, &loss, err, errlen) == 0 &&
	     cnn_gpu_api.get_state(g, out, NULL, err, errlen) == 0;
	memset(&run_census, 0, sizeof(run_census));
	if (ok)
		cnn_gpu_api.graph_census(g, &run_census);
	run_note(out, g);
	cnn_gpu_api.close(g);
	cnn_comm_close(c);
	cnn_optim_free(&o);
	return ok ? 0 : -1;
}

/* Per tensor, |got - ref| against the size of ref's update from the
 * initial parameters (seed 1), within the rtol of row (its conv rows
 * for the convolutions' tensors, fc's for the linear layers').  Prints
 * each ratio; returns how many tensors exceed it. */
static int steps_gap_rows(const char *conv_row, const char *fc_row, const char *what,
			  const struct cnn_model *ref, const float *refp, const float *got)
{
	struct cnn_model m0;
	char err[256];
	int bad = 0;
	cnn_model_init(&m0, ref->in, err, sizeof(err));
	cnn_model_init_params(&m0, 1);
	for (int t = 0; t < P_COUNT; t++) {
		double dd = 0, uu = 0;
		for (size_t i = ref->t[t].off; i < ref->t[t].off + ref->t[t].n; i++) {
			double u = refp[i] - m0.params[i], d = got[i] - refp[i];
			dd += d * d;
			uu += u * u;
		}
		double r = sqrt(dd / uu), lim = TOL(t < P_W3 ? conv_row : fc_row)->rtol;
		printf("#   %s %s: |got - ref| = %.3g of |ref's update|%s\n", what, ref->t[t].name, r,
		       r <= lim ? "" : " (too far)");
		bad += !(r <= lim);
	}
	cnn_model_free(&m0);
	return bad;
}

/* bf16 training drifts from fp32's ("bf16 steps") */
static int steps_gap(const char *what, const struct cnn_model *ref, const float *got)
{
	return steps_gap_rows("bf16 steps", "bf16 steps", what, ref, ref->params, got);
}

/* ... and from the emulation of its own roundings far less ("bf16 twin
 * steps"): a gradient wrong in one step of several stands out there */
static int twin_gap(const char *what, const struct cnn_model *ref, const float *got)
{
	return steps_gap_rows("bf16 twin steps conv", "bf16 twin steps fc", what, ref, ref->params,
			      got);
}

/* The parameters after STEPS fp32 steps against ref's, entry by entry
 * (row what); where entries fall outside, explained, and taken as a
 * rounding flip where every tensor stays within "fp32 steps flip" of
 * ref's update.  Another summation order turns the odd max-pool or ReLU
 * decision that sat on a tie, and a flipped decision moves its channel's
 * weights by more than any per-entry row: the CPU path against itself,
 * its initial parameters moved by one ulp, exceeded "steps" in 1 run of
 * 80 (by 12.6 times, 4,000 entries of fc1 outside, fc1.bias 0.013 of its
 * update), and an H200's run of test_steps_more by 2.29 times (28 entries
 * of conv2.weight).  A gradient wrong for a whole step stays outside:
 * conv2's one step stale moves conv2.weight 0.062, every tensor's 0.21;
 * two of conv2's 64 channels stale for a step (0.011) pass as a flip:
 * those the entries' explanation above shows, and cuemu's lazy streams
 * find such a missing wait by construction. */
static int params_near(const char *what, const struct cnn_model *m, const float *got,
		       const float *ref)
{
	if (checkf(what, "params", got, ref, m->nparams) == 0)
		return 1;
	explain_params(what, m, got, ref);
	if (steps_gap_rows("fp32 steps flip", "fp32 steps flip", "a flip?", m, ref, got) > 0)
		return 0;
	printf("#   taken as a rounding flip: every tensor within \"fp32 steps flip\" of its update\n");
	return 1;
}

/* STEPS steps on the CPU (dropout, SGD with momentum) from m's parameters:
 * the CPU path, or (bf16 1) the emulation of the GPU's bf16 step, (bf16 2)
 * the emulation without its roundings, (bf16 3) the emulation with
 * TWIN_NOISE before each rounding; the same images and masks (seed 1,
 * rank 0, step k) as gpu_run. */
static void cpu_run(const struct cnn_dataset *tr, struct cnn_model *m, int bf16)
{
	struct cnn_acts a;
	struct bf16_ref r;
	char err[1024];
	struct cnn_optim o = { .lr = 0.05f, .momentum = 0.9f };
	cnn_optim_init(&o, CNN_SGD, m->nparams);
	if (bf16) {
		bf16_ref_init(&r, m, BATCH);
		r.train = 1;
		r.exact = bf16 == 2;
		r.noise = bf16 == 3 ? TWIN_NOISE : 0.f;
		r.nz = 12345;
	}
	cnn_acts_init(&a, m, BATCH, 2, err, sizeof(err));
	uint8_t y[BATCH];
	uint32_t idx[BATCH];
	float loss, logp0[16];
	for (int step = 0; step < STEPS; step++) {
		for (int i = 0; i < BATCH; i++)
			idx[i] = (uint32_t)((step * BATCH + i) * 7 % tr->n);
		cnn_data_gather(tr, idx, BATCH, a.x, y);
		if (bf16) {
			r.key[0] = cnn_dropout_key(1, (uint64_t)step, 0, 1);
			r.key[1] = cnn_dropout_key(1, (uint64_t)step, 0, 2);
			bf16_ref_step(&r, m->params, a.x, y, logp0, m->grads);
		} else {
			cnn_forward(m, &a, y, BATCH, 1, 1, (uint64_t)step, 0, &loss, NULL);
			cnn_backward(m, &a, y, BATCH, (float)BATCH, NULL, NULL);
		}
		cnn_optim_step(&o, m->params, m->grads, 0.05f);
	}
	if (bf16)
		bf16_ref_free(&r);
	cnn_acts_free(&a);
	cnn_optim_free(&o);
}

/* The synthetic data set and a model on it with seed 1's parameters. */
static int synthetic(struct cnn_dataset *tr, struct cnn_dataset *te, struct cnn_model *m)
{
	char err[1024];
	if (cnn_data_load("synthetic", NULL, tr, te, err, sizeof(err)) < 0) {
		printf("#   %s\n", err);
		test_cond("synthetic data set", 0);
		return -1;
	}
	struct cnn_shape sh = { tr->c, tr->h, tr->w, tr->classes };
	if (cnn_model_init(m, sh, err, sizeof(err)) < 0) {
		printf("#   %s\n", err);
		test_cond("model on the synthetic data set", 0);
		return -1;
	}
	cnn_model_init_params(m, 1);
	return 0;
}

#ifndef CNN_CUEMU
/* The bf16 emulation's 20 training steps against the CPU path's fp32 ones:
 * what "bf16 steps" allows the GPU's, measured here everywhere; and
 * against itself with noise before each rounding (another summation
 * order, as a GPU's): what "bf16 twin steps" allows the GPU's against it. */
static void test_bf16_steps_emulated(void)
{
	struct cnn_dataset tr, te;
	struct cnn_model m, mb, mx, mn;
	char err[256];
	if (synthetic(&tr, &te, &m) < 0)
		return;
	cnn_model_init(&mb, m.in, err, sizeof(err));
	cnn_model_init(&mx, m.in, err, sizeof(err));
	cnn_model_init(&mn, m.in, err, sizeof(err));
	memcpy(mb.params, m.params, m.nparams * 4);
	memcpy(mx.params, m.params, m.nparams * 4);
	memcpy(mn.params, m.params, m.nparams * 4);
	cpu_run(&tr, &m, 0);
	cpu_run(&tr, &mb, 1);
	cpu_run(&tr, &mx, 2);
	cpu_run(&tr, &mn, 3);
	test_cond(STEPS_S " emulated steps without rounding equal the CPU path's (steps): dropout included",
		  checkf("steps", "params", mx.params, m.params, m.nparams) == 0);
	test_cond(STEPS_S " emulated bf16 steps (dropout, SGD) track the CPU path's fp32 ones (bf16 steps)",
		  steps_gap("bf16 emulated", &m, mb.params) == 0);
	test_cond(STEPS_S " emulated bf16 steps with another summation order (noise) track the same "
		  "steps' (bf16 twin steps)",
		  twin_gap("bf16 emulated, noise", &mb, mn.params) == 0);
	cnn_model_free(&m);
	cnn_model_free(&mb);
	cnn_model_free(&mx);
	cnn_model_free(&mn);
	cnn_data_free(&tr);
	cnn_data_free(&te);
}
#endif

static void test_steps_vs_cpu(int bf16)
{
	struct cnn_dataset tr, te;
	struct cnn_model m;
	char err[1024];
	if (synthetic(&tr, &te, &m) < 0)
		return;
	float *p0 = malloc(m.nparams * 4), *eager = malloc(m.nparams * 4),
	      *graph = malloc(m.nparams * 4), *nccl = malloc(m.nparams * 4),
	      *beager = malloc(m.nparams * 4), *bgraph = malloc(m.nparams * 4),
	      *host = malloc(m.nparams * 4);
	memcpy(p0, m.params, m.nparams * 4);

	cpu_run(&tr, &m, 0);
	struct cnn_model mg = m;
	mg.params = p0;
	int r1 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 0, NO_COMM, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, eager, err, sizeof(err));
	if (r1 < 0)
		printf("#   eager: %s\n", err);
	test_cond(STEPS_S " eager GPU steps (dropout, SGD) run", r1 == 0);
	test_cond(STEPS_S " eager GPU steps equal the CPU path's (same images, same dropout masks)",
		  r1 == 0 && params_near("steps", &m, eager, m.params));
	int r2 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 1, NO_COMM, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, graph, err, sizeof(err));
	if (r2 < 0)
		printf("#   graph: %s\n", err);
	test_cond(STEPS_S " GPU steps replayed as a CUDA graph run", r2 == 0);
	test_cond("the graph's result equals the eager one's",
		  r1 == 0 && r2 == 0 && params_near("graph", &m, graph, eager));
	int r3 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, nccl, err, sizeof(err));
	if (r3 < 0)
		printf("#   nccl: %s\n", err);
	test_cond(STEPS_S " GPU steps with the NCCL all-reduce in the graph run (world 1)", r3 == 0);
	test_cond("NCCL's average over one rank changes nothing",
		  r2 == 0 && r3 == 0 && params_near("graph", &m, nccl, graph));
	int r6 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 1, HOST_TWIN, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, host, err, sizeof(err));
	if (r6 < 0)
		printf("#   host: %s\n", err);
	test_cond(STEPS_S " GPU steps with the gradients all-reduced through host memory (gloo's path) run",
		  r6 == 0);
	test_cond("... a twin rank's average changes nothing: the eager steps' result",
		  r1 == 0 && r6 == 0 && params_near("graph", &m, host, eager));
	if (!bf16) {
		test_skip("bf16 training steps", "this GPU has no bf16 tensor cores (sm_80+)");
	} else {
		int r4 = gpu_run(&tr, &te, &mg, CNN_PREC_BF16, 0, NO_COMM, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, beager, err, sizeof(err));
		if (r4 < 0)
			printf("#   bf16 eager: %s\n", err);
		test_cond(STEPS_S " eager GPU steps in bf16 run", r4 == 0);
		test_cond(STEPS_S " bf16 steps track the CPU path's fp32 ones (bf16 steps tolerance)",
			  r4 == 0 && steps_gap("bf16 GPU", &m, beager) == 0);
		struct cnn_model mb;
		cnn_model_init(&mb, m.in, err, sizeof(err));
		memcpy(mb.params, p0, m.nparams * 4);
		cpu_run(&tr, &mb, 1);
		test_cond(STEPS_S " bf16 steps track the emulation of the same roundings (bf16 twin steps)",
			  r4 == 0 && twin_gap("bf16 GPU vs emulated", &mb,
						   beager) == 0);
		int r5 = gpu_run(&tr, &te, &mg, CNN_PREC_BF16, 1, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS, bgraph, err, sizeof(err));
		if (r5 < 0)
			printf("#   bf16 graph: %s\n", err);
		test_cond(STEPS_S " bf16 GPU steps as a CUDA graph with NCCL (world 1) run", r5 == 0);
		/* Not entry by entry against the bf16 eager run: a run whose
		 * cuDNN algorithms (cudnnFind's pick) sum in another order
		 * rounds to other bf16 values, and 20 steps compound it
		 * (measured on an H100: 1716 of 1.2M weights past 2e-3 +
		 * 1e-2 |w|, by up to 0.03).  Per tensor, like the eager run. */
		test_cond(STEPS_S " bf16 graph steps with NCCL track the CPU path's fp32 ones as the eager ones do (bf16 steps tolerance)",
			  r5 == 0 && steps_gap("bf16 graph", &m, bgraph) == 0);
		test_cond(STEPS_S " bf16 graph steps with NCCL track the emulation of the same roundings (bf16 twin steps)",
			  r5 == 0 && twin_gap("bf16 graph vs emulated", &mb,
						   bgraph) == 0);
		cnn_model_free(&mb);
	}
	cnn_model_free(&m);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	free(p0), free(eager), free(graph), free(nccl), free(beager), free(bgraph), free(host);
}

/* Channels-last (--conv-layout nhwc), auto and the weight gradients on a
 * second stream (--backward-streams 2): the same STEPS steps against the CPU
 * path, eager and as a graph with NCCL; bf16 per tensor. */
static void test_steps_more(int bf16)
{
	struct cnn_dataset tr, te;
	struct cnn_model m;
	char err[1024];
	if (synthetic(&tr, &te, &m) < 0)
		return;
	float *p0 = malloc(m.nparams * 4), *out = malloc(m.nparams * 4);
	memcpy(p0, m.params, m.nparams * 4);
	struct cnn_model mb;   /* the bf16 runs' twin: the emulation's steps */
	cnn_model_init(&mb, m.in, err, sizeof(err));
	memcpy(mb.params, p0, m.nparams * 4);
	if (bf16)
		cpu_run(&tr, &mb, 1);
	cpu_run(&tr, &m, 0);
	struct cnn_model mg = m;
	mg.params = p0;
	static const struct {
		const char *what;
		enum cnn_precision prec;
		int graph, comm;
		enum cnn_layout layout;
		int streams;
		enum cnn_conv_impl conv1, conv2;
		enum cnn_fc2_impl fc2;
	} runs[] = {
		{ STEPS_S " eager GPU steps, NHWC", CNN_PREC_FP32, 0, NO_COMM, CNN_LAYOUT_NHWC, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, NHWC, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NHWC, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, auto layout, as a CUDA graph", CNN_PREC_FP32, 1, NO_COMM, CNN_LAYOUT_AUTO, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " eager GPU steps in bf16, NHWC", CNN_PREC_BF16, 0, NO_COMM, CNN_LAYOUT_NHWC, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, NHWC, as a CUDA graph with NCCL (world 1)", CNN_PREC_BF16, 1, NCCL_1, CNN_LAYOUT_NHWC, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " eager GPU steps, two backward streams", CNN_PREC_FP32, 0, NO_COMM, CNN_LAYOUT_NCHW, 2, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, two backward streams, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NCHW, 2, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, two backward streams, NHWC, all-reduced through the host (no graph)", CNN_PREC_FP32, 0, HOST_TWIN, CNN_LAYOUT_NHWC, 2, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, two backward streams, NHWC, as a CUDA graph with NCCL (world 1)", CNN_PREC_BF16, 1, NCCL_1, CNN_LAYOUT_NHWC, 2, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		/* both graphs replayed at the capture, the state put back */
		{ STEPS_S " GPU steps, backward streams auto, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NCHW, CNN_STREAMS_AUTO, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, backward streams auto, conv1 and conv2 direct, as a CUDA graph", CNN_PREC_BF16, 1, NO_COMM, CNN_LAYOUT_NCHW, CNN_STREAMS_AUTO, CNN_CONV_DIRECT, CNN_CONV_DIRECT, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, conv1 direct, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_DIRECT, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " GPU steps, conv1 by cuDNN, NHWC, two backward streams, as a CUDA graph", CNN_PREC_FP32, 1, NO_COMM, CNN_LAYOUT_NHWC, 2, CNN_CONV_CUDNN, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, conv1 direct, NHWC, as a CUDA graph", CNN_PREC_BF16, 1, NO_COMM, CNN_LAYOUT_NHWC, 1, CNN_CONV_DIRECT, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, conv2 on the tensor-core kernels, as a CUDA graph with NCCL (world 1)", CNN_PREC_BF16, 1, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_DIRECT, CNN_FC2_CUBLAS },
		{ STEPS_S " bf16 GPU steps, conv1 and conv2 direct, NHWC, two backward streams, as a CUDA graph", CNN_PREC_BF16, 1, NO_COMM, CNN_LAYOUT_NHWC, 2, CNN_CONV_DIRECT, CNN_CONV_DIRECT, CNN_FC2_CUBLAS },
		{ STEPS_S " eager bf16 GPU steps, conv2 by cuDNN, NHWC", CNN_PREC_BF16, 0, NO_COMM, CNN_LAYOUT_NHWC, 1, CNN_CONV_AUTO, CNN_CONV_CUDNN, CNN_FC2_CUBLAS },
		/* fc2's fused classifier: dropout's scale on dh, the buckets with NCCL */
		{ STEPS_S " GPU steps, fc2 fused, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, 1, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_FUSED },
		{ STEPS_S " eager GPU steps, fc2 fused, two backward streams, all-reduced through the host", CNN_PREC_FP32, 0, HOST_TWIN, CNN_LAYOUT_NCHW, 2, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_FUSED },
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char d[192];
		int b = runs[i].prec == CNN_PREC_BF16;
		if (b && !bf16) {
			test_skip(runs[i].what, "this GPU has no bf16 tensor cores (sm_80+)");
			continue;
		}
		int r = gpu_run(&tr, &te, &mg, runs[i].prec, runs[i].graph, runs[i].comm,
				runs[i].layout, runs[i].streams, runs[i].conv1, runs[i].conv2, runs[i].fc2,
				out, err, sizeof(err));
		if (r < 0)
			printf("#   %s: %s\n", runs[i].what, err);
		snprintf(d, sizeof(d), "%s run", runs[i].what);
		test_cond(d, r == 0);
		if (b) {
			snprintf(d, sizeof(d), "%s track the CPU path's fp32 ones (bf16 steps tolerance)",
				 runs[i].what);
			test_cond(d, r == 0 && steps_gap(runs[i].what, &m, out) == 0);
			snprintf(d, sizeof(d), "%s track the emulation of the same roundings (bf16 twin steps)",
				 runs[i].what);
			test_cond(d, r == 0 && twin_gap(runs[i].what, &mb, out) == 0);
		} else {
			snprintf(d, sizeof(d), "%s equal the CPU path's (steps tolerance)", runs[i].what);
			test_cond(d, r == 0 && params_near("steps", &m, out, m.params));
		}
	}
	cnn_model_free(&m);
	cnn_model_free(&mb);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	free(p0), free(out);
}

/* Every algorithm cudnnFind offers for conv2's three calls (the ones the
 * trainer picks among, and since its graph-batch timing also the
 * runners-up), each run once on random operands and compared with the
 * CPU's sums: at batch n, in both layouts, fp32 (FMA math, as
 * --precision fp32 asks) or TF32 (the default's math; run before any
 * fp32 open has set NVIDIA_TF32_OVERRIDE=0).  A run whose conv2 weights
 * drifted in a block of channels (explain_params) then shows whether one
 * of cuDNN's kernels computes them wrong at this shape on this GPU, and
 * which. */
enum { ALG_FWD, ALG_BWD_DATA, ALG_BWD_FILTER };
static const char *const alg_call[3] = { "forward", "backward-data", "backward-filter" };

/* conv2's shapes: x n x c x h x w, w oc x c x 3 x 3, y n x oc x (h-2) x (w-2), NCHW */
struct conv_case {
	int n, c, h, w, oc, oh, ow;
	float *x, *wt, *dy;          /* the operands, NCHW and OIHW */
	double *y, *dx, *dw;         /* the CPU's sums */
};

static void conv_case_ref(struct conv_case *k)
{
	size_t ny = (size_t)k->n * k->oc * k->oh * k->ow, nx = (size_t)k->n * k->c * k->h * k->w;
	size_t nw = (size_t)k->oc * k->c * 9;
	memset(k->y, 0, ny * sizeof(double));
	memset(k->dx, 0, nx * sizeof(double));
	memset(k->dw, 0, nw * sizeof(double));
	for (int b = 0; b < k->n; b++)
		for (int o = 0; o < k->oc; o++)
			for (int c = 0; c < k->c; c++)
				for (int r = 0; r < 9; r++) {
					double wv = k->wt[((size_t)o * k->c + c) * 9 + r], dwv = 0;
					const float *xp = k->x + (((size_t)b * k->c + c) * k->h + r / 3) * k->w + r % 3;
					double *dxp = k->dx + (((size_t)b * k->c + c) * k->h + r / 3) * k->w + r % 3;
					size_t yo = ((size_t)b * k->oc + o) * k->oh * k->ow;
					for (int i = 0; i < k->oh; i++)
						for (int j = 0; j < k->ow; j++) {
							size_t yi = yo + (size_t)i * k->ow + j, xi = (size_t)i * k->w + j;
							k->y[yi] += wv * xp[xi];
							dxp[xi] += wv * k->dy[yi];
							dwv += (double)k->dy[yi] * xp[xi];
						}
					k->dw[((size_t)o * k->c + c) * 9 + r] += dwv;
				}
}

/* a (planes of n x c x hw, or OIHW as o x c x 9) into or out of the
 * channels-last order */
static void to_nhwc(const float *a, float *o, int n, int c, int hw)
{
	for (int b = 0; b < n; b++)
		for (int ch = 0; ch < c; ch++)
			for (int p = 0; p < hw; p++)
				o[((size_t)b * hw + p) * c + ch] = a[((size_t)b * c + ch) * hw + p];
}

static void from_nhwc(const float *a, double *o, int n, int c, int hw)
{
	for (int b = 0; b < n; b++)
		for (int ch = 0; ch < c; ch++)
			for (int p = 0; p < hw; p++)
				o[((size_t)b * c + ch) * hw + p] = a[((size_t)b * hw + p) * c + ch];
}

/* Runs algorithm algo of call on the device operands, its result to
 * host (NCHW, double) in got; 0, or -1 with the failure in err. */
static int conv_algo_run(cudnnHandle_t h, int call, int algo, int nhwc, const struct conv_case *k,
			 cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
			 cudnnTensorDescriptor_t yd, cudnnConvolutionDescriptor_t cd, void *const dev[3],
			 void *out, size_t ws_bytes, double *got, char *err, size_t errlen)
{
	const float one = 1.f, zero = 0.f;
	void *ws = NULL;
	cudnnStatus_t st;
	if (ws_bytes && cudaMalloc(&ws, ws_bytes) != cudaSuccess) {
		snprintf(err, errlen, "cudaMalloc of its %zu bytes of workspace failed", ws_bytes);
		return -1;
	}
	if (call == ALG_FWD)
		st = cudnnConvolutionForward(h, &one, xd, dev[0], wd, dev[1], cd,
					     (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, &zero, yd, out);
	else if (call == ALG_BWD_DATA)
		st = cudnnConvolutionBackwardData(h, &one, wd, dev[1], yd, dev[2], cd,
						  (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, &zero,
						  xd, out);
	else
		st = cudnnConvolutionBackwardFilter(h, &one, xd, dev[0], yd, dev[2], cd,
						    (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes,
						    &zero, wd, out);
	cudaError_t ce = cudaDeviceSynchronize();
	cudaFree(ws);
	if (st != CUDNN_STATUS_SUCCESS || ce != cudaSuccess) {
		snprintf(err, errlen, "%s", st != CUDNN_STATUS_SUCCESS ? cudnnGetErrorString(st) :
					    cudaGetErrorString(ce));
		return -1;
	}
	int c = call == ALG_FWD ? k->oc : call == ALG_BWD_DATA ? k->c : k->c;
	int hw = call == ALG_FWD ? k->oh * k->ow : call == ALG_BWD_DATA ? k->h * k->w : 9;
	int nn = call == ALG_BWD_FILTER ? k->oc : k->n;
	size_t cnt = (size_t)nn * c * hw;
	float *f = malloc(cnt * 4);
	if (!f || cudaMemcpy(f, out, cnt * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
		snprintf(err, errlen, "copying the result back failed");
		free(f);
		return -1;
	}
	if (nhwc)
		from_nhwc(f, got, nn, c, hw);
	else
		for (size_t i = 0; i < cnt; i++)
			got[i] = f[i];
	free(f);
	return 0;
}

static void test_cudnn_algos(int n, int tf32)
{
	struct conv_case k = { .n = n, .c = 32, .h = 26, .w = 26, .oc = 64, .oh = 24, .ow = 24 };
	const char *prec = tf32 ? "TF32" : "fp32";
	size_t nx = (size_t)n * k.c * k.h * k.w, nw = (size_t)k.oc * k.c * 9,
	       ny = (size_t)n * k.oc * k.oh * k.ow;
	uint64_t rs = 20261127;
	k.x = malloc(nx * 4), k.wt = malloc(nw * 4), k.dy = malloc(ny * 4);
	k.y = malloc(ny * 8), k.dx = malloc(nx * 8), k.dw = malloc(nw * 8);
	double *got = malloc((nx > ny ? nx : ny) * 8);
	float *t = malloc((nx > ny ? nx : ny) * 4);
	for (size_t i = 0; i < nx; i++)
		k.x[i] = 2.f * cnn_rng_uniform(&rs) - 1.f;
	for (size_t i = 0; i < nw; i++)
		k.wt[i] = (2.f * cnn_rng_uniform(&rs) - 1.f) / 17.f;
	for (size_t i = 0; i < ny; i++)
		k.dy[i] = 2.f * cnn_rng_uniform(&rs) - 1.f;
	conv_case_ref(&k);
	double *refs[3] = { k.y, k.dx, k.dw };
	size_t cnts[3] = { ny, nx, nw };
	double mean[3] = { 0, 0, 0 };
	for (int c = 0; c < 3; c++) {
		for (size_t i = 0; i < cnts[c]; i++)
			mean[c] += fabs(refs[c][i]);
		mean[c] /= (double)cnts[c];
	}
	cudnnHandle_t h = NULL;
	void *dev[3] = { NULL, NULL, NULL }, *out = NULL;
	int ok = cudnnCreate(&h) == CUDNN_STATUS_SUCCESS &&
		 cudaMalloc(&dev[0], nx * 4) == cudaSuccess && cudaMalloc(&dev[1], nw * 4) == cudaSuccess &&
		 cudaMalloc(&dev[2], ny * 4) == cudaSuccess &&
		 cudaMalloc(&out, (nx > ny ? nx : ny) * 4) == cudaSuccess;
	char d[256], err[256];
	snprintf(d, sizeof(d), "cuDNN opens, conv2's operands at batch %d on the GPU (%s)", n, prec);
	test_cond(d, ok);
	for (int nhwc = 0; ok && nhwc < 2; nhwc++) {
		const char *lay = nhwc ? "NHWC" : "NCHW";
		cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
		cudnnTensorDescriptor_t xd, yd;
		cudnnFilterDescriptor_t wd;
		cudnnConvolutionDescriptor_t cd;
		cudnnCreateTensorDescriptor(&xd);
		cudnnCreateTensorDescriptor(&yd);
		cudnnCreateFilterDescriptor(&wd);
		cudnnCreateConvolutionDescriptor(&cd);
		cudnnSetTensor4dDescriptor(xd, f, CUDNN_DATA_FLOAT, n, k.c, k.h, k.w);
		cudnnSetTensor4dDescriptor(yd, f, CUDNN_DATA_FLOAT, n, k.oc, k.oh, k.ow);
		cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, f, k.oc, k.c, 3, 3);
		cudnnSetConvolution2dDescriptor(cd, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
						CUDNN_DATA_FLOAT);
		cudnnSetConvolutionMathType(cd, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
		const float *hs[3] = { k.x, k.wt, k.dy };
		int hc[3] = { k.c, k.c, k.oc }, hn[3] = { n, k.oc, n };
		int hhw[3] = { k.h * k.w, 9, k.oh * k.ow };
		size_t hcnt[3] = { nx, nw, ny };
		for (int i = 0; i < 3 && ok; i++) {
			if (nhwc)
				to_nhwc(hs[i], t, hn[i], hc[i], hhw[i]);
			else
				memcpy(t, hs[i], hcnt[i] * 4);
			ok = cudaMemcpy(dev[i], t, hcnt[i] * 4, cudaMemcpyHostToDevice) == cudaSuccess;
		}
		for (int call = 0; ok && call < 3; call++) {
			int cnt = 0, algo[16];
			size_t mem[16];
			cudnnStatus_t fs, ss[16];
			if (call == ALG_FWD) {
				cudnnConvolutionFwdAlgoPerf_t p[16];
				fs = cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, 16, &cnt, p);
				for (int i = 0; i < cnt; i++)
					algo[i] = p[i].algo, mem[i] = p[i].memory, ss[i] = p[i].status;
			} else if (call == ALG_BWD_DATA) {
				cudnnConvolutionBwdDataAlgoPerf_t p[16];
				fs = cudnnFindConvolutionBackwardDataAlgorithm(h, wd, yd, cd, xd, 16, &cnt, p);
				for (int i = 0; i < cnt; i++)
					algo[i] = p[i].algo, mem[i] = p[i].memory, ss[i] = p[i].status;
			} else {
				cudnnConvolutionBwdFilterAlgoPerf_t p[16];
				fs = cudnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, cd, wd, 16, &cnt, p);
				for (int i = 0; i < cnt; i++)
					algo[i] = p[i].algo, mem[i] = p[i].memory, ss[i] = p[i].status;
			}
			snprintf(d, sizeof(d), "cudnnFind of conv2's %s (batch %d, %s, %s) offers an algorithm",
				 alg_call[call], n, lay, prec);
			int offered = 0;
			for (int i = 0; fs == CUDNN_STATUS_SUCCESS && i < cnt; i++)
				offered += ss[i] == CUDNN_STATUS_SUCCESS;
			test_cond(d, fs == CUDNN_STATUS_SUCCESS && offered > 0);
			for (int i = 0; fs == CUDNN_STATUS_SUCCESS && i < cnt; i++) {
				if (ss[i] != CUDNN_STATUS_SUCCESS)
					continue;
				char name[96];
				snprintf(name, sizeof(name), "conv2 %s %s %s algo %d", prec, lay, alg_call[call],
					 algo[i]);
				snprintf(d, sizeof(d), "cuDNN's conv2 %s algorithm %d (batch %d, %s, %s, %zu "
					 "bytes of workspace) agrees with the CPU's sums", alg_call[call], algo[i],
					 n, lay, prec, mem[i]);
				if (mem[i] > ((size_t)256 << 20)) {
					test_skip(d, "its workspace is over 256 MiB: the trainer never takes it");
					continue;
				}
				int r = conv_algo_run(h, call, algo[i], nhwc, &k, xd, wd, yd, cd, dev, out,
						      mem[i], got, err, sizeof(err));
				if (r < 0)
					printf("#   %s: %s\n", name, err);
				test_cond(d, r == 0 && check_scaled(tf32 ? "cudnn tf32" : "cudnn fp32", name,
								    got, refs[call], cnts[call],
								    mean[call]) == 0);
			}
		}
		cudnnDestroyConvolutionDescriptor(cd);
		cudnnDestroyFilterDescriptor(wd);
		cudnnDestroyTensorDescriptor(yd);
		cudnnDestroyTensorDescriptor(xd);
	}
	for (int i = 0; i < 3; i++)
		cudaFree(dev[i]);
	cudaFree(out);
	if (h)
		cudnnDestroy(h);
	free(k.x), free(k.wt), free(k.dy), free(k.y), free(k.dx), free(k.dw), free(got), free(t);
}

/* --pdl: the step's graph with its edges into the project's kernels
 * programmatic (on sm_90 and later; pdl.h) trains as the graph without
 * them: the same bits on cuemu (the same algorithms each run), within the
 * "graph" row on a GPU (each run's cudnnFind may pick others), and within
 * "steps" of the CPU path either way.  Each layout and precision, one and
 * two backward streams, NCCL's all-reduce inside the graph. */
static int near_cpu(const char *what, int bf, const struct cnn_model *cpu, const float *got)
{
	return bf ? steps_gap(what, cpu, got) == 0 :
		    params_near("steps", cpu, got, cpu->params);
}

static void test_pdl_steps(int major, size_t nruns)
{
	struct cnn_dataset tr, te;
	struct cnn_model m;
	char err[1024], d[256];
	if (synthetic(&tr, &te, &m) < 0)
		return;
	float *p0 = malloc(m.nparams * 4), *off = malloc(m.nparams * 4), *on = malloc(m.nparams * 4);
	memcpy(p0, m.params, m.nparams * 4);
	cpu_run(&tr, &m, 0);
	struct cnn_model mg = m;
	mg.params = p0;
	static const struct {
		const char *what;
		enum cnn_precision prec;
		int comm;
		enum cnn_layout layout;
		int streams;
		enum cnn_conv_impl conv1, conv2;
		enum cnn_fc2_impl fc2;
	} runs[] = {
		{ "GPU steps as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, NCCL_1, CNN_LAYOUT_NCHW, 1, CNN_CONV_AUTO, CNN_CONV_AUTO, CNN_FC2_CUBLAS },
		{ "GPU steps, two backward streams, NHWC, fc2 fused, as a CUDA graph with NCCL (world 1)", CNN_PREC_FP32, NCCL_1, CNN_LAYOUT_NHWC, 2, CNN_CONV_DIRECT, CNN_CONV_CUDNN, CNN_FC2_FUSED },
		{ "bf16 GPU steps, conv1 and conv2 direct, two backward streams, as a CUDA graph", CNN_PREC_BF16, NO_COMM, CNN_LAYOUT_NCHW, 2, CNN_CONV_DIRECT, CNN_CONV_DIRECT, CNN_FC2_CUBLAS },
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]) && i < nruns; i++) {
		int bf = runs[i].prec == CNN_PREC_BF16;
		if (bf && major < 8) {
			test_skip(runs[i].what, "this GPU has no bf16 tensor cores (sm_80+)");
			continue;
		}
		struct cnn_graph_census c[3];
		float *got[3] = { off, on, on };
		static const enum cnn_pdl modes[3] = { CNN_PDL_OFF, CNN_PDL_ON, CNN_PDL_AUTO };
		int r[3];
		for (int k = 0; k < 3; k++) {
			open_pdl = modes[k];
			r[k] = gpu_run(&tr, &te, &mg, runs[i].prec, 1, runs[i].comm, runs[i].layout,
				       runs[i].streams, runs[i].conv1, runs[i].conv2, runs[i].fc2, got[k],
				       err, sizeof(err));
			open_pdl = CNN_PDL_OFF;
			c[k] = run_census;
			if (r[k] < 0)
				printf("#   %s, --pdl %s: %s\n", runs[i].what, cnn_pdl_name(modes[k]), err);
			else
				printf("#   %s, --pdl %s: %d programmatic edges, %s; %s\n", runs[i].what,
				       cnn_pdl_name(modes[k]), c[k].pdl_edges,
				       c[k].pdl_kept ? "kept" : "not kept", c[k].pdl_none);
			if (k == 1) {
				snprintf(d, sizeof(d), "--pdl on: %s run, %s", runs[i].what,
					 major >= 9 ? "with programmatic edges (sm_90+)" :
						      "without programmatic edges (before sm_90)");
				test_cond(d, r[1] == 0 && c[1].batch == BATCH &&
					  (major >= 9 ? c[1].pdl_edges > 0 && c[1].pdl_kept :
							!c[1].pdl_edges && !c[1].pdl_kept &&
							strstr(c[1].pdl_none, "sm_90")));
				snprintf(d, sizeof(d), "--pdl on: %s track the CPU path's (%s tolerance)",
					 runs[i].what, bf ? "bf16 steps" : "steps");
				test_cond(d, r[1] == 0 && near_cpu(runs[i].what, bf, &m, on));
#ifdef CNN_CUEMU
				snprintf(d, sizeof(d), "--pdl on: %s are --pdl off's, bit for bit",
					 runs[i].what);
				test_cond(d, r[0] == 0 && r[1] == 0 &&
					  memcmp(on, off, m.nparams * 4) == 0);
#else
				snprintf(d, sizeof(d), "--pdl on: %s equal --pdl off's (graph tolerance)",
					 runs[i].what);
				test_cond(d, r[0] == 0 && r[1] == 0 &&
					  params_near("graph", &m, on, off));
#endif
			}
		}
		snprintf(d, sizeof(d), "--pdl off: %s, no programmatic edge", runs[i].what);
		test_cond(d, r[0] == 0 && !c[0].pdl_edges && !c[0].pdl_kept && !c[0].pdl_timed);
		/* the same edges as --pdl on's run where both ran the same
		 * kernels: on cuemu, whose cudnnFind and clock pick the same
		 * each run; on a GPU each run's cudnnFind and timed choices may
		 * take other kernels (an H200 made 11 edges in one run, 13 in
		 * the next), so there some */
		snprintf(d, sizeof(d), "--pdl auto: %s, the graph timed with and without them%s",
			 runs[i].what, major >= 9 ? "" : " (before sm_90: neither)");
#ifdef CNN_CUEMU
		int same_edges = c[2].pdl_edges == c[1].pdl_edges;
#else
		int same_edges = c[2].pdl_edges > 0;
#endif
		if (major >= 9 && r[2] == 0 && !same_edges)
			printf("#   --pdl auto: %d programmatic edges, --pdl on: %d\n", c[2].pdl_edges,
			       c[1].pdl_edges);
		test_cond(d, r[2] == 0 &&
			  (major >= 9 ? c[2].pdl_timed && same_edges &&
					c[2].pdl_ms[0] > 0.f && c[2].pdl_ms[1] > 0.f &&
					c[2].pdl_kept == (c[2].pdl_ms[1] < c[2].pdl_ms[0]) :
				       !c[2].pdl_timed && !c[2].pdl_kept));
		snprintf(d, sizeof(d), "--pdl auto: %s track the CPU path's (%s tolerance)",
			 runs[i].what, bf ? "bf16 steps" : "steps");
		test_cond(d, r[2] == 0 && near_cpu(runs[i].what, bf, &m, on));
	}
	cnn_model_free(&m);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	free(p0), free(off), free(on);
}

/* Parameters set between steps (a checkpoint loaded into a running
 * trainer): the steps after train from them, as a fresh trainer does, the
 * weights' other forms (bf16 copy, conv2's packs, OHWI) remade from them,
 * not left from the last update's; through the captured graph too. */
static int midrun(const struct cnn_dataset *tr, const struct cnn_dataset *te,
		  const struct cnn_model *m, const float *p0, const float *p1, int warm,
		  enum cnn_precision prec, enum cnn_layout layout, enum cnn_conv_impl conv2, float *out,
		  char *err, size_t errlen)
{
	struct cnn_optim o;
	struct cnn_gpu *g = NULL;
	uint32_t idx[BATCH];
	int ok = 1;
	for (int phase = warm ? 0 : 1; ok && phase < 2; phase++) {
		memset(&o, 0, sizeof(o));
		o.lr = 0.05f, o.momentum = 0.9f;
		ok = cnn_optim_init(&o, CNN_SGD, m->nparams) == 0;
		if (ok && !g) {
			g = open_gpu(m, BATCH, prec, 1, &o, layout, 1, CNN_CONV_DIRECT, conv2,
				     CNN_FC2_CUBLAS);
			ok = g && cnn_gpu_api.load_data(g, tr, te, err, errlen) == 0;
		}
		ok = ok && cnn_gpu_api.set_state(g, phase ? p1 : p0, &o, err, errlen) == 0;
		for (int step = 0; ok && step < (phase ? 3 : 4); step++) {
			for (int i = 0; i < BATCH; i++)
				idx[i] = (uint32_t)((step * BATCH + i) * 7 % tr->n);
			ok = cnn_gpu_api.train_step(g, idx, BATCH, 0.05f, (uint64_t)step, err, errlen) == 0;
		}
		cnn_optim_free(&o);
	}
	ok = ok && cnn_gpu_api.get_state(g, out, NULL, err, errlen) == 0;
	if (g)
		cnn_gpu_api.close(g);
	return ok ? 0 : -1;
}

static void test_set_state_midrun(int tc)
{
	struct cnn_dataset tr, te;
	struct cnn_model m;
	char err[1024], d[192];
	if (synthetic(&tr, &te, &m) < 0)
		return;
	size_t n = m.nparams;
	float *p0 = malloc(n * 4), *p1 = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
	memcpy(p0, m.params, n * 4);
	cnn_model_init_params(&m, 2);
	memcpy(p1, m.params, n * 4);
	/* bf16 with conv2's kernels in NHWC reads all three forms there are
	 * (conv1's one input channel has no OHWI of its own) */
	enum cnn_precision prec = tc ? CNN_PREC_BF16 : CNN_PREC_FP32;
	const char *what = tc ? "bf16, NHWC, conv2 on the tensor-core kernels" : "fp32, NHWC";
	int ra = midrun(&tr, &te, &m, p0, p1, 1, prec, CNN_LAYOUT_NHWC,
			tc ? CNN_CONV_DIRECT : CNN_CONV_CUDNN, a, err, sizeof(err));
	if (ra < 0)
		printf("#   %s\n", err);
	int rb = midrun(&tr, &te, &m, p0, p1, 0, prec, CNN_LAYOUT_NHWC,
			tc ? CNN_CONV_DIRECT : CNN_CONV_CUDNN, b, err, sizeof(err));
	if (rb < 0)
		printf("#   %s\n", err);
	snprintf(d, sizeof(d), "%s: parameters set after 4 steps (graph replays), then 3 steps, "
		 "train as 3 steps of a fresh trainer from them (graph tolerance)", what);
	int near = ra == 0 && rb == 0 && checkf("graph", "params", a, b, n) == 0;
	if (ra == 0 && rb == 0 && !near)
		explain_params("graph", &m, a, b);
	test_cond(d, near);
	cnn_model_free(&m);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	free(p0), free(p1), free(a), free(b);
}

/* A GPU older than 8.0 (sm_75) trains with cuDNN's convolutions: --conv2
 * direct is refused there at open, naming the GPU and what it needs, and
 * auto takes cuDNN (test_golden with tf32 ran that). */
static void test_conv2_direct_refused(const struct cudaDeviceProp *prop)
{
	struct cnn_model m;
	struct cnn_shape sh = { 1, 28, 28, 10 };
	char err[1024], want[32];
	if (cnn_model_init(&m, sh, err, sizeof(err)) < 0)
		return;
	struct cnn_optim o = { .lr = 0.05f };
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	struct cnn_gpu *g = NULL;
	struct cnn_gpu_opts go = { &m, 8, 8, 0, CNN_PREC_TF32, 0, &o, 1, 0, 1, 60000, CNN_LAYOUT_NCHW,
				   1, 0, 0, CNN_CONV_AUTO, CNN_CONV_DIRECT, NULL, CNN_FC2_CUBLAS,
				   CNN_PDL_OFF, { 0, 0 } };
	int r = cnn_gpu_api.open(&g, &go, err, sizeof(err));
	cnn_gpu_api.close(g);
	printf("#   open: %s\n", r < 0 ? err : "(opened)");
	snprintf(want, sizeof(want), "is sm_%d%d", prop->major, prop->minor);
	test_cond("--conv2 direct on a GPU older than 8.0 is refused at open, naming the GPU and "
		  "compute capability 8.0", r < 0 && strstr(err, want) && strstr(err, "8.0"));
	cnn_optim_free(&o);
	cnn_model_free(&m);
}

/* The graph census's longest chain (cnn_graph_chain) on graphs whose
 * short branch comes last in Kahn's order, whose deepest path is not the
 * one through the most edges, with a cycle and an edge to no node. */
static void test_graph_chain(void)
{
	/* 0 -> 1 -> 2 -> 3 -> 5 and 0 -> 4 -> 5: 5 deep, its short branch's
	 * edge listed last */
	static const int f1[] = { 0, 1, 2, 3, 0, 4 }, t1[] = { 1, 2, 3, 5, 4, 5 };
	test_cond("graph chain: a fork and a join, the long branch 5 deep",
		  cnn_graph_chain(6, f1, t1, 6) == 5);
	/* the same with the short branch first and the nodes numbered backwards */
	static const int f2[] = { 5, 1, 5, 4, 3, 2 }, t2[] = { 1, 0, 4, 3, 2, 0 };
	test_cond("graph chain: the same graph numbered backwards, its edges in another order",
		  cnn_graph_chain(6, f2, t2, 6) == 5);
	/* a chain of 3 beside a lone node and a pair: 3 */
	static const int f3[] = { 0, 1, 4 }, t3[] = { 1, 2, 5 };
	test_cond("graph chain: disconnected pieces, the longest one 3 deep",
		  cnn_graph_chain(6, f3, t3, 3) == 3);
	test_cond("graph chain: nodes and no edges, 1 deep", cnn_graph_chain(4, NULL, NULL, 0) == 1);
	test_cond("graph chain: no nodes, 0", cnn_graph_chain(0, NULL, NULL, 0) == 0);
	static const int f4[] = { 0, 1, 2 }, t4[] = { 1, 2, 1 };
	test_cond("graph chain: a cycle is -1", cnn_graph_chain(3, f4, t4, 3) == -1);
	static const int f5[] = { 0, -1 }, t5[] = { 1, 0 };
	test_cond("graph chain: an edge from no node is -1", cnn_graph_chain(2, f5, t5, 2) == -1);
}

/* The GPU step's stages (net.c) cover the layer sequence (layers.h) once,
 * forward in order and backward in reverse, with fc2 fused and without:
 * tables only, so it runs without a GPU. */
static void test_gnet_stages(void)
{
	for (int fused = 0; fused < 2; fused++)
		for (int bwd = 0; bwd < 2; bwd++) {
			char d[128], err[256] = "";
			size_t n;
			const struct cnn_stage *s = cnn_gnet_stages(fused, bwd, &n);
			snprintf(d, sizeof(d), "the GPU %s's stages%s do every layer once, %s",
				 bwd ? "backward" : "forward", fused ? " with fc2 fused" : "",
				 bwd ? "in reverse" : "in order");
			test_cond(d, cnn_stages_check(s, n, bwd, err, sizeof(err)) == 0);
			if (err[0])
				printf("#   %s\n", err);
		}
}

int main(void)
{
	test_gnet_stages();
	test_graph_chain();
	/* the bf16 arithmetic the GPU's bf16 step does, against the golden
	 * file, on the CPU: runs everywhere; first without its roundings, where
	 * it must be the fp32 step (test_gpu_step's: its cuemu build has the
	 * GPU path to run) */
#ifndef CNN_CUEMU
	struct stepper exact = { .name = "bf16 emulation without rounding", .tol = "fp32", .prec = CNN_PREC_FP32, .emulate = 2 };
	struct stepper emu = { .name = "bf16 emulated on the CPU", .tol = "bf16", .prec = CNN_PREC_BF16, .emulate = 1 };
	test_golden(&exact);
	test_golden(&emu);
	test_bf16_steps_emulated();
#endif
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		test_skip("GPU training step vs the golden file and the CPU path", "no GPU here");
		printf("#   cudaGetDeviceCount: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		int rv = test_report();
		fprintf(stderr, "test_gpu_step: SKIPPED: no GPU (%s); the GPU path was compiled and "
			"linked, not run (the bf16 emulation ran)\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return rv;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
#ifdef DEBUG_ONLY
	DEBUG_ONLY;
	return test_report();
#endif
	/* TF32 and bf16 tensor cores: 8.0 and newer */
	int tc = prop.major >= 8;
	printf("# GPU 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
	struct stepper tf32 = { .name = "tf32", .tol = "tf32", .prec = CNN_PREC_TF32, .emulate = 0 };
	struct stepper bf = { .name = "bf16", .tol = "bf16", .prec = CNN_PREC_BF16, .emulate = 0 };
	struct stepper fp32 = { .name = "fp32", .tol = "fp32", .prec = CNN_PREC_FP32, .emulate = 0 };
	test_golden(&tf32);   /* first: the fp32 run sets NVIDIA_TF32_OVERRIDE=0 */
	if (tc)
		test_cudnn_algos(BATCH, 1);
	else
		test_skip("cuDNN's conv2 algorithms in TF32", "this GPU has no TF32 tensor cores (sm_80+)");
	if (tc) {
		test_golden(&bf);
		test_bf16_twin();
	} else {
		test_skip("bf16 golden step and twin", "this GPU has no bf16 tensor cores (sm_80+)");
	}
	test_golden(&fp32);
	/* after an fp32 open: NVIDIA_TF32_OVERRIDE=0, as the fp32 runs have it */
	test_cudnn_algos(BATCH, 0);
	test_steps_vs_cpu(tc);
	/* channels-last: the golden step in each precision, then training */
	struct stepper tf32h = { .name = "tf32 nhwc", .tol = "tf32", .prec = CNN_PREC_TF32, .layout = CNN_LAYOUT_NHWC };
	struct stepper bfh = { .name = "bf16 nhwc", .tol = "bf16", .prec = CNN_PREC_BF16, .layout = CNN_LAYOUT_NHWC };
	struct stepper fp32h = { .name = "fp32 nhwc", .tol = "fp32", .prec = CNN_PREC_FP32, .layout = CNN_LAYOUT_NHWC };
	test_golden(&tf32h);
	if (tc)
		test_golden(&bfh);
	else
		test_skip("bf16 nhwc golden step", "this GPU has no bf16 tensor cores (sm_80+)");
	test_golden(&fp32h);
	/* the weight gradients on a second stream: the golden step */
	struct stepper fp32s = { .name = "fp32 two streams", .tol = "fp32", .prec = CNN_PREC_FP32, .streams = 2 };
	struct stepper bfhs = { .name = "bf16 nhwc two streams", .tol = "bf16", .prec = CNN_PREC_BF16, .layout = CNN_LAYOUT_NHWC, .streams = 2 };
	/* conv1 by each: the direct kernels and cuDNN (auto times them) */
	struct stepper fp32d = { .name = "fp32 conv1 direct", .tol = "fp32", .prec = CNN_PREC_FP32, .conv1 = CNN_CONV_DIRECT };
	struct stepper tf32c = { .name = "tf32 conv1 cudnn", .tol = "tf32", .prec = CNN_PREC_TF32, .conv1 = CNN_CONV_CUDNN };
	struct stepper bfhd = { .name = "bf16 nhwc conv1 direct", .tol = "bf16", .prec = CNN_PREC_BF16, .layout = CNN_LAYOUT_NHWC, .conv1 = CNN_CONV_DIRECT };
	test_golden(&fp32d);
	test_golden(&tf32c);
	if (tc)
		test_golden(&bfhd);
	else
		test_skip("bf16 nhwc conv1 direct golden step", "this GPU has no bf16 tensor cores (sm_80+)");
	/* conv2 by each: the tensor-core kernels (TF32, bf16; either layout)
	 * and cuDNN (auto times them); in NCHW with conv1 by cuDNN (which
	 * reads the da1 conv2's backward-data writes) and by its direct
	 * kernels (whose weight gradient rides on conv2's backward-data) */
	struct stepper tf32d2 = { .name = "tf32 conv2 direct, conv1 cudnn", .tol = "tf32", .prec = CNN_PREC_TF32, .conv1 = CNN_CONV_CUDNN, .conv2 = CNN_CONV_DIRECT };
	struct stepper tf32hd2 = { .name = "tf32 nhwc conv2 direct two streams", .tol = "tf32", .prec = CNN_PREC_TF32, .layout = CNN_LAYOUT_NHWC, .streams = 2, .conv2 = CNN_CONV_DIRECT };
	struct stepper tf32c2 = { .name = "tf32 conv2 cudnn", .tol = "tf32", .prec = CNN_PREC_TF32, .conv2 = CNN_CONV_CUDNN };
	struct stepper bfhd2 = { .name = "bf16 nhwc conv2 direct", .tol = "bf16", .prec = CNN_PREC_BF16, .layout = CNN_LAYOUT_NHWC, .conv2 = CNN_CONV_DIRECT };
	struct stepper bfd2 = { .name = "bf16 conv1 and conv2 direct", .tol = "bf16", .prec = CNN_PREC_BF16, .conv1 = CNN_CONV_DIRECT, .conv2 = CNN_CONV_DIRECT };
	if (tc) {
		test_golden(&tf32d2);
		test_golden(&tf32hd2);
	} else {
		test_skip("tf32 conv2 direct golden steps", "this GPU has no TF32 tensor cores (sm_80+)");
		test_conv2_direct_refused(&prop);
	}
	test_golden(&tf32c2);
	if (tc) {
		test_golden(&bfhd2);
		test_golden(&bfd2);
	} else {
		test_skip("bf16 conv2 direct golden steps", "this GPU has no bf16 tensor cores (sm_80+)");
	}
	/* fc2's fused classifier: fp32, and TF32 with every convolution the
	 * project's and two streams */
	struct stepper fp32f = { .name = "fp32 fc2 fused", .tol = "fp32", .prec = CNN_PREC_FP32, .fc2 = CNN_FC2_FUSED };
	struct stepper tf32f = { .name = "tf32 fc2 fused, conv1 and conv2 direct, two streams", .tol = "tf32", .prec = CNN_PREC_TF32, .streams = 2, .conv1 = CNN_CONV_DIRECT, .conv2 = CNN_CONV_DIRECT, .fc2 = CNN_FC2_FUSED };
	test_golden(&fp32f);
	if (tc)
		test_golden(&tf32f);
	else
		test_skip("tf32 fc2 fused golden step", "this GPU has no TF32 tensor cores (sm_80+)");
	test_golden(&fp32s);
	if (tc)
		test_golden(&bfhs);
	else
		test_skip("bf16 nhwc two streams golden step", "this GPU has no bf16 tensor cores (sm_80+)");
	test_steps_more(tc);
	test_pdl_steps(prop.major, 3);
#ifdef CNN_CUEMU
	/* a GPU before sm_90 (an A100's 8.0): no edge made, said, the steps
	 * as ever */
	cuemu_set_cc(8, 0);
	test_pdl_steps(8, 1);
	cuemu_set_cc(9, 0);
#endif
	test_set_state_midrun(tc);
	return test_report();
}
