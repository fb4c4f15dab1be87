/* cnn_train's numerics: every layer's backward against central finite
 * differences, and the whole step (forward, backward, SGD and Adadelta
 * updates) against the golden file PyTorch wrote from the same weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "conv_dnnl.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "pool_avx2.h"
#include "rng.h"
#include "test.h"
#include "tol.h"
#include "golden.h"
#include "layers.h"

#ifndef GOLDEN
#define GOLDEN "tests/golden/net_step.golden"
#endif

/* Tolerances, |got - ref| <= atol + rtol * |ref|, one table, and why (tol.h). */
static const struct tol tols[] = {
	{ "fd",     1e-3, 2e-2, "central differences in float32 with eps 1e-2: rounding of the loss" },
	{ "loss",   1e-5, 1e-5, "float32 sums of 10 logits; GEMM blocking differs from PyTorch's" },
	{ "grad",   2e-6, 1e-3, "GEMM reductions over up to 9216 terms in a different order" },
	{ "gradsum",1e-4, 1e-3, "sums of 1.2M gradients; fc2's cancel to ~0, so mostly atol" },
	{ "param",  1e-5, 1e-3, "three optimizer steps compound the gradient differences" },
	{ "twin",   1e-5, 1e-4, "oneDNN's direct convolution sums in another order than im2col+GEMM" },
	{ "twin28", 1e-4, 1e-4, "as twin, on 28x28 inputs: a conv2 weight gradient sums 8 x 24 x 24 products, which cancel (measured up to 2.1e-5; x5)" },
};

static void fill_uniform(float *p, size_t n, uint64_t *s, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * cnn_rng_uniform(s);
}

static double dot(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* ---- finite differences, layer by layer -------------------------------- */

/* (loss(p + eps) - loss(p - eps)) / 2 eps, p restored. */
static double central_diff(float *p, float eps, double (*loss)(void *), void *ctx)
{
	float keep = *p;
	*p = keep + eps;
	double lp = loss(ctx);
	*p = keep - eps;
	double lm = loss(ctx);
	*p = keep;
	return (lp - lm) / (2 * eps);
}

/* L = sum(conv(x) * r) with the bias large enough that ReLU is identity. */
struct conv_case {
	float x[2 * 6 * 5], wt[3 * 18], b[3], r[3 * 12], y[3 * 12], col[18 * 12];
};

static double conv_loss(void *ctx)
{
	struct conv_case *k = ctx;
	cnn_conv3_relu_fwd(k->x, 2, 6, 5, k->wt, k->b, 3, k->col, k->y);
	return dot(k->y, k->r, 3 * 12);
}

static void test_conv_fd(void)
{
	const int c = 2, h = 6, w = 5, oc = 3, k = c * 9, n = (h - 2) * (w - 2);
	static struct conv_case K;
	float dcol[18 * 12], dw[3 * 18] = { 0 }, db[3] = { 0 }, dx[2 * 6 * 5];
	uint64_t s = 42;
	fill_uniform(K.x, c * h * w, &s, -1, 1);
	fill_uniform(K.wt, oc * k, &s, -0.3f, 0.3f);
	fill_uniform(K.r, oc * n, &s, -1, 1);
	for (int o = 0; o < oc; o++)
		K.b[o] = 20.f + o;   /* every output positive: ReLU is identity */
	cnn_conv3_relu_fwd(K.x, c, h, w, K.wt, K.b, oc, K.col, K.y);
	cnn_conv3_bwd(K.x, c, h, w, K.wt, oc, K.r, K.col, dcol, dw, db, dx);

	const float eps = 1e-2f;
	double got[64], ref[64];
	int m = 0;
	for (int i = 0; i < k * oc; i += 5, m++) {
		ref[m] = central_diff(&K.wt[i], eps, conv_loss, &K);
		got[m] = dw[i];
	}
	test_cond("conv3 backward: weight gradient matches finite differences",
		  check("fd", "conv.dw", got, ref, m) == 0);
	m = 0;
	for (int i = 0; i < c * h * w; i += 3, m++) {
		ref[m] = central_diff(&K.x[i], eps, conv_loss, &K);
		got[m] = dx[i];
	}
	test_cond("conv3 backward: input gradient (col2im) matches finite differences",
		  check("fd", "conv.dx", got, ref, m) == 0);
	m = 0;
	for (int o = 0; o < oc; o++, m++) {
		ref[m] = central_diff(&K.b[o], eps, conv_loss, &K);
		got[m] = db[o];
	}
	test_cond("conv3 backward: bias gradient matches finite differences",
		  check("fd", "conv.db", got, ref, m) == 0);
}

enum { LN = 3, LIN = 7, LOUT = 4 };
struct linear_case {
	float x[LN * LIN], wt[LOUT * LIN], b[LOUT], r[LN * LOUT], y[LN * LOUT];
};

static double linear_loss(void *ctx)
{
	struct linear_case *k = ctx;
	cnn_linear_fwd(k->x, LN, LIN, k->wt, k->b, LOUT, k->y);
	return dot(k->y, k->r, LN * LOUT);
}

static void test_linear_fd(void)
{
	static struct linear_case K;
	float dw[LOUT * LIN] = { 0 }, db[LOUT] = { 0 }, dx[LN * LIN];
	uint64_t s = 7;
	fill_uniform(K.x, LN * LIN, &s, -1, 1);
	fill_uniform(K.wt, LOUT * LIN, &s, -1, 1);
	fill_uniform(K.b, LOUT, &s, -1, 1);
	fill_uniform(K.r, LN * LOUT, &s, -1, 1);
	cnn_linear_bwd(K.x, LN, LIN, K.wt, LOUT, K.r, dw, db, dx);
	const float eps = 1e-2f;
	double got[64], ref[64];
	int m = 0;
	for (int i = 0; i < LOUT * LIN; i += 2, m++) {
		ref[m] = central_diff(&K.wt[i], eps, linear_loss, &K);
		got[m] = dw[i];
	}
	for (int i = 0; i < LN * LIN; i += 2, m++) {
		ref[m] = central_diff(&K.x[i], eps, linear_loss, &K);
		got[m] = dx[i];
	}
	for (int o = 0; o < LOUT; o++, m++) {
		ref[m] = central_diff(&K.b[o], eps, linear_loss, &K);
		got[m] = db[o];
	}
	test_cond("linear backward: dW, dx and db match finite differences",
		  check("fd", "linear", got, ref, m) == 0);
}

static void test_pool_fd(void)
{
	enum { C = 2, H = 5, W = 6 };   /* odd height: the last row is dropped */
	float x[C * H * W], y[C * 2 * 3], r[C * 2 * 3], dx[C * H * W];
	uint8_t arg[C * 2 * 3];
	/* distinct values 0.05 apart, half negative, shuffled */
	for (int i = 0; i < C * H * W; i++)
		x[i] = (float)((i * 37) % (C * H * W)) * 0.05f - 1.0f;
	uint64_t s = 3;
	fill_uniform(r, C * 6, &s, -1, 1);
	cnn_maxpool2_fwd(x, C, H, W, y, arg);
	for (int i = 0; i < C * 6; i++)
		if (y[i] < 0)
			y[i] = 0;   /* the ReLU before the pool, applied after: same maxima */
	cnn_maxpool2_relu_bwd(r, y, arg, C, H, W, dx);
	const float eps = 1e-3f;
	double got[C * H * W], ref[C * H * W];
	for (int i = 0; i < C * H * W; i++) {
		float keep = x[i], yy[C * 6];
		uint8_t aa[C * 6];
		double l[2];
		for (int sgn = 0; sgn < 2; sgn++) {
			x[i] = keep + (sgn ? -eps : eps);
			cnn_maxpool2_fwd(x, C, H, W, yy, aa);
			for (int j = 0; j < C * 6; j++)
				yy[j] = yy[j] > 0 ? yy[j] : 0;
			l[sgn] = dot(yy, r, C * 6);
		}
		x[i] = keep;
		ref[i] = (l[0] - l[1]) / (2 * eps);
		got[i] = dx[i];
	}
	test_cond("relu + maxpool backward matches finite differences (odd height too)",
		  check("fd", "pool", got, ref, C * H * W) == 0);
	test_cond("maxpool picks the first maximum of a tie, as PyTorch",
		  ({ float t[4] = { 1, 1, 1, 1 }, o; uint8_t a; cnn_maxpool2_fwd(t, 1, 2, 2, &o, &a); a == 0; }));
}

static void test_nll_fd(void)
{
	enum { N = 3, K = 5 };
	float z[N * K], lp[N * K], dz[N * K];
	uint8_t lab[N] = { 0, 3, 4 };
	uint64_t s = 11;
	fill_uniform(z, N * K, &s, -2, 2);
	cnn_logsoftmax_nll_fwd(z, lab, N, K, lp, NULL);
	cnn_logsoftmax_nll_bwd(lp, lab, N, K, (float)N, dz);
	const float eps = 1e-2f;
	double got[N * K], ref[N * K];
	for (int i = 0; i < N * K; i++) {
		float keep = z[i];
		z[i] = keep + eps;
		double lpv = cnn_logsoftmax_nll_fwd(z, lab, N, K, lp, NULL);
		z[i] = keep - eps;
		double lmv = cnn_logsoftmax_nll_fwd(z, lab, N, K, lp, NULL);
		z[i] = keep;
		ref[i] = (lpv - lmv) / (2 * eps);
		got[i] = dz[i];
	}
	test_cond("log-softmax + NLL backward matches finite differences",
		  check("fd", "nll", got, ref, N * K) == 0);
	int correct;
	float big[2] = { 1000.f, -1000.f };
	uint8_t l0 = 1;
	float lpb[2];
	float loss = cnn_logsoftmax_nll_fwd(big, &l0, 1, 2, lpb, &correct);
	test_cond("log-softmax is stable for large logits", isfinite(loss) && fabsf(loss - 2000.f) < 1e-2f);
	test_cond("... and counts the argmax", correct == 0);
}

/* The model's convolution stack (oneDNN, conv_dnnl.c) against the readable
 * reference in ops_cpu.c (im2col + GEMM), image by image, for several batch
 * sizes: more than the stack keeps primitives for, and back to the first. */
static void test_convnet_twin(struct cnn_shape sh)
{
	struct cnn_model m;
	struct cnn_convnet *c = NULL;
	char err[256], d[160];
	const int sizes[] = { 3, 1, 5, 2, 4, 6, 7, 8, 3 };
	const int maxn = 8;
	if (cnn_model_init(&m, sh, err, sizeof(err)) < 0 ||
	    cnn_convnet_create(&c, &m, maxn, err, sizeof(err)) < 0) {
		printf("#   %s\n", err);
		test_cond("convolution stack set up", 0);
		return;
	}
	printf("#   oneDNN, %d channels in: %s\n", sh.c, cnn_convnet_describe(c));
	/* oneDNN's reference code is correct and 10x to 100x slower: on AVX2,
	 * conv1's weight gradient for one input channel fell to ref:any, and
	 * the CPU trainer ran at 70 images/s instead of 580 */
	snprintf(d, sizeof(d), "convolution stack on %dx%dx%d: no primitive runs oneDNN's reference code",
		 sh.c, sh.h, sh.w);
	test_cond(d, strstr(cnn_convnet_describe(c), "ref") == NULL);
	uint64_t s = 77;
	cnn_model_init_params(&m, 3);
	size_t in_n = (size_t)sh.c * sh.h * sh.w, a1_n = (size_t)m.c1 * m.h1 * m.w1;
	size_t y_n = (size_t)m.c2 * m.h2 * m.w2, flat = (size_t)m.flat;
	size_t conv_n = m.t[P_W3].off;
	float *x = malloc(maxn * in_n * sizeof(float)), *a1 = malloc(maxn * a1_n * sizeof(float));
	float *y = malloc(y_n * sizeof(float)), *da2 = malloc(y_n * sizeof(float));
	float *da1 = malloc(a1_n * sizeof(float));
	float *col = malloc((size_t)m.c1 * 9 * m.h2 * m.w2 * sizeof(float) + in_n * 9 * sizeof(float));
	float *dcol = malloc((size_t)m.c1 * 9 * m.h2 * m.w2 * sizeof(float));
	float *p = malloc(maxn * flat * sizeof(float)), *pr = malloc(maxn * flat * sizeof(float));
	float *dp = malloc(maxn * flat * sizeof(float));
	uint8_t *arg = malloc(maxn * flat), *argr = malloc(maxn * flat);
	float *g = calloc(conv_n, sizeof(float)), *gr = calloc(conv_n, sizeof(float));
	int bad_fwd = 0, bad_arg = 0, bad_bwd = 0, fails = 0;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		int n = sizes[k];
		fill_uniform(x, n * in_n, &s, -1, 1);
		fill_uniform(dp, n * flat, &s, -1, 1);
		if (cnn_convnet_fwd(c, &m, x, n, p, arg, err, sizeof(err)) < 0 ||
		    cnn_convnet_bwd(c, &m, x, n, p, arg, dp, g, err, sizeof(err)) < 0) {
			printf("#   batch %d: %s\n", n, err);
			fails++;
			continue;
		}
		const float *P = m.params;
		memset(gr, 0, conv_n * sizeof(float));
		for (int i = 0; i < n; i++) {
			float *a1i = a1 + i * a1_n;
			cnn_conv3_relu_fwd(x + i * in_n, sh.c, sh.h, sh.w, P + m.t[P_W1].off,
					   P + m.t[P_B1].off, m.c1, col, a1i);
			cnn_conv3_relu_fwd(a1i, m.c1, m.h1, m.w1, P + m.t[P_W2].off,
					   P + m.t[P_B2].off, m.c2, col, y);
			cnn_maxpool2_fwd(y, m.c2, m.h2, m.w2, pr + i * flat, argr + i * flat);
			cnn_maxpool2_relu_bwd(dp + i * flat, pr + i * flat, argr + i * flat, m.c2,
					      m.h2, m.w2, da2);
			cnn_conv3_bwd(a1i, m.c1, m.h1, m.w1, P + m.t[P_W2].off, m.c2, da2, col, dcol,
				      gr + m.t[P_W2].off, gr + m.t[P_B2].off, da1);
			cnn_relu_bwd(da1, a1i, a1_n);
			cnn_conv3_bwd(x + i * in_n, sh.c, sh.h, sh.w, P + m.t[P_W1].off, m.c1, da1,
				      col, dcol, gr + m.t[P_W1].off, gr + m.t[P_B1].off, NULL);
		}
		char name[32];
		snprintf(name, sizeof(name), "pool[n=%d]", n);
		const char *tw = sh.h * sh.w > 200 ? "twin28" : "twin";
		bad_fwd += checkf(tw, name, p, pr, n * flat);
		/* a winner may differ only where two inputs round to a tie */
		for (size_t i = 0; i < n * flat; i++)
			bad_arg += arg[i] != argr[i] && fabsf(p[i] - pr[i]) > 1e-5f;
		snprintf(name, sizeof(name), "conv grads[n=%d]", n);
		bad_bwd += checkf(tw, name, g, gr, conv_n);
	}
	snprintf(d, sizeof(d), "convolution stack, %d channels in: every batch size builds and runs", sh.c);
	test_cond(d, fails == 0);
	snprintf(d, sizeof(d), "convolution stack, %d channels in: forward (oneDNN) == im2col+GEMM reference", sh.c);
	test_cond(d, bad_fwd == 0);
	test_cond("... the same pool winners", bad_arg == 0);
	snprintf(d, sizeof(d), "convolution stack, %d channels in: gradients (oneDNN) == reference", sh.c);
	test_cond(d, bad_bwd == 0);
	free(x); free(a1); free(y); free(da2); free(da1); free(col); free(dcol);
	free(p); free(pr); free(dp); free(arg); free(argr); free(g); free(gr);
	cnn_convnet_free(c);
	cnn_model_free(&m);
}

/* The model's forward and backward; a oneDNN failure fails the test run. */
static double fwd(const struct cnn_model *m, struct cnn_acts *a, const uint8_t *lab, int n,
		  int train)
{
	float loss = NAN;
	if (cnn_forward(m, a, lab, n, train, 0, 0, 0, &loss, NULL) < 0) {
		test_cond(a->err, 0);
		exit(1);
	}
	return loss;
}

static void bwd(struct cnn_model *m, struct cnn_acts *a, const uint8_t *lab, int n)
{
	if (cnn_backward(m, a, lab, n, (float)n, NULL, NULL) < 0) {
		test_cond(a->err, 0);
		exit(1);
	}
}

/* The whole Net on a tiny image, against finite differences of its loss. */
static void test_model_fd(void)
{
	struct cnn_model m;
	struct cnn_acts a;
	char err[256];
	struct cnn_shape sh = { 2, 8, 9, 3 };
	if (cnn_model_init(&m, sh, err, sizeof(err)) < 0 || cnn_acts_init(&a, &m, 2, 1, err, sizeof(err)) < 0) {
		test_cond("tiny model set up", 0);
		return;
	}
	m.p_drop1 = m.p_drop2 = 0;
	cnn_model_init_params(&m, 5);
	uint64_t s = 9;
	fill_uniform(a.x, 2 * 2 * 8 * 9, &s, -1, 1);
	uint8_t lab[2] = { 1, 2 };
	fwd(&m, &a, lab, 2, 1);
	bwd(&m, &a, lab, 2);
	/* A step across a ReLU or max-pool kink breaks a central difference:
	 * a sample whose differences at two step sizes disagree is skipped. */
	double got[P_COUNT * 3], ref[P_COUNT * 3];
	int k = 0, skipped = 0;
	const float eps[2] = { 5e-3f, 1e-3f };
	for (int t = 0; t < P_COUNT; t++)
		for (int j = 0; j < 3; j++) {
			size_t i = m.t[t].off + (m.t[t].n - 1) * j / 2;
			float keep = m.params[i];
			double d[2];
			for (int e = 0; e < 2; e++) {
				m.params[i] = keep + eps[e];
				double lp = fwd(&m, &a, lab, 2, 1);
				m.params[i] = keep - eps[e];
				double lm = fwd(&m, &a, lab, 2, 1);
				d[e] = (lp - lm) / (2 * eps[e]);
			}
			m.params[i] = keep;
			if (fabs(d[0] - d[1]) > 1e-3 + 2e-2 * fabs(d[0])) {
				skipped++;
				continue;
			}
			ref[k] = d[0];
			got[k++] = m.grads[i];
		}
	printf("#   %d samples compared, %d skipped at kinks\n", k, skipped);
	test_cond("whole Net: at most 3 of 24 samples sit on a kink", skipped <= 3);
	test_cond("whole Net (2x8x9 input, 3 classes): gradients match finite differences",
		  check("fd", "net", got, ref, k) == 0);
	cnn_acts_free(&a);
	cnn_model_free(&m);
}

/* ---- golden file ------------------------------------------------------- */

static void test_golden(void)
{
	FILE *f = fopen(GOLDEN, "r");
	struct cnn_model m;
	struct cnn_acts a;
	char err[256];
	double ref[16], got[16];
	test_cond("golden file " GOLDEN " opens", f != NULL);
	if (!f)
		return;
	test_cond("golden file is version 1", golden_get(f, "version", NULL, ref, 1) == 1 && ref[0] == 1);
	struct cnn_shape sh = { 1, 28, 28, 10 };
	if (cnn_model_init(&m, sh, err, sizeof(err)) < 0 || cnn_acts_init(&a, &m, 8, 2, err, sizeof(err)) < 0) {
		test_cond("model set up", 0);
		fclose(f);
		return;
	}
	m.p_drop1 = m.p_drop2 = 0;
	uint8_t lab[8];
	for (int i = 0; i < 8; i++)
		lab[i] = (uint8_t)(i % 10);

	golden_params(&m);
	hashed(a.x, 8 * 784, 7, 2.f);
	got[0] = fwd(&m, &a, lab, 8, 1);
	golden_get(f, "loss", NULL, ref, 1);
	test_cond("golden: loss of the batch", check("loss", "loss", got, ref, 1) == 0);
	for (int j = 0; j < 10; j++)
		got[j] = a.logp[j];
	test_cond("golden: log-probabilities of image 0",
		  golden_get(f, "logp0", NULL, ref, 10) == 10 && check("loss", "logp0", got, ref, 10) == 0);
	bwd(&m, &a, lab, 8);
	for (int t = 0; t < P_COUNT; t++) {
		double sums[2], gs[2];
		const float *g = m.grads + m.t[t].off;
		size_t n = m.t[t].n;
		double v[10];
		int ok = golden_get(f, "grad", m.t[t].name, v, 10) == 10;
		gs[0] = gs[1] = 0;
		for (size_t i = 0; i < n; i++) {
			gs[0] += g[i];
			gs[1] += fabs(g[i]);
		}
		sums[0] = v[0];
		sums[1] = v[1];
		for (int j = 0; j < 8; j++) {
			got[j] = g[j * n / 8];
			ref[j] = v[2 + j];
		}
		char desc[96];
		snprintf(desc, sizeof(desc), "golden: gradient of %s", m.t[t].name);
		test_cond(desc, ok && check("gradsum", m.t[t].name, gs, sums, 2) == 0 &&
				check("grad", m.t[t].name, got, ref, 8) == 0);
	}

	/* Three steps of each optimizer on the same batch. */
	const char *names[2] = { "sgd", "adadelta" };
	for (int k = 0; k < 2; k++) {
		struct cnn_optim o = { .lr = k ? 1.0f : 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f };
		cnn_optim_init(&o, k ? CNN_ADADELTA : CNN_SGD, m.nparams);
		golden_params(&m);
		for (int step = 0; step < 3; step++) {
			fwd(&m, &a, lab, 8, 1);
			bwd(&m, &a, lab, 8);
			cnn_optim_step(&o, m.params, m.grads, o.lr);
		}
		got[0] = fwd(&m, &a, lab, 8, 0);
		char key[32], desc[96];
		snprintf(key, sizeof(key), "%s_loss3", names[k]);
		golden_get(f, key, NULL, ref, 1);
		snprintf(desc, sizeof(desc), "golden: %s, loss after 3 steps", names[k]);
		test_cond(desc, check("loss", key, got, ref, 1) == 0);
		snprintf(key, sizeof(key), "%s_param", names[k]);
		int bad = 0;
		for (int t = 0; t < P_COUNT; t++) {
			size_t n = m.t[t].n;
			if (golden_get(f, key, m.t[t].name, ref, 8) != 8) {
				bad++;
				continue;
			}
			for (int j = 0; j < 8; j++)
				got[j] = m.params[m.t[t].off + j * n / 8];
			bad += check("param", m.t[t].name, got, ref, 8);
		}
		snprintf(desc, sizeof(desc), "golden: %s, parameters after 3 steps", names[k]);
		test_cond(desc, bad == 0);
		cnn_optim_free(&o);
	}
	cnn_acts_free(&a);
	cnn_model_free(&m);
	fclose(f);
}

/* bf16.h: the rounding the GPU's bf16 stores are checked against. */
static void test_bf16(void)
{
	static const struct { uint32_t in; uint16_t out; const char *why; } c[] = {
		{ 0x3f800000u, 0x3f80u, "1.0 is exact" },
		{ 0x3f808000u, 0x3f80u, "1 + 2^-8, a tie, goes to the even 1.0" },
		{ 0x3f818000u, 0x3f82u, "1 + 3*2^-8, a tie, goes up to the even neighbour" },
		{ 0x3f808001u, 0x3f81u, "just above the tie rounds up" },
		{ 0x3f807fffu, 0x3f80u, "just below the tie rounds down" },
		{ 0xbf808001u, 0xbf81u, "negative values round by magnitude" },
		{ 0x80000000u, 0x8000u, "-0 keeps its sign" },
		{ 0x7f7fffffu, 0x7f80u, "FLT_MAX rounds to +inf" },
		{ 0xff800000u, 0xff80u, "-inf stays -inf" },
		{ 0x00010000u, 0x0001u, "a denormal keeps its upper bits" },
	};
	int bad = 0;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		float f;
		memcpy(&f, &c[i].in, 4);
		uint16_t h = cnn_bf16_from_float(f);
		if (h != c[i].out) {
			printf("#   bf16(0x%08x) = 0x%04x, want 0x%04x: %s\n", c[i].in, h, c[i].out, c[i].why);
			bad++;
		}
	}
	test_cond("bf16 rounding: nearest, ties to even, overflow to inf", bad == 0);
	uint32_t nan = 0x7f800001u;  /* a signalling NaN whose payload is all in the low half */
	float fn;
	memcpy(&fn, &nan, 4);
	test_cond("bf16 of a NaN is a NaN (not inf)", isnan(cnn_bf16_to_float(cnn_bf16_from_float(fn))));
	int round_trip = 1;
	for (uint32_t h = 0; h < 0x10000u; h++) {
		float f = cnn_bf16_to_float((uint16_t)h);
		if (!isnan(f) && cnn_bf16_from_float(f) != h)
			round_trip = 0;
	}
	test_cond("every bf16 value widens and rounds back to itself", round_trip);
	float v[3] = { 1.f / 3.f, -2.5f, 1e-3f };
	cnn_bf16_round(v, 3);
	test_cond("cnn_bf16_round keeps 8 significant bits",
		  fabsf(v[0] - 1.f / 3.f) <= 1.f / 3.f / 256.f && v[1] == -2.5f &&
		  fabsf(v[2] - 1e-3f) <= 1e-3f / 256.f);
}

static void test_shapes(void)
{
	struct cnn_model m;
	char err[256];
	struct cnn_shape cifar = { 3, 32, 32, 10 }, tiny = { 1, 4, 28, 10 };
	test_cond("CIFAR-10 shape: fc1 takes 64x14x14",
		  cnn_model_init(&m, cifar, err, sizeof(err)) == 0 && m.flat == 64 * 14 * 14 &&
		  m.t[P_W1].n == 32 * 3 * 9);
	cnn_model_free(&m);
	test_cond("an input too small is refused", cnn_model_init(&m, tiny, err, sizeof(err)) < 0);
	test_err("... naming the shape", err, "input 1x4x28");
	struct cnn_sched sc = { CNN_SCHED_STEP, 1.0f, 1, 0.7f, 0, 0 };
	test_cond("step schedule: epoch 2 is lr*0.49", fabsf(cnn_sched_lr(&sc, 2, 0) - 0.49f) < 1e-6f);
	sc = (struct cnn_sched){ CNN_SCHED_COSINE, 1.0f, 1, 0.7f, 100, 10 };
	test_cond("cosine with warm-up: ramps, peaks, ends at 0",
		  fabsf(cnn_sched_lr(&sc, 0, 0) - 0.1f) < 1e-6f &&
		  fabsf(cnn_sched_lr(&sc, 0, 10) - 1.0f) < 1e-6f &&
		  cnn_sched_lr(&sc, 0, 100) < 1e-6f);
}

/* The one layer sequence (layers.h): the model's tensors come from it, in
 * the order the P_* indices name them, and the CPU path's stages cover it
 * forward and backward; cnn_stages_check refuses tables that do not. */
static void test_layers(void)
{
	struct cnn_model m;
	char err[256];
	struct cnn_shape mnist = { 1, 28, 28, 10 };
	int ok = cnn_model_init(&m, mnist, err, sizeof(err)) == 0;
	test_cond("the Net on 1x28x28: 1,199,882 parameters, as PyTorch's", ok && m.nparams == 1199882);
	static const char *names[P_COUNT] = { "conv1.weight", "conv1.bias", "conv2.weight",
		"conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" };
	const int fan_in[P_COUNT] = { 9, 9, 288, 288, 9216, 9216, 128, 128 };
	for (int t = 0; ok && t < P_COUNT; t++) {
		char d[96];
		snprintf(d, sizeof(d), "tensor %d is %s, fan-in %d", t, names[t], fan_in[t]);
		test_cond(d, strcmp(m.t[t].name, names[t]) == 0 && m.t[t].fan_in == fan_in[t]);
	}
	test_cond("shapes from the sequence: 32x26x26, 64x24x24, pooled 12x12, fc1 128, p 0.25/0.5",
		  ok && m.c1 == 32 && m.h1 == 26 && m.c2 == 64 && m.h2 == 24 && m.hp == 12 &&
		  m.flat == 9216 && m.hidden == 128 && m.p_drop1 == 0.25f && m.p_drop2 == 0.5f);
	cnn_model_free(&m);

	for (int bwd = 0; bwd < 2; bwd++) {
		size_t n;
		const struct cnn_stage *s = cnn_cpu_stages(bwd, &n);
		err[0] = 0;
		test_cond(bwd ? "the CPU backward's stages do every layer once, in reverse" :
				"the CPU forward's stages do every layer once, in order",
			  cnn_stages_check(s, n, bwd, err, sizeof(err)) == 0);
		if (err[0])
			printf("#   %s\n", err);
	}
	const struct cnn_stage gap[] = { { "a", CNN_CONV1, CNN_RELU1, NULL },
					 { "b", CNN_BIAS2, CNN_NLL, NULL } };
	test_cond("a stage that skips a layer is refused", cnn_stages_check(gap, 2, 0, err, sizeof(err)) < 0);
	test_err("... naming the layer expected", err, "starts at conv2.bias (expected conv2)");
	const struct cnn_stage few[] = { { "a", CNN_CONV1, CNN_FC2, NULL } };
	test_cond("stages that end early are refused", cnn_stages_check(few, 1, 0, err, sizeof(err)) < 0);
	test_err("... naming the layer no stage does", err, "no stage does fc2.bias");
	const struct cnn_stage all[] = { { "a", CNN_CONV1, CNN_NLL, NULL }, { "b", CNN_NLL, CNN_NLL, NULL } };
	test_cond("a layer done twice is refused", cnn_stages_check(all, 2, 0, err, sizeof(err)) < 0);
	test_err("... naming the stage", err, "stage 1 (b)");
	const struct cnn_stage rev[] = { { "a", CNN_NLL, CNN_CONV1, NULL } };
	test_cond("one stage over the whole sequence backward passes", cnn_stages_check(rev, 1, 1, err, sizeof(err)) == 0);
	test_cond("... not as a forward", cnn_stages_check(rev, 1, 0, err, sizeof(err)) < 0);
	const struct cnn_stage wrong[] = { { "a", CNN_NLL, CNN_FC2, NULL },
					   { "b", CNN_DROP2, CNN_DROP2, NULL }, { "c", CNN_RELU3, CNN_NLL, NULL } };
	test_cond("a backward stage that runs forward is refused",
		  cnn_stages_check(wrong, 3, 1, err, sizeof(err)) < 0);
	test_err("... naming it", err, "stage 2 (c) runs from relu3 to log_softmax+nll (expected backward order)");
}

/* ---- dropout's mask ------------------------------------------------------ */

/* The mask as its definition says (ops.h, cuda/kernels_common.cuh): group
 * g of 4 elements takes 16 bits apiece of cnn_mix64(key + 4g); kept when
 * the bits are >= p * 65536, then scaled by 1 / (1 - p). */
static void dropout_ref(float *x, size_t n, float p, uint64_t key)
{
	uint32_t thresh = (uint32_t)(p * 65536.f);
	for (size_t i = 0; i < n; i++) {
		uint64_t r = cnn_mix64(key + (i & ~(size_t)3));
		uint32_t d = (uint32_t)(r >> (16 * (i & 3))) & 0xffff;
		x[i] = d >= thresh ? x[i] * (1.f / (1.f - p)) : 0.f;
	}
}

/* cnn_dropout_fwd (whole vectors where the CPU has them, then one group
 * at a time) draws the definition's mask bit for bit: lengths that end
 * inside a vector and inside a group, every p the Net uses and the edges,
 * values of both signs; and it drops about p of them. */
static void test_dropout(void)
{
	static const size_t lens[] = { 0, 1, 3, 4, 15, 16, 17, 33, 1001, 64 * 9216 + 5 };
	static const float ps[] = { 0.f, 0.25f, 0.5f, 0.999f };
	size_t maxn = lens[sizeof(lens) / sizeof(lens[0]) - 1];
	float *a = malloc(maxn * sizeof(float)), *b = malloc(maxn * sizeof(float));
	uint64_t s = 42;
	int same = 1;
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
			size_t n = lens[li];
			uint64_t key = cnn_dropout_key(7, li, (int)pi, 1);
			fill_uniform(a, n, &s, -1.f, 1.f);
			memcpy(b, a, n * sizeof(float));
			cnn_dropout_fwd(a, n, ps[pi], key);
			dropout_ref(b, n, ps[pi], key);
			if (memcmp(a, b, n * sizeof(float)) != 0) {
				printf("# dropout differs: n %zu, p %g\n", n, ps[pi]);
				same = 0;
			}
		}
	test_cond("dropout draws its definition's mask, bit for bit, at every length and p", same);
	/* a slice from a multiple of 4 with the key moved by as much is the
	 * same draw as the whole: the mask is by index, not by call */
	size_t n = 64 * 9216;
	fill_uniform(a, n, &s, 0.f, 1.f);
	memcpy(b, a, n * sizeof(float));
	cnn_dropout_fwd(a, n, 0.25f, 99);
	cnn_dropout_fwd(b, 1156, 0.25f, 99);
	cnn_dropout_fwd(b + 1156, n - 1156, 0.25f, 99 + 1156);
	test_cond("... and a slice from a multiple of 4 draws what the whole does",
		  memcmp(a, b, n * sizeof(float)) == 0);
	size_t dropped = 0;
	for (size_t i = 0; i < n; i++)
		dropped += a[i] == 0.f;
	double frac = (double)dropped / (double)n;
	printf("# dropped %.4f of %zu at p 0.25\n", frac, n);
	test_cond("... dropping about p of the elements (0.25 +- 0.005)", fabs(frac - 0.25) < 0.005);
	free(a);
	free(b);
}

/* ---- the pool in 8-channel blocks with AVX2 ------------------------------ */

/* The pool's definition on the blocked layout: window (py, px) of channel
 * ch is y[((n*C/8 + ch/8)*H + 2py + dy)*W + 2px + dx][ch%8]; the first
 * maximum in the order (0,0) (0,1) (1,0) (1,1) wins. */
static size_t blk8(int C, int H, int W, int n, int ch, int yy, int xx)
{
	return ((((size_t)n * (C / 8) + ch / 8) * H + yy) * W + xx) * 8 + ch % 8;
}

static void pool8_ref(const float *y, int C, int H, int W, int n, float *p, uint8_t *arg)
{
	int ph = H / 2, pw = W / 2;
	for (int ch = 0; ch < C; ch++)
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++) {
				size_t o = (((size_t)n * C + ch) * ph + py) * pw + px;
				float m = y[blk8(C, H, W, n, ch, 2 * py, 2 * px)];
				int a = 0;
				for (int k = 1; k < 4; k++) {
					float v = y[blk8(C, H, W, n, ch, 2 * py + k / 2, 2 * px + k % 2)];
					if (v > m) {
						m = v;
						a = k;
					}
				}
				p[o] = m;
				arg[o] = (uint8_t)a;
			}
}

static void pool8_bwd_ref(const float *dp, const float *p, const uint8_t *arg, int C, int H, int W,
			  int n, float *dy)
{
	int ph = H / 2, pw = W / 2;
	for (int ch = 0; ch < C; ch++)
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++) {
				size_t o = (((size_t)n * C + ch) * ph + py) * pw + px;
				for (int k = 0; k < 4; k++)
					dy[blk8(C, H, W, n, ch, 2 * py + k / 2, 2 * px + k % 2)] =
						k == arg[o] && p[o] > 0.f ? dp[o] : 0.f;
			}
}

/* Images of both shapes the vector path takes (the Net's conv2 output,
 * 64 x 24 x 24, and a small one), values on a coarse grid so windows
 * tie, half of them negative: p, the winners and the backward's dy are
 * the definition's bit for bit; a shape it does not take is refused. */
static void test_pool_avx2(void)
{
	static const int shapes[][3] = { { 64, 24, 24 }, { 16, 8, 4 } };
	if (!__builtin_cpu_supports("avx2")) {
		test_skip("the AVX2 pool matches its definition", "this CPU has no AVX2");
		return;
	}
	uint64_t s = 7;
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		int C = shapes[si][0], H = shapes[si][1], W = shapes[si][2], N = 3;
		size_t ny = (size_t)N * C * H * W, np = ny / 4;
		float *y = malloc(ny * sizeof(float)), *p = malloc(np * sizeof(float));
		float *pr = malloc(np * sizeof(float)), *dp = malloc(np * sizeof(float));
		float *dy = malloc(ny * sizeof(float)), *dyr = malloc(ny * sizeof(float));
		uint8_t *a = malloc(np), *ar = malloc(np);
		for (size_t i = 0; i < ny; i++)
			y[i] = (float)(int)(cnn_rng_uniform(&s) * 8.f) - 4.f;
		fill_uniform(dp, np, &s, -1.f, 1.f);
		int done = 1;
		for (int n = 0; n < N; n++) {
			done &= cnn_pool8_avx2_fwd(y, C, H, W, n, p, a) == 0;
			pool8_ref(y, C, H, W, n, pr, ar);
		}
		memset(dy, 0xff, ny * sizeof(float));   /* every element must be written */
		for (int n = 0; n < N; n++) {
			done &= cnn_pool8_avx2_bwd(dp, pr, ar, C, H, W, n, dy) == 0;
			pool8_bwd_ref(dp, pr, ar, C, H, W, n, dyr);
		}
		char d[160];
		snprintf(d, sizeof(d), "AVX2 pool of %d x %d x %d: the definition's maxima and winners, "
			 "ties to the first, bit for bit", C, H, W);
		test_cond(d, done && memcmp(p, pr, np * sizeof(float)) == 0 && memcmp(a, ar, np) == 0);
		snprintf(d, sizeof(d), "... and its backward's every element of dy");
		test_cond(d, done && memcmp(dy, dyr, ny * sizeof(float)) == 0);
		free(y), free(p), free(pr), free(dp), free(dy), free(dyr), free(a), free(ar);
	}
	float y1[8 * 6 * 6];
	test_cond("the AVX2 pool refuses a plane of 9 pixels (not whole runs of 8)",
		  cnn_pool8_avx2_fwd(y1, 8, 6, 6, 0, y1, (uint8_t *)y1) == -1);
	test_cond("... and an odd side", cnn_pool8_avx2_bwd(y1, y1, (uint8_t *)y1, 8, 5, 8, 0, y1) == -1);
}

int main(void)
{
	test_layers();
	test_conv_fd();
	test_linear_fd();
	test_pool_fd();
	test_dropout();
	test_pool_avx2();
	test_nll_fd();
	test_convnet_twin((struct cnn_shape){ 3, 12, 11, 4 });
	test_convnet_twin((struct cnn_shape){ 1, 28, 28, 10 });   /* the Net on Fashion-MNIST */
	test_bf16();
	test_model_fd();
	test_shapes();
	test_golden();
	return test_report();
}
