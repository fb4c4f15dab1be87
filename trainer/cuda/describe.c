/* cnn_gnet_describe (see net.h): the "# GPU:" line's part of the Net,
 * from what cnn_gnet_prepare chose and timed. */
#include <stdio.h>

#include "net_impl.h"

#include "cuda/kernels.h"

/* Times of the pairs choose_bwd timed, the chosen first: ", backward-data
 * with conv1's weight gradient direct/cuDNN 0.200 ms (cuDNN/cuDNN 0.300)",
 * each pair named conv2's call/conv1's call. */
static int describe_pair(const struct cnn_gnet_algos *a, char *buf, size_t len, int k)
{
	static const char *impl[2] = { "cuDNN", "direct" };
	int c1 = (a->direct1 >> 1) & 1, c2 = (a->direct2 >> 1) & 1, more = 0;
	if (k < 0 || (size_t)k >= len)
		return k;
	k += snprintf(buf + k, len - k, ", backward-data with conv1's weight gradient %s/%s %.3f ms",
		      impl[c2], impl[c1], a->msb[c1][c2]);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			if ((i == c1 && j == c2) || a->msb[i][j] <= 0.f || k < 0 || (size_t)k >= len)
				continue;
			k += snprintf(buf + k, len - k, "%s%s/%s %.3f", more++ ? ", " : " (", impl[j],
				      impl[i], a->msb[i][j]);
		}
	if (more && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ")");
	return k;
}

/* ", conv1 direct", or with auto each batch size's choice per call and
 * the times that made it; nothing where cuDNN does it all.  The calls
 * choose_bwd chose together (not timed alone) print as a pair, with
 * conv2's where it is auto, else with conv1's. */
static int describe_conv(const struct cnn_gnet *g, char *buf, size_t len, int k, int layer)
{
	static const char *names[2][3] = {
		{ "forward", "weight gradient" },
		{ "forward and pool", "backward-data", "backward-filter and bias gradient" }
	};
	int calls = layer ? 3 : 2;
	enum cnn_conv_impl impl = layer ? g->conv2 : g->conv1;
	int possible = layer ? cnn_gnet_conv2_possible(g) : g->m.in.c == 1;
	if (!possible || impl == CNN_CONV_CUDNN || k < 0 || (size_t)k >= len)
		return k;
	if (impl == CNN_CONV_DIRECT)
		return k + snprintf(buf + k, len - k, ", conv%d direct%s", layer + 1,
				    layer ? " (tensor cores)" : "");
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		int direct = layer ? a->direct2 : a->direct1;
		k += snprintf(buf + k, len - k, ", batch %d conv%d", a->n, layer + 1);
		for (int c = 0; c < calls && k >= 0 && (size_t)k < len; c++) {
			const float *ms = layer ? a->ms2[c] : a->ms1[c];
			int d = (direct >> c) & 1;
			if (ms[0] > 0.f && ms[1] < 0.f)
				k += snprintf(buf + k, len - k, "%s %s cuDNN %.3f ms (direct could not launch)",
					      c ? "," : "", names[layer][c], ms[0]);
			else if (ms[0] > 0.f || ms[1] > 0.f)
				k += snprintf(buf + k, len - k, "%s %s %s %.3f ms (%s %.3f)", c ? "," : "",
					      names[layer][c], d ? "direct" : "cuDNN", ms[d],
					      d ? "cuDNN" : "direct", ms[!d]);
			else if (layer)
				k = describe_pair(a, buf, len, k);
			else if (g->conv2 == CNN_CONV_AUTO)
				k += snprintf(buf + k, len - k, ", weight gradient %s (with conv2's backward-data)",
					      d ? "direct" : "cuDNN");
			else
				k = describe_pair(a, buf, len, k);
		}
		/* NCHW: the pool's backward, which only cuDNN's calls need */
		if (layer && a->ms_da2 > 0.f && k >= 0 && (size_t)k < len)
			k += snprintf(buf + k, len - k, ", pool backward %.3f ms (%s)", a->ms_da2,
				      (direct & 6) == 6 ? "skipped" : "run");
	}
	return k;
}

/* ", batch N conv2 cuDNN forward A kept (cudnnFind's candidates timed
 * as graphs: A1 t1 ms, A2 t2, ...)" for each of conv2's calls that had
 * candidates timed (retime_cudnn), in cudnnFind's order. */
static int describe_cands(const struct cnn_gnet *g, char *buf, size_t len, int k)
{
	static const char *names[3] = { "forward", "backward-data", "backward-filter" };
	for (int i = 0; i < g->nalgos; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		int kept[3] = { a->fwd[1], a->bwd_data, a->bwd_filter[1] };
		for (int c = 0; c < 3; c++) {
			if (a->ncand[c] < 2 || a->cand_ms[c][0] <= 0.f || k < 0 || (size_t)k >= len)
				continue;
			k += snprintf(buf + k, len - k, ", batch %d conv2 cuDNN %s %d kept "
				      "(cudnnFind's candidates timed as graphs:", a->n, names[c], kept[c]);
			for (int j = 0; j < a->ncand[c] && k >= 0 && (size_t)k < len; j++) {
				if (a->cand_ms[c][j] < 0.f)
					k += snprintf(buf + k, len - k, "%s %d failed", j ? "," : "",
						      a->cand[c][j]);
				else
					k += snprintf(buf + k, len - k, "%s %d %.3f%s", j ? "," : "",
						      a->cand[c][j], a->cand_ms[c][j], j ? "" : " ms");
			}
			if (k >= 0 && (size_t)k < len)
				k += snprintf(buf + k, len - k, ")");
		}
	}
	return k;
}

/* cuDNN's algorithm names (cudnn_cnn.h's enums, their prefix dropped) */
static const char *fwd_algo_name(int a)
{
	static const char *n[] = { "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
				   "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *bwd_data_algo_name(int a)
{
	static const char *n[] = { "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
				   "WINOGRAD_NONFUSED" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *bwd_filter_algo_name(int a)
{
	static const char *n[] = { "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
				   "WINOGRAD_NONFUSED", "FFT_TILING" };
	return a >= 0 && a < (int)(sizeof(n) / sizeof(n[0])) ? n[a] : "?";
}

static const char *math_name(cudnnMathType_t m)
{
	return m == CUDNN_TENSOR_OP_MATH ? "tensor ops" :
	       m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? "tensor ops, converting" :
	       m == CUDNN_FMA_MATH ? "FMA" : "default math";
}

/* ", batch N cuDNN: conv2 forward IMPLICIT_PRECOMP_GEMM (FMA), ..." for
 * each batch size: the algorithm and math of each call cuDNN makes, as
 * kept (cudnnFind's pick, or the candidate retime_cudnn kept), so that
 * two runs' steps can be told apart by what cuDNN ran. */
static int describe_cudnn(const struct cnn_gnet *g, char *buf, size_t len, int k)
{
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		struct {
			int on;
			const char *call, *algo;
			cudnnMathType_t math;
		} c[5] = {
			{ !(a->direct1 & 1), "conv1 forward", fwd_algo_name(a->fwd[0]), a->fwd_math[0] },
			{ !(a->direct1 & 2), "conv1 weight gradient", bwd_filter_algo_name(a->bwd_filter[0]),
			  a->bwd_filter_math[0] },
			{ !(a->direct2 & 1), "conv2 forward", fwd_algo_name(a->fwd[1]), a->fwd_math[1] },
			{ !(a->direct2 & 2), "conv2 backward-data", bwd_data_algo_name(a->bwd_data),
			  a->bwd_data_math },
			{ !(a->direct2 & 4), "conv2 backward-filter", bwd_filter_algo_name(a->bwd_filter[1]),
			  a->bwd_filter_math[1] },
		};
		int n = 0;
		for (int j = 0; j < 5 && k >= 0 && (size_t)k < len; j++) {
			if (!c[j].on)
				continue;
			if (!n++)
				k += snprintf(buf + k, len - k, ", batch %d cuDNN:", a->n);
			if (k >= 0 && (size_t)k < len)
				k += snprintf(buf + k, len - k, "%s %s %s (%s)", n > 1 ? "," : "",
					      c[j].call, c[j].algo, math_name(c[j].math));
		}
	}
	return k;
}

void cnn_gnet_describe(const struct cnn_gnet *g, char *buf, size_t len)
{
	size_t v = cudnnGetVersion();
	int bv = 0;
	cublasGetVersion(g->blas, &bv);
	int k = snprintf(buf, len, "cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d, %s", v / 10000, v / 100 % 100,
			 v % 100, bv / 10000, bv / 100 % 100, bv % 100,
			 g->precision == CNN_PREC_TF32 ?
				 (g->tc ? "TF32" : "TF32 asked, fp32 math (no TF32 before compute capability 8.0)") :
			 g->precision == CNN_PREC_FP32 ? "fp32" : "bf16 with fp32 master weights");
	k = describe_conv(g, buf, len, k, 0);
	k = describe_conv(g, buf, len, k, 1);
	k = describe_cands(g, buf, len, k);
	k = describe_cudnn(g, buf, len, k);
	if (g->fc2 == CNN_FC2_FUSED && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ", fc2 fused");
	/* auto: each batch size's fc2 and the times that chose it */
	for (int i = 0; g->fc2 == CNN_FC2_AUTO && i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		if (!cnn_cuda_fc2_fused_fits(g->m.hidden, g->m.in.classes)) {
			k += snprintf(buf + k, len - k, ", batch %d fc2 cuBLAS (the fused classifier does "
				      "not take %d hidden units and %d classes)", a->n, g->m.hidden,
				      g->m.in.classes);
			continue;
		}
		k += snprintf(buf + k, len - k, ", batch %d fc2 %s %.3f ms (%s %.3f)", a->n,
			      a->fc2 ? "fused" : "cuBLAS", a->ms_fc2[a->fc2], a->fc2 ? "cuBLAS" : "fused",
			      a->ms_fc2[!a->fc2]);
	}
	/* how auto timed the replayed batch's calls (time_call) */
	if (g->graph_timed + g->graph_refused && k >= 0 && (size_t)k < len) {
		k += snprintf(buf + k, len - k, ", batch %d's calls timed as CUDA graphs", g->graph_batch);
		if (g->graph_refused && k >= 0 && (size_t)k < len)
			k += snprintf(buf + k, len - k, " (%d of %d on the stream: no graph of them ran)",
				      g->graph_refused, g->graph_timed + g->graph_refused);
	}
	if (g->fallback[0] && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - k, ", the project's kernels failed to launch here (%s): "
			      "cuDNN there", g->fallback);
	/* the layout; with auto, each batch size's and the times that chose it */
	if (g->layout != CNN_LAYOUT_AUTO) {
		if (k >= 0 && (size_t)k < len)
			snprintf(buf + k, len - k, ", %s", g->layout == CNN_LAYOUT_NHWC ? "NHWC" : "NCHW");
		return;
	}
	for (int i = 0; i < g->nalgos && k >= 0 && (size_t)k < len; i++) {
		const struct cnn_gnet_algos *a = &g->algos[i];
		char other[sizeof(a->why) + 8];
		if (a->ms[!a->nhwc] < 0.f)
			snprintf(other, sizeof(other), "%s", a->why);
		else
			snprintf(other, sizeof(other), "%s %.3f ms", a->nhwc ? "NCHW" : "NHWC",
				 a->ms[!a->nhwc]);
		k += snprintf(buf + k, len - k, ", batch %d %s (convolutions %.3f ms, %s%s)", a->n,
			      a->nhwc ? "NHWC" : "NCHW", a->ms[a->nhwc], other,
			      g->others[i].n == a->n ?
				      "; the step's graph timed in each layout at its capture" : "");
	}
}
