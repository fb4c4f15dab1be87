/* The Net's convolution stack on the CPU with oneDNN's direct convolution
 * primitives (the JIT kernels PyTorch itself uses on CPUs):
 *   conv1+ReLU -> conv2+ReLU -> 2x2 max-pool   and its backward.
 * Activations between the convolutions stay in the layout oneDNN picks for
 * this CPU (nChw16c with AVX-512, nChw8c with AVX2, else nchw): no im2col,
 * no reorders of activations; the pool reads that layout and writes the
 * pooled map in PyTorch's NCHW order for fc1.  Parameters and gradients stay
 * in PyTorch's OIHW order in the model's flat buffers; weights are reordered
 * to oneDNN's layout each step (a few microseconds).
 *
 * The readable reference of the same maths is ops.h (im2col + GEMM), which
 * the tests compare this against.  Primitives are built per batch size on
 * first use and kept (a few sizes: training, its last batch, evaluation). */
#ifndef CNN_CONV_DNNL_H
#define CNN_CONV_DNNL_H

#include <stddef.h>
#include <stdint.h>

struct cnn_model;
struct cnn_convnet;

/* Engine, stream and the activation buffers for up to max_batch images.
 * -1 with err set when oneDNN cannot be set up or memory is short. */
int cnn_convnet_create(struct cnn_convnet **out, const struct cnn_model *m, int max_batch,
		       char *err, size_t errlen);
void cnn_convnet_free(struct cnn_convnet *c);

/* Forward of n images x (NCHW) with m's parameters: p (n x flat, NCHW) is
 * maxpool(relu(conv2(relu(conv1(x))))), arg the winner (0..3) of each
 * window.  The intermediate maps are kept for the backward. */
int cnn_convnet_fwd(struct cnn_convnet *c, const struct cnn_model *m, const float *x, int n,
		    float *p, uint8_t *arg, char *err, size_t errlen);

/* Backward of the last forward (same n): dp is the gradient at the pool's
 * output, p its output (a window passes its gradient to its winner where
 * p > 0).  Writes (overwrites) the conv weights' and biases' gradients in
 * grads at m's offsets.  dp is not modified. */
int cnn_convnet_bwd(struct cnn_convnet *c, const struct cnn_model *m, const float *x, int n,
		    const float *p, const uint8_t *arg, const float *dp, float *grads,
		    char *err, size_t errlen);

/* "jit:avx512_core nChw16c": what oneDNN chose, for the log. */
const char *cnn_convnet_describe(const struct cnn_convnet *c);

#endif
