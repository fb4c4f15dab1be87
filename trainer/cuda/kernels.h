/* CUDA kernels of cnn_train's element-wise work, each the twin of a CPU
 * function in ops.h / optim.c (same layouts, same rules, batched):
 *
 *   cnn_cuda_bias_relu          cnn_bias_relu, per image
 *   cnn_cuda_maxpool2_fwd       cnn_maxpool2_fwd (first maximum wins)
 *   cnn_cuda_maxpool2_relu_bwd  cnn_maxpool2_relu_bwd
 *   cnn_cuda_relu_bwd           cnn_relu_bwd
 *   cnn_cuda_logsoftmax_nll_fwd cnn_logsoftmax_nll_fwd (sum of losses, correct count),
 *                               after the bias of cnn_linear_fwd, and
 *                               cnn_logsoftmax_nll_bwd in the same pass
 *   cnn_cuda_fc2_fused           cnn_linear_fwd, the loss and its gradient,
 *                               cnn_linear_bwd and cnn_relu_bwd (fc2 whole)
 *   cnn_cuda_sgd_step           SGD of cnn_optim_step (torch.optim.SGD)
 *   cnn_cuda_adadelta_step      Adadelta of cnn_optim_step
 *   cnn_cuda_dropout_fwd        cnn_dropout_fwd (the same mask), after cnn_bias_relu
 *   cnn_cuda_gather             cnn_data_gather (images and labels by index)
 *   cnn_cuda_conv1_fwd_gather   cnn_data_gather then conv1's forward (below)
 *   cnn_cuda_bias_grad          cnn_bias_grad, summed over the images (gated:
 *                               after cnn_relu_bwd, which relu also stores)
 *
 * Several are fusions, so the step makes fewer passes over the activations
 * and launches fewer kernels: the pool applies conv2's bias and ReLU on its
 * way in and dropout on its way out (its twin is cnn_bias_relu,
 * cnn_maxpool2_fwd then cnn_dropout_fwd, exactly), fc1's dropout its bias
 * and ReLU, the loss fc2's bias; and the bias
 * gradient can gate by a ReLU's output (conv1's: relu_bwd and the bias
 * gradient in one pass; conv2's: summed from the pool's output gradient,
 * 4x smaller than conv2's, where each window's gradient reaches exactly
 * one of its four inputs).
 *
 * --conv-layout nhwc stores the convolutions' activations channels-last
 * (cuDNN's NHWC, the layout its tensor-core kernels read): the _nhwc
 * kernels are the twins of the same CPU functions on the transposed data
 * (each test transposes the CPU function's input and output), and the
 * pool's output, fc1's input, stays in NCHW order; cnn_cuda_oihw_to_ohwi
 * and back move convolution weights between PyTorch's layout (the
 * parameters) and cuDNN's NHWC filter layout.
 *
 * --precision bf16 keeps the convolutions' activations and gradients in
 * bfloat16: the _bf16 kernels are the same computation in float with the
 * bf16 values widened on load and rounded to nearest even on store, twins
 * of the CPU function between cnn_bf16_to_float and cnn_bf16_from_float
 * (bf16.h), as are the conversions cnn_cuda_to_bf16 and cnn_cuda_from_bf16.
 *
 * Pointers are device pointers; every launch is asynchronous on stream
 * (NULL: the legacy default stream).  Each returns 0, or -1 after printing
 * the launch error (cudaCheck).  tests/unit/test_cuda_kernels.c checks each
 * against its CPU twin with atol + rtol * |ref|. */
#ifndef CNN_CUDA_KERNELS_H
#define CNN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The bits of a bfloat16 (CUDA's __nv_bfloat16), as stored. */
typedef uint16_t cnn_bf16;

/* y[i][o][*] = relu(y[i][o][*] + b[o]) for nimg images of oc planes of n pixels. */
int cnn_cuda_bias_relu(float *y, const float *b, int nimg, int oc, int n, cudaStream_t s);
/* What a pool does besides the max (NULL: nothing): bias, the previous
 * convolution's bias per plane, added with a ReLU before the max, each
 * value as cnn_cuda_bias_relu stores it (for bf16, rounded: the maxima and
 * arg of bias_relu then the pool); then, p > 0, dropout of the output with
 * the mask of cnn_dropout_fwd(y, nimg * c * (h/2) * (w/2), p, *key); yb:
 * NULL, or also the output rounded to bf16 (for a bf16 GEMM next). */
struct cnn_cuda_pool_ep {
	const float *bias;
	float p;
	const uint64_t *key;   /* device memory, as cnn_cuda_dropout_fwd's */
	cnn_bf16 *yb;
};
/* 2x2/2 max-pool of nimg images of c planes of h x w; arg gets 0..3. */
int cnn_cuda_maxpool2_fwd(const float *x, int nimg, int c, int h, int w,
			  const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg, cudaStream_t s);
/* dx (planes x h x w, overwritten): each window's dy to its winner where y > 0. */
int cnn_cuda_maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg, int planes,
			       int h, int w, float *dx, cudaStream_t s);
/* dx[i] = y[i] > 0 ? dx[i] : 0; dxb: NULL, or also the result rounded to
 * bf16 (cnn_cuda_to_bf16's, for a bf16 GEMM next) */
int cnn_cuda_relu_bwd(float *dx, const float *y, size_t n, cnn_bf16 *dxb, cudaStream_t s);
/* logp = log_softmax(logits + b) over n rows of k <= 64 (b: NULL, or a bias
 * per column, cnn_linear_fwd's); out[0] = sum of the rows' losses, out[1] =
 * rows whose argmax (first maximum) is the label, overwritten (one block,
 * summed in a fixed order: the same bits each run).  The mean loss is
 * out[0] / n.  dlogits: NULL, or also the loss's gradient
 * (softmax - onehot) / scale_n (scale_n > 0), in the same pass, and (dlb
 * not NULL) rounded to bf16; dbias: NULL, or (with dlogits) that
 * gradient's sum over the rows, the bias's gradient (k floats, written, in
 * a fixed order). */
/* fc2 and the loss on a training batch in one launch (cnn_train --fc2
 * fused), the twin of cnn_linear_fwd, cnn_logsoftmax_nll_fwd and _bwd,
 * cnn_linear_bwd and cnn_relu_bwd in a row; with b1 (not NULL) h is fc1's
 * GEMM output, and cnn_cuda_dropout_fwd(h, b1, hid, n * hid, p, key)
 * comes first, in place, the same bits: logp = log_softmax(h W^T + b)
 * (h n x hid, W k x hid, b k), out and dlogits as
 * cnn_cuda_logsoftmax_nll_fwd writes them, dw = dlogits^T h (k x hid), db
 * its column sums, dh = s2 dlogits W where h > 0 (else 0: fc1's ReLU; s2
 * dropout's scale) and dbh = dh's column sums (fc1's bias gradient), all
 * written, each sum in a fixed order (a block per 32 rows at 128 hidden
 * units, the blocks' partial sums added by the last of them to finish:
 * the same bits each run for a given n).  n >= 1, scale_n > 0 and the
 * shapes cnn_cuda_fc2_fused_fits takes; scratch: scratch_n floats, at
 * least cnn_cuda_fc2_fused_scratch(n, hid, k) (0 for one block: NULL will
 * do), its first 4 bytes 0 before the first call (each call leaves them
 * 0; calls on one scratch must not overlap). */
int cnn_cuda_fc2_fused(float *h, const float *b1, float p, const uint64_t *key, const float *w,
		      const float *b, const uint8_t *label, int n, int hid, int k, float scale_n,
		      float s2, float *logp, float *out, float *dlogits, float *dw, float *db,
		      float *dh, float *dbh, float *scratch, size_t scratch_n, cudaStream_t s);
/* whether cnn_cuda_fc2_fused takes hid hidden units and k classes: hid
 * 1..1024, k 1..64, k (hid + 1) floats of weights at most 4096 */
int cnn_cuda_fc2_fused_fits(int hid, int k);
/* the floats of scratch cnn_cuda_fc2_fused needs for n rows (0 where one
 * block takes them all, or for shapes it refuses) */
size_t cnn_cuda_fc2_fused_scratch(int n, int hid, int k);
int cnn_cuda_logsoftmax_nll_fwd(const float *logits, const float *b, const uint8_t *label, int n,
				int k, float *logp, float *out, float *dlogits, cnn_bf16 *dlb,
				float scale_n, float *dbias, cudaStream_t s);
/* What an optimizer step writes besides the parameters: the weights as
 * the next forward reads them, from each updated value, so the forward
 * needs no pass of its own over them (NULL pointers, or n 0: not that one).
 * The same bits as the separate kernels on the updated parameters:
 *   wb      every parameter rounded to bf16 (cnn_cuda_to_bf16's)
 *   pack    the oc x c x 3 x 3 weights at off in cnn_cuda_conv3_pack_tf32's
 *           (f) or _bf16's (b) two layouts, [0] the forward's, [1] the
 *           backward-data's
 *   ohwi    the out x in x hw weights at off in OHWI (cnn_cuda_oihw_to_ohwi's,
 *           f, or _bf16's, b) */
struct cnn_cuda_wop {
	cnn_bf16 *wb;
	struct {
		size_t off;
		int oc, c;
		float *f[2];
		cnn_bf16 *b[2];
	} pack;
	struct {
		size_t off;
		int out, in, hw;
		float *f;
		cnn_bf16 *b;
	} ohwi[2];
};
/* SGD with momentum and weight decay; first != 0 on the first update (the
 * buffer becomes the gradient, as torch does).  lr from device memory so a
 * captured CUDA graph can replay with a new schedule value.  wop: NULL, or
 * the weights' other forms to write (above). */
int cnn_cuda_sgd_step(float *p, const float *g, float *buf, size_t n, const float *lr,
		      float momentum, float weight_decay, int first, const struct cnn_cuda_wop *wop,
		      cudaStream_t s);
int cnn_cuda_adadelta_step(float *p, const float *g, float *sq, float *acc, size_t n,
			   const float *lr, float rho, float eps, float weight_decay,
			   const struct cnn_cuda_wop *wop, cudaStream_t s);
/* The same on parameters [lo, hi) only (p, g and the state at their
 * starts; the forms of wop indexed as ever), the bits of the whole update
 * there: the update split in two, the linear layers' run as soon as the
 * backward has read their weights for the last time, beside the rest. */
int cnn_cuda_sgd_step_range(float *p, const float *g, float *buf, size_t lo, size_t hi,
			    const float *lr, float momentum, float weight_decay, int first,
			    const struct cnn_cuda_wop *wop, cudaStream_t s);
int cnn_cuda_adadelta_step_range(float *p, const float *g, float *sq, float *acc, size_t lo,
				 size_t hi, const float *lr, float rho, float eps,
				 float weight_decay, const struct cnn_cuda_wop *wop, cudaStream_t s);

/* In-place dropout with the mask of cnn_dropout_fwd(x, n, p, *key); the
 * key is read from device memory so a captured graph draws a new mask
 * each replay (p 0 or key NULL: no dropout).  b: NULL, or a bias per
 * column of rows of k added with a ReLU first (cnn_cuda_bias_relu's, one
 * pass).  xb: NULL, or also the result rounded to bf16. */
int cnn_cuda_dropout_fwd(float *x, const float *b, int k, size_t n, float p, const uint64_t *key,
			 cnn_bf16 *xb, cudaStream_t s);

/* Per-channel normalization of cnn_data_gather: x = byte * scale - off. */
struct cnn_cuda_norm {
	float scale[4], off[4];
};
void cnn_cuda_norm_set(struct cnn_cuda_norm *nm, int c, const float *mean, const float *std);
/* x (n x c x h x w) and y (n) from the data set's bytes xs and labels ys
 * (both on the device) at the device indices idx[0..n); xb: NULL, or also
 * x rounded to bf16 (cnn_cuda_to_bf16's, for a bf16 convolution next). */
int cnn_cuda_gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx, int n, int c,
		    int h, int w, const struct cnn_cuda_norm *norm, float *x, uint8_t *y,
		    cnn_bf16 *xb, cudaStream_t s);

/* db[o] = sum of dy over nimg images of oc planes of n pixels (overwritten):
 * a convolution's bias gradient.  gate: NULL, or sum dy only where gate > 0
 * (a ReLU's output of the same shape); relu (with a gate): also store those
 * zeros into dy, cnn_cuda_relu_bwd in the same pass.  scratch: device
 * memory of at least cnn_cuda_bias_grad_scratch(nimg, oc, n) floats (the
 * per-chunk sums; it grows with nimg, so the largest batch's size serves
 * every smaller one).  Deterministic: the same bits for the same input. */
size_t cnn_cuda_bias_grad_scratch(int nimg, int oc, int n);
int cnn_cuda_bias_grad(float *dy, const float *gate, int relu, int nimg, int oc, int n,
		       float *scratch, float *db, cudaStream_t s);

/* Channels-last: y is nimg x n pixels x oc channels; the pool reads x
 * (nimg x h x w x c) and writes y and arg in the NCHW order of
 * cnn_cuda_maxpool2_fwd (nimg x c planes); its backward writes dx
 * channels-last.  The bias gradient sums dy (nimg x n x oc) per channel,
 * deterministically, with cnn_cuda_bias_grad_nhwc_scratch floats of
 * scratch; gate and relu as cnn_cuda_bias_grad's. */
int cnn_cuda_bias_relu_nhwc(float *y, const float *b, int nimg, int oc, int n, cudaStream_t s);
int cnn_cuda_maxpool2_fwd_nhwc(const float *x, int nimg, int c, int h, int w,
			       const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
			       cudaStream_t s);
int cnn_cuda_maxpool2_relu_bwd_nhwc(const float *dy, const float *y, const uint8_t *arg, int nimg,
				    int c, int h, int w, float *dx, cudaStream_t s);
size_t cnn_cuda_bias_grad_nhwc_scratch(int nimg, int oc, int n);
int cnn_cuda_bias_grad_nhwc(float *dy, const float *gate, int relu, int nimg, int oc, int n,
			    float *scratch, float *db, cudaStream_t s);
/* Convolution weights: o = w from OIHW (out x in x hw) to OHWI (out x hw x
 * in), and back; with out images of in channels, a batch from NCHW to
 * NHWC. */
int cnn_cuda_oihw_to_ohwi(const float *w, int out, int in, int hw, float *o, cudaStream_t s);
int cnn_cuda_ohwi_to_oihw(const float *w, int out, int in, int hw, float *o, cudaStream_t s);

/* conv1 direct, for one input channel (3x3, stride 1, no padding): y (nimg
 * x oc x (h-2) x (w-2), or channels-last with nhwc) = relu(conv(x, w) + b),
 * the twin of cnn_conv3_relu_fwd; x is nimg x h x w, w the oc x 9 weights
 * (oc 256 at most, nimg (h-2) (w-2) below 2^31: a thread per pixel).
 * bf16: operands and y in bf16, the sum rounded to bf16 before the bias and
 * ReLU (as cuDNN's output then cnn_cuda_bias_relu_bf16).  Its backward:
 * the weight and bias gradients (fp32, overwritten) from dy where y > 0 (the
 * ReLU's backward), the twin of cnn_relu_bwd then cnn_conv3_bwd's dw and db
 * summed over the images, deterministic, with
 * cnn_cuda_conv1_wgrad_scratch floats of scratch (it grows with nimg):
 * its first ceil(oc / 4) words 0 before the first call (a counter for each
 * group of 4 channels, which each call leaves 0; calls on one scratch must
 * not overlap). */
int cnn_cuda_conv1_fwd(const float *x, const float *w, const float *b, int nimg, int h, int wd,
		       int oc, int nhwc, float *y, cudaStream_t s);
size_t cnn_cuda_conv1_wgrad_scratch(int nimg, int h, int w, int oc);
/* dw (oc x 9) and db (oc) = the sums of part[o][chunk][10] over chunks, in
 * a fixed order (conv1_wgrad's second pass; also after
 * cnn_cuda_conv3_dgrad_conv1). */
int cnn_cuda_conv1_wgrad_sum(const float *part, int chunks, int oc, float *dw, float *db,
			     cudaStream_t s);
int cnn_cuda_conv1_wgrad(const float *x, const float *dy, const float *y, int nimg, int h, int wd,
			 int oc, int nhwc, float *scratch, float *dw, float *db, cudaStream_t s);
int cnn_cuda_conv1_fwd_bf16(const cnn_bf16 *x, const cnn_bf16 *w, const float *b, int nimg, int h,
			    int wd, int oc, int nhwc, cnn_bf16 *y, cudaStream_t s);
int cnn_cuda_conv1_wgrad_bf16(const cnn_bf16 *x, const cnn_bf16 *dy, const cnn_bf16 *y, int nimg,
			      int h, int wd, int oc, int nhwc, float *scratch, float *dw, float *db,
			      cudaStream_t s);
/* conv1's forward on a batch it gathers itself: cnn_cuda_gather's images
 * (xs at idx, normalized by norm's first channel) read where they are,
 * and what the gather writes (x, xb, labels) written by the same launch:
 * one node fewer in the step, the same bits as the gather then the
 * forward.  One input channel; x and labels as cnn_cuda_gather's. */
int cnn_cuda_conv1_fwd_gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx,
			      const struct cnn_cuda_norm *norm, const float *w, const float *b,
			      int nimg, int h, int wd, int oc, int nhwc, float *y, float *x,
			      uint8_t *labels, cudaStream_t s);
int cnn_cuda_conv1_fwd_gather_bf16(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx,
				   const struct cnn_cuda_norm *norm, const cnn_bf16 *w,
				   const float *b, int nimg, int h, int wd, int oc, int nhwc,
				   cnn_bf16 *y, float *x, cnn_bf16 *xb, uint8_t *labels,
				   cudaStream_t s);

/* A 3x3 convolution (stride 1, no padding) of many input channels, conv2,
 * on the tensor cores as an implicit GEMM (no im2col buffer): activations
 * NCHW, or NHWC with nhwc; sums in fp32 of operands rounded to TF32
 * (cvt.rna, as cuDNN's TF32) for the _tf32 calls or read as bf16 for the
 * _bf16 ones.  Twins: cnn_im2col3 + cnn_sgemm on the rounded operands (no
 * bias: the pool applies conv2's), col2im of W^T dy (cnn_conv3_bwd's dx),
 * and its dw summed over the images.
 *   pack:  the fp32 OIHW weights w (oc x c x 3 x 3) as the forward reads
 *          them, wf [tap][c][oc], and as the backward-data does, wb
 *          [tap][oc][c] (9 c oc entries each, in the operands' type; bf16
 *          rounded to nearest even); once a step, after the update
 *   fwd:   y (nimg x oc x (h-2) x (w-2)) = conv(x (nimg x c x h x w), wf)
 *   fwd_pool: fwd with conv2's pool in its epilogue: p and arg (nimg x oc x
 *          (h-2)/2 x (w-2)/2, NCHW in either layout) as
 *          cnn_cuda_maxpool2_fwd[_nhwc][_bf16] would write them from fwd's y
 *          with ep (its bias, ReLU, dropout and bf16 copy), the same bits,
 *          without y in memory
 *   dgrad: dx (nimg x c x h x w) from dy (nimg x oc x (h-2) x (w-2)) and wb
 *   dgrad_pool, wgrad_pool: dgrad and wgrad (NCHW) with dy the pool's
 *          backward, read from the pool's tensors where the calls read dy:
 *          the pooled gradient dp, the pool's output p and arg (nimg x oc
 *          x (h-2)/2 x (w-2)/2, NCHW), dy at each pixel dp's entry where p
 *          > 0 and arg names the pixel, else 0, as
 *          cnn_cuda_maxpool2_relu_bwd[_bf16] stores it: the same bits as
 *          that kernel then dgrad or wgrad, without dy in memory; wgrad_pool
 *          with db (not NULL) also writes conv2's bias gradient db (oc),
 *          the sum of the gated fp32 values before their rounding, as
 *          cnn_cuda_bias_grad(dp, p, 0, ...) gives it, summed in another
 *          fixed order
 *   dgrad_conv1: dgrad_pool with conv1's weight and bias gradients in its
 *          epilogue, for a Net whose conv1 (one input channel x1, nimg x
 *          (h+2) x (wd+2), output a1 = this call's dx shape) has the ReLU:
 *          dw1 (c x 9) and db1 (c), as cnn_cuda_conv1_wgrad[_bf16](x1, dx,
 *          a1) would give them from dgrad_pool's dx, summed in another
 *          fixed order; dx is not written.  Scratch:
 *          cnn_cuda_conv3_dgrad_conv1_scratch floats (up to nimg images)
 *   wgrad: dw (fp32 OIHW in every layout, overwritten) from x and dy; the
 *          blocks' partial sums go to scratch (cnn_cuda_conv3_wgrad_scratch
 *          floats, for up to nimg images and any fewer) and are added in a
 *          fixed order: the same bits each run on a given GPU (the split
 *          fills one wave of its SMs).
 * y and dx are stored in the operands' type (float, or bf16 rounded to
 * nearest even, as cuDNN stores its output).
 * Every call but pack needs compute capability 8.0 or newer (TF32 and bf16
 * wmma) and refuse an older GPU; cnn_cuda_tensor_cores says whether the
 * current one is: 1, 0, or -1 where CUDA cannot say. */
int cnn_cuda_tensor_cores(void);
int cnn_cuda_conv3_pack_tf32(const float *w, int oc, int c, float *wf, float *wb, cudaStream_t s);
int cnn_cuda_conv3_fwd_tf32(const float *x, const float *wf, int nimg, int c, int h, int wd, int oc,
			    int nhwc, float *y, cudaStream_t s);
int cnn_cuda_conv3_fwd_pool_tf32(const float *x, const float *wf, int nimg, int c, int h, int wd,
				 int oc, int nhwc, const struct cnn_cuda_pool_ep *ep, float *p,
				 uint8_t *arg, cudaStream_t s);
int cnn_cuda_conv3_dgrad_tf32(const float *dy, const float *wb, int nimg, int c, int h, int wd,
			      int oc, int nhwc, float *dx, cudaStream_t s);
size_t cnn_cuda_conv3_wgrad_scratch(int nimg, int c, int h, int wd, int oc);
int cnn_cuda_conv3_wgrad_tf32(const float *x, const float *dy, int nimg, int c, int h, int wd,
			      int oc, int nhwc, float *scratch, float *dw, cudaStream_t s);
int cnn_cuda_conv3_dgrad_pool_tf32(const float *dp, const float *p, const uint8_t *arg,
				   const float *wb, int nimg, int c, int h, int wd, int oc, float *dx,
				   cudaStream_t s);
size_t cnn_cuda_conv3_dgrad_conv1_scratch(int nimg, int c, int h, int wd);
int cnn_cuda_conv3_dgrad_conv1_tf32(const float *dp, const float *p, const uint8_t *arg,
				    const float *wb, int nimg, int c, int h, int wd, int oc,
				    const float *x1, const float *a1, float *scratch, float *dw1,
				    float *db1, cudaStream_t s);
int cnn_cuda_conv3_wgrad_pool_tf32(const float *x, const float *dp, const float *p,
				   const uint8_t *arg, int nimg, int c, int h, int wd, int oc,
				   float *scratch, float *dw, float *db, cudaStream_t s);
int cnn_cuda_conv3_pack_bf16(const float *w, int oc, int c, cnn_bf16 *wf, cnn_bf16 *wb,
			     cudaStream_t s);
int cnn_cuda_conv3_fwd_bf16(const cnn_bf16 *x, const cnn_bf16 *wf, int nimg, int c, int h, int wd,
			    int oc, int nhwc, cnn_bf16 *y, cudaStream_t s);
int cnn_cuda_conv3_fwd_pool_bf16(const cnn_bf16 *x, const cnn_bf16 *wf, int nimg, int c, int h,
				 int wd, int oc, int nhwc, const struct cnn_cuda_pool_ep *ep,
				 float *p, uint8_t *arg, cudaStream_t s);
int cnn_cuda_conv3_dgrad_bf16(const cnn_bf16 *dy, const cnn_bf16 *wb, int nimg, int c, int h,
			      int wd, int oc, int nhwc, cnn_bf16 *dx, cudaStream_t s);
int cnn_cuda_conv3_wgrad_bf16(const cnn_bf16 *x, const cnn_bf16 *dy, int nimg, int c, int h,
			      int wd, int oc, int nhwc, float *scratch, float *dw, cudaStream_t s);
int cnn_cuda_conv3_dgrad_pool_bf16(const float *dp, const float *p, const uint8_t *arg,
				   const cnn_bf16 *wb, int nimg, int c, int h, int wd, int oc,
				   cnn_bf16 *dx, cudaStream_t s);
int cnn_cuda_conv3_dgrad_conv1_bf16(const float *dp, const float *p, const uint8_t *arg,
				    const cnn_bf16 *wb, int nimg, int c, int h, int wd, int oc,
				    const cnn_bf16 *x1, const cnn_bf16 *a1, float *scratch, float *dw1,
				    float *db1, cudaStream_t s);
int cnn_cuda_conv3_wgrad_pool_bf16(const cnn_bf16 *x, const float *dp, const float *p,
				   const uint8_t *arg, int nimg, int c, int h, int wd, int oc,
				   float *scratch, float *dw, float *db, cudaStream_t s);

/* bf16 storage, float math (see the top of this file). */
int cnn_cuda_bias_relu_bf16(cnn_bf16 *y, const float *b, int nimg, int oc, int n, cudaStream_t s);
int cnn_cuda_maxpool2_fwd_bf16(const cnn_bf16 *x, int nimg, int c, int h, int w,
			       const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
			       cudaStream_t s);
int cnn_cuda_maxpool2_relu_bwd_bf16(const float *dy, const float *y, const uint8_t *arg,
				    int planes, int h, int w, cnn_bf16 *dx, cudaStream_t s);
int cnn_cuda_bias_grad_bf16(cnn_bf16 *dy, const cnn_bf16 *gate, int relu, int nimg, int oc, int n,
			    float *scratch, float *db, cudaStream_t s);
int cnn_cuda_bias_relu_nhwc_bf16(cnn_bf16 *y, const float *b, int nimg, int oc, int n,
				 cudaStream_t s);
int cnn_cuda_maxpool2_fwd_nhwc_bf16(const cnn_bf16 *x, int nimg, int c, int h, int w,
				    const struct cnn_cuda_pool_ep *ep, float *y, uint8_t *arg,
				    cudaStream_t s);
int cnn_cuda_maxpool2_relu_bwd_nhwc_bf16(const float *dy, const float *y, const uint8_t *arg,
					 int nimg, int c, int h, int w, cnn_bf16 *dx,
					 cudaStream_t s);
int cnn_cuda_bias_grad_nhwc_bf16(cnn_bf16 *dy, const cnn_bf16 *gate, int relu, int nimg, int oc,
				 int n, float *scratch, float *db, cudaStream_t s);
/* fp32 OIHW weights to bf16 OHWI (rounded), and bf16 OHWI gradients to
 * fp32 OIHW (exact). */
int cnn_cuda_oihw_to_ohwi_bf16(const float *w, int out, int in, int hw, cnn_bf16 *o,
			       cudaStream_t s);
int cnn_cuda_ohwi_to_oihw_bf16(const cnn_bf16 *w, int out, int in, int hw, float *o,
			       cudaStream_t s);
/* y = bf16(x), rounded to nearest even; and back (exact). */
int cnn_cuda_to_bf16(const float *x, cnn_bf16 *y, size_t n, cudaStream_t s);
int cnn_cuda_from_bf16(const cnn_bf16 *x, float *y, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
