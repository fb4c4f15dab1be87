/* The GPU path's automatic choices from measured times (choose.h). */
#include "cuda/choose.h"

int cnn_choose_faster(float base_ms, float other_ms)
{
	return other_ms >= 0.f && (base_ms < 0.f || other_ms < base_ms);
}

int cnn_choose_least(const float *ms, int n)
{
	int best = -1;
	for (int i = 0; i < n; i++)
		if (ms[i] >= 0.f && (best < 0 || ms[i] < ms[best]))
			best = i;
	return best;
}

int cnn_choose_bwd(const float dg[2][2], const float wg[2], float pool_bwd, int *conv1)
{
	int best = -1;
	float least = 0.f;
	/* the project's kernels first: a tie goes to fewer launches */
	for (int c1 = 1; c1 >= 0; c1--)
		for (int d = 1; d >= 0; d--)
			for (int w = 1; w >= 0; w--) {
				if (dg[c1][d] < 0.f || wg[w] < 0.f)
					continue;
				float t = dg[c1][d] + wg[w] + (d && w ? 0.f : pool_bwd);
				if (best < 0 || t < least) {
					least = t;
					best = c1 << 3 | d << 1 | w << 2;
				}
			}
	if (best < 0)
		return -1;
	*conv1 = best >> 3;
	return best & 6;
}

int cnn_choose_mixes(int nconv2, int nvariants, int kept_k2)
{
	return nconv2 > 0 && nvariants > 1 && kept_k2 != 0;
}

int cnn_choose_pdl(int on, int have, const float ms[2])
{
	return have && (on || ms[1] < ms[0]);
}
