/* The Net's layer sequence, written once: the PyTorch examples MNIST Net,
 *   conv3x3 c->32, ReLU, conv3x3 32->64, ReLU, maxpool 2, dropout 0.25,
 *   linear flat->128, ReLU, dropout 0.5, linear 128->classes, log-softmax
 *   with the NLL loss.
 * Each bias is a layer of its own, since the paths fuse biases into
 * different calls (oneDNN's convolution, a GEMM, the next layer's kernel).
 *
 * cnn_model_init (cpu/model.c) derives the shapes and the parameter
 * tensors, in PyTorch's named_parameters order, from cnn_layers.  The CPU
 * path (cpu/model.c) and the GPU step (cuda/net.c) run the sequence as
 * stages: a stage is one call (or a few on one stream) that does one or
 * more consecutive layers, forward in the table's order and backward in
 * reverse.  Each path's forward and backward are loops over its own
 * tables of stages, and cnn_stages_check proves that a table covers every
 * layer once, in order, so a layer added here that a path does not run is
 * a failing test (tests/unit/test_cnn.c, test_gpu_step.c). */
#ifndef CNN_LAYERS_H
#define CNN_LAYERS_H

#include <stddef.h>

enum cnn_layer_kind {
	CNN_K_CONV3,    /* 3x3 valid convolution, stride 1 */
	CNN_K_BIAS,     /* per channel (or feature) of the layer before */
	CNN_K_RELU,
	CNN_K_POOL2,    /* 2x2 max-pool, stride 2 */
	CNN_K_DROPOUT,
	CNN_K_LINEAR,   /* flattens its input */
	CNN_K_NLL,      /* log-softmax and the mean NLL loss */
};

enum cnn_layer_id {
	CNN_CONV1, CNN_BIAS1, CNN_RELU1,
	CNN_CONV2, CNN_BIAS2, CNN_RELU2, CNN_POOL, CNN_DROP1,
	CNN_FC1, CNN_BIAS3, CNN_RELU3, CNN_DROP2,
	CNN_FC2, CNN_BIAS4, CNN_NLL,
	CNN_LAYERS
};

struct cnn_layer {
	const char *name;         /* "conv1", "conv1.bias", "relu1", ... */
	enum cnn_layer_kind kind;
	const char *tensor;       /* its parameter tensor's PyTorch name, or NULL */
	int out;                  /* CONV3, LINEAR: channels or features out; 0: the classes */
	float p;                  /* DROPOUT: the probability of a drop */
};

extern const struct cnn_layer cnn_layers[CNN_LAYERS];

/* One call of a path over layers first..last: first <= last forward,
 * first >= last backward (the order the call does them in).  run NULL: the
 * layers' work is done by an earlier call that name says (a backward
 * folded into the forward's kernel). */
struct cnn_stage {
	const char *name;
	int first, last;
	int (*run)(void *step);
};

/* 0 when stages[0..n) do every layer once, in the sequence's order
 * (backward: in reverse), else -1 with err naming the first stage out of
 * place and what was expected. */
int cnn_stages_check(const struct cnn_stage *stages, size_t n, int backward, char *err,
		     size_t errlen);

/* Run the stages in order; the first that fails (< 0) ends it. */
static inline int cnn_stages_run(const struct cnn_stage *stages, size_t n, void *step)
{
	for (size_t i = 0; i < n; i++)
		if (stages[i].run && stages[i].run(step) < 0)
			return -1;
	return 0;
}

#endif
