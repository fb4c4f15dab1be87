/* Optimizers with PyTorch's update rules, and the learning-rate schedule. */
#ifndef CNN_OPTIM_H
#define CNN_OPTIM_H

#include <stddef.h>

enum cnn_optim_kind { CNN_SGD = 0, CNN_ADADELTA = 1 };
enum cnn_sched_kind { CNN_SCHED_NONE = 0, CNN_SCHED_STEP, CNN_SCHED_COSINE };

struct cnn_optim {
	enum cnn_optim_kind kind;
	float lr, momentum, weight_decay;   /* SGD (torch.optim.SGD, no nesterov) */
	float rho, eps;                     /* Adadelta (torch.optim.Adadelta) */
	size_t n;
	float *s1, *s2;   /* SGD: momentum buffer; Adadelta: square_avg, acc_delta */
	long long updates;
};

int cnn_optim_init(struct cnn_optim *o, enum cnn_optim_kind kind, size_t n);
void cnn_optim_free(struct cnn_optim *o);
/* One update of params from grads with learning rate lr. */
void cnn_optim_step(struct cnn_optim *o, float *params, const float *grads, float lr);
/* Number of floats of state (s1 then s2) for checkpoints. */
size_t cnn_optim_state_len(const struct cnn_optim *o);

struct cnn_sched {
	enum cnn_sched_kind kind;
	float base_lr;
	int step_epochs;     /* step: multiply by gamma every step_epochs epochs */
	float gamma;
	long long total_steps;  /* cosine: over the whole run */
	long long warmup_steps; /* linear warm-up from 0 */
};

/* The learning rate for a global step in a given epoch. */
float cnn_sched_lr(const struct cnn_sched *s, int epoch, long long step);

#endif
