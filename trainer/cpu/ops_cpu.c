/* CPU kernels: the readable reference, and fast enough to beat PyTorch on
 * the same cores (GEMMs in oneDNN, the rest plain loops the compiler
 * vectorizes).  The GPU kernels are tested against these. */
#include <float.h>
#include <math.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "ops.h"
#include "rng.h"

/* The element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64
 * and picked at load time, so one binary runs everywhere at full width. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

void cnn_sgemm(char ta, char tb, int m, int n, int k, float alpha,
	       const float *a, int lda, const float *b, int ldb,
	       float beta, float *c, int ldc)
{
	/* dnnl_sgemm is row-major, like the rest of this file.  It can only
	 * fail on bad arguments, which are compile-time shapes here. */
	(void)dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cnn_im2col3(const float *x, int c, int h, int w, float *col)
{
	int oh = h - 2, ow = w - 2;
	for (int ci = 0; ci < c; ci++)
		for (int ky = 0; ky < 3; ky++)
			for (int kx = 0; kx < 3; kx++) {
				float *row = col + (size_t)((ci * 3 + ky) * 3 + kx) * oh * ow;
				const float *src = x + ((size_t)ci * h + ky) * w + kx;
				for (int y = 0; y < oh; y++)
					memcpy(row + (size_t)y * ow, src + (size_t)y * w,
					       (size_t)ow * sizeof(float));
			}
}

HOT void cnn_col2im3(const float *dcol, int c, int h, int w, float *dx)
{
	int oh = h - 2, ow = w - 2;
	memset(dx, 0, (size_t)c * h * w * sizeof(float));
	for (int ci = 0; ci < c; ci++)
		for (int ky = 0; ky < 3; ky++)
			for (int kx = 0; kx < 3; kx++) {
				const float *row = dcol + (size_t)((ci * 3 + ky) * 3 + kx) * oh * ow;
				float *dst = dx + ((size_t)ci * h + ky) * w + kx;
				for (int y = 0; y < oh; y++) {
					float *d = dst + (size_t)y * w;
					const float *s = row + (size_t)y * ow;
					for (int x = 0; x < ow; x++)
						d[x] += s[x];
				}
			}
}

HOT void cnn_bias_relu(float *y, const float *b, int oc, int n)
{
	for (int o = 0; o < oc; o++) {
		float *p = y + (size_t)o * n, bo = b[o];
		for (int i = 0; i < n; i++) {
			float v = p[i] + bo;
			p[i] = v > 0.f ? v : 0.f;
		}
	}
}

void cnn_conv3_relu_fwd(const float *x, int c, int h, int w, const float *wt,
			const float *b, int oc, float *col, float *y)
{
	int n = (h - 2) * (w - 2), k = c * 9;
	cnn_im2col3(x, c, h, w, col);
	cnn_sgemm('N', 'N', oc, n, k, 1.f, wt, k, col, n, 0.f, y, n);
	cnn_bias_relu(y, b, oc, n);
}

void cnn_bias_grad(const float *dy, int oc, int n, float *db)
{
	for (int o = 0; o < oc; o++) {
		const float *p = dy + (size_t)o * n;
		float s = 0.f;
		#pragma omp simd reduction(+ : s)
		for (int i = 0; i < n; i++)
			s += p[i];
		db[o] += s;
	}
}

void cnn_conv3_bwd(const float *x, int c, int h, int w, const float *wt, int oc,
		   const float *dy, float *col, float *dcol, float *dw, float *db,
		   float *dx)
{
	int n = (h - 2) * (w - 2), k = c * 9;
	cnn_im2col3(x, c, h, w, col);
	cnn_sgemm('N', 'T', oc, k, n, 1.f, dy, n, col, n, 1.f, dw, k);
	cnn_bias_grad(dy, oc, n, db);
	if (dx) {
		cnn_sgemm('T', 'N', k, n, oc, 1.f, wt, k, dy, n, 0.f, dcol, n);
		cnn_col2im3(dcol, c, h, w, dx);
	}
}

HOT void cnn_maxpool2_fwd(const float *x, int c, int h, int w, float *y, uint8_t *arg)
{
	int ph = h / 2, pw = w / 2;
	for (int ci = 0; ci < c; ci++) {
		const float *xp = x + (size_t)ci * h * w;
		float *yp = y + (size_t)ci * ph * pw;
		uint8_t *ap = arg + (size_t)ci * ph * pw;
		for (int py = 0; py < ph; py++) {
			const float *r0 = xp + (size_t)(2 * py) * w, *r1 = r0 + w;
			for (int px = 0; px < pw; px++) {
				float v0 = r0[2 * px], v1 = r0[2 * px + 1];
				float v2 = r1[2 * px], v3 = r1[2 * px + 1];
				/* strict > keeps the first maximum, as PyTorch */
				float m = v0;
				uint8_t a = 0;
				a = v1 > m ? 1 : a;
				m = v1 > m ? v1 : m;
				a = v2 > m ? 2 : a;
				m = v2 > m ? v2 : m;
				a = v3 > m ? 3 : a;
				m = v3 > m ? v3 : m;
				yp[py * pw + px] = m;
				ap[py * pw + px] = a;
			}
		}
	}
}

void cnn_maxpool2_relu_bwd(const float *dy, const float *y, const uint8_t *arg,
			       int c, int h, int w, float *dx)
{
	int ph = h / 2, pw = w / 2;
	memset(dx, 0, (size_t)c * h * w * sizeof(float));
	for (int ci = 0; ci < c; ci++) {
		float *dp = dx + (size_t)ci * h * w;
		size_t base = (size_t)ci * ph * pw;
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++) {
				size_t i = base + (size_t)py * pw + px;
				if (!(y[i] > 0.f))
					continue;
				int a = arg[i];
				dp[(size_t)(2 * py + (a >> 1)) * w + 2 * px + (a & 1)] = dy[i];
			}
	}
}

void cnn_linear_fwd(const float *x, int n, int in, const float *wt, const float *b,
		    int out, float *y)
{
	for (int i = 0; i < n; i++)
		memcpy(y + (size_t)i * out, b, (size_t)out * sizeof(float));
	cnn_sgemm('N', 'T', n, out, in, 1.f, x, in, wt, in, 1.f, y, out);
}

void cnn_linear_bwd(const float *x, int n, int in, const float *wt, int out,
		    const float *dy, float *dw, float *db, float *dx)
{
	cnn_sgemm('T', 'N', out, in, n, 1.f, dy, out, x, in, 0.f, dw, in);
	memcpy(db, dy, (size_t)out * sizeof(float));
	for (int i = 1; i < n; i++)
		for (int o = 0; o < out; o++)
			db[o] += dy[(size_t)i * out + o];
	if (dx)
		cnn_sgemm('N', 'N', n, in, out, 1.f, dy, out, wt, in, 0.f, dx, in);
}

HOT void cnn_relu_fwd(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] > 0.f ? x[i] : 0.f;
}

HOT void cnn_relu_bwd(float *dx, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.f ? dx[i] : 0.f;
}

float cnn_logsoftmax_nll_fwd(const float *logits, const uint8_t *label, int n, int k,
			     float *logp, int *correct)
{
	double loss = 0;
	int good = 0;
	for (int i = 0; i < n; i++) {
		const float *z = logits + (size_t)i * k;
		float *lp = logp + (size_t)i * k;
		float mx = -FLT_MAX;
		int am = 0;
		for (int j = 0; j < k; j++)
			if (z[j] > mx) {
				mx = z[j];
				am = j;
			}
		double s = 0;
		for (int j = 0; j < k; j++)
			s += exp((double)(z[j] - mx));
		float lse = mx + (float)log(s);
		for (int j = 0; j < k; j++)
			lp[j] = z[j] - lse;
		loss -= lp[label[i]];
		good += am == label[i];
	}
	if (correct)
		*correct = good;
	return n ? (float)(loss / n) : 0.f;
}

void cnn_logsoftmax_nll_bwd(const float *logp, const uint8_t *label, int n, int k,
			    float scale_n, float *dlogits)
{
	float inv = 1.f / scale_n;
	for (int i = 0; i < n; i++) {
		const float *lp = logp + (size_t)i * k;
		float *d = dlogits + (size_t)i * k;
		for (int j = 0; j < k; j++)
			d[j] = expf(lp[j]) * inv;
		d[label[i]] -= inv;
	}
}
