/* Random numbers for the trainer: a splitmix64 stream for initialization
 * and shuffling, and a counter-based hash for dropout masks, so a mask is
 * a pure function of (seed, step, rank, layer, index) and a resumed run
 * draws exactly what the uninterrupted one would have. */
#ifndef CNN_RNG_H
#define CNN_RNG_H

#include <stdint.h>

static inline uint64_t cnn_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Next value of the stream whose state is *s. */
static inline uint64_t cnn_rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return cnn_mix64(*s);
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float cnn_rng_uniform(uint64_t *s)
{
	return (float)(cnn_rng_next(s) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n) without modulo bias worth noticing (n < 2^32). */
static inline uint32_t cnn_rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((cnn_rng_next(s) >> 32) * (uint64_t)n) >> 32);
}

/* The key of a dropout mask (ops.h cnn_dropout_fwd and its CUDA twin). */
static inline uint64_t cnn_dropout_key(uint64_t seed, uint64_t step, int rank, int layer)
{
	return cnn_mix64(seed ^ cnn_mix64(step * 0x100000001b3ull + (uint64_t)rank * 0x9e37ull +
					  (uint64_t)layer));
}

#endif
