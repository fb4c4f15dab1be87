/* The golden file's shared half (tests/golden/net_step.golden, written by
 * make_golden.py): the integer hash that fills parameters and images the
 * same way in C and Python, and a reader of its "key [name] numbers"
 * lines.  Used by the CPU (test_cnn.c) and GPU (test_gpu_step.c) tests. */
#ifndef DDP_TEST_GOLDEN_H
#define DDP_TEST_GOLDEN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* The hash both this file and make_golden.py use. */
static inline void hashed(float *out, size_t n, uint64_t salt, float scale)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t u = ((i + salt * 1000003ull) * 2654435761ull) & 0xffffffffull;
		float v = (float)(u >> 8) / 8388608.f - 1.f;
		out[i] = v * scale;
	}
}

static inline void golden_params(struct cnn_model *m)
{
	const int fan_in[P_COUNT] = { 9, 9, 288, 288, 9216, 9216, 128, 128 };
	for (int t = 0; t < P_COUNT; t++)
		hashed(m->params + m->t[t].off, m->t[t].n, 100 + (uint64_t)t,
		       1.f / sqrtf((float)fan_in[t]));
}

/* Find "key [name]" and read up to max numbers after it. */
static inline int golden_get(FILE *f, const char *key, const char *name, double *v, int max)
{
	char line[4096];
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *tok = strtok(p, " \n");
		if (!tok || strcmp(tok, key) != 0)
			continue;
		if (name) {
			tok = strtok(NULL, " \n");
			if (!tok || strcmp(tok, name) != 0)
				continue;
		}
		int n = 0;
		while (n < max && (tok = strtok(NULL, " \n")))
			v[n++] = strtod(tok, NULL);
		return n;
	}
	return -1;
}

/* The golden file: GOLDEN (its absolute path where the test was built),
 * else tests/golden/net_step.golden under the working directory (a test
 * binary carried to another machine, run from the repository root). */
static inline FILE *golden_open(const char *built_path)
{
	FILE *f = fopen(built_path, "r");
	return f ? f : fopen("tests/golden/net_step.golden", "r");
}

#endif
