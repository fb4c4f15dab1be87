/* CPU kernels of the CNN, forward and backward, one image or one batch at
 * a time.  Layouts are PyTorch's: activations NCHW, conv weights OIHW,
 * linear weights [out][in].  GEMMs go through cnn_sgemm (oneDNN). */
#ifndef CNN_OPS_H
#define CNN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Row-major C = alpha * op(A) * op(B) + beta * C; ta/tb are 'N' or 'T'. */
void cnn_sgemm(char ta, char tb, int m, int n, int k, float alpha,
	       const float *a, int lda, const float *b, int ldb,
	       float beta, float *c, int ldc);

/* 3x3 valid convolution, stride 1, for one image of c x h x w.
 * col is (c*9) x (oh*ow); oh = h-2, ow = w-2. */
void cnn_im2col3(const float *x, int c, int h, int w, float *col);
/* dx (c x h x w) = col2im(dcol), overwriting dx. */
void cnn_col2im3(const float *dcol, int c, int h, int w, float *dx);

/* y (oc x oh*ow) = relu(W * col + b) for one image. */
void cnn_conv3_relu_fwd(const float *x, int c, int h, int w, const float *wt,
			const float *b, int oc, float *col, float *y);
/* One image's conv backward given dy (oc x oh*ow) and its input x:
 * dw += dy * col^T, db += rowsum(dy), and when dx != NULL,
 * dx = col2im(W^T * dy) (dcol is scratch of (c*9) x (oh*ow)). */
void cnn_conv3_bwd(const float *x, int c, int h, int w, const float *wt, int oc,
		   const float *dy, float *col, float *dcol, float *dw, float *db,
		   float *dx);

/* db[o] += sum of dy's plane o, over oc planes of n pixels: a
 * convolution's bias gradient for one image. */
void cnn_bias_grad(const float *dy, int oc, int n, float *db);

/* y = relu(y + b) over oc planes of n pixels. */
void cnn_bias_relu(float *y, const float *b, int oc, int n);

/* 2x2 max-pool, stride 2, of c planes h x w (even or odd: the last
 * row/column is dropped as in PyTorch).  arg gets 0..3, the winner's
 * position in its window (first maximum wins, as PyTorch). */
void cnn_maxpool2_fwd(const float *x, int c, int h, int w, float *y, uint8_t *arg);
/* dx (c x h x w, overwritten) from dy: each window's gradient goes to its
 * winner when the pooled value is positive (the ReLU before the pool). */
void cnn_maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg,
			   int c, int h, int w, float *dx);

/* Linear over a batch: y (n x out) = x (n x in) * W^T + b. */
void cnn_linear_fwd(const float *x, int n, int in, const float *wt, const float *b,
		    int out, float *y);
/* dW = dy^T * x, db = colsum(dy), dx = dy * W (dx may be NULL); n >= 1. */
void cnn_linear_bwd(const float *x, int n, int in, const float *wt, int out,
		    const float *dy, float *dw, float *db, float *dx);

void cnn_relu_fwd(float *x, size_t n);
/* dx *= (y > 0) */
void cnn_relu_bwd(float *dx, const float *y, size_t n);

/* Mean NLL of log-softmax over n rows of k logits: writes logp, returns
 * the loss; correct (may be NULL) counts argmax == label. */
float cnn_logsoftmax_nll_fwd(const float *logits, const uint8_t *label, int n, int k,
			     float *logp, int *correct);
/* dlogits = (softmax - onehot) / scale_n */
void cnn_logsoftmax_nll_bwd(const float *logp, const uint8_t *label, int n, int k,
			    float scale_n, float *dlogits);

/* Dropout of probability p, in place: kept elements scaled by 1/(1-p).
 * The mask is a pure function of key = cnn_dropout_key(seed, step, rank,
 * layer) (rng.h) and the element's index, so a resumed run, and the CUDA
 * twin, draw the same one. */
void cnn_dropout_fwd(float *x, size_t n, float p, uint64_t key);

#endif
