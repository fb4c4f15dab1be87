/* selftest.cu's launches; each returns cudaGetLastError() after it. */
#ifndef CUEMU_SELFTEST_H
#define CUEMU_SELFTEST_H

#include <cuda_runtime_api.h>

int cuemu_selftest_coords(int *out, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			  unsigned by, unsigned bz);
/* sums[b] = sum of block b's 256 values, sums[blocks] += each of them;
 * shifted[i] = x of the next thread of the same block (cyclic) */
int cuemu_selftest_block_sums(const float *x, int blocks, float *sums, float *shifted);
int cuemu_selftest_diverged(float *x);     /* 64 threads */
int cuemu_selftest_late_barrier(float *x); /* 2 blocks of 32 */
int cuemu_selftest_touch(float *x, unsigned threads);
int cuemu_selftest_touch_bounded(float *x, unsigned tx, unsigned ty);
/* 2 blocks of 64 threads write x[0..127]; kind 0-3 races (see selftest.cu),
 * 4 does not */
int cuemu_selftest_racy(float *x, int kind);
/* 4 blocks atomicAdd 1e8, 1, -1e8, 1 to x[0] */
int cuemu_selftest_atomic_order(float *x);
/* one warp: d (16x16 column-major) = a (16x8 row-major) b (8x16
 * column-major) + c (16x16 row-major) in TF32, and r[i] rounded to TF32 */
int cuemu_selftest_wmma_tf32(const float *a, const float *b, const float *c, float *d, float *r,
			     int nr);
/* one warp: d[doff..] (16x16, ld 16) = a[off..] (16x8, ld ldm) times ones */
int cuemu_selftest_wmma_collective(float *a, float *d);
int cuemu_selftest_wmma_wrong(const float *a, float *d, float *out, int mode);
int cuemu_selftest_wmma_copy(const float *a, unsigned off, unsigned ldm, float *d, unsigned doff);

/* 64 threads: cp.async of x[t] (even t) or zeros into shared memory;
 * before[t] its slot before the wait, after[t] the next thread's after it
 * (wait 0: no wait, the launch fails) */
int cuemu_selftest_cp_async(const float *x, float *before, float *after, int wait);
/* y[i] = a x[i] + b for i < n (one block), on stream s */
int cuemu_selftest_axpb(const float *x, float *y, unsigned n, float a, float b, cudaStream_t s);
/* the same, its kernel calling pdl_enter (griddepcontrol.wait) first */
int cuemu_selftest_axpb_pdl(const float *x, float *y, unsigned n, float a, float b,
			    cudaStream_t s);

#endif
