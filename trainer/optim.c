/* SGD (momentum, weight decay) and Adadelta, as torch.optim computes them,
 * and step / cosine schedules with linear warm-up. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

int cnn_optim_init(struct cnn_optim *o, enum cnn_optim_kind kind, size_t n)
{
	float lr = o->lr, mom = o->momentum, wd = o->weight_decay;
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->lr = lr;
	o->momentum = mom;
	o->weight_decay = wd;
	o->rho = 0.9f;
	o->eps = 1e-6f;
	o->n = n;
	o->s1 = calloc(n, sizeof(float));
	o->s2 = kind == CNN_ADADELTA ? calloc(n, sizeof(float)) : NULL;
	if (!o->s1 || (kind == CNN_ADADELTA && !o->s2)) {
		cnn_optim_free(o);
		return -1;
	}
	return 0;
}

void cnn_optim_free(struct cnn_optim *o)
{
	free(o->s1);
	free(o->s2);
	o->s1 = o->s2 = NULL;
}

size_t cnn_optim_state_len(const struct cnn_optim *o)
{
	return o->kind == CNN_ADADELTA ? 2 * o->n : o->n;
}

/* One slice [lo, hi) of the update: element-wise, so slices on different
 * threads give bit-identical results to one pass. */
HOT static void step_range(struct cnn_optim *o, float *p, const float *g, float lr, size_t lo,
			   size_t hi)
{
	float wd = o->weight_decay;
	if (o->kind == CNN_SGD) {
		float mom = o->momentum;
		float *buf = o->s1;
		if (mom == 0.f) {
			for (size_t i = lo; i < hi; i++)
				p[i] -= lr * (g[i] + wd * p[i]);
		} else if (o->updates == 0) {
			/* torch: the first step's buffer is the gradient itself */
			for (size_t i = lo; i < hi; i++) {
				float d = g[i] + wd * p[i];
				buf[i] = d;
				p[i] -= lr * d;
			}
		} else {
			for (size_t i = lo; i < hi; i++) {
				float d = g[i] + wd * p[i];
				buf[i] = mom * buf[i] + d;
				p[i] -= lr * buf[i];
			}
		}
	} else {
		/* sqrtf vectorizes: the trainer is built with -fno-math-errno */
		float rho = o->rho, eps = o->eps;
		float *sq = o->s1, *acc = o->s2;
		for (size_t i = lo; i < hi; i++) {
			float d = g[i] + wd * p[i];
			sq[i] = sq[i] * rho + (1.f - rho) * d * d;
			float delta = sqrtf(acc[i] + eps) / sqrtf(sq[i] + eps) * d;
			acc[i] = acc[i] * rho + (1.f - rho) * delta * delta;
			p[i] -= lr * delta;
		}
	}
}

void cnn_optim_step(struct cnn_optim *o, float *p, const float *g, float lr)
{
	size_t n = o->n;
	#pragma omp parallel
	{
		/* 64-byte aligned slices: no two threads share a cache line */
		size_t t = (size_t)omp_get_thread_num(), T = (size_t)omp_get_num_threads();
		size_t lo = (n * t / T) & ~(size_t)15, hi = t + 1 == T ? n : (n * (t + 1) / T) & ~(size_t)15;
		step_range(o, p, g, lr, lo, hi);
	}
	o->updates++;
}

float cnn_sched_lr(const struct cnn_sched *s, int epoch, long long step)
{
	float lr = s->base_lr;
	if (s->kind == CNN_SCHED_STEP && s->step_epochs > 0)
		lr *= powf(s->gamma, (float)(epoch / s->step_epochs));
	else if (s->kind == CNN_SCHED_COSINE && s->total_steps > 0) {
		long long span = s->total_steps - s->warmup_steps;
		long long t = step - s->warmup_steps;
		if (span > 0 && t > 0)
			lr *= 0.5f * (1.f + cosf((float)M_PI * (float)(t < span ? t : span) / (float)span));
	}
	if (s->warmup_steps > 0 && step < s->warmup_steps)
		lr *= (float)(step + 1) / (float)s->warmup_steps;
	return lr;
}
