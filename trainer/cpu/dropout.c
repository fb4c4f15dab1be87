/* The dropout mask (ops.h cnn_dropout_fwd): each group of 4 elements takes
 * 16 bits apiece of one hash of key + its first index, so the CUDA twin
 * draws the same mask with a thread per group.  On AVX2 four hashes at
 * once, in 64-bit lanes: their 16 16-bit fields are the 16 elements' draws
 * in order; the same bits as the scalar loop, which stays the reference
 * and does the rest. */
#include <stddef.h>
#include <stdint.h>

#include "ops.h"
#include "rng.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DROPOUT_AVX2 1

/* z * c modulo 2^64 in each lane (AVX2 multiplies 32 x 32 bits). */
__attribute__((target("avx2"))) static inline __m256i mul64(__m256i z, uint64_t c)
{
	__m256i cl = _mm256_set1_epi64x((long long)(c & 0xffffffffu));
	__m256i ch = _mm256_set1_epi64x((long long)(c >> 32));
	__m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(z, 32), cl),
					 _mm256_mul_epu32(z, ch));
	return _mm256_add_epi64(_mm256_mul_epu32(z, cl), _mm256_slli_epi64(cross, 32));
}

/* cnn_mix64 of each lane. */
__attribute__((target("avx2"))) static inline __m256i mix64(__m256i z)
{
	z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ull);
	z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebull);
	return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

/* The whole groups of 16 elements; returns how many elements it did. */
__attribute__((target("avx2"))) static size_t dropout_avx2(float *x, size_t n, uint32_t thresh,
							    float scale, uint64_t key)
{
	__m256 vs = _mm256_set1_ps(scale);
	__m256i below = _mm256_set1_epi32((int)thresh - 1);   /* draw >= thresh: draw > thresh-1 */
	__m256i idx = _mm256_add_epi64(_mm256_set1_epi64x((long long)key), _mm256_setr_epi64x(0, 4, 8, 12));
	__m256i sixteen = _mm256_set1_epi64x(16);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i r = mix64(idx);
		idx = _mm256_add_epi64(idx, sixteen);
		__m256i d0 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(r));
		__m256i d1 = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(r, 1));
		__m256 k0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(d0, below));
		__m256 k1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(d1, below));
		_mm256_storeu_ps(x + i, _mm256_and_ps(k0, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs)));
		_mm256_storeu_ps(x + i + 8, _mm256_and_ps(k1, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vs)));
	}
	return i;
}
#endif

/* Elements [i, n) one group of 4 at a time; i a multiple of 4. */
static void dropout_scalar(float *x, size_t i, size_t n, uint32_t thresh, float scale, uint64_t key)
{
	for (; i < n; i += 4) {
		uint64_t r = cnn_mix64(key + i);
		for (size_t j = 0; j < 4 && i + j < n; j++)
			x[i + j] = ((r >> (16 * j)) & 0xffff) >= thresh ? x[i + j] * scale : 0.f;
	}
}

void cnn_dropout_fwd(float *x, size_t n, float p, uint64_t key)
{
	uint32_t thresh = (uint32_t)(p * 65536.f);
	float scale = 1.f / (1.f - p);
	size_t done = 0;
#ifdef DROPOUT_AVX2
	if (__builtin_cpu_supports("avx2"))
		done = dropout_avx2(x, n, thresh, scale, key);
#endif
	dropout_scalar(x, done, n, thresh, scale, key);
}
