/* Every CUDA kernel of trainer/cuda/ (its *.cu files) against its
 * CPU twin on random inputs, llm.c style: |gpu - cpu| <= atol + rtol *
 * |cpu|, the first mismatches printed.  Without a GPU (or a driver) every check is skipped,
 * loudly, and the program exits 0: make check compiles it everywhere.
 * Built a second time as test_cuda_kernels_emu (-DCNN_CUEMU): the same
 * checks on the kernels' source run on the CPU by tests/cuemu, so their
 * indexing, bounds and reductions are tested on every machine; "gpu" in
 * its messages is then the emulated kernel.  There each launch runs twice,
 * its blocks and threads forward and reversed (CUEMU_ORDER=check, unless
 * CUEMU_ORDER says otherwise): a kernel whose bytes differ, a race on a
 * GPU, fails its check even where one order matches the twin. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bf16.h"
#include "cuda/errors.h"
#include "cuda/kernels.h"
#include "data.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"
#include "test.h"

#ifdef CNN_CUEMU
void cuemu_set_cc(int major, int minor);
int cuemu_set_order(const char *name);
#endif

/* Tolerances, one table, with why.  Element-wise kernels compute the same
 * float operations in the same order as the CPU twin, so they are exact
 * unless a math function differs (expf, sqrtf: a few ulp on the GPU). */
static const struct {
	const char *what;
	float atol, rtol;
	const char *why;
} TOL[] = {
	{ "exact", 0.f, 0.f, "same float operations in the same order (max, add, compare, select)" },
	{ "expf", 1e-7f, 2e-6f, "CUDA expf is within 2 ulp of the C library's" },
	{ "sum", 1e-4f, 1e-5f, "a sum of 1000 losses: block tree order vs the CPU's double accumulation" },
	{ "update", 1e-6f, 1e-5f, "3 optimizer updates: nvcc and gcc's vectorized loop contract different multiply-adds into FMAs" },
	{ "fma", 1e-6f, 1e-6f, "byte * scale - off: either compiler may fuse it into one FMA (one rounding fewer)" },
	{ "biassum", 2e-4f, 1e-5f, "a sum of 4608 values in [-1, 1): a block's tree vs the CPU's simd lanes" },
	{ "conv9", 2e-6f, 1e-6f, "9 products of values in [-1, 1) summed in another order (nvcc's FMAs, oneDNN's GEMM)" },
	{ "conv9 bf16", 1e-6f, 8e-3f, "as conv9, then rounded to bf16: an order that differs may round to the neighbouring bf16 value (2^-7 relative)" },
	{ "mma", 2e-4f, 1e-5f, "up to ~2000 exact products of TF32 or bf16 operands in [-1, 1) (sums of magnitude ~15): the tensor cores' and the blocks' order vs oneDNN's, image by image" },
	{ "mma bf16", 2e-4f, 8e-3f, "as mma, then rounded to bf16 (2^-7 relative)" },
	{ "fc2", 2e-5f, 2e-5f, "fc2's classifier: 128 products of values in [-1, 1) summed in order (nvcc's FMAs) vs the CPU's sgemm, logits of ~10 a few ulp apart, and what follows from them" },
};
enum { T_EXACT, T_EXPF, T_SUM, T_UPDATE, T_FMA, T_BIASSUM, T_CONV9, T_CONV9_BF16, T_MMA, T_MMA_BF16,
       T_FC2 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.f;
}

static void fill(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = frand();
}

/* Compare and print the first 5 mismatches; returns the mismatch count.
 * Equal values and NaN against NaN pass at any tolerance. */
static size_t compare(const char *name, const float *gpu, const float *cpu, size_t n, int tol)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		/* equal (infinities included), or both NaN */
		if (gpu[i] == cpu[i] || (isnan(gpu[i]) && isnan(cpu[i])))
			continue;
		float lim = TOL[tol].atol + TOL[tol].rtol * fabsf(cpu[i]);
		if (!(fabsf(gpu[i] - cpu[i]) <= lim) || isnan(gpu[i]) != isnan(cpu[i])) {
			if (bad < 5)
				printf("#   %s[%zu]: gpu %.9g cpu %.9g (tolerance %s: %g + %g*|cpu|)\n", name,
				       i, gpu[i], cpu[i], TOL[tol].what, TOL[tol].atol, TOL[tol].rtol);
			bad++;
		}
	}
	return bad;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	printf("# %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static void *dev(const void *host, size_t bytes)
{
	void *d;
	CK(cudaMalloc(&d, bytes ? bytes : 1));
	if (host)
		CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
	return d;
}

static void back(void *host, const void *d, size_t bytes)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost));
}

/* ---- bf16 storage (--precision bf16), and the activation kernels in both
 * storage types ------------------------------------------------------------ */

static cnn_bf16 *bits(const float *x, size_t n)
{
	cnn_bf16 *h = malloc(n * 2);
	for (size_t i = 0; i < n; i++)
		h[i] = cnn_bf16_from_float(x[i]);
	return h;
}

static void widen(const cnn_bf16 *h, float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = cnn_bf16_to_float(h[i]);
}

static void test_bf16_convert(void)
{
	size_t n = 100003;
	float *x = malloc(n * 4), *got = malloc(n * 4), *want = malloc(n * 4);
	fill(x, n);
	/* ties, overflow, inf, NaN, signed zero, denormals */
	uint32_t sp[] = { 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
			  0x7fc00000u, 0x80000000u, 0x00018000u, 0x00000001u };
	for (size_t i = 0; i < sizeof(sp) / 4; i++)
		memcpy(&x[i * 97], &sp[i], 4);
	cnn_bf16 *h = malloc(n * 2), *cpu = bits(x, n);
	float *dx = dev(x, n * 4), *dw = dev(NULL, n * 4);
	cnn_bf16 *dh = dev(NULL, n * 2);
	test_cond("to_bf16 launches", cnn_cuda_to_bf16(dx, dh, n, NULL) == 0);
	back(h, dh, n * 2);
	widen(h, got, n);
	widen(cpu, want, n);
	test_cond("to_bf16 equals cnn_bf16_from_float: nearest, ties to even, inf, NaN (exact)",
		  compare("to_bf16", got, want, n, T_EXACT) == 0);
	test_cond("from_bf16 launches", cnn_cuda_from_bf16(dh, dw, n, NULL) == 0);
	back(got, dw, n * 4);
	test_cond("from_bf16 equals cnn_bf16_to_float (exact)",
		  compare("from_bf16", got, want, n, T_EXACT) == 0);
	cudaFree(dx), cudaFree(dw), cudaFree(dh);
	free(x), free(got), free(want), free(h), free(cpu);
}

/* The activation kernels in either storage type: bf16 runs the _bf16
 * kernel on bf16 data, its CPU twin on the same values widened, and
 * rounds the twin's output where the kernel stores bf16. */
static const char *ty(int bf16) { return bf16 ? "_bf16" : ""; }

/* n floats on the device as the kernel stores them (x rounded in place for bf16) */
static void *up(float *x, size_t n, int bf16)
{
	if (!bf16)
		return dev(x, n * 4);
	cnn_bf16 *h = bits(x, n);
	widen(h, x, n);
	void *d = dev(h, n * 2);
	free(h);
	return d;
}

/* n values back from the device as floats */
static void down(float *x, const void *d, size_t n, int bf16)
{
	if (!bf16) {
		back(x, d, n * 4);
		return;
	}
	cnn_bf16 *h = malloc(n * 2);
	back(h, d, n * 2);
	widen(h, x, n);
	free(h);
}

/* A kernel's bf16 copy of its output (the next GEMM's operand): the n
 * values at d are want's rounded to bf16, exactly. */
static int bf16_copy_is(const void *d, const float *want, size_t n)
{
	float *got = malloc(n * 4), *w = malloc(n * 4);
	memcpy(w, want, n * 4);
	cnn_bf16_round(w, n);
	down(got, d, n, 1);
	int rv = compare("bf16 copy", got, w, n, T_EXACT) == 0;
	free(got), free(w);
	return rv;
}

static void test_bias_relu(int bf16)
{
	/* conv2's output of a batch of 8: 64 planes of 24x24 */
	int nimg = 8, oc = 64, n = 24 * 24;
	size_t tot = (size_t)nimg * oc * n;
	float *y = malloc(tot * 4), *b = malloc(oc * 4), *got = malloc(tot * 4);
	char d[96];
	fill(y, tot);
	fill(b, oc);
	void *dy = up(y, tot, bf16);
	float *db = dev(b, oc * 4);
	snprintf(d, sizeof(d), "bias_relu%s launches", ty(bf16));
	test_cond(d, (bf16 ? cnn_cuda_bias_relu_bf16(dy, db, nimg, oc, n, NULL) :
			     cnn_cuda_bias_relu(dy, db, nimg, oc, n, NULL)) == 0);
	down(got, dy, tot, bf16);
	for (int i = 0; i < nimg; i++)
		cnn_bias_relu(y + (size_t)i * oc * n, b, oc, n);
	if (bf16)
		cnn_bf16_round(y, tot);
	snprintf(d, sizeof(d), "bias_relu%s equals cnn_bias_relu%s (exact)", ty(bf16),
		 bf16 ? " rounded to bf16" : "");
	test_cond(d, compare("bias_relu", got, y, tot, T_EXACT) == 0);
	cudaFree(dy), cudaFree(db);
	free(y), free(b), free(got);
}

/* The pool's CPU twin, with a bias: cnn_bias_relu (rounded to bf16 where
 * the unfused kernel would store it) on a copy, then cnn_maxpool2_fwd;
 * with p > 0, cnn_dropout_fwd of the output with key. */
static void twin_pool(const float *x, const float *b, int nimg, int c, int h, int w, int bf16,
		      float p, uint64_t key, float *y, uint8_t *arg)
{
	size_t nx = (size_t)nimg * c * h * w;
	float *t = malloc(nx * 4);
	memcpy(t, x, nx * 4);
	if (b) {
		for (int i = 0; i < nimg; i++)
			cnn_bias_relu(t + (size_t)i * c * h * w, b, c, h * w);
		if (bf16)
			cnn_bf16_round(t, nx);
	}
	cnn_maxpool2_fwd(t, nimg * c, h, w, y, arg);
	if (p > 0.f)
		cnn_dropout_fwd(y, (size_t)nimg * c * (h / 2) * (w / 2), p, key);
	free(t);
}

/* The pool's epilogue for a test: none (ep 0), the bias (1), the bias and
 * dropout (2), the key on the device at *dkey. */
static const char *ep_name(int ep)
{
	return ep == 2 ? " with bias, ReLU and dropout" : ep ? " with bias and ReLU" : "";
}

/* bias: conv2's, with values within a bias of zero, so the ReLU makes ties
 * at 0 that the raw values do not have */
static float *pool_bias(float *x, size_t nx, int c, int hw)
{
	float *b = malloc(c * 4);
	fill(b, c);
	for (size_t i = 3; i < nx; i += 11)
		x[i] = -b[(i / hw) % c] * (1.f + 0.01f * (float)(i % 5));
	return b;
}

static void test_maxpool(int h, int w, int bf16, int bias)
{
	uint64_t key = cnn_dropout_key(7, 99, 1, 1), *dkey = dev(&key, 8);
	float pd = bias == 2 ? 0.25f : 0.f;
	int nimg = 8, c = 64, planes = nimg * c, ph = h / 2, pw = w / 2;
	size_t nx = (size_t)planes * h * w, ny = (size_t)planes * ph * pw;
	float *x = malloc(nx * 4), *y = malloc(ny * 4), *gy = malloc(ny * 4);
	uint8_t *arg = malloc(ny), *garg = malloc(ny);
	const char *bn = ep_name(bias);
	fill(x, nx);
	/* ties: the first maximum must win on both sides (bf16 rounding makes more) */
	for (size_t i = 0; i < nx; i += 7)
		x[i] = x[i + 1 < nx ? i + 1 : i];
	float *b = bias ? pool_bias(x, nx, c, h * w) : NULL, *dbias = b ? dev(b, c * 4) : NULL;
	cnn_bf16 *dyb = dev(NULL, ny * 2);
	struct cnn_cuda_pool_ep ep = { dbias, pd, dkey, bias == 2 ? dyb : NULL };
	void *dx = up(x, nx, bf16);
	float *dyv = dev(NULL, ny * 4);
	uint8_t *darg = dev(NULL, ny);
	char d[200];
	snprintf(d, sizeof(d), "maxpool2_fwd%s%s %dx%d launches", ty(bf16), bn, h, w);
	test_cond(d, (bf16 ? cnn_cuda_maxpool2_fwd_bf16(dx, nimg, c, h, w, bias ? &ep : NULL, dyv, darg, NULL) :
			     cnn_cuda_maxpool2_fwd(dx, nimg, c, h, w, bias ? &ep : NULL, dyv, darg, NULL)) == 0);
	back(gy, dyv, ny * 4);
	back(garg, darg, ny);
	twin_pool(x, b, nimg, c, h, w, bf16, pd, key, y, arg);
	snprintf(d, sizeof(d), "maxpool2_fwd%s%s %dx%d equals %scnn_maxpool2_fwd%s, arg included (exact)",
		 ty(bf16), bn, h, w, bias ? bf16 ? "cnn_bias_relu rounded to bf16, then " :
					    "cnn_bias_relu, then " : "",
		 pd > 0.f ? ", then cnn_dropout_fwd" : "");
	test_cond(d, compare("maxpool2_fwd", gy, y, ny, T_EXACT) == 0 && memcmp(garg, arg, ny) == 0);
	if (bias) {
		size_t zero = 0;
		for (size_t i = 0; i < ny; i++)
			zero += y[i] == 0.f;
		snprintf(d, sizeof(d), "... the ReLU%s zeroed outputs (%zu of %zu)",
			 pd > 0.f ? " and the dropout" : "", zero, ny);
		test_cond(d, zero > ny / 20 + (pd > 0.f ? ny / 5 : 0));
		if (bias == 2)
			test_cond("... and its bf16 copy (fc1's operand) is the output rounded (exact)",
				  bf16_copy_is(dyb, y, ny));
		cudaFree(dbias), free(b);
		cudaFree(dx), cudaFree(dyv), cudaFree(darg), cudaFree(dkey), cudaFree(dyb);
		free(x), free(y), free(gy), free(arg), free(garg);
		return;
	}
	cudaFree(dkey), cudaFree(dyb);

	/* backward: y has negatives (the ReLU gate) and positives */
	float *g = malloc(ny * 4), *gx = malloc(nx * 4), *cx = malloc(nx * 4);
	fill(g, ny);
	float *dg = dev(g, ny * 4);
	void *ddx = dev(NULL, nx * 4);
	CK(cudaMemset(ddx, 0x7f, nx * 4)); /* garbage: the kernel must overwrite all */
	snprintf(d, sizeof(d), "maxpool2_relu_bwd%s %dx%d launches", ty(bf16), h, w);
	test_cond(d, (bf16 ? cnn_cuda_maxpool2_relu_bwd_bf16(dg, dyv, darg, planes, h, w, ddx, NULL) :
			     cnn_cuda_maxpool2_relu_bwd(dg, dyv, darg, planes, h, w, ddx, NULL)) == 0);
	down(gx, ddx, nx, bf16);
	cnn_maxpool2_relu_bwd(g, y, arg, planes, h, w, cx);
	if (bf16)
		cnn_bf16_round(cx, nx);
	snprintf(d, sizeof(d), "maxpool2_relu_bwd%s %dx%d equals cnn_maxpool2_relu_bwd%s (exact)",
		 ty(bf16), h, w, bf16 ? " rounded to bf16" : "");
	test_cond(d, compare("maxpool2_relu_bwd", gx, cx, nx, T_EXACT) == 0);
	cudaFree(dx), cudaFree(dyv), cudaFree(darg), cudaFree(dg), cudaFree(ddx);
	free(x), free(y), free(gy), free(arg), free(garg), free(g), free(gx), free(cx);
}

/* fc1's ReLU backward (fp32: the convolutions' are fused into their bias
 * gradients, test_bias_grad_gated) */
static void test_relu_bwd(void)
{
	size_t n = 100003;
	float *dx = malloc(n * 4), *y = malloc(n * 4), *got = malloc(n * 4);
	fill(dx, n);
	fill(y, n);
	float *ddx = dev(dx, n * 4), *dy = dev(y, n * 4);
	cnn_bf16 *dxb = dev(NULL, n * 2);
	test_cond("relu_bwd launches", cnn_cuda_relu_bwd(ddx, dy, n, dxb, NULL) == 0);
	back(got, ddx, n * 4);
	cnn_relu_bwd(dx, y, n);
	test_cond("relu_bwd equals cnn_relu_bwd (exact)", compare("relu_bwd", got, dx, n, T_EXACT) == 0);
	test_cond("... and its bf16 copy (the next GEMM's operand) is that rounded (exact)",
		  bf16_copy_is(dxb, dx, n));
	cudaFree(ddx), cudaFree(dy), cudaFree(dxb);
	free(dx), free(y), free(got);
}

/* ---- channels-last (--conv-layout nhwc): each _nhwc kernel against the
 * CPU twin of its NCHW sibling, its input and output transposed here ----- */

/* dst (nimg x hw x c) from src (nimg x c x hw), and back */
static void to_nhwc(const float *src, float *dst, int nimg, int c, int hw)
{
	for (size_t i = 0; i < (size_t)nimg; i++)
		for (int ch = 0; ch < c; ch++)
			for (int k = 0; k < hw; k++)
				dst[(i * hw + k) * c + ch] = src[(i * c + ch) * hw + k];
}

static void to_nchw(const float *src, float *dst, int nimg, int c, int hw)
{
	for (size_t i = 0; i < (size_t)nimg; i++)
		for (int ch = 0; ch < c; ch++)
			for (int k = 0; k < hw; k++)
				dst[(i * c + ch) * hw + k] = src[(i * hw + k) * c + ch];
}

/* dst as a kernel of either layout reads src (nimg x c x hw, NCHW) */
static void to_layout(int nhwc, const float *src, float *dst, int nimg, int c, int hw)
{
	if (nhwc)
		to_nhwc(src, dst, nimg, c, hw);
	else
		memcpy(dst, src, (size_t)nimg * c * hw * 4);
}

static void test_bias_relu_nhwc(int nimg, int oc, int n, int bf16)
{
	size_t tot = (size_t)nimg * oc * n;
	float *y = malloc(tot * 4), *t = malloc(tot * 4), *b = malloc(oc * 4), *got = malloc(tot * 4);
	char d[128];
	fill(y, tot);
	fill(b, oc);
	if (bf16)
		cnn_bf16_round(y, tot);
	to_nhwc(y, t, nimg, oc, n);
	void *dy = up(t, tot, bf16);
	float *db = dev(b, oc * 4);
	snprintf(d, sizeof(d), "bias_relu_nhwc%s launches on %d x %d x %d", ty(bf16), nimg, oc, n);
	test_cond(d, (bf16 ? cnn_cuda_bias_relu_nhwc_bf16(dy, db, nimg, oc, n, NULL) :
			     cnn_cuda_bias_relu_nhwc(dy, db, nimg, oc, n, NULL)) == 0);
	down(t, dy, tot, bf16);
	to_nchw(t, got, nimg, oc, n);
	for (int i = 0; i < nimg; i++)
		cnn_bias_relu(y + (size_t)i * oc * n, b, oc, n);
	if (bf16)
		cnn_bf16_round(y, tot);
	snprintf(d, sizeof(d), "bias_relu_nhwc%s on %d x %d x %d equals cnn_bias_relu%s, transposed (exact)",
		 ty(bf16), nimg, oc, n, bf16 ? " rounded to bf16" : "");
	test_cond(d, compare("bias_relu_nhwc", got, y, tot, T_EXACT) == 0);
	cudaFree(dy), cudaFree(db);
	free(y), free(t), free(b), free(got);
}

static void test_maxpool_nhwc(int nimg, int c, int h, int w, int bf16, int bias)
{
	uint64_t key = cnn_dropout_key(7, 99, 1, 1), *dkey = dev(&key, 8);
	float pd = bias == 2 ? 0.25f : 0.f;
	int planes = nimg * c, ph = h / 2, pw = w / 2;
	size_t nx = (size_t)planes * h * w, ny = (size_t)planes * ph * pw;
	float *x = malloc(nx * 4), *t = malloc(nx * 4), *y = malloc(ny * 4), *gy = malloc(ny * 4);
	uint8_t *arg = malloc(ny), *garg = malloc(ny);
	const char *bn = ep_name(bias);
	char d[200];
	fill(x, nx);
	for (size_t i = 0; i < nx; i += 7)   /* ties: the first maximum wins */
		x[i] = x[i + 1 < nx ? i + 1 : i];
	float *b = bias ? pool_bias(x, nx, c, h * w) : NULL, *dbias = b ? dev(b, c * 4) : NULL;
	cnn_bf16 *dyb = dev(NULL, ny * 2);
	struct cnn_cuda_pool_ep ep = { dbias, pd, dkey, bias == 2 ? dyb : NULL };
	if (bf16)
		cnn_bf16_round(x, nx);
	to_nhwc(x, t, nimg, c, h * w);
	void *dx = up(t, nx, bf16);
	float *dyv = dev(NULL, ny * 4);
	uint8_t *darg = dev(NULL, ny);
	snprintf(d, sizeof(d), "maxpool2_fwd_nhwc%s%s %d x %d x %dx%d launches", ty(bf16), bn, nimg, c,
		 h, w);
	test_cond(d, (bf16 ? cnn_cuda_maxpool2_fwd_nhwc_bf16(dx, nimg, c, h, w, bias ? &ep : NULL, dyv, darg, NULL) :
			     cnn_cuda_maxpool2_fwd_nhwc(dx, nimg, c, h, w, bias ? &ep : NULL, dyv, darg, NULL)) == 0);
	back(gy, dyv, ny * 4);
	back(garg, darg, ny);
	twin_pool(x, b, nimg, c, h, w, bf16, pd, key, y, arg);
	snprintf(d, sizeof(d), "maxpool2_fwd_nhwc%s%s %d x %d x %dx%d equals the twin on the NCHW "
		 "input: output and arg in NCHW order (exact)", ty(bf16), bn, nimg, c, h, w);
	test_cond(d, compare("maxpool2_fwd_nhwc", gy, y, ny, T_EXACT) == 0 && memcmp(garg, arg, ny) == 0);
	if (bias == 2)
		test_cond("... and its bf16 copy (fc1's operand) is the output rounded (exact)",
			  bf16_copy_is(dyb, y, ny));
	cudaFree(dyb);
	if (bias) {
		cudaFree(dbias), free(b);
		cudaFree(dx), cudaFree(dyv), cudaFree(darg), cudaFree(dkey);
		free(x), free(t), free(y), free(gy), free(arg), free(garg);
		return;
	}
	cudaFree(dkey);

	float *g = malloc(ny * 4), *gx = malloc(nx * 4), *cx = malloc(nx * 4);
	fill(g, ny);
	float *dg = dev(g, ny * 4);
	void *ddx = dev(NULL, nx * 4);
	CK(cudaMemset(ddx, 0x7f, nx * 4)); /* garbage: the kernel must overwrite all */
	snprintf(d, sizeof(d), "maxpool2_relu_bwd_nhwc%s %d x %d x %dx%d launches", ty(bf16), nimg, c, h, w);
	test_cond(d, (bf16 ? cnn_cuda_maxpool2_relu_bwd_nhwc_bf16(dg, dyv, darg, nimg, c, h, w, ddx, NULL) :
			     cnn_cuda_maxpool2_relu_bwd_nhwc(dg, dyv, darg, nimg, c, h, w, ddx, NULL)) == 0);
	down(t, ddx, nx, bf16);
	to_nchw(t, gx, nimg, c, h * w);
	cnn_maxpool2_relu_bwd(g, y, arg, planes, h, w, cx);
	if (bf16)
		cnn_bf16_round(cx, nx);
	snprintf(d, sizeof(d), "maxpool2_relu_bwd_nhwc%s %d x %d x %dx%d equals cnn_maxpool2_relu_bwd, "
		 "transposed (exact)", ty(bf16), nimg, c, h, w);
	test_cond(d, compare("maxpool2_relu_bwd_nhwc", gx, cx, nx, T_EXACT) == 0);
	cudaFree(dx), cudaFree(dyv), cudaFree(darg), cudaFree(dg), cudaFree(ddx);
	free(x), free(t), free(y), free(gy), free(arg), free(garg), free(g), free(gx), free(cx);
}

/* The scratch floats the bias gradient asks for, in either layout. */
static size_t bias_scratch(int nhwc, int nimg, int oc, int n)
{
	return nhwc ? cnn_cuda_bias_grad_nhwc_scratch(nimg, oc, n) :
		      cnn_cuda_bias_grad_scratch(nimg, oc, n);
}

/* The bias gradient, NCHW (nhwc 0) or channels-last, on the Net's shapes
 * and odd ones (one image, a batch that leaves a short last chunk, planes
 * smaller than a block, planes of one pixel, more channels than a block
 * has threads), fp32 and bf16 storage: against the CPU twin summed over
 * the images, and against a double sum within the worst-case float bound
 * of the kernel's summation order, d * 2^-24 * sum |dy| (a chunk summed
 * twice or lost is off by far more).  NCHW: d = 64 covers a thread's
 * stride of ~16, two block trees of 8 and a stride over up to 16 chunks.
 * NHWC (kBiasRows = 256 rows a block in kernels.cu, its 256 threads in
 * lanes of min(oc, 256) channels): a thread adds 256 / groups rows, the
 * groups are added in order, then bias_grad_sum strides over the chunks
 * and finishes with a tree of 8.  Twice each: the same bits. */
static void test_bias_grad(int nhwc)
{
	static const int shapes[][3] = { /* images, channels, pixels */
		{ 8, 64, 24 * 24 }, { 1, 32, 26 * 26 }, { 37, 32, 26 * 26 }, { 257, 64, 24 * 24 },
		{ 5, 3, 7 }, { 1000, 2, 1 }, { 3, 300, 5 },
	};
	const char *name = nhwc ? "bias_grad_nhwc" : "bias_grad";
	for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
		int nimg = shapes[sh][0], oc = shapes[sh][1], n = shapes[sh][2];
		size_t tot = (size_t)nimg * oc * n;
		size_t ns = bias_scratch(nhwc, nimg, oc, n);
		size_t chunks = ((size_t)nimg * n + 255) / 256;
		int lanes = oc < 256 ? oc : 256, groups = 256 / lanes;
		double depth = nhwc ? 256.0 / groups + groups + (double)(chunks + 255) / 256 + 8 : 64;
		float *dy = malloc(tot * 4), *t = malloc(tot * 4), *want = calloc(oc, 4);
		float *got = malloc(oc * 4), *again = calloc(oc, 4), *ref = malloc(oc * 4),
		      *lim = malloc(oc * 4);
		fill(dy, tot);
		cnn_bf16_round(dy, tot);   /* both kernels see the same values */
		to_layout(nhwc, dy, t, nimg, oc, n);
		cnn_bf16 *th = bits(t, tot);
		for (int i = 0; i < nimg; i++)
			cnn_bias_grad(dy + (size_t)i * oc * n, oc, n, want);
		for (int o = 0; o < oc; o++) {
			double sum = 0, abs = 0;
			for (int i = 0; i < nimg; i++)
				for (int j = 0; j < n; j++) {
					double v = dy[((size_t)i * oc + o) * n + j];
					sum += v;
					abs += fabs(v);
				}
			ref[o] = (float)sum;
			lim[o] = (float)(depth * 0x1p-24 * abs);
		}
		float *ddy = dev(t, tot * 4), *ddb = dev(NULL, oc * 4), *dsc = dev(NULL, ns * 4);
		cnn_bf16 *ddyh = dev(th, tot * 2);
		for (int b16 = 0; b16 < 2; b16++) {
			char d[192];
			size_t far = 0;
			int ok = 1;
			for (int run = 0; run < 2 && ok; run++) {
				CK(cudaMemset(ddb, 0x7f, oc * 4));   /* overwritten, not accumulated */
				if (nhwc)
					ok = (b16 ? cnn_cuda_bias_grad_nhwc_bf16(ddyh, NULL, 0, nimg, oc, n, dsc, ddb, NULL) :
						    cnn_cuda_bias_grad_nhwc(ddy, NULL, 0, nimg, oc, n, dsc, ddb, NULL)) == 0;
				else
					ok = (b16 ? cnn_cuda_bias_grad_bf16(ddyh, NULL, 0, nimg, oc, n, dsc, ddb, NULL) :
						    cnn_cuda_bias_grad(ddy, NULL, 0, nimg, oc, n, dsc, ddb, NULL)) == 0;
				back(run ? again : got, ddb, oc * 4);
			}
			snprintf(d, sizeof(d), "%s%s launches on %d x %d x %d (%zu floats of scratch)",
				 name, ty(b16), nimg, oc, n, ns);
			test_cond(d, ok);
			if (nimg * n <= 8 * 24 * 24) {
				snprintf(d, sizeof(d), "%s%s on %d x %d x %d equals cnn_bias_grad summed over "
					 "the images", name, ty(b16), nimg, oc, n);
				test_cond(d, compare(name, got, want, oc, T_BIASSUM) == 0);
			}
			for (int o = 0; o < oc; o++)
				if (!(fabsf(got[o] - ref[o]) <= lim[o]) && far++ < 5)
					printf("#   %s%s[%d]: gpu %.9g, double sum %.9g, bound %g\n", name,
					       ty(b16), o, got[o], ref[o], lim[o]);
			snprintf(d, sizeof(d), "%s%s on %d x %d x %d is within float's bound (depth %.0f) of "
				 "the double sum", name, ty(b16), nimg, oc, n, depth);
			test_cond(d, far == 0);
			snprintf(d, sizeof(d), "%s%s on %d x %d x %d gives the same bits twice", name,
				 ty(b16), nimg, oc, n);
			test_cond(d, memcmp(got, again, oc * 4) == 0);
		}
		cudaFree(ddy), cudaFree(ddb), cudaFree(dsc), cudaFree(ddyh);
		free(dy), free(t), free(th), free(want), free(got), free(again), free(ref), free(lim);
	}
	/* the scratch each asks for: a float per channel and chunk of images
	 * (NCHW) or of 256 rows (NHWC) */
	if (nhwc)
		test_cond("bias_grad_nhwc scratch: a float per channel and chunk of 256 rows",
			  cnn_cuda_bias_grad_nhwc_scratch(1, 64, 576) == 64 * 3 &&
			  cnn_cuda_bias_grad_nhwc_scratch(0, 64, 576) == 0);
	else
		test_cond("bias_grad scratch grows with the batch and never shrinks below one chunk",
			  cnn_cuda_bias_grad_scratch(1, 64, 576) == 64 &&
			  cnn_cuda_bias_grad_scratch(1024, 64, 576) >= cnn_cuda_bias_grad_scratch(64, 64, 576) &&
			  cnn_cuda_bias_grad_scratch(0, 64, 576) == 0);
}

/* The gated bias gradient, NCHW or channels-last, fp32 and bf16: db sums dy
 * where gate > 0, against cnn_relu_bwd then cnn_bias_grad summed over the
 * images; with relu, dy becomes cnn_relu_bwd's result (exact), without, it
 * is left as it was.  The shapes: conv1's (relu_bwd and its bias gradient
 * in one pass), the pool's output (conv2's bias gradient from it), odd. */
static void test_bias_grad_gated(int nhwc)
{
	static const int shapes[][3] = { { 8, 32, 26 * 26 }, { 8, 64, 12 * 12 }, { 5, 3, 7 } };
	const char *name = nhwc ? "bias_grad_nhwc" : "bias_grad";
	for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
		int nimg = shapes[sh][0], oc = shapes[sh][1], n = shapes[sh][2];
		size_t tot = (size_t)nimg * oc * n;
		size_t ns = bias_scratch(nhwc, nimg, oc, n);
		float *dy = malloc(tot * 4), *gate = malloc(tot * 4), *gd = malloc(tot * 4);
		float *t = malloc(tot * 4), *tg = malloc(tot * 4), *got = malloc(tot * 4);
		float *want = calloc(oc, 4), *db = malloc(oc * 4);
		fill(dy, tot);
		fill(gate, tot);
		for (size_t i = 0; i < tot; i += 13)
			gate[i] = 0.f;      /* not > 0: gated */
		cnn_bf16_round(dy, tot);   /* both storage types see the same values */
		cnn_bf16_round(gate, tot);
		memcpy(gd, dy, tot * 4);
		cnn_relu_bwd(gd, gate, tot);
		for (int i = 0; i < nimg; i++)
			cnn_bias_grad(gd + (size_t)i * oc * n, oc, n, want);
		to_layout(nhwc, dy, t, nimg, oc, n);
		to_layout(nhwc, gate, tg, nimg, oc, n);
		float *dsc = dev(NULL, ns * 4), *ddb = dev(NULL, oc * 4);
		for (int b16 = 0; b16 < 2; b16++)
			for (int relu = 0; relu < 2; relu++) {
				char d[192];
				void *ddy = up(t, tot, b16), *dg = up(tg, tot, b16);
				int ok;
				CK(cudaMemset(ddb, 0x7f, oc * 4));
				if (nhwc)
					ok = (b16 ? cnn_cuda_bias_grad_nhwc_bf16(ddy, dg, relu, nimg, oc, n, dsc, ddb, NULL) :
						    cnn_cuda_bias_grad_nhwc(ddy, dg, relu, nimg, oc, n, dsc, ddb, NULL)) == 0;
				else
					ok = (b16 ? cnn_cuda_bias_grad_bf16(ddy, dg, relu, nimg, oc, n, dsc, ddb, NULL) :
						    cnn_cuda_bias_grad(ddy, dg, relu, nimg, oc, n, dsc, ddb, NULL)) == 0;
				snprintf(d, sizeof(d), "%s%s gated%s launches on %d x %d x %d", name, ty(b16),
					 relu ? ", relu" : "", nimg, oc, n);
				test_cond(d, ok);
				back(db, ddb, oc * 4);
				snprintf(d, sizeof(d), "%s%s gated%s on %d x %d x %d equals cnn_relu_bwd then "
					 "cnn_bias_grad", name, ty(b16), relu ? ", relu" : "", nimg, oc, n);
				test_cond(d, compare(name, db, want, oc, T_BIASSUM) == 0);
				down(got, ddy, tot, b16);
				if (nhwc) {
					to_nchw(got, t, nimg, oc, n);
					memcpy(got, t, tot * 4);
					to_nhwc(dy, t, nimg, oc, n);   /* t back to the input */
				}
				snprintf(d, sizeof(d), "... and dy %s", relu ? "is cnn_relu_bwd's (exact)" :
					 "is untouched");
				test_cond(d, compare(name, got, relu ? gd : dy, tot, T_EXACT) == 0);
				cudaFree(ddy), cudaFree(dg);
			}
		cudaFree(dsc), cudaFree(ddb);
		free(dy), free(gate), free(gd), free(t), free(tg), free(got), free(want), free(db);
	}
}

/* conv1 direct (one input channel), forward and its weight and bias
 * gradients, NCHW or channels-last, fp32 or bf16 operands: against
 * cnn_im2col3 + cnn_sgemm (rounded to bf16 where cuDNN's output is) +
 * cnn_bias_relu, and cnn_relu_bwd + cnn_conv3_bwd summed over the images;
 * the gradients the same bits twice. */
static void test_conv1(int nimg, int h, int w, int oc, int nhwc, int bf16)
{
	int pix = (h - 2) * (w - 2);
	size_t nx = (size_t)nimg * h * w, ny = (size_t)nimg * oc * pix;
	size_t ns = cnn_cuda_conv1_wgrad_scratch(nimg, h, w, oc);
	float *x = malloc(nx * 4), *wt = malloc(oc * 9 * 4), *b = malloc(oc * 4);
	float *y = malloc(ny * 4), *got = malloc(ny * 4), *t = malloc(ny * 4), *dy = malloc(ny * 4);
	float *col = malloc((size_t)9 * pix * 4), *dcol = malloc((size_t)9 * pix * 4);
	float *dw = calloc(oc * 9, 4), *db = calloc(oc, 4), *gdw = malloc(oc * 9 * 4),
	      *gdb = malloc(oc * 4), *gdw2 = malloc(oc * 9 * 4), *gdb2 = malloc(oc * 4);
	char d[200], sh[96];
	snprintf(sh, sizeof(sh), "%s%s on %d x %dx%d, %d channels", nhwc ? "_nhwc" : "", ty(bf16),
		 nimg, h, w, oc);
	fill(x, nx);
	fill(wt, oc * 9);
	fill(b, oc);
	void *dx = up(x, nx, bf16), *dwt = up(wt, oc * 9, bf16), *dyv = dev(NULL, ny * (bf16 ? 2 : 4));
	float *dbias = dev(b, oc * 4);
	snprintf(d, sizeof(d), "conv1_fwd%s launches", sh);
	test_cond(d, (bf16 ? cnn_cuda_conv1_fwd_bf16(dx, dwt, dbias, nimg, h, w, oc, nhwc, dyv, NULL) :
			     cnn_cuda_conv1_fwd(dx, dwt, dbias, nimg, h, w, oc, nhwc, dyv, NULL)) == 0);
	down(t, dyv, ny, bf16);
	if (nhwc)
		to_nchw(t, got, nimg, oc, pix);
	else
		memcpy(got, t, ny * 4);
	for (int i = 0; i < nimg; i++) {
		float *yi = y + (size_t)i * oc * pix;
		cnn_im2col3(x + (size_t)i * h * w, 1, h, w, col);
		cnn_sgemm('N', 'N', oc, pix, 9, 1.f, wt, 9, col, pix, 0.f, yi, pix);
		if (bf16)
			cnn_bf16_round(yi, (size_t)oc * pix);
		cnn_bias_relu(yi, b, oc, pix);
	}
	if (bf16)
		cnn_bf16_round(y, ny);
	snprintf(d, sizeof(d), "conv1_fwd%s equals im2col, GEMM, bias and ReLU (%s tolerance)", sh,
		 bf16 ? "conv9 bf16" : "conv9");
	test_cond(d, compare("conv1_fwd", got, y, ny, bf16 ? T_CONV9_BF16 : T_CONV9) == 0);
	if (nhwc) {
		/* channels-last (through shared memory where oc % 4 == 0 and
		 * oc <= 32, 8 channels a store where oc % 8 == 0, else one):
		 * NCHW's values */
		CK(cudaMemset(dyv, 0xff, ny * (bf16 ? 2 : 4)));
		int rv = bf16 ? cnn_cuda_conv1_fwd_bf16(dx, dwt, dbias, nimg, h, w, oc, 0, dyv, NULL) :
				cnn_cuda_conv1_fwd(dx, dwt, dbias, nimg, h, w, oc, 0, dyv, NULL);
		down(t, dyv, ny, bf16);
		snprintf(d, sizeof(d), "conv1_fwd%s equals NCHW's forward, transposed (exact)", sh);
		test_cond(d, rv == 0 && compare("conv1_fwd_nhwc", got, t, ny, T_EXACT) == 0);
	}

	/* backward: the gate is the GPU's own output (the twin reads the same) */
	memcpy(y, got, ny * 4);
	fill(dy, ny);
	if (bf16)
		cnn_bf16_round(dy, ny);
	float *tg = malloc(ny * 4);
	to_layout(nhwc, dy, t, nimg, oc, pix);
	to_layout(nhwc, y, tg, nimg, oc, pix);
	void *ddy = up(t, ny, bf16), *dg = up(tg, ny, bf16);
	float *dsc = dev(NULL, ns * 4), *ddw = dev(NULL, oc * 9 * 4), *ddb = dev(NULL, oc * 4);
	/* its counters (a group of 4 channels each) 0 before the first call */
	int groups = (oc + 3) / 4;
	CK(cudaMemset(dsc, 0, ns * 4));
	int ok = 1;
	for (int run = 0; run < 2; run++) {
		CK(cudaMemset(ddw, 0x7f, oc * 9 * 4));   /* overwritten, not added to */
		ok &= (bf16 ? cnn_cuda_conv1_wgrad_bf16(dx, ddy, dg, nimg, h, w, oc, nhwc, dsc, ddw, ddb, NULL) :
			      cnn_cuda_conv1_wgrad(dx, ddy, dg, nimg, h, w, oc, nhwc, dsc, ddw, ddb, NULL)) == 0;
		back(run ? gdw2 : gdw, ddw, oc * 9 * 4);
		back(run ? gdb2 : gdb, ddb, oc * 4);
	}
	snprintf(d, sizeof(d), "conv1_wgrad%s launches (%zu floats of scratch)", sh, ns);
	test_cond(d, ok);
	unsigned *cnt = malloc(groups * sizeof(unsigned));
	back(cnt, dsc, groups * sizeof(unsigned));
	int zero = 1;
	for (int i = 0; i < groups; i++)
		zero &= cnt[i] == 0;
	free(cnt);
	snprintf(d, sizeof(d), "... its %d counters are 0 after each call (the last chunk's block set "
		 "them back)", groups);
	test_cond(d, zero);
	cnn_relu_bwd(dy, y, ny);
	for (int i = 0; i < nimg; i++)
		cnn_conv3_bwd(x + (size_t)i * h * w, 1, h, w, wt, oc, dy + (size_t)i * oc * pix, col,
			      dcol, dw, db, NULL);
	snprintf(d, sizeof(d), "conv1_wgrad%s equals relu_bwd then cnn_conv3_bwd's weight and bias "
		 "gradients (biassum tolerance)", sh);
	test_cond(d, compare("conv1_dw", gdw, dw, oc * 9, T_BIASSUM) == 0 &&
		     compare("conv1_db", gdb, db, oc, T_BIASSUM) == 0);
	snprintf(d, sizeof(d), "conv1_wgrad%s gives the same bits twice", sh);
	test_cond(d, !memcmp(gdw, gdw2, oc * 9 * 4) && !memcmp(gdb, gdb2, oc * 4));
	cudaFree(dx), cudaFree(dwt), cudaFree(dyv), cudaFree(dbias), cudaFree(ddy), cudaFree(dg);
	cudaFree(dsc), cudaFree(ddw), cudaFree(ddb);
	free(x), free(wt), free(b), free(y), free(got), free(t), free(dy), free(col), free(dcol);
	free(dw), free(db), free(gdw), free(gdb), free(gdw2), free(gdb2), free(tg);
}

/* TF32 as cvt.rna.tf32.f32 makes it (cuDNN's TF32 and the _tf32 kernels):
 * 10 mantissa bits, to nearest, ties away from zero */
static void tf32_round(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		if ((u & 0x7f800000u) != 0x7f800000u)
			u = (u + 0x1000u) & ~0x1fffu;
		memcpy(&x[i], &u, 4);
	}
}

/* conv2's forward with the pool in its epilogue (cnn_cuda_conv3_fwd_pool)
 * against the unfused pair the step runs otherwise: conv3_fwd's output dY
 * (already checked against its twin) through cnn_cuda_maxpool2_fwd (or
 * _nhwc; its own twin test above), with the epilogue ep (ep_name): p, arg
 * and the bf16 copy the same bits.  Each output's sum is the same mma
 * chain in both kernels, only its row in the tile differs. */
static void test_conv3_pool(const void *dX, const void *dWF, const void *dY, int nimg, int c, int h,
			    int w, int oc, int nhwc, int bf16, int ep)
{
	int ph = (h - 2) / 2, pw = (w - 2) / 2;
	size_t np = (size_t)nimg * oc * ph * pw;
	uint64_t key = cnn_dropout_key(3, 41, 2, 1), *dkey = dev(&key, 8);
	float *b = malloc(oc * 4), *p[2] = { malloc(np * 4 + 4), malloc(np * 4 + 4) };
	uint8_t *arg[2] = { malloc(np + 1), malloc(np + 1) };
	uint16_t *pb[2] = { malloc(np * 2 + 2), malloc(np * 2 + 2) };
	fill(b, oc);
	float *db = dev(b, oc * 4), *dp[2];
	uint8_t *darg[2];
	cnn_bf16 *dpb[2];
	char d[240];
	int ok = 1;
	for (int k = 0; k < 2; k++) {
		/* NaN-filled and one entry longer: an output written twice, left
		 * unwritten, or past the end shows */
		dp[k] = dev(NULL, np * 4 + 4), darg[k] = dev(NULL, np + 1), dpb[k] = dev(NULL, np * 2 + 2);
		CK(cudaMemset(dp[k], 0xff, np * 4 + 4));
		CK(cudaMemset(darg[k], 0xee, np + 1));
		CK(cudaMemset(dpb[k], 0xff, np * 2 + 2));
		struct cnn_cuda_pool_ep e = { db, ep == 2 ? 0.25f : 0.f, dkey, ep == 2 ? dpb[k] : NULL };
		const struct cnn_cuda_pool_ep *pe = ep ? &e : NULL;
		int r;
		if (k == 0)
			r = bf16 ? cnn_cuda_conv3_fwd_pool_bf16(dX, dWF, nimg, c, h, w, oc, nhwc, pe, dp[k],
								darg[k], NULL) :
				   cnn_cuda_conv3_fwd_pool_tf32(dX, dWF, nimg, c, h, w, oc, nhwc, pe, dp[k],
								darg[k], NULL);
		else if (nhwc)
			r = bf16 ? cnn_cuda_maxpool2_fwd_nhwc_bf16(dY, nimg, oc, h - 2, w - 2, pe, dp[k], darg[k],
								   NULL) :
				   cnn_cuda_maxpool2_fwd_nhwc(dY, nimg, oc, h - 2, w - 2, pe, dp[k], darg[k], NULL);
		else
			r = bf16 ? cnn_cuda_maxpool2_fwd_bf16(dY, nimg, oc, h - 2, w - 2, pe, dp[k], darg[k],
							      NULL) :
				   cnn_cuda_maxpool2_fwd(dY, nimg, oc, h - 2, w - 2, pe, dp[k], darg[k], NULL);
		ok &= r == 0;
		back(p[k], dp[k], np * 4 + 4);
		back(arg[k], darg[k], np + 1);
		back(pb[k], dpb[k], np * 2 + 2);
	}
	snprintf(d, sizeof(d), "conv3_fwd_pool%s%s on %d x %d x %dx%d, %d outputs, launches", nhwc ? "_nhwc" : "",
		 bf16 ? "_bf16" : "_tf32", nimg, c, h, w, oc);
	test_cond(d, ok);
	size_t bad = 0, first = np;
	for (size_t i = 0; i < np + 1; i++)
		if (memcmp(&p[0][i], &p[1][i], 4) || arg[0][i] != arg[1][i] ||
		    (ep == 2 && memcmp(&pb[0][i], &pb[1][i], 2))) {
			if (!bad++)
				first = i;
		}
	if (bad)
		printf("#   %zu of %zu pooled outputs differ, the first %zu: fused %g (arg %d), "
		       "unfused %g (arg %d)\n", bad, np, first, p[0][first], arg[0][first], p[1][first],
		       arg[1][first]);
	size_t zero = 0;
	for (size_t i = 0; i < np; i++)
		zero += p[1][i] == 0.f;
	snprintf(d, sizeof(d), "... equals conv3_fwd then maxpool2_fwd%s%s: p, arg%s the same bits "
		 "(%zu of %zu zero), nothing past the end", nhwc ? "_nhwc" : "", ep_name(ep),
		 ep == 2 ? " and the bf16 copy" : "", zero, np);
	/* with the ReLU and dropout, zeros must be there to compare */
	test_cond(d, !bad && (!ep || zero > np / 5));
	for (int k = 0; k < 2; k++)
		cudaFree(dp[k]), cudaFree(darg[k]), cudaFree(dpb[k]), free(p[k]), free(arg[k]), free(pb[k]);
	cudaFree(db), cudaFree(dkey), free(b);
}

/* conv2's backward-data and backward-filter reading the pool's tensors
 * (cnn_cuda_conv3_dgrad_pool, _wgrad_pool; NCHW) against the unfused
 * pair: cnn_cuda_maxpool2_relu_bwd (its own twin test above) writing dy,
 * then conv3_dgrad and conv3_wgrad (checked against their twins) on it:
 * the same bits.  The pool's output has zeros and negatives (no gradient
 * there), arg every position, and an odd last row or column of dy (the
 * pool dropped it) must read as 0. */
static void test_conv3_pool_bwd(const void *dX, const void *dWB, int nimg, int c, int h, int w,
				int oc, int bf16, float *dsc)
{
	int oh = h - 2, ow = w - 2, ph = oh / 2, pw = ow / 2;
	size_t np = (size_t)nimg * oc * ph * pw, ny = (size_t)nimg * oc * oh * ow,
	       nx = (size_t)nimg * c * h * w, nw = (size_t)oc * c * 9, es = bf16 ? 2 : 4;
	float *dp = malloc(np * 4 + 4), *pv = malloc(np * 4 + 4), *got[2], *gdw[2];
	uint8_t *arg = malloc(np + 1);
	char d[240], sh[96];
	snprintf(sh, sizeof(sh), "%s on %d x %d x %dx%d, %d outputs", bf16 ? "_bf16" : "_tf32", nimg, c,
		 h, w, oc);
	fill(dp, np);
	fill(pv, np);
	for (size_t i = 0; i < np; i++) {
		arg[i] = (uint8_t)(i * 7 % 4);
		if (i % 5 == 0)
			pv[i] = 0.f;   /* ReLU or dropout zero: no gradient */
	}
	float *ddp = dev(dp, np * 4), *dpv = dev(pv, np * 4);
	uint8_t *darg = dev(arg, np);
	void *dDY = dev(NULL, ny * es), *dDX[2] = { dev(NULL, nx * es), dev(NULL, nx * es) };
	float *ddw[2] = { dev(NULL, nw * 4), dev(NULL, nw * 4) };
	int ok = (bf16 ? cnn_cuda_maxpool2_relu_bwd_bf16(ddp, dpv, darg, nimg * oc, oh, ow, dDY, NULL) :
			 cnn_cuda_maxpool2_relu_bwd(ddp, dpv, darg, nimg * oc, oh, ow, dDY, NULL)) == 0;
	ok &= (bf16 ? cnn_cuda_conv3_dgrad_bf16(dDY, dWB, nimg, c, h, w, oc, 0, dDX[1], NULL) :
		      cnn_cuda_conv3_dgrad_tf32(dDY, dWB, nimg, c, h, w, oc, 0, dDX[1], NULL)) == 0;
	ok &= (bf16 ? cnn_cuda_conv3_wgrad_bf16(dX, dDY, nimg, c, h, w, oc, 0, dsc, ddw[1], NULL) :
		      cnn_cuda_conv3_wgrad_tf32(dX, dDY, nimg, c, h, w, oc, 0, dsc, ddw[1], NULL)) == 0;
	snprintf(d, sizeof(d), "maxpool2_relu_bwd then conv3_dgrad and conv3_wgrad%s launch", sh);
	test_cond(d, ok);
	ok = (bf16 ? cnn_cuda_conv3_dgrad_pool_bf16(ddp, dpv, darg, dWB, nimg, c, h, w, oc, dDX[0], NULL) :
		     cnn_cuda_conv3_dgrad_pool_tf32(ddp, dpv, darg, dWB, nimg, c, h, w, oc, dDX[0], NULL)) == 0;
	/* with conv2's bias gradient (twice: the same bits), and without */
	float *ddb[3] = { dev(NULL, oc * 4 + 4), dev(NULL, oc * 4 + 4), dev(NULL, oc * 4 + 4) };
	for (int k = 0; k < 3; k++)
		CK(cudaMemset(ddb[k], 0xff, oc * 4 + 4));
	for (int k = 0; k < 3; k++)
		ok &= (bf16 ? cnn_cuda_conv3_wgrad_pool_bf16(dX, ddp, dpv, darg, nimg, c, h, w, oc, dsc, ddw[0],
							     k < 2 ? ddb[k] : NULL, NULL) :
			      cnn_cuda_conv3_wgrad_pool_tf32(dX, ddp, dpv, darg, nimg, c, h, w, oc, dsc, ddw[0],
							     k < 2 ? ddb[k] : NULL, NULL)) == 0;
	/* the reference: the bias-gradient kernel the step runs otherwise (its
	 * own twin test above), from dp where p > 0 */
	size_t nbs = cnn_cuda_bias_grad_scratch(nimg, oc, ph * pw);
	float *dbs = dev(NULL, nbs * 4 + 4);
	ok &= cnn_cuda_bias_grad(ddp, dpv, 0, nimg, oc, ph * pw, dbs, ddb[2], NULL) == 0;
	snprintf(d, sizeof(d), "conv3_dgrad_pool and conv3_wgrad_pool%s launch", sh);
	test_cond(d, ok);
	for (int k = 0; k < 2; k++) {
		got[k] = malloc(nx * 4), gdw[k] = malloc(nw * 4);
		down(got[k], dDX[k], nx, bf16);
		back(gdw[k], ddw[k], nw * 4);
	}
	size_t nz = 0;
	for (size_t i = 0; i < nx; i++)
		nz += got[1][i] != 0.f;
	snprintf(d, sizeof(d), "... conv3_dgrad_pool%s: the same bits as the unfused pair (%zu of %zu "
		 "nonzero)", sh, nz, nx);
	test_cond(d, !memcmp(got[0], got[1], nx * 4) && nz > nx / 4);
	if (memcmp(got[0], got[1], nx * 4))
		compare("conv3_dgrad_pool", got[0], got[1], nx, T_EXACT);
	snprintf(d, sizeof(d), "... conv3_wgrad_pool%s: the same bits as the unfused pair", sh);
	test_cond(d, !memcmp(gdw[0], gdw[1], nw * 4));
	if (memcmp(gdw[0], gdw[1], nw * 4))
		compare("conv3_wgrad_pool", gdw[0], gdw[1], nw, T_EXACT);
	float *gdb[3];
	for (int k = 0; k < 3; k++) {
		gdb[k] = malloc(oc * 4 + 4);
		back(gdb[k], ddb[k], oc * 4 + 4);
	}
	uint32_t nan = 0xffffffffu;
	snprintf(d, sizeof(d), "... and its bias gradient equals bias_grad's from dp where p > 0 (biassum "
		 "tolerance), the same bits twice, nothing past the end");
	test_cond(d, compare("conv3_wgrad_pool db", gdb[0], gdb[2], oc, T_BIASSUM) == 0 &&
		     !memcmp(gdb[0], gdb[1], oc * 4) && !memcmp(&gdb[0][oc], &nan, 4));
	for (int k = 0; k < 3; k++)
		cudaFree(ddb[k]), free(gdb[k]);
	cudaFree(dbs);

	/* conv1's weight gradient in the backward-data's epilogue
	 * (cnn_cuda_conv3_dgrad_conv1), against cnn_cuda_conv1_wgrad (its
	 * own twin test above) on the dx dgrad_pool wrote: conv1's input x1
	 * one channel of (h+2) x (w+2), its output a1 (the gate) c x h x w */
	size_t nx1 = (size_t)nimg * (h + 2) * (w + 2), n1 = (size_t)c * 9;
	size_t s1 = cnn_cuda_conv1_wgrad_scratch(nimg, h + 2, w + 2, c),
	       s2 = cnn_cuda_conv3_dgrad_conv1_scratch(nimg, c, h, w);
	float *x1 = malloc(nx1 * 4), *a1 = malloc(nx * 4), *r[3][2];
	fill(x1, nx1);
	fill(a1, nx);
	void *dx1 = up(x1, nx1, bf16), *da1 = up(a1, nx, bf16);
	float *dsc1 = dev(NULL, s1 * 4 + 4), *dsc2 = dev(NULL, s2 * 4 + 4), *dr[3][2];
	CK(cudaMemset(dsc1, 0, s1 * 4));   /* conv1_wgrad's counters */
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 2; j++)
			r[k][j] = malloc(n1 * 4), dr[k][j] = dev(NULL, n1 * 4);
	/* 0, 1: fused twice (the same bits); 2: conv1_wgrad on dx */
	ok = 1;
	for (int k = 0; k < 2; k++)
		ok &= (bf16 ? cnn_cuda_conv3_dgrad_conv1_bf16(ddp, dpv, darg, dWB, nimg, c, h, w, oc, dx1, da1,
							      dsc2, dr[k][0], dr[k][1], NULL) :
			      cnn_cuda_conv3_dgrad_conv1_tf32(ddp, dpv, darg, dWB, nimg, c, h, w, oc, dx1, da1,
							      dsc2, dr[k][0], dr[k][1], NULL)) == 0;
	ok &= (bf16 ? cnn_cuda_conv1_wgrad_bf16(dx1, dDX[0], da1, nimg, h + 2, w + 2, c, 0, dsc1, dr[2][0],
						dr[2][1], NULL) :
		      cnn_cuda_conv1_wgrad(dx1, dDX[0], da1, nimg, h + 2, w + 2, c, 0, dsc1, dr[2][0],
					   dr[2][1], NULL)) == 0;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 2; j++)
			back(r[k][j], dr[k][j], n1 / (j ? 9 : 1) * 4);
	snprintf(d, sizeof(d), "conv3_dgrad_conv1%s launches (%zu floats of scratch)", sh, s2);
	test_cond(d, ok);
	snprintf(d, sizeof(d), "... conv1's weight and bias gradients equal conv1_wgrad on "
		 "conv3_dgrad_pool's dx (biassum tolerance), the same bits twice");
	test_cond(d, compare("conv1 dw", r[0][0], r[2][0], n1, T_BIASSUM) == 0 &&
		     compare("conv1 db", r[0][1], r[2][1], c, T_BIASSUM) == 0 &&
		     !memcmp(r[0][0], r[1][0], n1 * 4) && !memcmp(r[0][1], r[1][1], c * 4));
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 2; j++)
			cudaFree(dr[k][j]), free(r[k][j]);
	cudaFree(dx1), cudaFree(da1), cudaFree(dsc1), cudaFree(dsc2);
	free(x1), free(a1);
	for (int k = 0; k < 2; k++)
		cudaFree(dDX[k]), cudaFree(ddw[k]), free(got[k]), free(gdw[k]);
	cudaFree(ddp), cudaFree(dpv), cudaFree(darg), cudaFree(dDY);
	free(dp), free(pv), free(arg);
}

/* conv2 on the tensor cores (cnn_cuda_conv3_*): forward, backward-data and
 * backward-filter of a 3x3 convolution of c channels into oc, NCHW or
 * channels-last (OHWI weights), TF32 or bf16 operands, against
 * cnn_im2col3 + cnn_sgemm and cnn_conv3_bwd on the operands rounded as the
 * kernels read them; the weight gradient the same bits twice. */
static void test_conv3(int nimg, int c, int h, int w, int oc, int nhwc, int bf16)
{
	int pix = (h - 2) * (w - 2), K = c * 9;
	size_t nx = (size_t)nimg * c * h * w, ny = (size_t)nimg * oc * pix, nw = (size_t)oc * K;
	size_t ns = cnn_cuda_conv3_wgrad_scratch(nimg, c, h, w, oc);
	float *x = malloc(nx * 4), *wt = malloc(nw * 4), *dy = malloc(ny * 4);
	float *xl = malloc(nx * 4), *dyl = malloc(ny * 4);
	float *y = malloc(ny * 4), *got = malloc((nx > ny ? nx : ny) * 4), *t = malloc((nx > ny ? nx : ny) * 4);
	float *dx = malloc(nx * 4), *dw = calloc(nw, 4), *db = calloc(oc, 4);
	float *gdw = malloc(nw * 4), *gdw2 = malloc(nw * 4);
	float *col = malloc((size_t)K * pix * 4), *dcol = malloc((size_t)K * pix * 4);
	char d[220], sh[96];
	snprintf(sh, sizeof(sh), "%s%s on %d x %d x %dx%d, %d outputs", nhwc ? "_nhwc" : "",
		 bf16 ? "_bf16" : "_tf32", nimg, c, h, w, oc);
	fill(x, nx);
	fill(wt, nw);
	fill(dy, ny);
	to_layout(nhwc, x, xl, nimg, c, h * w);
	to_layout(nhwc, dy, dyl, nimg, oc, pix);
	/* the weights packed from fp32 OIHW, as the step does */
	float *dW32 = up(wt, nw, 0);
	void *dWF = dev(NULL, nw * (bf16 ? 2 : 4)), *dWB = dev(NULL, nw * (bf16 ? 2 : 4));
	void *dX = up(xl, nx, bf16), *dDY = up(dyl, ny, bf16);
	snprintf(d, sizeof(d), "conv3_pack%s launches", sh);
	test_cond(d, (bf16 ? cnn_cuda_conv3_pack_bf16(dW32, oc, c, dWF, dWB, NULL) :
			     cnn_cuda_conv3_pack_tf32(dW32, oc, c, dWF, dWB, NULL)) == 0);
	void *dY = dev(NULL, ny * (bf16 ? 2 : 4)), *dDX = dev(NULL, nx * (bf16 ? 2 : 4));
	float *dsc = dev(NULL, ns * 4), *ddw = dev(NULL, nw * 4);
	/* the operands as the kernels read them */
	if (bf16) {
		cnn_bf16_round(x, nx);
		cnn_bf16_round(wt, nw);
		cnn_bf16_round(dy, ny);
	} else {
		tf32_round(x, nx);
		tf32_round(wt, nw);
		tf32_round(dy, ny);
	}
	int tol = bf16 ? T_MMA_BF16 : T_MMA;

	snprintf(d, sizeof(d), "conv3_fwd%s launches", sh);
	test_cond(d, (bf16 ? cnn_cuda_conv3_fwd_bf16(dX, dWF, nimg, c, h, w, oc, nhwc, dY, NULL) :
			     cnn_cuda_conv3_fwd_tf32(dX, dWF, nimg, c, h, w, oc, nhwc, dY, NULL)) == 0);
	down(t, dY, ny, bf16);
	if (nhwc)
		to_nchw(t, got, nimg, oc, pix);
	else
		memcpy(got, t, ny * 4);
	for (int i = 0; i < nimg; i++) {
		cnn_im2col3(x + (size_t)i * c * h * w, c, h, w, col);
		cnn_sgemm('N', 'N', oc, pix, K, 1.f, wt, K, col, pix, 0.f, y + (size_t)i * oc * pix, pix);
	}
	if (bf16)
		cnn_bf16_round(y, ny);
	snprintf(d, sizeof(d), "conv3_fwd%s equals im2col and GEMM (%s tolerance)", sh, TOL[tol].what);
	test_cond(d, compare("conv3_fwd", got, y, ny, tol) == 0);
	for (int ep = 0; ep < 3; ep += 2)
		test_conv3_pool(dX, dWF, dY, nimg, c, h, w, oc, nhwc, bf16, ep);

	for (int i = 0; i < nimg; i++)
		cnn_conv3_bwd(x + (size_t)i * c * h * w, c, h, w, wt, oc, dy + (size_t)i * oc * pix, col,
			      dcol, dw, db, dx + (size_t)i * c * h * w);
	if (bf16)
		cnn_bf16_round(dx, nx);
	snprintf(d, sizeof(d), "conv3_dgrad%s launches", sh);
	test_cond(d, (bf16 ? cnn_cuda_conv3_dgrad_bf16(dDY, dWB, nimg, c, h, w, oc, nhwc, dDX, NULL) :
			     cnn_cuda_conv3_dgrad_tf32(dDY, dWB, nimg, c, h, w, oc, nhwc, dDX, NULL)) == 0);
	down(t, dDX, nx, bf16);
	if (nhwc)
		to_nchw(t, got, nimg, c, h * w);
	else
		memcpy(got, t, nx * 4);
	snprintf(d, sizeof(d), "conv3_dgrad%s equals cnn_conv3_bwd's dx (%s tolerance)", sh, TOL[tol].what);
	test_cond(d, compare("conv3_dgrad", got, dx, nx, tol) == 0);

	int ok = 1;
	for (int run = 0; run < 2; run++) {
		CK(cudaMemset(ddw, 0x7f, nw * 4));   /* overwritten, not added to */
		ok &= (bf16 ? cnn_cuda_conv3_wgrad_bf16(dX, dDY, nimg, c, h, w, oc, nhwc, dsc, ddw, NULL) :
			      cnn_cuda_conv3_wgrad_tf32(dX, dDY, nimg, c, h, w, oc, nhwc, dsc, ddw, NULL)) == 0;
		back(run ? gdw2 : gdw, ddw, nw * 4);
	}
	snprintf(d, sizeof(d), "conv3_wgrad%s launches (%zu floats of scratch)", sh, ns);
	test_cond(d, ok);
	snprintf(d, sizeof(d), "conv3_wgrad%s equals cnn_conv3_bwd's dw summed over the images (mma "
		 "tolerance)", sh);
	test_cond(d, compare("conv3_wgrad", gdw, dw, nw, T_MMA) == 0);
	snprintf(d, sizeof(d), "conv3_wgrad%s gives the same bits twice", sh);
	test_cond(d, !memcmp(gdw, gdw2, nw * 4));
	if (!nhwc)
		test_conv3_pool_bwd(dX, dWB, nimg, c, h, w, oc, bf16, dsc);
	cudaFree(dX), cudaFree(dW32), cudaFree(dWF), cudaFree(dWB), cudaFree(dDY), cudaFree(dY);
	cudaFree(dDX), cudaFree(dsc), cudaFree(ddw);
	free(x), free(wt), free(dy), free(xl), free(dyl), free(y), free(got), free(t);
	free(dx), free(dw), free(db), free(gdw), free(gdw2), free(col), free(dcol);
}

/* On a GPU older than 8.0 (sm_75) the tensor-core kernels are not run: each
 * of the three calls refuses, naming the GPU and what it needs, and writes
 * nothing; cnn_cuda_tensor_cores says 0. */
static void test_conv3_refused(void)
{
	int nimg = 2, c = 5, h = 7, w = 9, oc = 6, cur = 0, major = 0, minor = 0;
	size_t nx = (size_t)nimg * c * h * w, ny = (size_t)nimg * oc * (h - 2) * (w - 2),
	       nw = (size_t)oc * c * 9, ns = cnn_cuda_conv3_wgrad_scratch(nimg, c, h, w, oc);
	char want[32], d[160];
	CK(cudaGetDevice(&cur));
	CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cur));
	CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, cur));
	snprintf(want, sizeof(want), "is sm_%d%d", major, minor);
	test_cond("cnn_cuda_tensor_cores says 0 on a GPU older than 8.0", cnn_cuda_tensor_cores() == 0);
	size_t most = nx > ny ? nx : ny;
	most = most > nw ? most : nw;
	most = most > ns ? most : ns;
	float *sentinel = malloc(most * 4), *got = malloc(most * 4);
	for (size_t i = 0; i < most; i++)
		sentinel[i] = 1234.5f;
	float *dX = dev(sentinel, nx * 4), *dY = dev(sentinel, ny * 4), *dW = dev(sentinel, nw * 4),
	      *dS = dev(sentinel, ns * 4), *dDW = dev(sentinel, nw * 4);
	for (int b16 = 0; b16 < 2; b16++) {
		const char *sh = b16 ? "_bf16" : "_tf32";
		int r[3];
		r[0] = b16 ? cnn_cuda_conv3_fwd_bf16((cnn_bf16 *)dX, (cnn_bf16 *)dW, nimg, c, h, w, oc, 0,
						     (cnn_bf16 *)dY, NULL) :
			     cnn_cuda_conv3_fwd_tf32(dX, dW, nimg, c, h, w, oc, 0, dY, NULL);
		int fwd_said = strstr(cnn_cuda_last_error(), want) && strstr(cnn_cuda_last_error(), "8.0");
		printf("#   conv3_fwd%s: %s\n", sh, cnn_cuda_last_error());
		r[1] = b16 ? cnn_cuda_conv3_dgrad_bf16((cnn_bf16 *)dY, (cnn_bf16 *)dW, nimg, c, h, w, oc, 0,
						       (cnn_bf16 *)dX, NULL) :
			     cnn_cuda_conv3_dgrad_tf32(dY, dW, nimg, c, h, w, oc, 0, dX, NULL);
		int dgrad_said = strstr(cnn_cuda_last_error(), "cnn_cuda_conv3_dgrad") &&
				 strstr(cnn_cuda_last_error(), want);
		r[2] = b16 ? cnn_cuda_conv3_wgrad_bf16((cnn_bf16 *)dX, (cnn_bf16 *)dY, nimg, c, h, w, oc, 0,
						       dS, dDW, NULL) :
			     cnn_cuda_conv3_wgrad_tf32(dX, dY, nimg, c, h, w, oc, 0, dS, dDW, NULL);
		int wgrad_said = strstr(cnn_cuda_last_error(), "cnn_cuda_conv3_wgrad") &&
				 strstr(cnn_cuda_last_error(), want);
		snprintf(d, sizeof(d), "conv3_fwd%s, _dgrad and _wgrad refuse a GPU older than 8.0, "
			 "saying which and what they need", sh);
		test_cond(d, r[0] < 0 && r[1] < 0 && r[2] < 0 && fwd_said && dgrad_said && wgrad_said);
	}
	int untouched = 1;
	float *bufs[] = { dX, dY, dW, dS, dDW };
	size_t lens[] = { nx, ny, nw, ns, nw };
	for (int i = 0; i < 5; i++) {
		back(got, bufs[i], lens[i] * 4);
		untouched &= memcmp(got, sentinel, lens[i] * 4) == 0;
	}
	test_cond("conv3 refused: no kernel ran (every buffer as it was)", untouched);
	CK(cudaGetLastError());
	for (int i = 0; i < 5; i++)
		cudaFree(bufs[i]);
	free(sentinel), free(got);
}

/* conv3_pack: the fp32 OIHW weights reindexed exactly, [tap][c][o] and
 * [tap][o][c], bf16 rounded to nearest even as cnn_bf16_round does. */
static void test_conv3_pack(int oc, int c, int bf16)
{
	size_t n = (size_t)oc * c * 9;
	float *w = malloc(n * 4), *ref = malloc(n * 4), *wf = malloc(n * 4), *wb = malloc(n * 4);
	fill(w, n);
	memcpy(ref, w, n * 4);
	if (bf16)
		cnn_bf16_round(ref, n);
	float *dw = up(w, n, 0);
	void *dwf = dev(NULL, n * (bf16 ? 2 : 4)), *dwb = dev(NULL, n * (bf16 ? 2 : 4));
	char d[160];
	snprintf(d, sizeof(d), "conv3_pack%s of %d x %d x 3 x 3 launches", bf16 ? "_bf16" : "_tf32", oc, c);
	test_cond(d, (bf16 ? cnn_cuda_conv3_pack_bf16(dw, oc, c, dwf, dwb, NULL) :
			     cnn_cuda_conv3_pack_tf32(dw, oc, c, dwf, dwb, NULL)) == 0);
	down(wf, dwf, n, bf16);
	down(wb, dwb, n, bf16);
	size_t bad = 0, first = n;
	for (int o = 0; o < oc; o++)
		for (int ci = 0; ci < c; ci++)
			for (int t = 0; t < 9; t++) {
				size_t i = ((size_t)o * c + ci) * 9 + t;
				float a = wf[((size_t)t * c + ci) * oc + o], b = wb[((size_t)t * oc + o) * c + ci];
				if (memcmp(&a, &ref[i], 4) || memcmp(&b, &ref[i], 4)) {
					bad++;
					if (first == n) {
						first = i;
						printf("#   w[%d][%d][%d] = %.9g: forward's %.9g, backward's %.9g\n", o,
						       ci, t, ref[i], a, b);
					}
				}
			}
	snprintf(d, sizeof(d), "conv3_pack%s of %d x %d x 3 x 3: [tap][c][o] and [tap][o][c], each "
		 "entry exactly (%zu wrong)", bf16 ? "_bf16" : "_tf32", oc, c, bad);
	test_cond(d, bad == 0);
	snprintf(d, sizeof(d), "conv3_pack refuses 0 outputs");
	test_cond(d, cnn_cuda_conv3_pack_tf32(dw, 0, c, dwf, dwb, NULL) < 0);
	cudaFree(dw), cudaFree(dwf), cudaFree(dwb);
	free(w), free(ref), free(wf), free(wb);
}

/* The weight gradient's scratch, sized for nimg images, holds the partial
 * sums of every launch for fewer: the pixels' split is not monotone in
 * their count (more images can mean fewer, longer splits).  A guard as
 * large again after it must keep its bytes through launches for 1 to nimg
 * images; the result of each must match cnn_conv3_bwd. */
static void test_conv3_scratch(int nimg, int c, int h, int w, int oc)
{
	int pix = (h - 2) * (w - 2), K = c * 9;
	size_t ns = cnn_cuda_conv3_wgrad_scratch(nimg, c, h, w, oc), nw = (size_t)oc * K;
	size_t nx = (size_t)nimg * c * h * w, ny = (size_t)nimg * oc * pix;
	float *x = malloc(nx * 4), *dy = malloc(ny * 4), *guard = malloc(ns * 4), *back_ = malloc(ns * 4);
	float *wt = calloc(nw, 4), *col = malloc((size_t)K * pix * 4), *dcol = malloc((size_t)K * pix * 4);
	float *dx = malloc((size_t)c * h * w * 4), *dw = calloc(nw, 4), *db = calloc(oc, 4);
	float *gdw = malloc(nw * 4);
	fill(x, nx);
	fill(dy, ny);
	tf32_round(x, nx);
	tf32_round(dy, ny);
	memset(guard, 0x5a, ns * 4);
	float *dX = up(x, nx, 0), *dDY = up(dy, ny, 0), *dsc = dev(NULL, 2 * ns * 4), *ddw = dev(NULL, nw * 4);
	CK(cudaMemcpy(dsc + ns, guard, ns * 4, cudaMemcpyHostToDevice));
	int launched = 1, kept = 1, first_bad = 0, right = 1;
	for (int n = 1; n <= nimg; n++) {
		launched &= cnn_cuda_conv3_wgrad_tf32(dX, dDY, n, c, h, w, oc, 0, dsc, ddw, NULL) == 0;
		back(back_, dsc + ns, ns * 4);
		if (kept && memcmp(back_, guard, ns * 4))
			kept = 0, first_bad = n;
		/* cnn_conv3_bwd adds into dw: image n's share on top of the first n - 1 */
		cnn_conv3_bwd(x + (size_t)(n - 1) * c * h * w, c, h, w, wt, oc,
			      dy + (size_t)(n - 1) * oc * pix, col, dcol, dw, db, dx);
		back(gdw, ddw, nw * 4);
		if (right && compare("conv3_wgrad (fewer images than the scratch's)", gdw, dw, nw, T_MMA))
			right = 0;
	}
	char d[200];
	snprintf(d, sizeof(d), "conv3_wgrad on 1 to %d images of %d x %dx%d, %d outputs launches", nimg, c,
		 h, w, oc);
	test_cond(d, launched);
	snprintf(d, sizeof(d), "conv3_wgrad on 1 to %d images stays inside the scratch sized for %d "
		 "(%zu floats)%s", nimg, nimg, ns, kept ? "" : ": overrun");
	test_cond(d, kept);
	if (!kept)
		printf("#   first overrun at %d images\n", first_bad);
	snprintf(d, sizeof(d), "conv3_wgrad on 1 to %d images equals cnn_conv3_bwd's dw each time", nimg);
	test_cond(d, right);
	cudaFree(dX), cudaFree(dDY), cudaFree(dsc), cudaFree(ddw);
	free(x), free(dy), free(guard), free(back_), free(wt), free(col), free(dcol), free(dx);
	free(dw), free(db), free(gdw);
}

/* OIHW <-> OHWI for conv1 (in 1) and conv2 (in 32), fp32 and bf16 */
static void test_weights_nhwc(int out, int in, int bf16)
{
	int hw = 9;
	size_t n = (size_t)out * in * hw;
	float *w = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
	char d[128];
	fill(w, n);
	for (int o = 0; o < out; o++)
		for (int k = 0; k < hw; k++)
			for (int ci = 0; ci < in; ci++)
				want[((size_t)o * hw + k) * in + ci] = w[((size_t)o * in + ci) * hw + k];
	if (bf16)
		cnn_bf16_round(want, n);
	float *dw = dev(w, n * 4), *dback = dev(NULL, n * 4);
	void *dt = dev(NULL, n * 4);
	snprintf(d, sizeof(d), "oihw_to_ohwi%s (%d x %d x 3x3) launches", ty(bf16), out, in);
	test_cond(d, (bf16 ? cnn_cuda_oihw_to_ohwi_bf16(dw, out, in, hw, dt, NULL) :
			     cnn_cuda_oihw_to_ohwi(dw, out, in, hw, dt, NULL)) == 0);
	down(got, dt, n, bf16);
	snprintf(d, sizeof(d), "oihw_to_ohwi%s (%d x %d x 3x3) is the transpose%s (exact)", ty(bf16),
		 out, in, bf16 ? ", rounded" : "");
	test_cond(d, compare("oihw_to_ohwi", got, want, n, T_EXACT) == 0);
	snprintf(d, sizeof(d), "ohwi_to_oihw%s (%d x %d x 3x3) launches", ty(bf16), out, in);
	test_cond(d, (bf16 ? cnn_cuda_ohwi_to_oihw_bf16(dt, out, in, hw, dback, NULL) :
			     cnn_cuda_ohwi_to_oihw(dt, out, in, hw, dback, NULL)) == 0);
	back(got, dback, n * 4);
	if (bf16)
		cnn_bf16_round(w, n);
	snprintf(d, sizeof(d), "ohwi_to_oihw%s (%d x %d x 3x3) restores the weights%s (exact)",
		 ty(bf16), out, in, bf16 ? " as rounded" : "");
	test_cond(d, compare("ohwi_to_oihw", got, w, n, T_EXACT) == 0);
	cudaFree(dw), cudaFree(dback), cudaFree(dt);
	free(w), free(want), free(got);
}

/* fc2's classifier (--fc2 fused) on n rows of hid inputs (in [-1, 1): fc1's ReLU
 * gates the negative ones) and k classes, against its twins in a row:
 * cnn_linear_fwd, cnn_logsoftmax_nll_fwd and _bwd, cnn_linear_bwd, dh
 * scaled by dropout's 2 and cnn_relu_bwd, dh's column sums; with fold,
 * fc1's bias, ReLU and dropout (p 0.5) first, as cnn_bias_relu and
 * cnn_dropout_fwd (exact).  Outputs are written, not added to (garbage
 * before), and the same bits twice. */
static void test_fc2_fused(int n, int hid, int k, int fold)
{
	size_t nh = (size_t)n * hid, nk = (size_t)n * k, kh = (size_t)k * hid;
	float *h = malloc(nh * 4), *w = malloc(kh * 4), b[64], *z = malloc(nk * 4), *lp = malloc(nk * 4);
	float *d = malloc(nk * 4), *dw = calloc(kh, 4), db[64] = { 0 }, *dh = malloc(nh * 4);
	float *dbh = malloc(hid * 4), *g = malloc((nh > kh ? nh : kh) * 4), *g2 = malloc(nh * 4);
	float out[2], again[2], *b1 = malloc(hid * 4);
	uint8_t *lab = malloc(n);
	char bn[128], m[280];
	uint64_t key = cnn_dropout_key(7, 99, 0, 2);
	snprintf(bn, sizeof(bn), " of %d rows, %d hidden, %d classes%s", n, hid, k,
		 fold ? ", fc1's bias, ReLU and dropout first" : "");
	fill(h, nh);
	fill(w, kh);
	fill(b, k);
	fill(b1, hid);
	for (int i = 0; i < n; i++)
		lab[i] = (uint8_t)(((frand() + 1.f) * 0.5f) * (float)k) % k;
	float *dH = dev(h, nh * 4), *dW = dev(w, kh * 4), *dB = dev(b, k * 4), *dlp = dev(NULL, nk * 4);
	float *dout = dev(NULL, 8), *dd = dev(NULL, nk * 4), *ddw = dev(NULL, kh * 4);
	float *ddb = dev(NULL, k * 4), *ddh = dev(NULL, nh * 4), *ddbh = dev(NULL, hid * 4);
	uint8_t *dlab = dev(lab, n);
	float *dB1 = dev(b1, hid * 4);
	uint64_t *dkey = dev(&key, 8);
	/* the blocks' partial sums and their counter, 0 before the first call */
	size_t sn = cnn_cuda_fc2_fused_scratch(n, hid, k);
	float *dS = sn ? dev(NULL, sn * 4) : NULL;
	if (sn)
		CK(cudaMemset(dS, 0, sn * 4));
	int ok = 1;
	for (int run = 0; run < 2; run++) {
		CK(cudaMemcpy(dH, h, nh * 4, cudaMemcpyHostToDevice));   /* fold: in place */
		CK(cudaMemset(dout, 0x7f, 8));
		CK(cudaMemset(ddw, 0x7f, kh * 4));
		CK(cudaMemset(ddb, 0x7f, k * 4));
		CK(cudaMemset(ddh, 0x7f, nh * 4));
		CK(cudaMemset(ddbh, 0x7f, hid * 4));
		ok &= cnn_cuda_fc2_fused(dH, fold ? dB1 : NULL, 0.5f, dkey, dW, dB, dlab, n, hid, k,
					(float)n, 2.f, dlp, dout, dd, ddw, ddb, ddh, ddbh, dS, sn,
					NULL) == 0;
		back(run ? again : out, dout, 8);
		back(run ? g2 : g, ddh, nh * 4);
	}
	snprintf(m, sizeof(m), "fc2_fused%s launches", bn);
	test_cond(m, ok);
	if (sn) {
		unsigned count = 1;
		back(&count, dS, 4);
		snprintf(m, sizeof(m), "fc2_fused%s: %zu floats of scratch, its counter back at 0", bn,
			 sn);
		test_cond(m, count == 0);
	}
	snprintf(m, sizeof(m), "fc2_fused%s: fc1's output gradient and the loss, the same bits twice", bn);
	test_cond(m, !memcmp(g, g2, nh * 4) && !memcmp(out, again, 8));
	/* the twins */
	if (fold) {
		for (int i = 0; i < n; i++)
			cnn_bias_relu(h + (size_t)i * hid, b1, hid, 1);
		cnn_dropout_fwd(h, nh, 0.5f, key);
		back(g, dH, nh * 4);
		snprintf(m, sizeof(m), "fc2_fused%s: h is cnn_bias_relu then cnn_dropout_fwd's (exact)", bn);
		test_cond(m, compare("h", g, h, nh, T_EXACT) == 0);
	}
	int correct = 0;
	cnn_linear_fwd(h, n, hid, w, b, k, z);
	float loss = cnn_logsoftmax_nll_fwd(z, lab, n, k, lp, &correct);
	cnn_logsoftmax_nll_bwd(lp, lab, n, k, (float)n, d);
	cnn_linear_bwd(h, n, hid, w, k, d, dw, db, dh);
	for (size_t i = 0; i < nh; i++)
		dh[i] *= 2.f;
	cnn_relu_bwd(dh, h, nh);
	for (int q = 0; q < hid; q++) {
		double acc = 0;
		for (int i = 0; i < n; i++)
			acc += dh[(size_t)i * hid + q];
		dbh[q] = (float)acc;
	}
	float cpu_sum = loss * n;
	snprintf(m, sizeof(m), "fc2_fused%s: the loss sum and correct count are the CPU's", bn);
	test_cond(m, compare("loss", &out[0], &cpu_sum, 1, T_SUM) == 0 && (int)out[1] == correct);
	const struct {
		const char *name, *what;
		const float *gpu, *cpu;
		size_t n;
	} outs[] = {
		{ "logp", "log-probabilities", dlp, lp, nk },
		{ "dlogits", "the loss's gradient", dd, d, nk },
		{ "dw", "fc2's weight gradient", ddw, dw, kh },
		{ "db", "fc2's bias gradient", ddb, db, (size_t)k },
		{ "dh", "fc1's output gradient (x2, through the ReLU: exact 0 where h <= 0)", ddh, dh, nh },
		{ "dbh", "fc1's bias gradient", ddbh, dbh, (size_t)hid },
	};
	for (size_t o = 0; o < sizeof(outs) / sizeof(outs[0]); o++) {
		back(g, outs[o].gpu, outs[o].n * 4);
		snprintf(m, sizeof(m), "fc2_fused%s: %s within the fc2 tolerance", bn, outs[o].what);
		test_cond(m, compare(outs[o].name, g, outs[o].cpu, outs[o].n, T_FC2) == 0);
	}
	if (n == 64) {
		test_cond("fc2_fused refuses 0 rows",
			  cnn_cuda_fc2_fused(dH, NULL, 0.f, NULL, dW, dB, dlab, 0, hid, k, 1.f, 1.f, dlp,
					    dout, dd, ddw, ddb, ddh, ddbh, dS, sn, NULL) == -1);
		test_cond("fc2_fused refuses 1025 hidden units",
			  cnn_cuda_fc2_fused(dH, NULL, 0.f, NULL, dW, dB, dlab, n, 1025, k, 1.f, 1.f, dlp,
					    dout, dd, ddw, ddb, ddh, ddbh, dS, sn, NULL) == -1 &&
			  !cnn_cuda_fc2_fused_fits(1025, k));
		test_cond("fc2_fused refuses 65 classes",
			  cnn_cuda_fc2_fused(dH, NULL, 0.f, NULL, dW, dB, dlab, n, hid, 65, 1.f, 1.f, dlp,
					    dout, dd, ddw, ddb, ddh, ddbh, dS, sn, NULL) == -1 &&
			  !cnn_cuda_fc2_fused_fits(hid, 65));
		test_cond("fc2_fused refuses weights of more than 4096 floats with their padding "
			  "(32 classes of 128 hidden units)",
			  !cnn_cuda_fc2_fused_fits(128, 32) && cnn_cuda_fc2_fused_fits(128, 31) &&
			  cnn_cuda_fc2_fused_fits(1024, 3));
		test_cond("fc2_fused refuses a scratch shorter than it needs",
			  sn > 0 && cnn_cuda_fc2_fused(dH, NULL, 0.f, NULL, dW, dB, dlab, n, hid, k, 1.f,
						      1.f, dlp, dout, dd, ddw, ddb, ddh, ddbh, dS,
						      sn - 1, NULL) == -1);
	}
	cudaFree(dH), cudaFree(dW), cudaFree(dB), cudaFree(dlp), cudaFree(dout), cudaFree(dd);
	cudaFree(ddw), cudaFree(ddb), cudaFree(ddh), cudaFree(ddbh), cudaFree(dlab), cudaFree(dB1);
	cudaFree(dkey);
	if (dS)
		cudaFree(dS);
	free(h), free(w), free(z), free(lp), free(d), free(dw), free(dh), free(dbh), free(g), free(g2);
	free(lab), free(b1);
}

/* n rows of k classes; bias: the logits without fc2's bias in, the bias
 * added by the kernel, the twin adding it as cnn_linear_fwd does; grad: the
 * loss's gradient in the same pass, against cnn_logsoftmax_nll_bwd, and
 * its sum over the rows (fc2's bias gradient) against the CPU's of that.
 * The sums are overwritten (garbage before) and the same bits twice. */
static void test_logsoftmax(int n, int k, int bias, int grad)
{
	size_t t = (size_t)n * k;
	float *z = malloc(t * 4), *lp = malloc(t * 4), *glp = malloc(t * 4);
	float *d = malloc(t * 4), *gd = malloc(t * 4), out[2], again[2], b[64];
	float gdb[64], gdb2[64];
	double cdb[64] = { 0 };
	char bn[64], m[200];
	uint8_t *lab = malloc(n);
	snprintf(bn, sizeof(bn), " of %d rows of %d%s%s", n, k, bias ? " with fc2's bias" : "",
		 grad ? " and the gradients" : "");
	for (size_t i = 0; i < t; i++)
		z[i] = 8.f * frand();
	for (int i = 0; i < n; i++)
		lab[i] = (uint8_t)(((frand() + 1.f) * 0.5f) * (float)k) % k;
	fill(b, k);
	float *dz = dev(z, t * 4), *dlp = dev(NULL, t * 4), *dout = dev(NULL, 8), *dd = dev(NULL, t * 4);
	float *db = dev(b, k * 4), *ddbias = dev(NULL, k * 4);
	cnn_bf16 *ddb16 = dev(NULL, t * 2);
	uint8_t *dlab = dev(lab, n);
	int ok = 1;
	for (int run = 0; run < 2; run++) {
		CK(cudaMemset(dout, 0x7f, 8));   /* overwritten, not added to */
		CK(cudaMemset(ddbias, 0x7f, k * 4));
		ok &= cnn_cuda_logsoftmax_nll_fwd(dz, bias ? db : NULL, dlab, n, k, dlp, dout,
						  grad ? dd : NULL, ddb16, 64.f, grad ? ddbias : NULL,
						  NULL) == 0;
		back(run ? again : out, dout, 8);
		back(run ? gdb2 : gdb, ddbias, k * 4);
	}
	snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s launches", bn);
	test_cond(m, ok);
	back(glp, dlp, t * 4);
	int correct = 0;
	if (bias)
		for (size_t i = 0; i < t; i++)
			z[i] += b[i % k];
	float loss = cnn_logsoftmax_nll_fwd(z, lab, n, k, lp, &correct);
	snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: log-probabilities equal the CPU's (expf "
		 "tolerance: CUDA's double exp and log)", bn);
	test_cond(m, compare("logp", glp, lp, t, T_EXPF) == 0);
	float cpu_sum = loss * n;
	snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: loss sum within the sum tolerance, the same "
		 "bits twice", bn);
	test_cond(m, compare("loss", &out[0], &cpu_sum, 1, T_SUM) == 0 && !memcmp(out, again, 8));
	snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: correct count equals the CPU's", bn);
	test_cond(m, (int)out[1] == correct);
	printf("# loss gpu %.7f cpu %.7f, correct %d of %d\n", out[0] / n, loss, correct, n);
	if (grad) {
		back(gd, dd, t * 4);
		cnn_logsoftmax_nll_bwd(lp, lab, n, k, 64.f, d);
		snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: the gradient equals cnn_logsoftmax_nll_bwd "
			 "(expf tolerance)", bn);
		test_cond(m, compare("dlogits", gd, d, t, T_EXPF) == 0);
		snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: the gradient's bf16 copy is it rounded "
			 "(exact)", bn);
		test_cond(m, bf16_copy_is(ddb16, gd, t));
		float cpu[64];
		for (int i = 0; i < n; i++)
			for (int j = 0; j < k; j++)
				cdb[j] += d[(size_t)i * k + j];
		for (int j = 0; j < k; j++)
			cpu[j] = (float)cdb[j];
		snprintf(m, sizeof(m), "logsoftmax_nll_fwd%s: fc2's bias gradient is the CPU's sum of "
			 "cnn_logsoftmax_nll_bwd's rows (sum tolerance), the same bits twice", bn);
		test_cond(m, compare("dbias", gdb, cpu, k, T_SUM) == 0 &&
			     !memcmp(gdb, gdb2, k * 4));
	}
	if (!bias && !grad) {
		test_cond("logsoftmax_nll_fwd refuses 65 classes",
			  cnn_cuda_logsoftmax_nll_fwd(dz, NULL, dlab, 10, 65, dlp, dout, NULL, NULL, 0.f,
						      NULL, NULL) == -1);
		test_cond("logsoftmax_nll_fwd refuses a gradient over 0 images",
			  cnn_cuda_logsoftmax_nll_fwd(dz, NULL, dlab, 10, 10, dlp, dout, dd, NULL, 0.f,
						      NULL, NULL) == -1);
		test_cond("logsoftmax_nll_fwd refuses a bias gradient without the loss's gradient",
			  cnn_cuda_logsoftmax_nll_fwd(dz, NULL, dlab, 10, 10, dlp, dout, NULL, NULL, 0.f,
						      ddbias, NULL) == -1);
	}
	cudaFree(dz), cudaFree(dlp), cudaFree(dout), cudaFree(dd), cudaFree(dlab), cudaFree(db);
	cudaFree(ddbias);
	cudaFree(ddb16);
	free(z), free(lp), free(glp), free(d), free(gd), free(lab);
}

/* The weights' other forms an optimizer step wrote (wop) against the
 * separate kernels on its own updated parameters dp, exactly: all of them
 * in bf16, conv2's packed, conv1's and conv2's in OHWI (the Net's). */
static int same_bytes(const void *d1, const void *d2, size_t bytes)
{
	unsigned char *a = malloc(bytes), *b = malloc(bytes);
	back(a, d1, bytes);
	back(b, d2, bytes);
	int same = !memcmp(a, b, bytes);
	free(a), free(b);
	return same;
}

static int wop_matches(const float *dp, size_t n, const struct cnn_cuda_wop *w, int pack_b16,
		       int ohwi_b16)
{
	size_t pn = 9 * (size_t)w->pack.oc * w->pack.c;
	void *want = dev(NULL, n * 4), *want2 = dev(NULL, pn * 4);
	int ok = cnn_cuda_to_bf16(dp, want, n, NULL) == 0 && same_bytes(want, w->wb, n * 2);
	size_t es = pack_b16 ? 2 : 4;
	ok = ok && (pack_b16 ? cnn_cuda_conv3_pack_bf16(dp + w->pack.off, w->pack.oc, w->pack.c, want,
							 want2, NULL) :
			       cnn_cuda_conv3_pack_tf32(dp + w->pack.off, w->pack.oc, w->pack.c, want,
							 want2, NULL)) == 0;
	for (int k = 0; ok && k < 2; k++)
		ok = same_bytes(k ? want2 : want,
				pack_b16 ? (const void *)w->pack.b[k] : (const void *)w->pack.f[k], pn * es);
	es = ohwi_b16 ? 2 : 4;
	for (int l = 0; ok && l < 2; l++) {
		int out = w->ohwi[l].out, in = w->ohwi[l].in, hw = w->ohwi[l].hw;
		const float *src = dp + w->ohwi[l].off;
		ok = (ohwi_b16 ? cnn_cuda_oihw_to_ohwi_bf16(src, out, in, hw, want, NULL) :
				 cnn_cuda_oihw_to_ohwi(src, out, in, hw, want, NULL)) == 0 &&
		     same_bytes(want, ohwi_b16 ? (const void *)w->ohwi[l].b : (const void *)w->ohwi[l].f,
				(size_t)out * in * hw * es);
	}
	cudaFree(want), cudaFree(want2);
	return ok;
}

/* SGD's groups of 4 (16-byte loads and stores where p, g and the momentum
 * are aligned) and the elements outside them: a range whose ends are not
 * multiples of 4, in three ranges or one, and the same update on arrays
 * one element off 16-byte alignment (an element a thread throughout) give
 * the same bits, and cnn_optim_step's values. */
static void test_sgd_edges(float mom)
{
	size_t n = 1003;
	struct cnn_optim o = { .lr = 0.05f, .momentum = mom, .weight_decay = 1e-4f };
	if (cnn_optim_init(&o, CNN_SGD, n) < 0) {
		test_cond("cnn_optim_init", 0);
		return;
	}
	float *p = malloc(n * 4), *g = malloc(n * 4), *got[3];
	fill(p, n);
	float lr = o.lr, *dlr = dev(&lr, 4), *dp[3], *dg[3], *db[3];
	for (int k = 0; k < 3; k++) {
		/* k 2: one element past an aligned start */
		size_t off = k == 2;
		dp[k] = dev(NULL, (n + 1) * 4), dg[k] = dev(NULL, (n + 1) * 4), db[k] = dev(NULL, (n + 1) * 4);
		CK(cudaMemset(db[k], 0, (n + 1) * 4));
		CK(cudaMemcpy(dp[k] + off, p, n * 4, cudaMemcpyHostToDevice));
		got[k] = malloc(n * 4);
	}
	int ok = 1;
	size_t cuts[4] = { 0, 5, 1001, n };
	for (int step = 0; step < 3; step++) {
		fill(g, n);
		for (int k = 0; k < 3; k++) {
			size_t off = k == 2;
			CK(cudaMemcpy(dg[k] + off, g, n * 4, cudaMemcpyHostToDevice));
			if (k == 1)
				for (int r = 0; r < 3; r++)
					ok &= cnn_cuda_sgd_step_range(dp[1], dg[1], db[1], cuts[r], cuts[r + 1], dlr,
								      mom, o.weight_decay, step == 0, NULL,
								      NULL) == 0;
			else
				ok &= cnn_cuda_sgd_step(dp[k] + off, dg[k] + off, db[k] + off, n, dlr, mom,
							o.weight_decay, step == 0, NULL, NULL) == 0;
		}
		cnn_optim_step(&o, p, g, lr);
	}
	for (int k = 0; k < 3; k++)
		back(got[k], dp[k] + (k == 2), n * 4);
	char d[160];
	snprintf(d, sizeof(d), "sgd (momentum %g) on 1003 parameters: whole, in ranges 0-5-1001-1003, "
		 "and off 16-byte alignment, the same bits, and cnn_optim_step's", mom);
	test_cond(d, ok && !memcmp(got[0], got[1], n * 4) && !memcmp(got[0], got[2], n * 4) &&
		     compare("sgd", got[0], p, n, T_UPDATE) == 0);
	for (int k = 0; k < 3; k++) {
		cudaFree(dp[k]), cudaFree(dg[k]), cudaFree(db[k]);
		free(got[k]);
	}
	cudaFree(dlr);
	free(p), free(g);
	cnn_optim_free(&o);
}

/* Three updates of each optimizer against cnn_optim_step (1 thread); and
 * the same updates writing the weights' other forms (cnn_cuda_wop) give
 * the same parameters, bit for bit, and those forms exactly. */
static void test_optim(enum cnn_optim_kind kind, float mom, float wd)
{
	size_t n = 1199882; /* the Net's parameters */
	struct cnn_optim o = { .lr = 0.05f, .momentum = mom, .weight_decay = wd };
	if (cnn_optim_init(&o, kind, n) < 0) {
		test_cond("cnn_optim_init", 0);
		return;
	}
	float *p = malloc(n * 4), *g = malloc(n * 4), *got = malloc(n * 4);
	fill(p, n);
	float *dp = dev(p, n * 4), *dg = dev(NULL, n * 4), *ds1 = dev(NULL, n * 4),
	      *ds2 = dev(NULL, n * 4), *dlr = dev(NULL, 4);
	CK(cudaMemset(ds1, 0, n * 4));
	CK(cudaMemset(ds2, 0, n * 4));
	/* the twin run with wop: its own parameters and state */
	float *wp = dev(p, n * 4), *ws1 = dev(NULL, n * 4), *ws2 = dev(NULL, n * 4);
	CK(cudaMemset(ws1, 0, n * 4));
	CK(cudaMemset(ws2, 0, n * 4));
	int pack_b16 = kind == CNN_ADADELTA || wd > 0.f, ohwi_b16 = !pack_b16;
	struct cnn_cuda_wop w = { .wb = dev(NULL, n * 2),
				  .pack = { .off = 320, .oc = 64, .c = 32 },
				  .ohwi = { { .off = 0, .out = 32, .in = 1, .hw = 9 },
					    { .off = 320, .out = 64, .in = 32, .hw = 9 } } };
	for (int k = 0; k < 2; k++) {
		if (pack_b16)
			w.pack.b[k] = dev(NULL, 18432 * 2);
		else
			w.pack.f[k] = dev(NULL, 18432 * 4);
		if (ohwi_b16)
			w.ohwi[k].b = dev(NULL, (size_t)w.ohwi[k].out * w.ohwi[k].in * 9 * 2);
		else
			w.ohwi[k].f = dev(NULL, (size_t)w.ohwi[k].out * w.ohwi[k].in * 9 * 4);
	}
	int ok = 1, same, forms = 1;
	for (int step = 0; step < 3; step++) {
		float lr = kind == CNN_SGD ? 0.05f / (step + 1) : 1.f;
		fill(g, n);
		CK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dlr, &lr, 4, cudaMemcpyHostToDevice));
		int rv = kind == CNN_SGD ?
			cnn_cuda_sgd_step(dp, dg, ds1, n, dlr, mom, wd, step == 0, NULL, NULL) :
			cnn_cuda_adadelta_step(dp, dg, ds1, ds2, n, dlr, o.rho, o.eps, wd, NULL, NULL);
		/* the twin split as a training step splits it: the linear
		 * layers' first (from cut, the convolutions' 18,816 before),
		 * then the rest */
		size_t cut = 18816, r[2][2] = { { cut, n }, { 0, cut } };
		int rw = 0;
		for (int k = 0; k < 2; k++)
			rw |= kind == CNN_SGD ?
				cnn_cuda_sgd_step_range(wp, dg, ws1, r[k][0], r[k][1], dlr, mom, wd,
							step == 0, &w, NULL) :
				cnn_cuda_adadelta_step_range(wp, dg, ws1, ws2, r[k][0], r[k][1], dlr,
							     o.rho, o.eps, wd, &w, NULL);
		ok &= rv == 0 && rw == 0;
		cnn_optim_step(&o, p, g, lr);
		forms &= wop_matches(wp, n, &w, pack_b16, ohwi_b16);
	}
	back(got, dp, n * 4);
	char d[160];
	snprintf(d, sizeof(d), "%s (momentum %g, weight decay %g): 3 updates equal cnn_optim_step",
		 kind == CNN_SGD ? "sgd" : "adadelta", mom, wd);
	test_cond(d, ok && compare(kind == CNN_SGD ? "sgd" : "adadelta", got, p, n,
				   T_UPDATE) == 0);
	float *got2 = malloc(n * 4);
	back(got2, wp, n * 4);
	same = !memcmp(got, got2, n * 4);
	snprintf(d, sizeof(d), "%s (momentum %g, weight decay %g) in two ranges with wop (bf16 copy, "
		 "packs %s, OHWI %s): the same parameters bit for bit, each form exact",
		 kind == CNN_SGD ? "sgd" : "adadelta", mom, wd, pack_b16 ? "bf16" : "fp32",
		 ohwi_b16 ? "bf16" : "fp32");
	test_cond(d, ok && same && forms);
	if (mom == 0.f && wd == 0.f) {
		int bad = kind == CNN_SGD ?
			cnn_cuda_sgd_step_range(wp, dg, ws1, 9, 8, dlr, mom, wd, 0, NULL, NULL) :
			cnn_cuda_adadelta_step_range(wp, dg, ws1, ws2, 9, 8, dlr, o.rho, o.eps, wd,
						     NULL, NULL);
		snprintf(d, sizeof(d), "%s: parameters 9 to 8 refused, named",
			 kind == CNN_SGD ? "sgd" : "adadelta");
		test_cond(d, bad < 0 && strstr(cnn_cuda_last_error(), "parameters 9 to 8: expected "
					       "the first at most the end"));
	}
	cudaFree(dp), cudaFree(dg), cudaFree(ds1), cudaFree(ds2), cudaFree(dlr);
	cudaFree(wp), cudaFree(ws1), cudaFree(ws2), cudaFree(w.wb);
	for (int k = 0; k < 2; k++) {
		cudaFree(w.pack.f[k]), cudaFree(w.pack.b[k]);
		cudaFree(w.ohwi[k].f), cudaFree(w.ohwi[k].b);
	}
	cnn_optim_free(&o);
	free(p), free(g), free(got), free(got2);
}

/* k > 0: fc1's bias (rows of k) and ReLU first, twin cnn_bias_relu of
 * each row then cnn_dropout_fwd, and the bf16 copy (fc2's operand); p 0:
 * no dropout, the bias and ReLU alone (an evaluation's) */
static void test_dropout(size_t n, float p, int k)
{
	cnn_bf16 *dxb = dev(NULL, n * 2);
	float *x = malloc(n * 4), *got = malloc(n * 4), *b = malloc((k > 0 ? k : 1) * 4);
	fill(x, n);
	fill(b, k > 0 ? k : 1);
	uint64_t key = cnn_dropout_key(42, 1234, 3, 2);
	float *dx = dev(x, n * 4), *db = dev(b, (k > 0 ? k : 1) * 4);
	uint64_t *dkey = dev(&key, 8);
	char d[160];
	snprintf(d, sizeof(d), "dropout_fwd of %zu elements, p %g%s, launches", n, p,
		 k > 0 ? ", with bias and ReLU" : "");
	test_cond(d, cnn_cuda_dropout_fwd(dx, k > 0 ? db : NULL, k, n, p, dkey, k > 0 ? dxb : NULL,
					  NULL) == 0);
	back(got, dx, n * 4);
	for (size_t r = 0; k > 0 && r < n / k; r++)
		cnn_bias_relu(x + r * k, b, k, 1);
	if (p > 0.f)
		cnn_dropout_fwd(x, n, p, key);
	size_t zeros = 0;
	for (size_t i = 0; i < n; i++)
		zeros += x[i] == 0.f;
	snprintf(d, sizeof(d), "dropout_fwd (%zu elements%s) draws cnn_dropout_fwd's mask (exact)", n,
		 k > 0 ? ", after cnn_bias_relu" : "");
	test_cond(d, compare("dropout", got, x, n, T_EXACT) == 0);
	if (k > 0)
		test_cond("... and its bf16 copy is that rounded (exact)", bf16_copy_is(dxb, x, n));
	printf("#   %.3f of the elements zeroed (p %g)\n", (double)zeros / n, p);
	cudaFree(dx), cudaFree(dkey), cudaFree(db), cudaFree(dxb);
	free(x), free(got), free(b);
}

/* A CIFAR-like set (3 channels, odd mean/std) gathered at shuffled indices. */
static void test_gather(void)
{
	struct cnn_dataset d = { .n = 500, .c = 3, .h = 32, .w = 32, .classes = 10,
				 .mean = { 0.49f, 0.48f, 0.45f }, .std = { 0.25f, 0.24f, 0.26f } };
	size_t img = (size_t)d.c * d.h * d.w;
	int n = 129;
	d.x = malloc(d.n * img);
	d.y = malloc(d.n);
	for (size_t i = 0; i < d.n * img; i++)
		d.x[i] = (uint8_t)(i * 2654435761u >> 24);
	for (int i = 0; i < d.n; i++)
		d.y[i] = (uint8_t)(i % 10);
	uint32_t idx[129];
	for (int i = 0; i < n; i++)
		idx[i] = (uint32_t)((i * 7919u) % d.n);
	float *x = malloc(n * img * 4), *got = malloc(n * img * 4);
	uint8_t y[129], gy[129];
	struct cnn_cuda_norm nm;
	cnn_cuda_norm_set(&nm, d.c, d.mean, d.std);
	uint8_t *dxs = dev(d.x, d.n * img), *dys = dev(d.y, d.n), *dyo = dev(NULL, n);
	uint32_t *didx = dev(idx, sizeof(idx));
	float *dxo = dev(NULL, n * img * 4);
	test_cond("gather launches",
		  cnn_cuda_gather(dxs, dys, didx, n, d.c, d.h, d.w, &nm, dxo, dyo, NULL, NULL) == 0);
	back(got, dxo, n * img * 4);
	back(gy, dyo, n);
	cnn_data_gather(&d, idx, n, x, y);
	test_cond("gather equals cnn_data_gather: images (fma tolerance)",
		  compare("gather", got, x, n * img, T_FMA) == 0);
	test_cond("gather equals cnn_data_gather: labels", memcmp(gy, y, n) == 0);
	/* with the bf16 copy: x the same bits, xb those of cnn_cuda_to_bf16(x) */
	float *dx2 = dev(NULL, n * img * 4), *got2 = malloc(n * img * 4);
	cnn_bf16 *dxb = dev(NULL, n * img * 2), *dwant = dev(NULL, n * img * 2);
	test_cond("gather with xb launches",
		  cnn_cuda_gather(dxs, dys, didx, n, d.c, d.h, d.w, &nm, dx2, dyo, dxb, NULL) == 0 &&
		  cnn_cuda_to_bf16(dx2, dwant, n * img, NULL) == 0);
	back(got2, dx2, n * img * 4);
	test_cond("gather with xb: x the same bits, xb cnn_cuda_to_bf16's of it (exact)",
		  !memcmp(got, got2, n * img * 4) && same_bytes(dxb, dwant, n * img * 2));
	cudaFree(dx2), cudaFree(dxb), cudaFree(dwant);
	free(got2);
	cudaFree(dxs), cudaFree(dys), cudaFree(dyo), cudaFree(didx), cudaFree(dxo);
	free(d.x), free(d.y), free(x), free(got);
}

/* conv1's forward gathering its batch itself: the bits of the gather then
 * the forward, in every output it has (conv1's output, the batch in fp32
 * and bf16, the labels: each pixel written, none left as the allocation's
 * fill), each precision and layout, an image of odd size too */
static void test_conv1_gather(int h, int w)
{
	int nd = 300, nimg = 37, oc = 5;
	size_t img = (size_t)h * w, ny = (size_t)nimg * oc * (h - 2) * (w - 2), nx = nimg * img;
	uint8_t *xs = malloc(nd * img), ys[300];
	for (size_t i = 0; i < nd * img; i++)
		xs[i] = (uint8_t)(i * 2654435761u >> 24);
	for (int i = 0; i < nd; i++)
		ys[i] = (uint8_t)(i * 7 % 10);
	uint32_t idx[37];
	for (int i = 0; i < nimg; i++)
		idx[i] = (uint32_t)((i * 7919u + 11) % nd);
	float wt[45], bias[5], mean = 0.2860f, sd = 0.3530f;
	fill(wt, 45);
	fill(bias, 5);
	struct cnn_cuda_norm nm;
	cnn_cuda_norm_set(&nm, 1, &mean, &sd);
	uint8_t *dxs = dev(xs, nd * img), *dys = dev(ys, nd);
	uint32_t *didx = dev(idx, sizeof(idx));
	float *dw = dev(wt, sizeof(wt)), *db = dev(bias, sizeof(bias));
	cnn_bf16 *dwb = dev(NULL, 45 * 2);
	CK(cnn_cuda_to_bf16(dw, dwb, 45, NULL) == 0 ? cudaSuccess : cudaErrorUnknown);
	for (int bf = 0; bf < 2; bf++)
		for (int nhwc = 0; nhwc < 2; nhwc++) {
			size_t es = bf ? 2 : 4;
			void *ry = dev(NULL, ny * es), *fy = dev(NULL, ny * es);
			float *rx = dev(NULL, nx * 4), *fx = dev(NULL, nx * 4);
			cnn_bf16 *rxb = dev(NULL, nx * 2), *fxb = dev(NULL, nx * 2);
			uint8_t *rl = dev(NULL, nimg), *fl = dev(NULL, nimg);
			int ok = cnn_cuda_gather(dxs, dys, didx, nimg, 1, h, w, &nm, rx, rl, bf ? rxb : NULL,
						 NULL) == 0;
			ok &= (bf ? cnn_cuda_conv1_fwd_bf16(rxb, dwb, db, nimg, h, w, oc, nhwc, ry, NULL) :
				    cnn_cuda_conv1_fwd(rx, dw, db, nimg, h, w, oc, nhwc, ry, NULL)) == 0;
			ok &= (bf ? cnn_cuda_conv1_fwd_gather_bf16(dxs, dys, didx, &nm, dwb, db, nimg, h, w,
								   oc, nhwc, fy, fx, fxb, fl, NULL) :
				    cnn_cuda_conv1_fwd_gather(dxs, dys, didx, &nm, dw, db, nimg, h, w, oc,
							      nhwc, fy, fx, fl, NULL)) == 0;
			char d[200];
			snprintf(d, sizeof(d), "conv1 forward gathering its batch (%dx%d, %s, %s): conv1's "
				 "output, the batch%s and the labels, the bits of gather then forward", h, w,
				 bf ? "bf16" : "fp32", nhwc ? "NHWC" : "NCHW", bf ? " (fp32, bf16)" : "");
			test_cond(d, ok && same_bytes(ry, fy, ny * es) && same_bytes(rx, fx, nx * 4) &&
					     (!bf || same_bytes(rxb, fxb, nx * 2)) && same_bytes(rl, fl, nimg));
			cudaFree(ry), cudaFree(fy), cudaFree(rx), cudaFree(fx), cudaFree(rxb);
			cudaFree(fxb), cudaFree(rl), cudaFree(fl);
		}
	if (h == 28) {
		float *y = dev(NULL, 64), *x = dev(NULL, 64);
		uint8_t *l = dev(NULL, 4);
		int rv = cnn_cuda_conv1_fwd_gather(dxs, dys, didx, &nm, dw, db, 1, 2, 9, oc, 0, y, x, l,
						   NULL);
		test_cond("conv1 forward gathering images of 2x9: refused, named",
			  rv < 0 && strstr(cnn_cuda_last_error(), "cnn_cuda_conv1_fwd_gather: images of "
				   "2x9: expected 3x3 or larger"));
		cudaFree(y), cudaFree(x), cudaFree(l);
	}
	cudaFree(dxs), cudaFree(dys), cudaFree(didx), cudaFree(dw), cudaFree(db), cudaFree(dwb);
	free(xs);
}

int main(void)
{
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("ok 1 - CUDA kernels vs their CPU twins # SKIP no GPU here (cudaGetDeviceCount: %s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		printf("1..1\n");
		fprintf(stderr, "test_cuda_kernels: SKIPPED: no GPU (%s); the kernels were compiled, not run\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 0;
	}
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
#ifdef CNN_CUEMU
	printf("# %s: tests/cuemu/cuemu.h says what this proves and what only a GPU can\n", prop.name);
	const char *order = getenv("CUEMU_ORDER");
	if (!order || !*order) {
		order = "check (each launch forward and reversed, the bytes compared)";
		cuemu_set_order("check");
	}
	printf("# threads' order: %s\n", order);
#else
	printf("# GPU 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
#endif
	for (int bf16 = 0; bf16 < 2; bf16++) {
		test_bias_relu(bf16);
		/* 24x24, 25x24: four windows a thread (pw a multiple of 4; 25:
		 * the backward's one block a thread, h odd); 20x20: a window a
		 * thread, rows in pairs; 7x9: one element a load */
		test_maxpool(24, 24, bf16, 0);
		test_maxpool(25, 24, bf16, 0);
		test_maxpool(20, 20, bf16, 0);
		test_maxpool(7, 9, bf16, 0); /* odd sizes: the last row and column are dropped */
		test_maxpool(24, 24, bf16, 1);
		test_maxpool(7, 9, bf16, 1);
		test_maxpool(24, 24, bf16, 2);
		test_maxpool(25, 24, bf16, 2);
		test_maxpool(20, 20, bf16, 2);
		test_maxpool(7, 9, bf16, 2); /* outputs not a multiple of 4: a short last draw */
		test_bias_relu_nhwc(8, 64, 24 * 24, bf16);
		test_bias_relu_nhwc(3, 5, 7, bf16);
		/* tiles of 5 pooled rows (24x24: bands of 5, 5, 2), of all 3
		 * (7x9: the odd last row and column zero); 1100 channels: not
		 * one row in a tile, a thread an element.  The backward's
		 * quad stores (4 channels a thread, the pixel stepped): 64
		 * channels, 8 (two threads a pixel, a step of 128 pixels across
		 * rows of 9, odd edges) and 32 (13x11: bands of 6, odd edges);
		 * 3 channels the element a thread */
		test_maxpool_nhwc(8, 64, 24, 24, bf16, 0);
		test_maxpool_nhwc(5, 3, 7, 9, bf16, 0);
		test_maxpool_nhwc(3, 8, 7, 9, bf16, 0);
		test_maxpool_nhwc(4, 32, 13, 11, bf16, 0);
		test_maxpool_nhwc(2, 1100, 8, 9, bf16, 0);
		test_maxpool_nhwc(8, 64, 24, 24, bf16, 1);
		test_maxpool_nhwc(5, 3, 7, 9, bf16, 1);
		test_maxpool_nhwc(8, 64, 24, 24, bf16, 2);
		test_maxpool_nhwc(5, 3, 7, 9, bf16, 2);
		test_maxpool_nhwc(2, 1100, 8, 9, bf16, 2);
		test_weights_nhwc(32, 1, bf16);
		test_weights_nhwc(64, 32, bf16);
	}
	test_logsoftmax(1000, 10, 0, 0);
	test_logsoftmax(1000, 10, 1, 1);
	test_logsoftmax(64, 10, 1, 1);  /* the training batch: a row per thread */
	test_logsoftmax(3001, 10, 0, 1); /* more rows than threads: strided */
	test_logsoftmax(5, 64, 1, 1);   /* more classes than rows: a thread a column */
	test_logsoftmax(40, 3, 0, 1);   /* groups of 3 that leave threads out */
	test_fc2_fused(64, 128, 10, 1);  /* the training batch of 64, the Net's shapes */
	test_fc2_fused(64, 128, 10, 0);  /* h as given */
	test_fc2_fused(8, 128, 10, 1);   /* fewer rows than the groups of columns */
	test_fc2_fused(1500, 128, 10, 1);/* 47 blocks, the last of 28 rows */
	test_fc2_fused(1024, 128, 10, 1);/* the training batch of 1024: 32 blocks */
	test_fc2_fused(33, 101, 7, 1);   /* two blocks, the second of one row; groups that leave
					   threads out */
	test_fc2_fused(30, 301, 5, 1);   /* 13 rows a block: the later blocks' rows start inside a
					   group of 4 dropout draws */
	test_fc2_fused(9, 1000, 3, 1);   /* 4 rows a block, more columns than threads */
	test_optim(CNN_SGD, 0.9f, 0.f);
	test_optim(CNN_SGD, 0.9f, 1e-4f);
	test_optim(CNN_SGD, 0.f, 0.f);
	test_sgd_edges(0.9f);
	test_sgd_edges(0.f);
	test_optim(CNN_ADADELTA, 0.f, 0.f);
	test_dropout(64 * 12 * 12 * 8, 0.25f, 0); /* dropout1 of a batch of 8 */
	test_dropout(128 * 7 + 3, 0.5f, 0);       /* a tail shorter than 4 */
	test_dropout(128 * 8, 0.5f, 128);         /* fc1's: its bias and ReLU first */
	test_dropout(11 * 7, 0.5f, 7);            /* rows of 7, a short last group of 4 */
	test_dropout(128 * 8, 0.f, 128);          /* an evaluation: bias and ReLU only */
	test_gather();
	test_conv1_gather(28, 28);
	test_conv1_gather(13, 7);
	test_relu_bwd();
	for (int nhwc = 0; nhwc < 2; nhwc++)
		for (int b16 = 0; b16 < 2; b16++) {
			test_conv1(8, 28, 28, 32, nhwc, b16);
			test_conv1(5, 7, 9, 3, nhwc, b16);
			/* NHWC through shared memory, 189 pixels (a short block);
			 * 64 channels, 8 a store */
			test_conv1(3, 9, 11, 12, nhwc, b16);
			test_conv1(2, 28, 28, 64, nhwc, b16);
		}
	test_conv1(37, 28, 28, 32, 0, 0);   /* chunks of 7 images: a short last one */
	int tc = cnn_cuda_tensor_cores();
	for (int nhwc = 0; nhwc < 2 && tc == 1; nhwc++)
		for (int b16 = 0; b16 < 2; b16++) {
			/* conv2's shape: 9 pixel tiles, the last one short; 5
			 * weight-gradient splits of 256 pixels, the last short */
			test_conv3(2, 32, 26, 26, 64, nhwc, b16);
			/* fewer channels than a tile; more than one tile of each */
			test_conv3(3, 5, 7, 9, 6, nhwc, b16);
			test_conv3(2, 40, 6, 5, 70, nhwc, b16);
			/* as many weight-gradient splits as the device runs at
			 * once (cuemu: 10 of 256 pixels), so each of the sum's
			 * 8 ways adds one or more */
			test_conv3(40, 3, 10, 10, 5, nhwc, b16);
		}
	for (int b16 = 0; b16 < 2; b16++) {
		test_conv3_pack(64, 32, b16);
		test_conv3_pack(5, 7, b16);
	}
	/* cuemu: 32 images of 81 pixels make 9 splits, 31 make 10 */
	if (tc == 1)
		test_conv3_scratch(32, 3, 11, 11, 5);
	else
		test_skip("conv2's tensor-core kernels (conv3_fwd, _dgrad, _wgrad) against their twins",
			  "this GPU is older than compute capability 8.0 (no TF32 or bf16 tensor cores)");
#ifdef CNN_CUEMU
	/* what the host code does on a T4 */
	cuemu_set_cc(7, 5);
	test_conv3_refused();
	cuemu_set_cc(9, 0);
#else
	if (tc == 0)
		test_conv3_refused();
#endif
	test_bias_grad(0);
	test_bias_grad_gated(0);
	test_bias_grad_gated(1);
	test_bias_grad(1);
	test_bf16_convert();
	return test_report();
}
