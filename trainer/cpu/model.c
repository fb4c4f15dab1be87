/* The Net: shapes, parameters, forward and backward on the CPU.  The
 * convolutions and the pool run on oneDNN's direct convolutions
 * (conv_dnnl.c); the fully connected layers as whole-batch GEMMs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl.h"
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

int cnn_acts_init(struct cnn_acts *a, const struct cnn_model *m, int max_batch, int nthreads,
		  char *err, size_t errlen)
{
	size_t B = (size_t)max_batch;
	size_t in_n = (size_t)m->in.c * m->in.h * m->in.w;
	size_t K = (size_t)m->in.classes;

	memset(a, 0, sizeof(*a));
	a->max_batch = max_batch;
	a->nthreads = nthreads > 0 ? nthreads : 1;
	a->x = alloc(B * in_n * sizeof(float));
	a->p = alloc(B * m->flat * sizeof(float));
	a->dp = alloc(B * m->flat * sizeof(float));
	a->arg = alloc(B * m->flat);
	a->h = alloc(B * m->hidden * sizeof(float));
	a->dh = alloc(B * m->hidden * sizeof(float));
	a->logits = alloc(B * K * sizeof(float));
	a->logp = alloc(B * K * sizeof(float));
	a->dlogits = alloc(B * K * sizeof(float));
	if (!a->x || !a->p || !a->dp || !a->arg || !a->h || !a->dh ||
	    !a->logits || !a->logp || !a->dlogits) {
		snprintf(err, errlen, "out of memory for the activations of %d images", max_batch);
		cnn_acts_free(a);
		return -1;
	}
	if (cnn_convnet_create(&a->conv, m, max_batch, err, errlen) < 0) {
		cnn_acts_free(a);
		return -1;
	}
	return 0;
}

void cnn_acts_free(struct cnn_acts *a)
{
	void *ps[] = { a->x, a->p, a->dp, a->arg, a->h, a->dh,
		       a->logits, a->logp, a->dlogits };
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		free(ps[i]);
	cnn_convnet_free(a->conv);
	memset(a, 0, sizeof(*a));
}

/* Dropout in place with drop probability p: each element is kept or
 * dropped by a pure function of (seed, step, rank, layer, index), so a
 * resumed run draws what the uninterrupted one would have.  The backward
 * needs no mask: a kept, positive value is nonzero. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
int cnn_forward(const struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		int train, uint64_t seed, uint64_t step, int rank, float *loss, int *correct)
{
	const float *P = m->params;
	size_t flat = (size_t)m->flat;

	if (cnn_convnet_fwd(a->conv, m, a->x, n, a->p, a->arg, a->err, sizeof(a->err)) < 0)
		return -1;
	if (train && m->p_drop1 > 0.f) {
		cnn_dropout_fwd(a->p, (size_t)n * flat, m->p_drop1, cnn_dropout_key(seed, step, rank, 1));
	}
	cnn_linear_fwd(a->p, n, m->flat, P + m->t[P_W3].off, P + m->t[P_B3].off, m->hidden, a->h);
	cnn_relu_fwd(a->h, (size_t)n * m->hidden);
	if (train && m->p_drop2 > 0.f) {
		cnn_dropout_fwd(a->h, (size_t)n * m->hidden, m->p_drop2, cnn_dropout_key(seed, step, rank, 2));
	}
	cnn_linear_fwd(a->h, n, m->hidden, P + m->t[P_W4].off, P + m->t[P_B4].off,
		       m->in.classes, a->logits);
	*loss = cnn_logsoftmax_nll_fwd(a->logits, labels, n, m->in.classes, a->logp, correct);
	return 0;
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

int cnn_backward(struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		 float scale_n, void (*on_fc_ready)(void *), void *ctx)
{
	const float *P = m->params;
	float *G = m->grads;
	size_t flat = (size_t)m->flat;
	int K = m->in.classes;
	float s1 = m->p_drop1 > 0.f ? 1.f / (1.f - m->p_drop1) : 1.f;
	float s2 = m->p_drop2 > 0.f ? 1.f / (1.f - m->p_drop2) : 1.f;

	/* the convolutions' gradients are written whole below */
	memset(G + m->t[P_W3].off, 0, (m->nparams - m->t[P_W3].off) * sizeof(float));
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
	if (cnn_convnet_bwd(a->conv, m, a->x, n, a->p, a->arg, a->dp, G, a->err,
			    sizeof(a->err)) < 0)
		return -1;
	return 0;
}
