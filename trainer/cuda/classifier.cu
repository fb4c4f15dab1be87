// The step's two ends on the GPU (see kernels.h): the batch's gather from
// the data set, fc1's dropout, log-softmax with the NLL loss (and its
// gradient), fc2's fused classifier, and the optimizers' updates (SGD with
// momentum, Adadelta) with the weights' other forms written as they go.
#include "kernels_common.cuh"

namespace {

// One block: a thread per row (rows strided over the block), the sums in
// a fixed order (the thread's rows, then the tree), written, not added: no
// memset before it, no atomics, the same bits each run.  With b, the
// linear layer's bias is added to the logits on the way in; with d, the
// loss's gradient (logsoftmax_nll_bwd's arithmetic) is written too, and
// with dbias its sum over the rows, the bias's gradient: thread t of the
// first (blockDim / k) * k sums column t % k over the rows t / k, t / k +
// blockDim / k, ..., then thread j < k those partials in order.
constexpr int kLossThreads = 1024;

// One row's log-softmax of its k logits z (the bias added) into lp, its
// NLL into *loss and whether its argmax (first maximum) is the label into
// *good; with d, the loss's gradient (softmax - onehot) * inv, and with db
// that rounded to bf16.
__device__ __forceinline__ void loss_row(const float *z, int k, int label, float *lp, float *d,
					 bf16 *db, float inv, float *loss, float *good)
{
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
	*loss += -lp[label];
	*good += am == label ? 1.f : 0.f;
	if (d)
		for (int j = 0; j < k; j++) {
			float v = expf(lp[j]) * inv;
			v = j == label ? v - inv : v;
			d[j] = v;
			if (db)
				db[j] = __float2bfloat16_rn(v);
		}
}

// The rows' loss and correct counts (each thread's in part[0] and part[1])
// summed over the block in a tree, into out; part free again after it.
__device__ __forceinline__ void loss_sums(float (*part)[kLossThreads], float *out)
{
	__syncthreads();
	for (int half = blockDim.x / 2; half > 0; half /= 2) {
		if ((int)threadIdx.x < half) {
			part[0][threadIdx.x] += part[0][threadIdx.x + half];
			part[1][threadIdx.x] += part[1][threadIdx.x + half];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[0] = part[0][0];
		out[1] = part[1][0];
	}
	__syncthreads();
}

__global__ void __launch_bounds__(kLossThreads)
logsoftmax_nll_fwd(const float *logits, const float *b, const uint8_t *label, int n, int k,
		   float *logp, float *out, float *d, bf16 *db, float inv, float *dbias)
{
	pdl_enter();
	__shared__ float part[2][kLossThreads];
	float z[64];
	float loss = 0.f, good = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		for (int j = 0; j < k; j++)
			z[j] = b ? logits[(size_t)i * k + j] + b[j] : logits[(size_t)i * k + j];
		size_t r = (size_t)i * k;
		loss_row(z, k, label[i], logp + r, d ? d + r : NULL, db ? db + r : NULL, inv, &loss,
			 &good);
	}
	part[0][threadIdx.x] = loss;
	part[1][threadIdx.x] = good;
	loss_sums(part, out);
	if (!dbias)
		return;
	// the rows' gradients this block wrote, seen by all its threads after
	// loss_sums' last barrier (after which part is free again)
	int groups = blockDim.x / k, t = threadIdx.x;
	if (t < groups * k) {
		float acc = 0.f;
		for (int i = t / k; i < n; i += groups)
			acc += d[(size_t)i * k + t % k];
		part[0][t] = acc;
	}
	__syncthreads();
	if (t < k) {
		float acc = 0.f;
		for (int g = 0; g < groups; g++)
			acc += part[0][g * k + t];
		dbias[t] = acc;
	}
}

// Group g of 4 elements of x (n in all), as cnn_dropout_fwd draws them
// (one 64-bit draw of key a group); with b, bias_relu's bias (per column
// of rows of k) and ReLU first; drop: apply the mask.
__device__ __forceinline__ void dropout_group(float *x, const float *b, int k, size_t n, size_t g,
					      uint32_t thresh, float scale, bool drop,
					      uint64_t key, bf16 *xb)
{
	size_t i = g * 4;
	uint64_t r = mix64(key + i);
	for (int j = 0; j < 4 && i + j < n; j++) {
		float v = x[i + j];
		if (b)
			v = bias_relu_as(x, v, b[(i + j) % k]);
		if (drop)
			v = ((r >> (16 * j)) & 0xffff) >= thresh ? v * scale : 0.f;
		x[i + j] = v;
		if (xb)
			xb[i + j] = __float2bfloat16_rn(v);
	}
}

// fc2 and the loss, forward and backward, in one launch (cnn_cuda_fc2_fused):
// each block takes `rows` consecutive rows of the batch (fc2_fused_rows), the
// last block what is left.  With b1, fc1's bias, ReLU and dropout on its
// rows of h first (in place, each element as dropout_group draws it: a
// block's rows need not start on a group of 4); its rows of h and fc2's
// weights W then sit in shared memory, rows padded by one float (a warp
// reading one column of several rows hits as many banks).  logits = h W^T
// + b, each a dot product in four interleaved partial sums (q mod 4, then
// (0 + 1) + (2 + 3)), the rows as logsoftmax_nll_fwd computes them (logp
// written by the row's thread, the loss's gradient d to shared memory and
// from there to d); then fc1's output gradient dh = s2 d W through fc1's
// ReLU (0 where h <= 0), each thread one column of the rows g, g +
// groups, ..., and the block's partial sums: fc2's weight gradient d^T h
// (entry (j, q) over its rows in order), its bias gradient, fc1's bias
// gradient (the groups' sums in order), the loss and the correct count.
// One block writes them as the results; with more, each block writes its
// partials to the scratch, and the block that counts itself last on the
// scratch's counter (after a fence) adds every block's in block order and
// sets the counter back to 0: fixed orders throughout, the same bits each
// run for a given n.  One launch for seven of the unfused step's (fc1's
// dropout, fc2's GEMM, the loss, dW4's and dh's GEMMs, the ReLU's
// backward, db3's gemv).
constexpr int kHeadThreads = 512;
constexpr int kHeadW = 4096;        // fc2's weights, k x (hid + 1) floats: 16 KB
constexpr int kHeadH = 4128;        // a block's rows of h, rows x (hid + 1): 32 of 128
constexpr int kHeadRows = 32, kHeadK = 64, kHeadHid = 1024;
constexpr int kHeadCount = 32;      // the scratch's counter, then its partials from here

__host__ __device__ constexpr int fc2_fused_rows(int hid)
{
	return kHeadH / (hid + 1) < kHeadRows ? kHeadH / (hid + 1) : kHeadRows;
}

// fc2_fused's phases, each run by every thread of the block:
// fc2's weights into ws, rows of hid + 1; the block's elements e0..e1 of h
// into hs, with fc1's bias, ReLU and dropout first where b1 (in place in h,
// by groups of 4 as dropout_fwd draws them)
__device__ __forceinline__ void fc2_fused_load(float *ws, float *hs, float *h, const float *b1,
					       uint32_t thresh, float scale, const uint64_t *keyp,
					       const float *w, int hid, int k, size_t e0, size_t e1)
{
	int t = threadIdx.x, T = blockDim.x, hp = hid + 1;
	for (int e = t; e < k * hid; e += T)
		ws[e / hid * hp + e % hid] = w[e];
	bool drop = b1 && keyp;
	uint64_t key = drop ? *keyp : 0;
	for (size_t g = e0 / 4 + t; g < (e1 + 3) / 4; g += T) {
		size_t i = g * 4;
		uint64_t r = mix64(key + i);
		for (int j = 0; j < 4; j++) {
			size_t e = i + j;
			if (e < e0 || e >= e1)
				continue;
			float v = h[e];
			if (b1) {
				v = bias_relu_as(h, v, b1[e % hid]);
				if (drop)
					v = ((r >> (16 * j)) & 0xffff) >= thresh ? v * scale : 0.f;
				h[e] = v;
			}
			size_t l = e - e0;
			hs[l / hid * hp + l % hid] = v;
		}
	}
}

// the m rows' logits into ds: h W^T + b, four interleaved partial sums
__device__ __forceinline__ void fc2_fused_logits(float *ds, const float *hs, const float *ws,
						 const float *b, int m, int hid, int k)
{
	int t = threadIdx.x, T = blockDim.x, hp = hid + 1;
	for (int e = t; e < m * k; e += T) {
		int j = e / m, i = e % m;
		const float *hi = hs + i * hp, *wj = ws + j * hp;
		float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
		int q = 0;
		for (; q + 4 <= hid; q += 4) {
			a0 += hi[q] * wj[q];
			a1 += hi[q + 1] * wj[q + 1];
			a2 += hi[q + 2] * wj[q + 2];
			a3 += hi[q + 3] * wj[q + 3];
		}
		for (; q < hid; q++)
			a0 += hi[q] * wj[q];
		ds[i * k + j] = ((a0 + a1) + (a2 + a3)) + b[j];
	}
}

// row t by thread t: logp, the loss's gradient over its logits in ds,
// its loss and whether it is right into lsum
__device__ __forceinline__ void fc2_fused_loss(float *ds, float (*lsum)[kHeadRows],
					       const uint8_t *label, float *logp, int r0, int m,
					       int k, float inv)
{
	int t = threadIdx.x;
	if (t < m) {
		float z[kHeadK], loss = 0.f, good = 0.f;
		for (int j = 0; j < k; j++)
			z[j] = ds[t * k + j];
		size_t r = (size_t)(r0 + t) * k;
		loss_row(z, k, label[r0 + t], logp + r, ds + t * k, NULL, inv, &loss, &good);
		lsum[0][t] = loss;
		lsum[1][t] = good;
	}
}

// d from ds; dh = s2 d W through fc1's ReLU, `groups` groups of columns
// each summing its rows into red; the block's fc2 weight and bias
// gradients, loss and correct count into pw, pb, po
__device__ __forceinline__ void fc2_fused_grads(const float *ds, const float *hs, const float *ws,
						float *red, float (*lsum)[kHeadRows], float *d,
						float *dh, float *pw, float *pb, float *po, int r0,
						int m, int hid, int k, float s2, int groups)
{
	int t = threadIdx.x, T = blockDim.x, hp = hid + 1;
	for (int e = t; e < m * k; e += T)
		d[(size_t)r0 * k + e] = ds[e];
	for (int x = t; x < groups * hid; x += T) {
		int q = x % hid;
		float acc = 0.f;
		for (int i = x / hid; i < m; i += groups) {
			const float *di = ds + i * k;
			float v = 0.f;
			for (int j = 0; j < k; j++)
				v += di[j] * ws[j * hp + q];
			v = hs[i * hp + q] > 0.f ? s2 * v : 0.f;
			dh[(size_t)(r0 + i) * hid + q] = v;
			acc += v;
		}
		red[x] = acc;
	}
	for (int e = t; e < k * hid; e += T) {
		int j = e / hid, q = e % hid;
		float acc = 0.f;
		for (int i = 0; i < m; i++)
			acc += ds[i * k + j] * hs[i * hp + q];
		pw[e] = acc;
	}
	if (t < k) {
		float acc = 0.f;
		for (int i = 0; i < m; i++)
			acc += ds[i * k + t];
		pb[t] = acc;
	}
	if (t == 0) {
		float loss = 0.f, good = 0.f;
		for (int i = 0; i < m; i++) {
			loss += lsum[0][i];
			good += lsum[1][i];
		}
		po[0] = loss;
		po[1] = good;
	}
}

// the last block to finish (counted on the scratch's counter) adds every
// block's P partials in block order into the results, and sets the
// counter back to 0
__device__ __forceinline__ void fc2_fused_sum_blocks(float *scratch, int *last, int P, int hid,
						     int k, float *dw, float *db, float *dbh,
						     float *out)
{
	int t = threadIdx.x, T = blockDim.x;
	__threadfence();
	__syncthreads();
	unsigned *count = reinterpret_cast<unsigned *>(scratch);
	if (t == 0)
		*last = atomicAdd(count, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!*last)
		return;
	__threadfence();
	const volatile float *all = scratch + kHeadCount;
	for (int e = t; e < P; e += T) {
		float acc = 0.f;
		for (unsigned bk = 0; bk < gridDim.x; bk++)
			acc += all[(size_t)bk * P + e];
		if (e < k * hid)
			dw[e] = acc;
		else if (e < k * hid + k)
			db[e - k * hid] = acc;
		else if (e < k * hid + k + hid)
			dbh[e - k * hid - k] = acc;
		else
			out[e - k * hid - k - hid] = acc;
	}
	if (t == 0)
		*count = 0;
}

__global__ void __launch_bounds__(kHeadThreads)
fc2_fused(float *h, const float *b1, uint32_t thresh, float scale, const uint64_t *keyp,
	 const float *w, const float *b, const uint8_t *label, int n, int hid, int k, int rows,
	 float inv, float s2, float *logp, float *out, float *d, float *dw, float *db, float *dh,
	 float *dbh, float *scratch)
{
	pdl_enter();
	__shared__ float ws[kHeadW];               // W, k rows of hid + 1
	__shared__ float hs[kHeadH];               // the block's rows of h, hid + 1 each
	__shared__ float ds[kHeadRows * kHeadK];   // their logits, then the loss's gradient
	__shared__ float red[kHeadHid];            // the column groups' sums of dh
	__shared__ float lsum[2][kHeadRows];       // the rows' loss and correct
	__shared__ int last;
	int t = threadIdx.x, T = blockDim.x;
	int r0 = blockIdx.x * rows, m = n - r0 < rows ? n - r0 : rows;
	size_t e0 = (size_t)r0 * hid;
	fc2_fused_load(ws, hs, h, b1, thresh, scale, keyp, w, hid, k, e0, e0 + (size_t)m * hid);
	__syncthreads();
	fc2_fused_logits(ds, hs, ws, b, m, hid, k);
	__syncthreads();
	fc2_fused_loss(ds, lsum, label, logp, r0, m, k, inv);
	__syncthreads();
	// the block's sums: the results themselves with one block, else its
	// partials in the scratch (dw, db, dbh, then loss and correct)
	bool one = gridDim.x == 1;
	int P = k * hid + k + hid + 2;
	float *part = scratch + kHeadCount + (size_t)blockIdx.x * P;
	float *pw = one ? dw : part, *pb = one ? db : part + k * hid;
	float *pbh = one ? dbh : part + k * hid + k, *po = one ? out : part + k * hid + k + hid;
	int groups = T / hid > 0 ? T / hid : 1;
	fc2_fused_grads(ds, hs, ws, red, lsum, d, dh, pw, pb, po, r0, m, hid, k, s2, groups);
	__syncthreads();
	for (int q = t; q < hid; q += T) {
		float acc = 0.f;
		for (int g = 0; g < groups; g++)
			acc += red[g * hid + q];
		pbh[q] = acc;
	}
	if (!one)
		fc2_fused_sum_blocks(scratch, &last, P, hid, k, dw, db, dbh, out);
}

// The updated parameter v at i in the weights' other forms (cnn_cuda_wop:
// conv3_pack's, oihw_to_ohwi's and to_bf16's stores of it).  Ranges by
// unsigned difference: i below off wraps past the size.
__device__ __forceinline__ void wop_put(const cnn_cuda_wop &w, size_t i, float v)
{
	if (w.wb)
		st(reinterpret_cast<bf16 *>(w.wb) + i, v);
	size_t j = i - w.pack.off, pn = 9 * (size_t)w.pack.oc * w.pack.c;
	if (j < pn) {
		int tap = (int)(j % 9), ci = (int)(j / 9 % w.pack.c), o = (int)(j / 9 / w.pack.c);
		size_t f = ((size_t)tap * w.pack.c + ci) * w.pack.oc + o;
		size_t b = ((size_t)tap * w.pack.oc + o) * w.pack.c + ci;
		if (w.pack.f[0]) {
			w.pack.f[0][f] = v;
			w.pack.f[1][b] = v;
		} else {
			st(reinterpret_cast<bf16 *>(w.pack.b[0]) + f, v);
			st(reinterpret_cast<bf16 *>(w.pack.b[1]) + b, v);
		}
	}
	for (int l = 0; l < 2; l++) {
		const auto &t = w.ohwi[l];
		size_t k = i - t.off, per = (size_t)t.in * t.hw;
		if (k >= (size_t)t.out * per)
			continue;
		size_t o = k / per, q = (o * t.hw + k % t.hw) * t.in + k / t.hw % t.in;
		if (t.f)
			t.f[q] = v;
		else
			st(reinterpret_cast<bf16 *>(t.b) + q, v);
	}
}

// SGD's update of one element: its new value from p, g and (momentum)
// buf, which it updates.
__device__ __forceinline__ float sgd_one(float p, float g, float *buf, float lr, float mom,
					 float wd, int first)
{
	float d = g + wd * p;
	if (mom == 0.f)
		return p - lr * d;
	float b = first ? d : mom * *buf + d;
	*buf = b;
	return p - lr * b;
}

// quad (p, g, buf 16-byte aligned): the elements from lo and n rounded in
// to multiples of 4 a group of 4 a thread (16-byte loads and stores), the
// edges outside them an element a thread; the same arithmetic each way.
template <bool WOP>
__global__ void sgd_step(float *p, const float *g, float *buf, size_t lo, size_t n,
			 const float *lrp, float mom, float wd, int first, int quad, cnn_cuda_wop w)
{
	pdl_enter();
	float lr = *lrp;
	size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
	size_t a = quad ? (lo + 3) & ~(size_t)3 : n, z = quad ? n & ~(size_t)3 : n;
	if (a > n)
		a = n;
	if (z < a)
		z = a;
	for (size_t k = t; k < (a - lo) + (n - z); k += stride) {
		size_t i = k < a - lo ? lo + k : z + (k - (a - lo));
		float b = mom != 0.f && !first ? buf[i] : 0.f;
		float v = sgd_one(p[i], g[i], &b, lr, mom, wd, first);
		if (mom != 0.f)
			buf[i] = b;
		p[i] = v;
		if (WOP)
			wop_put(w, i, v);
	}
	for (size_t i = a + 4 * t; i < z; i += 4 * stride) {
		float pv[4], gv[4], bv[4] = { 0.f, 0.f, 0.f, 0.f }, v[4];
		ld4(p + i, pv);
		ld4(g + i, gv);
		if (mom != 0.f && !first)
			ld4(buf + i, bv);
		for (int j = 0; j < 4; j++)
			v[j] = sgd_one(pv[j], gv[j], &bv[j], lr, mom, wd, first);
		st4(p + i, v);
		if (mom != 0.f)
			st4(buf + i, bv);
		if (WOP)
			for (int j = 0; j < 4; j++)
				wop_put(w, i + j, v[j]);
	}
}

template <bool WOP>
__global__ void adadelta_step(float *p, const float *g, float *sq, float *acc, size_t lo,
			      size_t n, const float *lrp, float rho, float eps, float wd,
			      cnn_cuda_wop w)
{
	pdl_enter();
	float lr = *lrp;
	for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float d = g[i] + wd * p[i];
		float s = sq[i] * rho + (1.f - rho) * d * d;
		float delta = sqrtf(acc[i] + eps) / sqrtf(s + eps) * d;
		sq[i] = s;
		acc[i] = acc[i] * rho + (1.f - rho) * delta * delta;
		float v = p[i] - lr * delta;
		p[i] = v;
		if (WOP)
			wop_put(w, i, v);
	}
}

// One thread per group of 4 elements.
__global__ void dropout_fwd(float *x, const float *b, int k, size_t n, uint32_t thresh,
			    float scale, const uint64_t *keyp, bf16 *xb)
{
	pdl_enter();
	uint64_t key = keyp ? *keyp : 0;
	size_t groups = (n + 3) / 4;
	for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < groups;
	     g += (size_t)gridDim.x * blockDim.x)
		dropout_group(x, b, k, n, g, thresh, scale, keyp != NULL, key, xb);
}

// One thread per output pixel; the image and label come from idx.
__global__ void gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx, int c,
		       size_t plane, struct cnn_cuda_norm norm, size_t total, float *x, uint8_t *y,
		       bf16 *xb)
{
	pdl_enter();
	size_t img = (size_t)c * plane;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t row = i / img, r = i % img;
		int ch = (int)(r / plane);
		uint32_t src = idx[row];
		float v = (float)xs[(size_t)src * img + r] * norm.scale[ch] - norm.off[ch];
		x[i] = v;
		if (xb)
			st(xb + i, v);
		if (r == 0)
			y[row] = ys[src];
	}
}

} // namespace

extern "C" int cnn_cuda_logsoftmax_nll_fwd(const float *logits, const float *b,
					   const uint8_t *label, int n, int k, float *logp,
					   float *out, float *dlogits, cnn_bf16 *dlb, float scale_n,
					   float *dbias, cudaStream_t s)
{
	if (n < 0 || k < 1 || k > 64 || (dlogits && !(scale_n > 0.f)) || (dbias && !dlogits)) {
		char m[160];
		snprintf(m, sizeof(m), "%d rows of %d classes, scale %g%s: expected 0 or more, 1-64, "
			 "> 0%s", n, k, scale_n, dbias && !dlogits ? ", a bias gradient" : "",
			 dbias && !dlogits ? ", the loss's gradient with it" : "");
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_logsoftmax_nll_fwd", m);
		return -1;
	}
	/* a power of two (the tree), enough for a row each up to 1024, and
	 * with dbias a column each at least */
	int threads = 32;
	while ((threads < n || (dbias && threads < k)) && threads < kLossThreads)
		threads *= 2;
	logsoftmax_nll_fwd<<<1, threads, 0, s>>>(logits, b, label, n, k, logp, out, dlogits,
						   dlogits ? reinterpret_cast<bf16 *>(dlb) : NULL,
						   dlogits ? 1.f / scale_n : 0.f, dbias);
	LAUNCHED(s);
	return 0;
}

extern "C" size_t cnn_cuda_fc2_fused_scratch(int n, int hid, int k)
{
	if (n < 1 || hid < 1 || hid > kHeadHid || k < 1)
		return 0;
	int rows = fc2_fused_rows(hid), blocks = (n + rows - 1) / rows;
	return blocks > 1 ? kHeadCount + (size_t)blocks * ((size_t)k * hid + k + hid + 2) : 0;
}

extern "C" int cnn_cuda_fc2_fused_fits(int hid, int k)
{
	return hid >= 1 && hid <= kHeadHid && k >= 1 && k <= kHeadK && k * (hid + 1) <= kHeadW;
}

extern "C" int cnn_cuda_fc2_fused(float *h, const float *b1, float p, const uint64_t *key,
				 const float *w, const float *b, const uint8_t *label, int n, int hid,
				 int k, float scale_n, float s2, float *logp, float *out,
				 float *dlogits, float *dw, float *db, float *dh, float *dbh,
				 float *scratch, size_t scratch_n, cudaStream_t s)
{
	size_t need = cnn_cuda_fc2_fused_scratch(n, hid, k);
	if (n < 1 || !cnn_cuda_fc2_fused_fits(hid, k) || !(scale_n > 0.f) || scratch_n < need ||
	    (need && !scratch)) {
		char m[300];
		snprintf(m, sizeof(m), "%d rows, %d hidden units, %d classes, scale %g, scratch of %zu "
			 "floats: expected 1 or more rows, 1-%d hidden, 1-%d classes, classes x "
			 "(hidden + 1) at most %d, scale > 0, a scratch of %zu floats at least",
			 n, hid, k, scale_n, scratch ? scratch_n : 0, kHeadHid, kHeadK, kHeadW, need);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_fc2_fused", m);
		return -1;
	}
	int rows = fc2_fused_rows(hid), blocks = (n + rows - 1) / rows;
	fc2_fused<<<blocks, kHeadThreads, 0, s>>>(h, b1, (uint32_t)(p * 65536.f), 1.f / (1.f - p),
						 b1 && p > 0.f ? key : NULL, w, b, label, n, hid, k,
						 rows, 1.f / scale_n, s2, logp, out, dlogits, dw, db,
						 dh, dbh, scratch);
	LAUNCHED(s);
	return 0;
}

// A wop to pass by value: the caller's, or one that writes nothing.
static cnn_cuda_wop wop_of(const cnn_cuda_wop *w)
{
	cnn_cuda_wop none;
	memset(&none, 0, sizeof(none));
	if (!w)
		return none;
	none = *w;
	// a form with no pointer writes nothing, whatever its sizes say
	if (!none.pack.f[0] && !none.pack.b[0])
		none.pack.oc = none.pack.c = 0;
	for (int l = 0; l < 2; l++)
		if (!none.ohwi[l].f && !none.ohwi[l].b)
			none.ohwi[l].out = 0;
	return none;
}

// An update's range of parameters [lo, hi): said where it is backwards.
static bool range_bad(size_t lo, size_t hi, int line, const char *who)
{
	if (lo <= hi)
		return false;
	char m[96];
	snprintf(m, sizeof(m), "parameters %zu to %zu: expected the first at most the end", lo, hi);
	cnn_cuda_fail(__FILE__, line, who, m);
	return true;
}

extern "C" int cnn_cuda_sgd_step_range(float *p, const float *g, float *buf, size_t lo, size_t hi,
				       const float *lr, float momentum, float weight_decay, int first,
				       const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	if (range_bad(lo, hi, __LINE__, "cnn_cuda_sgd_step_range"))
		return -1;
	if (lo == hi)
		return 0;
	cnn_cuda_wop w = wop_of(wop);
	float mom = momentum, wd = weight_decay;
	auto sgd_kernel = wop ? sgd_step<true> : sgd_step<false>;
	int quad = aligned(p, 16) && aligned(g, 16) && (momentum == 0.f || aligned(buf, 16));
	unsigned nb = blocks_for(quad ? (hi - lo) / 4 + 1 : hi - lo);
	sgd_kernel<<<nb, kThreads, 0, s>>>(p, g, buf, lo, hi, lr, mom, wd, first, quad, w);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_sgd_step(float *p, const float *g, float *buf, size_t n, const float *lr,
				 float momentum, float weight_decay, int first,
				 const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	return cnn_cuda_sgd_step_range(p, g, buf, 0, n, lr, momentum, weight_decay, first, wop, s);
}

extern "C" int cnn_cuda_adadelta_step_range(float *p, const float *g, float *sq, float *acc,
					    size_t lo, size_t hi, const float *lr, float rho,
					    float eps, float weight_decay,
					    const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	if (range_bad(lo, hi, __LINE__, "cnn_cuda_adadelta_step_range"))
		return -1;
	if (lo == hi)
		return 0;
	cnn_cuda_wop w = wop_of(wop);
	float wd = weight_decay;
	unsigned nb = blocks_for(hi - lo);
	auto adadelta_kernel = wop ? adadelta_step<true> : adadelta_step<false>;
	adadelta_kernel<<<nb, kThreads, 0, s>>>(p, g, sq, acc, lo, hi, lr, rho, eps, wd, w);
	LAUNCHED(s);
	return 0;
}

extern "C" int cnn_cuda_adadelta_step(float *p, const float *g, float *sq, float *acc, size_t n,
				      const float *lr, float rho, float eps, float weight_decay,
				      const struct cnn_cuda_wop *wop, cudaStream_t s)
{
	return cnn_cuda_adadelta_step_range(p, g, sq, acc, 0, n, lr, rho, eps, weight_decay, wop, s);
}

extern "C" int cnn_cuda_dropout_fwd(float *x, const float *b, int k, size_t n, float p,
				    const uint64_t *key, cnn_bf16 *xb, cudaStream_t s)
{
	if (!n)
		return 0;
	if (b && k < 1) {
		char m[64];
		snprintf(m, sizeof(m), "rows of %d: expected >= 1", k);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_dropout_fwd", m);
		return -1;
	}
	uint32_t thresh = (uint32_t)(p * 65536.f);
	float scale = 1.f / (1.f - p);
	dropout_fwd<<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(x, b, k, n, thresh, scale,
								   p > 0.f ? key : NULL,
								   reinterpret_cast<bf16 *>(xb));
	LAUNCHED(s);
	return 0;
}

extern "C" void cnn_cuda_norm_set(struct cnn_cuda_norm *nm, int c, const float *mean,
				  const float *std)
{
	for (int ch = 0; ch < 4; ch++) {
		nm->scale[ch] = ch < c ? 1.f / (255.f * std[ch]) : 0.f;
		nm->off[ch] = ch < c ? mean[ch] / std[ch] : 0.f;
	}
}

extern "C" int cnn_cuda_gather(const uint8_t *xs, const uint8_t *ys, const uint32_t *idx, int n,
			       int c, int h, int w, const struct cnn_cuda_norm *norm, float *x,
			       uint8_t *y, cnn_bf16 *xb, cudaStream_t s)
{
	size_t plane = (size_t)h * w, total = (size_t)n * c * plane;
	if (!total)
		return 0;
	if (c < 1 || c > 4) {
		char m[64];
		snprintf(m, sizeof(m), "%d channels: expected 1-4", c);
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_cuda_gather", m);
		return -1;
	}
	gather<<<blocks_for(total), kThreads, 0, s>>>(xs, ys, idx, c, plane, *norm, total, x, y, B(xb));
	LAUNCHED(s);
	return 0;
}
