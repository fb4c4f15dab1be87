/* The Net's helpers shared by net.c (its layers' calls, the forward and
 * the backward), prepare.c (cuDNN's algorithms for a batch size and the
 * autos' choices, each call timed) and describe.c (the "# GPU:" line's
 * part).  Internal to cnn_train_cuda.so. */
#ifndef CNN_CUDA_NET_IMPL_H
#define CNN_CUDA_NET_IMPL_H

#include "net.h"

/* Whether conv2's tensor-core kernels can run: TF32 or bf16, on a GPU that
 * has them (cnn_gnet_init sets tc). */
static inline int cnn_gnet_conv2_possible(const struct cnn_gnet *g)
{
	return g->precision != CNN_PREC_FP32 && g->tc == 1;
}

/* Convolution l's filter descriptor in a layout. */
static inline cudnnFilterDescriptor_t cnn_gnet_filt(const struct cnn_gnet *g, int l, int nhwc)
{
	return nhwc ? g->fwh[l] : g->fw[l];
}

/* The activations' descriptors (tx, t1, t2) for a batch of n in either
 * layout; -1 where cuDNN refused one (said, cudnnCheck). */
int cnn_gnet_descs(struct cnn_gnet *g, int n, int nhwc);

/* Batch n's algorithms as cnn_gnet_prepare chose them; NULL if n was not
 * prepared. */
const struct cnn_gnet_algos *cnn_gnet_find_algos(const struct cnn_gnet *g, int n);

/* One call of a convolution by cuDNN or the project's kernels, with what
 * the step runs beside it, on g->s alone (as the autos time it): conv1's
 * (layer 0) forward or weight gradient (calls 0, 1); conv2's (layer 1)
 * forward (with the pool and dropout, which the direct kernel fuses),
 * backward-data or backward-filter with the bias's gradient (0, 1, 2);
 * "layer" 2, the pool's backward into da2 (direct ignored); "layer" 3,
 * conv2's backward-data (direct bit 1) with conv1's weight gradient
 * (bit 0), fused where both are direct in NCHW; "layer" 4, fc2's classifier
 * (direct: the fused kernel, else the calls it replaces).  a->n images,
 * the descriptors set for them (cnn_gnet_descs); -1 on a failure. */
int cnn_gnet_call(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		  int direct);

#endif
