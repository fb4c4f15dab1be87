/* The Net: shapes, parameters, forward and backward on the CPU.  The
 * convolutions and the pool run on oneDNN's direct convolutions
 * (conv_dnnl.c); the fully connected layers as whole-batch GEMMs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl.h"
#include "layers.h"
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

/* The named fields of a model that layer l's output shape (c x h x w) or
 * its probability sets. */
static void model_keep(struct cnn_model *m, int l, int c, int h, int w, int fan)
{
	switch (l) {
	case CNN_CONV1: m->c1 = c; m->h1 = h; m->w1 = w; break;
	case CNN_CONV2: m->c2 = c; m->h2 = h; m->w2 = w; break;
	case CNN_POOL: m->hp = h; m->wp = w; break;
	case CNN_DROP1: m->p_drop1 = cnn_layers[l].p; break;
	case CNN_FC1: m->flat = fan; m->hidden = c; break;
	case CNN_DROP2: m->p_drop2 = cnn_layers[l].p; break;
	default: break;
	}
}

/* Walk the layer sequence (layers.h) from the input: each layer's output
 * shape, and each parameter tensor's place, size and fan-in in the flat
 * buffer, in the sequence's order (PyTorch's named_parameters order).
 * Returns the count of parameters. */
static size_t model_walk(struct cnn_model *m)
{
	int c = m->in.c, h = m->in.h, w = m->in.w, fan = 0, t = 0;
	size_t off = 0;
	for (int l = 0; l < CNN_LAYERS; l++) {
		const struct cnn_layer *L = &cnn_layers[l];
		size_t size = 0;
		switch (L->kind) {
		case CNN_K_CONV3:
			fan = c * 9;
			c = L->out;
			h -= 2;
			w -= 2;
			size = (size_t)c * fan;
			break;
		case CNN_K_LINEAR:
			fan = c * h * w;
			c = L->out ? L->out : m->in.classes;
			h = w = 1;
			size = (size_t)c * fan;
			break;
		case CNN_K_BIAS:
			size = (size_t)c;
			break;
		case CNN_K_POOL2:
			h /= 2;
			w /= 2;
			break;
		default:
			break;
		}
		model_keep(m, l, c, h, w, fan);
		if (L->tensor && t < P_COUNT) {
			m->t[t] = (struct cnn_tensor){ L->tensor, off, size, fan };
			off += size;
			t++;
		}
	}
	return off;
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
	size_t off = model_walk(m);
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
	if (!m->grads_lent)
		free(m->grads);
	m->params = m->grads = NULL;
}

void cnn_model_lend_grads(struct cnn_model *m, float *buf)
{
	memcpy(buf, m->grads, m->nparams * sizeof(float));
	if (!m->grads_lent)
		free(m->grads);
	m->grads = buf;
	m->grads_lent = 1;
}

void cnn_model_init_params(struct cnn_model *m, uint64_t seed)
{
	uint64_t s = cnn_mix64(seed ^ 0x5eedcafeull);
	for (int i = 0; i < P_COUNT; i++) {
		float bound = 1.f / sqrtf((float)m->t[i].fan_in);
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

/* One forward or backward of the CPU path: what its stages read. */
struct cpu_step {
	struct cnn_model *m;
	struct cnn_acts *a;
	const uint8_t *labels;
	int n, train, rank;
	uint64_t seed, step;
	float *loss;           /* forward */
	int *correct;
	float scale_n;         /* backward */
	void (*on_fc_ready)(void *);
	void *ctx;
};

static const float *param(const struct cnn_model *m, int t)
{
	return m->params + m->t[t].off;
}

static float *grad(const struct cnn_model *m, int t)
{
	return m->grads + m->t[t].off;
}

/* conv1, its bias and ReLU, conv2, its bias and ReLU (oneDNN), the pool */
static int fwd_convnet(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	return cnn_convnet_fwd(a->conv, m, a->x, S->n, a->p, a->arg, a->err, sizeof(a->err));
}

/* Dropout in place with drop probability p: each element is kept or
 * dropped by a pure function of (seed, step, rank, layer, index), so a
 * resumed run draws what the uninterrupted one would have.  The backward
 * needs no mask: a kept, positive value is nonzero. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void dropout(const struct cpu_step *S, float *x, size_t n, float p, int layer)
{
	if (S->train && p > 0.f)
		cnn_dropout_fwd(x, n, p, cnn_dropout_key(S->seed, S->step, S->rank, layer));
}

static int fwd_drop1(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	dropout(S, a->p, (size_t)S->n * m->flat, m->p_drop1, 1);
	return 0;
}

/* fc1 with its bias */
static int fwd_fc1(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_linear_fwd(a->p, S->n, m->flat, param(m, P_W3), param(m, P_B3), m->hidden, a->h);
	return 0;
}

static int fwd_relu3(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_relu_fwd(a->h, (size_t)S->n * m->hidden);
	return 0;
}

static int fwd_drop2(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	dropout(S, a->h, (size_t)S->n * m->hidden, m->p_drop2, 2);
	return 0;
}

/* fc2 with its bias */
static int fwd_fc2(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_linear_fwd(a->h, S->n, m->hidden, param(m, P_W4), param(m, P_B4), m->in.classes, a->logits);
	return 0;
}

static int fwd_nll(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	*S->loss = cnn_logsoftmax_nll_fwd(a->logits, S->labels, S->n, m->in.classes, a->logp,
					  S->correct);
	return 0;
}

static const struct cnn_stage cpu_forward[] = {
	{ "oneDNN's conv1 and conv2 (bias and ReLU as post-ops), the pool", CNN_CONV1, CNN_POOL,
	  fwd_convnet },
	{ "dropout1", CNN_DROP1, CNN_DROP1, fwd_drop1 },
	{ "fc1's GEMM with its bias", CNN_FC1, CNN_BIAS3, fwd_fc1 },
	{ "relu3", CNN_RELU3, CNN_RELU3, fwd_relu3 },
	{ "dropout2", CNN_DROP2, CNN_DROP2, fwd_drop2 },
	{ "fc2's GEMM with its bias", CNN_FC2, CNN_BIAS4, fwd_fc2 },
	{ "log-softmax and the loss", CNN_NLL, CNN_NLL, fwd_nll },
};

int cnn_forward(const struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		int train, uint64_t seed, uint64_t step, int rank, float *loss, int *correct)
{
	struct cpu_step S = { .m = (struct cnn_model *)m, .a = a, .labels = labels, .n = n,
			      .train = train, .rank = rank, .seed = seed, .step = step,
			      .loss = loss, .correct = correct };
	return cnn_stages_run(cpu_forward, sizeof(cpu_forward) / sizeof(cpu_forward[0]), &S);
}

static int bwd_nll(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_logsoftmax_nll_bwd(a->logp, S->labels, S->n, m->in.classes, S->scale_n, a->dlogits);
	return 0;
}

/* fc2's weight and bias gradients, dh */
static int bwd_fc2(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_linear_bwd(a->h, S->n, m->hidden, param(m, P_W4), m->in.classes, a->dlogits,
		       grad(m, P_W4), grad(m, P_B4), a->dh);
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

static float drop_scale(float p)
{
	return p > 0.f ? 1.f / (1.f - p) : 1.f;
}

/* The masks were applied in place: y > 0 means kept and positive.  In
 * eval-mode backward (tests) the scale is 1 since nothing dropped. */
static int bwd_drop2_relu3(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	relu_dropout_bwd(a->dh, a->h, (size_t)S->n * m->hidden, drop_scale(m->p_drop2));
	return 0;
}

/* fc1's weight and bias gradients, dp; then the fully connected layers'
 * gradients are final (on_fc_ready) */
static int bwd_fc1(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	cnn_linear_bwd(a->p, S->n, m->flat, param(m, P_W3), m->hidden, a->dh, grad(m, P_W3), grad(m, P_B3),
		       a->dp);
	if (S->on_fc_ready)
		S->on_fc_ready(S->ctx);
	return 0;
}

static int bwd_drop1(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	float s1 = drop_scale(m->p_drop1);
	if (s1 != 1.f)
		for (size_t i = 0; i < (size_t)S->n * m->flat; i++)
			a->dp[i] *= s1;
	return 0;
}

static int bwd_convnet(void *step)
{
	const struct cpu_step *S = step;
	const struct cnn_model *m = S->m;
	struct cnn_acts *a = S->a;
	return cnn_convnet_bwd(a->conv, m, a->x, S->n, a->p, a->arg, a->dp, m->grads, a->err,
			       sizeof(a->err));
}

static const struct cnn_stage cpu_backward[] = {
	{ "log-softmax and the loss", CNN_NLL, CNN_NLL, bwd_nll },
	{ "fc2's GEMMs (weight, bias, data)", CNN_BIAS4, CNN_FC2, bwd_fc2 },
	{ "dropout2 and relu3 in one pass", CNN_DROP2, CNN_RELU3, bwd_drop2_relu3 },
	{ "fc1's GEMMs (weight, bias, data)", CNN_BIAS3, CNN_FC1, bwd_fc1 },
	{ "dropout1", CNN_DROP1, CNN_DROP1, bwd_drop1 },
	{ "the pool, oneDNN's conv2 and conv1 (ReLU and bias gradients)", CNN_POOL, CNN_CONV1,
	  bwd_convnet },
};

int cnn_backward(struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		 float scale_n, void (*on_fc_ready)(void *), void *ctx)
{
	struct cpu_step S = { .m = m, .a = a, .labels = labels, .n = n, .scale_n = scale_n,
			      .on_fc_ready = on_fc_ready, .ctx = ctx };
	/* every layer writes its gradients whole (no zeroing pass) */
	return cnn_stages_run(cpu_backward, sizeof(cpu_backward) / sizeof(cpu_backward[0]), &S);
}

const struct cnn_stage *cnn_cpu_stages(int backward, size_t *n)
{
	*n = backward ? sizeof(cpu_backward) / sizeof(cpu_backward[0]) :
			sizeof(cpu_forward) / sizeof(cpu_forward[0]);
	return backward ? cpu_backward : cpu_forward;
}
