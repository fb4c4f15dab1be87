/* The Net: shapes, parameters, forward and backward on the CPU.
 * Convolutions run image by image (im2col + GEMM, the image's working set
 * stays in cache), spread over threads with OpenMP; the fully connected
 * layers run as whole-batch GEMMs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ops.h"
#include "rng.h"

static void *alloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 64) != 0)
		return NULL;
	memset(p, 0, n);
	return p;
}

int cnn_model_init(struct cnn_model *m, struct cnn_shape in, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	if (in.c < 1 || in.c > 64 || in.h < 6 || in.w < 6 || in.h > 4096 || in.w > 4096 ||
	    in.classes < 2 || in.classes > 100000) {
		snprintf(err, errlen, "model: input %dx%dx%d with %d classes (expected 1..64 "
			 "channels, at least 6x6 pixels, at least 2 classes)",
			 in.c, in.h, in.w, in.classes);
		return -1;
	}
	m->in = in;
	m->c1 = 32;
	m->c2 = 64;
	m->hidden = 128;
	m->h1 = in.h - 2;
	m->w1 = in.w - 2;
	m->h2 = in.h - 4;
	m->w2 = in.w - 4;
	m->hp = m->h2 / 2;
	m->wp = m->w2 / 2;
	m->flat = m->c2 * m->hp * m->wp;
	m->p_drop1 = 0.25f;
	m->p_drop2 = 0.5f;
	static const char *names[P_COUNT] = {
		"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
		"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
	};
	size_t sizes[P_COUNT] = {
		(size_t)m->c1 * in.c * 9, (size_t)m->c1,
		(size_t)m->c2 * m->c1 * 9, (size_t)m->c2,
		(size_t)m->hidden * m->flat, (size_t)m->hidden,
		(size_t)in.classes * m->hidden, (size_t)in.classes,
	};
	size_t off = 0;
	for (int i = 0; i < P_COUNT; i++) {
		m->t[i].name = names[i];
		m->t[i].off = off;
		m->t[i].n = sizes[i];
		off += sizes[i];
	}
	m->nparams = off;
	m->params = alloc(off * sizeof(float));
	m->grads = alloc(off * sizeof(float));
	if (!m->params || !m->grads) {
		snprintf(err, errlen, "model: out of memory for %zu parameters", off);
		cnn_model_free(m);
		return -1;
	}
	return 0;
}

void cnn_model_free(struct cnn_model *m)
{
	free(m->params);
	free(m->grads);
	m->params = m->grads = NULL;
}

void cnn_model_init_params(struct cnn_model *m, uint64_t seed)
{
	uint64_t s = cnn_mix64(seed ^ 0x5eedcafeull);
	int fan_in[P_COUNT] = {
		m->in.c * 9, m->in.c * 9, m->c1 * 9, m->c1 * 9,
		m->flat, m->flat, m->hidden, m->hidden,
	};
	for (int i = 0; i < P_COUNT; i++) {
		float bound = 1.f / sqrtf((float)fan_in[i]);
		float *p = m->params + m->t[i].off;
		for (size_t j = 0; j < m->t[i].n; j++)
			p[j] = (2.f * cnn_rng_uniform(&s) - 1.f) * bound;
	}
}

void cnn_model_describe(const struct cnn_model *m, char *buf, size_t len)
{
	snprintf(buf, len, "%dx%dx%d->%d (%zu params)", m->in.c, m->in.h, m->in.w,
		 m->in.classes, m->nparams);
}

int cnn_acts_init(struct cnn_acts *a, const struct cnn_model *m, int max_batch, int nthreads)
{
	size_t B = (size_t)max_batch, T = (size_t)(nthreads > 0 ? nthreads : 1);
	size_t in_n = (size_t)m->in.c * m->in.h * m->in.w;
	size_t a1_n = (size_t)m->c1 * m->h1 * m->w1;
	size_t y2_n = (size_t)m->c2 * m->h2 * m->w2;
	size_t col1 = (size_t)m->in.c * 9 * m->h1 * m->w1, col2 = (size_t)m->c1 * 9 * m->h2 * m->w2;
	size_t K = (size_t)m->in.classes;

	memset(a, 0, sizeof(*a));
	a->max_batch = max_batch;
	a->nthreads = (int)T;
	a->col_n = col1 > col2 ? col1 : col2;
	a->dcol_n = col2;
	a->y_n = y2_n > a1_n ? y2_n : a1_n;
	a->da_n = y2_n;
	a->tgrad_n = m->t[P_W3].off;
	a->x = alloc(B * in_n * sizeof(float));
	a->a1 = alloc(B * a1_n * sizeof(float));
	a->p = alloc(B * m->flat * sizeof(float));
	a->dp = alloc(B * m->flat * sizeof(float));
	a->arg = alloc(B * m->flat);
	a->m1 = alloc(B * m->flat);
	a->m2 = alloc(B * m->hidden);
	a->h = alloc(B * m->hidden * sizeof(float));
	a->dh = alloc(B * m->hidden * sizeof(float));
	a->logits = alloc(B * K * sizeof(float));
	a->logp = alloc(B * K * sizeof(float));
	a->dlogits = alloc(B * K * sizeof(float));
	a->tcol = alloc(T * a->col_n * sizeof(float));
	a->tdcol = alloc(T * a->dcol_n * sizeof(float));
	a->ty = alloc(T * a->y_n * sizeof(float));
	a->tda = alloc(T * a->da_n * sizeof(float));
	a->tgrad = alloc(T * a->tgrad_n * sizeof(float));
	if (!a->x || !a->a1 || !a->p || !a->dp || !a->arg || !a->m1 || !a->m2 || !a->h ||
	    !a->dh || !a->logits || !a->logp || !a->dlogits || !a->tcol || !a->tdcol ||
	    !a->ty || !a->tda || !a->tgrad) {
		cnn_acts_free(a);
		return -1;
	}
	return 0;
}

void cnn_acts_free(struct cnn_acts *a)
{
	void *ps[] = { a->x, a->a1, a->p, a->dp, a->arg, a->m1, a->m2, a->h, a->dh,
		       a->logits, a->logp, a->dlogits, a->tcol, a->tdcol, a->ty, a->tda,
		       a->tgrad };
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		free(ps[i]);
	memset(a, 0, sizeof(*a));
}

/* Keep mask for n elements with drop probability p, a pure function of
 * (seed, step, rank, layer). */
static void dropout_mask(uint8_t *m, size_t n, float p, uint64_t seed, uint64_t step,
			 int rank, int layer)
{
	uint64_t key = cnn_mix64(seed ^ cnn_mix64(step * 0x100000001b3ull +
						  (uint64_t)rank * 0x9e37ull + (uint64_t)layer));
	uint32_t thresh = (uint32_t)(p * 65536.f);
	for (size_t i = 0; i < n; i += 4) {
		uint64_t r = cnn_mix64(key + i);
		for (size_t j = 0; j < 4 && i + j < n; j++)
			m[i + j] = ((r >> (16 * j)) & 0xffff) >= thresh;
	}
}

float cnn_forward(const struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels,
		  int n, int train, uint64_t seed, uint64_t step, int rank, int *correct)
{
	const struct cnn_shape *in = &m->in;
	const float *P = m->params;
	size_t in_n = (size_t)in->c * in->h * in->w, a1_n = (size_t)m->c1 * m->h1 * m->w1;
	size_t flat = (size_t)m->flat;

	#pragma omp parallel for num_threads(a->nthreads) schedule(static)
	for (int i = 0; i < n; i++) {
		int tid = omp_get_thread_num();
		float *col = a->tcol + (size_t)tid * a->col_n, *y = a->ty + (size_t)tid * a->y_n;
		float *a1 = a->a1 + (size_t)i * a1_n;
		cnn_conv3_relu_fwd(a->x + (size_t)i * in_n, in->c, in->h, in->w,
				   P + m->t[P_W1].off, P + m->t[P_B1].off, m->c1, col, a1);
		cnn_conv3_relu_fwd(a1, m->c1, m->h1, m->w1, P + m->t[P_W2].off,
				   P + m->t[P_B2].off, m->c2, col, y);
		cnn_maxpool2_fwd(y, m->c2, m->h2, m->w2, a->p + (size_t)i * flat,
				 a->arg + (size_t)i * flat);
	}
	if (train && m->p_drop1 > 0.f) {
		dropout_mask(a->m1, (size_t)n * flat, m->p_drop1, seed, step, rank, 1);
		cnn_dropout_apply(a->p, a->m1, (size_t)n * flat, 1.f / (1.f - m->p_drop1));
	}
	cnn_linear_fwd(a->p, n, m->flat, P + m->t[P_W3].off, P + m->t[P_B3].off, m->hidden, a->h);
	cnn_relu_fwd(a->h, (size_t)n * m->hidden);
	if (train && m->p_drop2 > 0.f) {
		dropout_mask(a->m2, (size_t)n * m->hidden, m->p_drop2, seed, step, rank, 2);
		cnn_dropout_apply(a->h, a->m2, (size_t)n * m->hidden, 1.f / (1.f - m->p_drop2));
	}
	cnn_linear_fwd(a->h, n, m->hidden, P + m->t[P_W4].off, P + m->t[P_B4].off,
		       m->in.classes, a->logits);
	return cnn_logsoftmax_nll_fwd(a->logits, labels, n, m->in.classes, a->logp, correct);
}

/* dx = (y > 0) ? dx * scale : 0; y is the stored (post-dropout) output. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void relu_dropout_bwd(float *dx, const float *y, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.f ? dx[i] * scale : 0.f;
}

void cnn_backward(struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		  float scale_n, void (*on_fc_ready)(void *), void *ctx)
{
	const struct cnn_shape *in = &m->in;
	const float *P = m->params;
	float *G = m->grads;
	size_t in_n = (size_t)in->c * in->h * in->w, a1_n = (size_t)m->c1 * m->h1 * m->w1;
	size_t flat = (size_t)m->flat, conv_n = a->tgrad_n;
	int K = in->classes;
	float s1 = m->p_drop1 > 0.f ? 1.f / (1.f - m->p_drop1) : 1.f;
	float s2 = m->p_drop2 > 0.f ? 1.f / (1.f - m->p_drop2) : 1.f;

	memset(G, 0, m->nparams * sizeof(float));
	cnn_logsoftmax_nll_bwd(a->logp, labels, n, K, scale_n, a->dlogits);
	cnn_linear_bwd(a->h, n, m->hidden, P + m->t[P_W4].off, K, a->dlogits,
		       G + m->t[P_W4].off, G + m->t[P_B4].off, a->dh);
	/* The masks were applied in place: y > 0 means kept and positive.
	 * In eval-mode backward (tests) the scale is 1 since nothing dropped. */
	relu_dropout_bwd(a->dh, a->h, (size_t)n * m->hidden, s2);
	cnn_linear_bwd(a->p, n, m->flat, P + m->t[P_W3].off, m->hidden, a->dh,
		       G + m->t[P_W3].off, G + m->t[P_B3].off, a->dp);
	if (on_fc_ready)
		on_fc_ready(ctx);
	if (s1 != 1.f)
		for (size_t i = 0; i < (size_t)n * flat; i++)
			a->dp[i] *= s1;

	if (a->nthreads > 1)
		memset(a->tgrad, 0, (size_t)a->nthreads * conv_n * sizeof(float));
	#pragma omp parallel for num_threads(a->nthreads) schedule(static)
	for (int i = 0; i < n; i++) {
		int tid = omp_get_thread_num();
		float *g = tid == 0 ? G : a->tgrad + (size_t)tid * conv_n;
		float *col = a->tcol + (size_t)tid * a->col_n, *dcol = a->tdcol + (size_t)tid * a->dcol_n;
		float *da2 = a->tda + (size_t)tid * a->da_n, *da1 = a->ty + (size_t)tid * a->y_n;
		const float *a1 = a->a1 + (size_t)i * a1_n;
		cnn_maxpool2_relu_bwd(a->dp + (size_t)i * flat, a->p + (size_t)i * flat,
				      a->arg + (size_t)i * flat, m->c2, m->h2, m->w2, da2);
		cnn_conv3_bwd(a1, m->c1, m->h1, m->w1, P + m->t[P_W2].off, m->c2, da2, col, dcol,
			      g + m->t[P_W2].off, g + m->t[P_B2].off, da1);
		cnn_relu_bwd(da1, a1, a1_n);
		cnn_conv3_bwd(a->x + (size_t)i * in_n, in->c, in->h, in->w, P + m->t[P_W1].off,
			      m->c1, da1, col, dcol, g + m->t[P_W1].off, g + m->t[P_B1].off, NULL);
	}
	for (int t = 1; t < a->nthreads; t++) {
		const float *g = a->tgrad + (size_t)t * conv_n;
		for (size_t j = 0; j < conv_n; j++)
			G[j] += g[j];
	}
}
