/* The 2x2 max-pool of one image in oneDNN's 8-channel blocks (nChw8c, its
 * layout on AVX2), forward and backward, in AVX2 registers: 8 output
 * pixels' windows at a time, each a vector of the block's 8 channels,
 * turned with an 8x8 transpose into 8 channels' runs of 8 pixels in the
 * plain NCHW layout the pool's output and winners have (and back for the
 * backward).  The same selects, in the same order, as conv_dnnl.c's
 * portable loops, so the same bits; those loops do every other shape. */
#include <stddef.h>
#include <stdint.h>

#include "pool_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* r[0..7] rows of 8 -> columns. */
AVX2 static inline void transpose8(__m256 r[8])
{
	__m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
	__m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
	__m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
	__m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
	__m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
	__m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
	__m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
	__m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
	__m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
	r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
	r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
	r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
	r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
	r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
	r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
	r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
	r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Whether this CPU and shape take the vector path: even sides (no row or
 * column the pool leaves out), a whole number of 8-pixel runs a plane. */
static int fits(int C, int H, int W)
{
	return __builtin_cpu_supports("avx2") && C % 8 == 0 && !((H | W) & 1) &&
	       ((size_t)(H / 2) * (W / 2)) % 8 == 0;
}

/* The window of output pixel q of block `blk` (the image's cb): its top
 * left input vector. */
static inline size_t window(int H, int W, int pw, size_t blk, size_t q)
{
	size_t py = q / (size_t)pw, px = q % (size_t)pw;
	return ((blk * (size_t)H + 2 * py) * (size_t)W + 2 * px) * 8;
}

AVX2 static void fwd(const float *y, int C, int H, int W, int n_i, float *p, uint8_t *arg)
{
	int pw = W / 2, nb = C / 8;
	size_t plane = (size_t)(H / 2) * pw, row = (size_t)W * 8;
	const __m256 one = _mm256_set1_ps(1.f), two = _mm256_set1_ps(2.f), three = _mm256_set1_ps(3.f);
	for (int cb = 0; cb < nb; cb++) {
		size_t blk = (size_t)n_i * nb + cb, o = ((size_t)n_i * C + (size_t)cb * 8) * plane;
		for (size_t q0 = 0; q0 < plane; q0 += 8) {
			__m256 m[8], a[8];
			for (int k = 0; k < 8; k++) {
				const float *r0 = y + window(H, W, pw, blk, q0 + k), *r1 = r0 + row;
				__m256 v1 = _mm256_loadu_ps(r0 + 8), v2 = _mm256_loadu_ps(r1),
				       v3 = _mm256_loadu_ps(r1 + 8), mk = _mm256_loadu_ps(r0), gt;
				/* strict >, in window order: the first maximum wins */
				gt = _mm256_cmp_ps(v1, mk, _CMP_GT_OQ);
				a[k] = _mm256_and_ps(gt, one);
				mk = _mm256_blendv_ps(mk, v1, gt);
				gt = _mm256_cmp_ps(v2, mk, _CMP_GT_OQ);
				a[k] = _mm256_blendv_ps(a[k], two, gt);
				mk = _mm256_blendv_ps(mk, v2, gt);
				gt = _mm256_cmp_ps(v3, mk, _CMP_GT_OQ);
				a[k] = _mm256_blendv_ps(a[k], three, gt);
				m[k] = _mm256_blendv_ps(mk, v3, gt);
			}
			transpose8(m);
			transpose8(a);
			for (int j = 0; j < 8; j++) {
				size_t at = o + (size_t)j * plane + q0;
				_mm256_storeu_ps(p + at, m[j]);
				__m256i w = _mm256_cvttps_epi32(a[j]);
				__m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
				_mm_storel_epi64((__m128i *)(arg + at), _mm_packus_epi16(h, h));
			}
		}
	}
}

AVX2 static void bwd(const float *dp, const float *p, const uint8_t *arg, int C, int H, int W,
		     int n_i, float *dy)
{
	int pw = W / 2, nb = C / 8;
	size_t plane = (size_t)(H / 2) * pw, row = (size_t)W * 8;
	const __m256 zero = _mm256_setzero_ps();
	const __m256i w0 = _mm256_setzero_si256(), w1 = _mm256_set1_epi32(1), w2 = _mm256_set1_epi32(2),
		      w3 = _mm256_set1_epi32(3);
	for (int cb = 0; cb < nb; cb++) {
		size_t blk = (size_t)n_i * nb + cb, o = ((size_t)n_i * C + (size_t)cb * 8) * plane;
		for (size_t q0 = 0; q0 < plane; q0 += 8) {
			__m256 g[8], a[8];
			for (int j = 0; j < 8; j++) {
				size_t at = o + (size_t)j * plane + q0;
				/* the ReLU before the pool: a gradient only where the pooled value is positive */
				__m256 pos = _mm256_cmp_ps(_mm256_loadu_ps(p + at), zero, _CMP_GT_OQ);
				g[j] = _mm256_and_ps(pos, _mm256_loadu_ps(dp + at));
				a[j] = _mm256_castsi256_ps(
					_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(arg + at))));
			}
			transpose8(g);
			transpose8(a);
			for (int k = 0; k < 8; k++) {
				float *r0 = dy + window(H, W, pw, blk, q0 + k), *r1 = r0 + row;
				__m256i w = _mm256_castps_si256(a[k]);
				_mm256_storeu_ps(r0, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(w, w0)), g[k]));
				_mm256_storeu_ps(r0 + 8, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(w, w1)), g[k]));
				_mm256_storeu_ps(r1, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(w, w2)), g[k]));
				_mm256_storeu_ps(r1 + 8, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(w, w3)), g[k]));
			}
		}
	}
}

int cnn_pool8_avx2_fwd(const float *y, int C, int H, int W, int n_i, float *p, uint8_t *arg)
{
	if (!fits(C, H, W))
		return -1;
	fwd(y, C, H, W, n_i, p, arg);
	return 0;
}

int cnn_pool8_avx2_bwd(const float *dp, const float *p, const uint8_t *arg, int C, int H, int W,
		       int n_i, float *dy)
{
	if (!fits(C, H, W))
		return -1;
	bwd(dp, p, arg, C, H, W, n_i, dy);
	return 0;
}

#else

int cnn_pool8_avx2_fwd(const float *y, int C, int H, int W, int n_i, float *p, uint8_t *arg)
{
	(void)y, (void)C, (void)H, (void)W, (void)n_i, (void)p, (void)arg;
	return -1;
}

int cnn_pool8_avx2_bwd(const float *dp, const float *p, const uint8_t *arg, int C, int H, int W,
		       int n_i, float *dy)
{
	(void)dp, (void)p, (void)arg, (void)C, (void)H, (void)W, (void)n_i, (void)dy;
	return -1;
}

#endif
