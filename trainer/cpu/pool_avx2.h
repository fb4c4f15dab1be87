/* The 2x2 max-pool of one image in 8-channel blocks (nChw8c) with AVX2
 * (pool_avx2.c): the same results, bit for bit, as conv_dnnl.c's loops. */
#ifndef CNN_POOL_AVX2_H
#define CNN_POOL_AVX2_H

#include <stdint.h>

/* Image n_i of y (C x H x W in blocks of 8 channels) into p and arg (its
 * winners, 0..3 in window order) in NCHW order.  Returns -1, having done
 * nothing, where this CPU has no AVX2 or the shape is not one it takes
 * (C a multiple of 8, H and W even, a multiple of 8 pixels a pooled
 * plane); 0 when done. */
int cnn_pool8_avx2_fwd(const float *y, int C, int H, int W, int n_i, float *p, uint8_t *arg);

/* Its backward: dy of image n_i (the blocked layout, every element
 * written) from dp where p is positive, at the winners arg.  -1 as the
 * forward's. */
int cnn_pool8_avx2_bwd(const float *dp, const float *p, const uint8_t *arg, int C, int H, int W,
		       int n_i, float *dy);

#endif
