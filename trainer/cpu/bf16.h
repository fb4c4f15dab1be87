/* bfloat16 on the host: the upper 16 bits of a float, rounded to nearest
 * even.  The CPU twins of the GPU path's bf16 stores (--precision bf16),
 * for its tests; CUDA's __float2bfloat16_rn rounds the same way (a NaN
 * stays a NaN, though not necessarily with the same payload). */
#ifndef CNN_BF16_H
#define CNN_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t cnn_bf16_from_float(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)        /* NaN: keep it one, quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);            /* ties to even; overflow gives inf */
	return (uint16_t)(u >> 16);
}

static inline float cnn_bf16_to_float(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* x[i] = float(bf16(x[i])): what a value is after a bf16 store. */
static inline void cnn_bf16_round(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = cnn_bf16_to_float(cnn_bf16_from_float(x[i]));
}

#endif
