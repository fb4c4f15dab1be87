/* The GPU path's automatic choices (--conv-layout, --conv1, --conv2, --fc2,
 * --backward-streams and --pdl auto), made from measured times by pure
 * functions: no CUDA here, so each rule is unit-tested on numbers
 * (tests/unit/test_choose.c).  prepare.c and graph.c time the ways, then
 * only read what these return.  A time below 0 is a way that could not
 * run (a kernel the GPU refused to launch, a layout without algorithms). */
#ifndef CNN_CUDA_CHOOSE_H
#define CNN_CUDA_CHOOSE_H

/* 1 when the other way ran and beat the base one (a tie keeps the base);
 * a base that could not run loses to any other that did. */
int cnn_choose_faster(float base_ms, float other_ms);

/* The index of the least time among n, a tie to the first; ways below 0
 * are left out.  -1 when none ran. */
int cnn_choose_least(const float *ms, int n);

/* conv2's backward with conv1's weight gradient in NCHW: every pair of
 * conv1's weight gradient (c1: 1 the project's) and conv2's backward-data
 * (dg[c1][d], d: 1 the project's), conv2's backward-filter (wg[w]) and the
 * pool's backward that only a cuDNN call needs; the least sum, a tie to
 * the project's kernels (fewer launches).  conv2's bits (2 data, 4
 * filter), *conv1 the weight gradient's; -1 when no pair ran. */
int cnn_choose_bwd(const float dg[2][2], const float wg[2], float pool_bwd, int *conv1);

/* Whether conv2's mixes of calls are timed beside the variant kept: conv2
 * had a choice (nconv2 variants), several were timed, and the one kept is
 * not the calls' own picks (variant 0) — where the calls' times did not
 * foretell the step's. */
int cnn_choose_mixes(int nconv2, int nvariants, int kept_k2);

/* --pdl: on keeps the programmatic edges wherever they could be made
 * (have); auto where the step replayed faster with them (ms[1] against
 * ms[0]; a tie as captured); off never. */
int cnn_choose_pdl(int on, int have, const float ms[2]);

#endif
