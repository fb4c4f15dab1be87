/* The PyTorch examples MNIST Net (its layers: ../layers.h), generalized to
 * c x h x w inputs.  Parameters live in one flat buffer in PyTorch's named_parameters order,
 * so a state_dict maps onto it tensor by tensor and gradients are
 * all-reduced as contiguous buckets. */
#ifndef CNN_MODEL_H
#define CNN_MODEL_H

#include <stddef.h>
#include <stdint.h>

enum { P_W1, P_B1, P_W2, P_B2, P_W3, P_B3, P_W4, P_B4, P_COUNT };

struct cnn_tensor {
	const char *name;     /* PyTorch's: "conv1.weight", ... */
	size_t off, n;
	int fan_in;           /* inputs per output: PyTorch's init bound */
};

struct cnn_shape {
	int c, h, w, classes;
};

struct cnn_model {
	struct cnn_shape in;
	int c1, c2, hidden;        /* 32, 64, 128 */
	int h1, w1, h2, w2, hp, wp;/* after conv1, conv2, pool */
	int flat;                  /* c2 * hp * wp: fc1's input */
	float p_drop1, p_drop2;    /* 0.25, 0.5; 0 turns dropout off */
	struct cnn_tensor t[P_COUNT];
	size_t nparams;
	float *params, *grads;     /* nparams each, 64-byte aligned */
	int grads_lent;            /* grads are the caller's (cnn_model_lend_grads) */
};

struct cnn_convnet;

/* Scratch for one batch of up to max_batch images. */
struct cnn_acts {
	int max_batch, nthreads;
	float *x;        /* input, B x c x h x w */
	float *p;        /* pooled conv2 after ReLU, then dropout1: B x flat */
	uint8_t *arg;    /* pool winners */
	float *h;        /* fc1 after ReLU and dropout2: B x hidden */
	float *logits, *logp, *dlogits, *dh, *dp;
	struct cnn_convnet *conv;  /* the convolutions (oneDNN) and their maps */
	char err[256];   /* why the last call returned -1 */
};

/* Set up shapes; -1 when the input is too small for two 3x3 convs and a
 * pool (err names the shape). */
int cnn_model_init(struct cnn_model *m, struct cnn_shape in, char *err, size_t errlen);
void cnn_model_free(struct cnn_model *m);
/* The gradients in buf from now on (nparams floats, 64-byte aligned, the
 * caller's to free after cnn_model_free): the shared-memory all-reduce's
 * own buffer, reduced where the backward pass writes it. */
void cnn_model_lend_grads(struct cnn_model *m, float *buf);
/* PyTorch's default init (kaiming_uniform a=sqrt(5): U(+-1/sqrt(fan_in))
 * for weights and biases) from a seeded generator. */
void cnn_model_init_params(struct cnn_model *m, uint64_t seed);
/* "1x28x28->10 (1199882 params)" */
void cnn_model_describe(const struct cnn_model *m, char *buf, size_t len);

/* -1 with err set when memory is short or oneDNN cannot run the shapes. */
int cnn_acts_init(struct cnn_acts *a, const struct cnn_model *m, int max_batch, int nthreads,
		  char *err, size_t errlen);
void cnn_acts_free(struct cnn_acts *a);

/* Forward of n images already in a->x.  train: dropout on, with masks
 * drawn from (seed, step, rank).  *loss gets the mean loss; correct (may be
 * NULL) counts right answers.  -1 with a->err set when oneDNN fails (out of
 * memory building a new batch size). */
int cnn_forward(const struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		int train, uint64_t seed, uint64_t step, int rank, float *loss, int *correct);

/* Backward of the last forward (grads overwritten, mean over scale_n).
 * on_fc_ready, when set, is called as soon as the fully connected layers'
 * gradients (the tail of the flat buffer from t[P_W3].off) are final, so
 * their all-reduce overlaps the convolutions' backward.  -1 with a->err
 * as cnn_forward. */
int cnn_backward(struct cnn_model *m, struct cnn_acts *a, const uint8_t *labels, int n,
		 float scale_n, void (*on_fc_ready)(void *), void *ctx);

struct cnn_stage;
/* The stages (../layers.h) cnn_forward (backward 0) or cnn_backward runs,
 * n of them. */
const struct cnn_stage *cnn_cpu_stages(int backward, size_t *n);

#endif
