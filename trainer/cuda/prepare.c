/* cnn_gnet_prepare (see net.h): cuDNN's algorithms for a batch size,
 * found by cudnnFind in the layout asked for or, under --conv-layout auto,
 * in both (the graph's batch keeps both); then the autos' choices, each
 * call timed as the step's replay runs it (cnn_gnet_call, net.c):
 * cudnnFind's candidates for conv2's calls timed again at the graph's
 * batch, conv1's and conv2's calls by cuDNN against the project's
 * kernels (in NCHW the backward's pair chosen together), fc2's fused classifier
 * against cuBLAS's calls.  Where a choice of conv2's calls is timed in
 * the step's graph as a whole (cnn_gnet_conv2_variants), graph.c times it. */
#include <stdio.h>
#include <string.h>

#include "net_impl.h"

#include "cuda/choose.h"
#include "cuda/errors.h"
#include "cuda/kernels.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* fp32 takes only FMA kernels; TF32 and bf16 take the fastest of any kind. */
static int math_ok(const struct cnn_gnet *g, cudnnMathType_t t)
{
	return g->precision != CNN_PREC_FP32 || t == CUDNN_FMA_MATH || t == CUDNN_DEFAULT_MATH;
}

const struct cnn_gnet_algos *cnn_gnet_find_algos(const struct cnn_gnet *g, int n)
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n)
			return &g->algos[i];
	return NULL;
}

#define PICK(perf, cnt, out, math, what)                                                     \
	do {                                                                                 \
		int k_ = 0;                                                                  \
		while (k_ < (cnt) && ((perf)[k_].status != CUDNN_STATUS_SUCCESS ||           \
				      !math_ok(g, (perf)[k_].mathType) ||                    \
				      (g->ws_frozen && (perf)[k_].memory > g->ws_bytes)))    \
			k_++;                                                                \
		if (k_ == (cnt)) {                                                           \
			snprintf(g->err, sizeof(g->err), "cuDNN has no %s algorithm for a "  \
				 "batch of %d in %s (%s)", what, n, nhwc ? "NHWC" : "NCHW",  \
				 cnn_precision_name(g->precision));                          \
			return -1;                                                           \
		}                                                                            \
		(out) = (perf)[k_].algo;                                                     \
		(math) = (perf)[k_].mathType;                                                \
		ms += (perf)[k_].time;                                                       \
		if ((perf)[k_].memory > need)                                                \
			need = (perf)[k_].memory;                                            \
	} while (0)

/* conv2's call c: the results PICK would take (its pick first) that
 * cudnnFind timed within CNN_CUDNN_SLACK of that pick, each one's
 * workspace within room; the workspace the call needs grows to theirs. */
#define CANDS(perf, cnt, c, room)                                                            \
	do {                                                                                 \
		float t0_ = -1.f;                                                            \
		a->ncand[c] = 0;                                                             \
		for (int k_ = 0; k_ < (cnt) && a->ncand[c] < CNN_CUDNN_CANDS; k_++) {       \
			if ((perf)[k_].status != CUDNN_STATUS_SUCCESS ||                     \
			    !math_ok(g, (perf)[k_].mathType) || (perf)[k_].memory > (room))  \
				continue;                                                    \
			if (t0_ < 0.f)                                                       \
				t0_ = (perf)[k_].time;                                       \
			else if (!((perf)[k_].time <= t0_ * CNN_CUDNN_SLACK))                \
				break;                                                       \
			a->cand[c][a->ncand[c]] = (int)(perf)[k_].algo;                      \
			a->cand_math[c][a->ncand[c]] = (perf)[k_].mathType;                  \
			a->cand_ms[c][a->ncand[c]++] = 0.f;                                  \
			if ((perf)[k_].memory > need)                                        \
				need = (perf)[k_].memory;                                    \
		}                                                                            \
	} while (0)

/* The workspace conv2's other candidates may take: what is allocated once
 * a graph holds it, else 64 MiB or what the picks already need. */
static size_t cand_room(const struct cnn_gnet *g, size_t need)
{
	size_t cap = (size_t)64 << 20;
	return g->ws_frozen ? g->ws_bytes : need > cap ? need : cap;
}

/* cudnnFind's own failure (NOT_SUPPORTED for a layout, say) goes to
 * g->err without printing: under --conv-layout auto the other layout may
 * still do, and a forced layout's caller reports g->err. */
#define FIND(call, what)                                                                     \
	do {                                                                                 \
		cudnnStatus_t s_ = (call);                                                   \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                            \
			snprintf(g->err, sizeof(g->err), "cudnnFind of the %s convolution for a " \
				 "batch of %d in %s (%s): %s", what, n, nhwc ? "NHWC" : "NCHW", \
				 cnn_precision_name(g->precision), cudnnGetErrorString(s_));  \
			return -1;                                                           \
		}                                                                            \
	} while (0)

/* The five convolution calls' algorithms for batch n in one layout into
 * a, their workspace into *need and cudnnFind's total time into *total. */
static int find_layout(struct cnn_gnet *g, int n, int nhwc, struct cnn_gnet_algos *a,
		       size_t *need_out, float *total)
{
	size_t need = 0;
	float ms = 0.f;
	int cnt;
	cudnnConvolutionFwdAlgoPerf_t fp[16];
	cudnnConvolutionBwdDataAlgoPerf_t dp[16];
	cudnnConvolutionBwdFilterAlgoPerf_t wp[16];
	cudnnTensorDescriptor_t in[2] = { g->tx, g->t1 }, out[2] = { g->t1, g->t2 };

	if (cnn_gnet_descs(g, n, nhwc) < 0)
		return -1;
	for (int l = 0; l < 2; l++) {
		FIND(cudnnFindConvolutionForwardAlgorithm(g->dnn, in[l], cnn_gnet_filt(g, l, nhwc), g->cv[l],
							  out[l], 16, &cnt, fp),
		     "forward");
		PICK(fp, cnt, a->fwd[l], a->fwd_math[l], "forward");
		if (l)
			CANDS(fp, cnt, 0, cand_room(g, need));
		FIND(cudnnFindConvolutionBackwardFilterAlgorithm(g->dnn, in[l], out[l], g->cv[l],
								 cnn_gnet_filt(g, l, nhwc), 16, &cnt, wp),
		     "backward-filter");
		PICK(wp, cnt, a->bwd_filter[l], a->bwd_filter_math[l], "backward-filter");
		if (l)
			CANDS(wp, cnt, 2, cand_room(g, need));
	}
	FIND(cudnnFindConvolutionBackwardDataAlgorithm(g->dnn, cnn_gnet_filt(g, 1, nhwc), g->t2, g->cv[1],
						       g->t1, 16, &cnt, dp),
	     "backward-data");
	PICK(dp, cnt, a->bwd_data, a->bwd_data_math, "backward-data");
	CANDS(dp, cnt, 1, cand_room(g, need));
	*need_out = need;
	*total = ms;
	return 0;
}

static int choose_convs(struct cnn_gnet *g, struct cnn_gnet_algos *a);
static int choose_fc2(struct cnn_gnet *g, struct cnn_gnet_algos *a);
static int retime_cudnn(struct cnn_gnet *g, struct cnn_gnet_algos *a);

int cnn_gnet_prepare(struct cnn_gnet *g, int n)
{
	if (cnn_gnet_find_algos(g, n))
		return 0;
	if (n < 1 || n > g->max_batch) {
		snprintf(g->err, sizeof(g->err), "batch of %d images: expected 1 to %d", n, g->max_batch);
		return -1;
	}
	struct cnn_gnet_algos a = { .n = n }, b = { .n = n, .nhwc = 1 };
	size_t need = 0, needb = 0;
	char why[sizeof(a.why)] = "";
	int oka = g->layout != CNN_LAYOUT_NHWC && find_layout(g, n, 0, &a, &need, &a.ms[0]) == 0;
	if (!oka && g->layout == CNN_LAYOUT_AUTO)
		snprintf(why, sizeof(why), "%s", g->err);
	int okb = g->layout != CNN_LAYOUT_NCHW && find_layout(g, n, 1, &b, &needb, &b.ms[1]) == 0;
	/* auto: a layout cuDNN has no algorithm for loses to the other (its
	 * time -1, its reason kept for the log); neither is the error */
	if (!oka && !okb) {
		if (why[0]) {
			char last[sizeof(g->err)];
			snprintf(last, sizeof(last), "%s", g->err);
			snprintf(g->err, sizeof(g->err), "%s; %s", why, last);
		}
		return -1;
	}
	if (!okb && g->layout == CNN_LAYOUT_AUTO)
		snprintf(why, sizeof(why), "%s", g->err);
	g->err[0] = '\0';
	float ms[2] = { oka ? a.ms[0] : -1.f, okb ? b.ms[1] : -1.f };
	/* the batch whose step replays as a graph keeps both layouts' (where
	 * both have algorithms): graph.c times the step's replay in each */
	int both = g->layout == CNN_LAYOUT_AUTO && oka && okb && n == g->graph_batch;
	int pick_b = cnn_choose_faster(ms[0], ms[1]);
	struct cnn_gnet_algos other = pick_b ? a : b;
	size_t need_a = pick_b ? needb : need, need_o = pick_b ? need : needb;
	if (pick_b)
		a = b;
	need = both && need_o > need_a ? need_o : need_a;
	a.ms[0] = other.ms[0] = ms[0];
	a.ms[1] = other.ms[1] = ms[1];
	snprintf(a.why, sizeof(a.why), "%s", why);
	if (need > g->ws_bytes && !g->ws_frozen) {
		/* with two streams, sw's backward-filter calls have their own */
		void **ws[2] = { &g->ws, &g->wsw };
		for (int i = 0; i < g->streams_made && i < 2; i++) {
			if (*ws[i])
				cudaCheck(cudaFree(*ws[i]));
			*ws[i] = NULL;
			cudaCheck(cudaMalloc(ws[i], need));
		}
		g->ws_bytes = need;
	}
	if (retime_cudnn(g, &a) < 0 || (both && retime_cudnn(g, &other) < 0) ||
	    choose_convs(g, &a) < 0 || choose_fc2(g, &a) < 0 || (both && choose_convs(g, &other) < 0))
		return -1;
	/* fc2's classifier does not depend on the layout */
	other.fc2 = a.fc2;
	memcpy(other.ms_fc2, a.ms_fc2, sizeof(a.ms_fc2));
	if (!both)
		memset(&other, 0, sizeof(other));
	if (g->nalgos == 8) {
		memmove(g->algos, g->algos + 1, 7 * sizeof(a));
		memmove(g->others, g->others + 1, 7 * sizeof(a));
	}
	int i = g->nalgos < 8 ? g->nalgos++ : 7;
	g->algos[i] = a;
	g->others[i] = other;
	return 0;
}

int cnn_gnet_layouts(const struct cnn_gnet *g, int n, int nhwc[2])
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n) {
			nhwc[0] = g->algos[i].nhwc;
			nhwc[1] = g->others[i].nhwc;
			return g->others[i].n == n ? 2 : 1;
		}
	return 0;
}

int cnn_gnet_set_layout(struct cnn_gnet *g, int n, int nhwc)
{
	for (int i = 0; i < g->nalgos; i++) {
		if (g->algos[i].n != n)
			continue;
		if (g->algos[i].nhwc == !!nhwc)
			return 0;
		if (g->others[i].n != n) {
			snprintf(g->err, sizeof(g->err), "batch of %d: no algorithms prepared in %s "
				 "(only the batch whose step replays as a graph has both layouts', "
				 "under --conv-layout auto)", n, nhwc ? "NHWC" : "NCHW");
			return -1;
		}
		struct cnn_gnet_algos t = g->algos[i];
		g->algos[i] = g->others[i];
		g->others[i] = t;
		return 0;
	}
	snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	return -1;
}

/* That call timed on s: CNN_TIME_WARMUP runs, then the mean of
 * CNN_TIME_RUNS, in *ms.  The buffers' contents do not matter (timing
 * only, before any step).  cuemu's build (tests/Makefile) times one run:
 * its clock is a model, the same each run, and every emulated run costs
 * the CPU what a real one costs a GPU a thousand times over. */
#ifndef CNN_TIME_WARMUP
#define CNN_TIME_WARMUP 3
#endif
#ifndef CNN_TIME_RUNS
#define CNN_TIME_RUNS 10
#endif
/* A call of the project's kernels failed while auto timed it: when the
 * failure was the launch's alone (a GPU refusing a kernel it cannot hold:
 * too many resources, no image for it) and the context is sound, cuDNN
 * keeps that call, said once on stderr and in the `# GPU:` line (1);
 * else 0, the failure stands (a fault inside a kernel leaves the context
 * unusable).  --conv1/--conv2 direct never get here: asked for, a
 * failure is an error. */
static int fall_back(struct cnn_gnet *g, const char *what)
{
	char why[sizeof(g->fallback) - 64];
	snprintf(why, sizeof(why), "%s", g->err[0] ? g->err : cnn_cuda_last_error());
	(void)cudaGetLastError();
	if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
		if (!g->err[0])
			snprintf(g->err, sizeof(g->err), "%s, timed at start-up: %s", what, why);
		return 0;
	}
	g->err[0] = 0;
	if (!g->fallback[0]) {
		snprintf(g->fallback, sizeof(g->fallback), "%s: %s", what, why);
		fprintf(stderr, "cnn_train: %s rank %d: warning: the project's kernels for %s failed "
			"to launch at start-up (%s): cuDNN's calls there instead\n",
			cnn_cuda_where_host(), cnn_cuda_where_rank(), what, why);
	}
	return 1;
}

/* That call timed (time_call); 0, or 1 where the project's kernels in it
 * could not launch here and cuDNN stands in (fall_back: *ms -1), or -1. */
/* The call's CNN_TIME_WARMUP runs on the stream (its first runs: lazy
 * loading, cuDNN's plans, as the training step's two eager steps before
 * its capture), then CNN_TIME_RUNS captured as one CUDA graph, uploaded,
 * and replayed once between ev[0] and ev[1]: the GPU's time alone, as
 * the step's replay runs it.  -1 where a run, the capture or a launch
 * failed, the stream out of capture and the error cleared (the caller
 * times it on the stream, where a failure is handled as there). */
static int time_graph(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		      int direct, cudaEvent_t ev[2], float *ms)
{
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	int rv = -1, bad = 0;
	for (int i = 0; i < CNN_TIME_WARMUP; i++)
		if (cnn_gnet_call(g, a, layer, call, direct) < 0)
			goto out;
	if (cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
		goto out;
	for (int i = 0; i < CNN_TIME_RUNS && !bad; i++)
		bad = cnn_gnet_call(g, a, layer, call, direct) < 0;
	if (cudaStreamEndCapture(g->s, &graph) != cudaSuccess || bad ||
	    cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
	    cudaGraphUpload(exec, g->s) != cudaSuccess || cudaEventRecord(ev[0], g->s) != cudaSuccess ||
	    cudaGraphLaunch(exec, g->s) != cudaSuccess || cudaEventRecord(ev[1], g->s) != cudaSuccess ||
	    cudaEventSynchronize(ev[1]) != cudaSuccess ||
	    cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess)
		goto out;
	rv = 0;
out:
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	if (rv < 0) {
		enum cudaStreamCaptureStatus st;
		graph = NULL;
		if (cudaStreamIsCapturing(g->s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone &&
		    cudaStreamEndCapture(g->s, &graph) == cudaSuccess && graph)
			cudaGraphDestroy(graph);
		(void)cudaGetLastError();
		g->err[0] = 0;
	}
	return rv;
}

static int time_call(struct cnn_gnet *g, const struct cnn_gnet_algos *a, int layer, int call,
		     int direct, float *ms)
{
	cudaEvent_t ev[2] = { NULL, NULL };
	int rv = -1;
	/* a failure here is reported by the caller, or recovered from */
	int quiet = cnn_cuda_fail_quiet(1);
	static const char *calls[2][3] = {
		{ "conv1's forward", "conv1's weight gradient" },
		{ "conv2's forward", "conv2's backward-data", "conv2's backward-filter" }
	};
	const char *what = layer == 4 ? "fc2's classifier" :
			   layer == 3 ? "conv2's backward-data with conv1's weight gradient" :
			   layer == 2 ? "the pool's backward" : calls[layer][call];
	if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
		snprintf(g->err, sizeof(g->err), "timing %s: cudaEventCreate failed", what);
		goto out;
	}
	if (a->n == g->graph_batch) {
		if (time_graph(g, a, layer, call, direct, ev, ms) == 0) {
			g->graph_timed++;
			*ms /= (float)CNN_TIME_RUNS;
			rv = 0;
			goto out;
		}
		g->graph_refused++;
	}
	for (int i = 0; i < CNN_TIME_WARMUP + CNN_TIME_RUNS; i++) {
		if (i == CNN_TIME_WARMUP && cudaEventRecord(ev[0], g->s) != cudaSuccess)
			goto out;
		if (cnn_gnet_call(g, a, layer, call, direct) < 0)
			goto out;
	}
	if (cudaEventRecord(ev[1], g->s) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
	    cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess) {
		snprintf(g->err, sizeof(g->err), "timing %s: %s", what,
			 cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	*ms /= (float)CNN_TIME_RUNS;
	rv = 0;
out:
	cnn_cuda_fail_quiet(quiet);
	/* (fc2's fused classifier has no cuDNN to fall back on: its failure stands) */
	if (rv < 0 && direct && layer != 2 && layer != 4 && fall_back(g, what)) {
		*ms = -1.f;
		rv = 1;
	}
	for (int i = 0; i < 2; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	return rv;
}

/* Whether conv1's weight gradient and conv2's backward pair are chosen
 * together (choose_bwd): in NCHW, where conv2's tensor-core kernels can
 * run and a choice is left, since there they read the pool's tensors (a
 * cuDNN call needs the pool's backward written first) and carry conv1's
 * weight gradient (conv1_on_conv2). */
static int joint_bwd(const struct cnn_gnet *g, int nhwc)
{
	int auto1 = g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1;
	return !nhwc && cnn_gnet_conv2_possible(g) &&
	       (g->conv2 == CNN_CONV_AUTO || (g->conv2 == CNN_CONV_DIRECT && auto1));
}

/* A layer's calls for batch a->n (those in the mask time): cuDNN's or the
 * project's kernels as asked (impl), or (auto) each call the faster of the
 * two, timed here, into the bits of *direct and ms[call][direct]; possible
 * 0 (the kernels do not apply: conv1's take one input channel, conv2's
 * TF32 or bf16). */
static int choose_conv(struct cnn_gnet *g, struct cnn_gnet_algos *a, int layer, int calls,
		       int mask, enum cnn_conv_impl impl, int possible, int *direct, float ms[][2])
{
	*direct = 0;
	if (!possible || impl == CNN_CONV_CUDNN)
		return 0;
	if (impl == CNN_CONV_DIRECT) {
		*direct = (1 << calls) - 1;
		return 0;
	}
	if (cnn_gnet_descs(g, a->n, a->nhwc) < 0)
		return -1;
	for (int call = 0; call < calls; call++) {
		if (!(mask >> call & 1))
			continue;
		for (int d = 0; d < 2; d++)
			if (time_call(g, a, layer, call, d, &ms[call][d]) < 0)
				return -1;
		/* ms[call][1] -1: the project's kernels could not launch */
		*direct |= cnn_choose_faster(ms[call][0], ms[call][1]) ? 1 << call : 0;
	}
	return 0;
}

/* joint_bwd: every pair of conv1's weight gradient (where auto) and conv2's
 * backward-data timed together as the step runs them (fused where both
 * are the project's), conv2's backward-filter with its bias's, and the
 * pool's backward; the least of the sums (cnn_choose_bwd). */
static int choose_bwd(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	/* the values each bit may take: 1 (0 only), 2 (1 only), 3 (either) */
	int c1 = g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1 ? 3 : 1 << ((a->direct1 >> 1) & 1);
	int c2 = g->conv2 == CNN_CONV_AUTO ? 3 : 1 << ((a->direct2 >> 1) & 1);
	float dg[2][2] = { { -1.f, -1.f }, { -1.f, -1.f } }, wg[2] = { -1.f, -1.f };
	if (cnn_gnet_descs(g, a->n, a->nhwc) < 0)
		return -1;
	for (int d1 = 0; d1 < 2; d1++)
		for (int d = 0; d < 2; d++)
			if ((c1 >> d1 & 1) && (c2 >> d & 1) &&
			    time_call(g, a, 3, 0, d1 | d << 1, &dg[d1][d]) < 0)
				return -1;
	for (int w = 0; w < 2; w++)
		if ((c2 >> w & 1) && time_call(g, a, 1, 2, w, &wg[w]) < 0)
			return -1;
	if (c2 != 2 && time_call(g, a, 2, 0, 0, &a->ms_da2) < 0)
		return -1;
	int d1 = 0;
	int bits = cnn_choose_bwd((const float (*)[2])dg, wg, a->ms_da2, &d1);
	if (bits < 0) {
		snprintf(g->err, sizeof(g->err), "batch of %d: no backward pair timed (internal)", a->n);
		return -1;
	}
	a->direct1 = (a->direct1 & 1) | d1 << 1;
	a->direct2 = (a->direct2 & 1) | bits;
	for (int i = 0; i < 2; i++) {
		/* -1 where conv2 is auto: its kernels could not launch */
		a->ms2[2][i] = wg[i] > 0.f || c2 == 3 ? wg[i] : 0.f;
		for (int j = 0; j < 2; j++)
			a->msb[i][j] = dg[i][j] > 0.f ? dg[i][j] : 0.f;
	}
	return 0;
}

/* Candidate i of conv2's call c as that call's algorithm. */
static void set_cand(struct cnn_gnet_algos *a, int c, int i)
{
	if (c == 0) {
		a->fwd[1] = (cudnnConvolutionFwdAlgo_t)a->cand[0][i];
		a->fwd_math[1] = a->cand_math[0][i];
	} else if (c == 1) {
		a->bwd_data = (cudnnConvolutionBwdDataAlgo_t)a->cand[1][i];
		a->bwd_data_math = a->cand_math[1][i];
	} else {
		a->bwd_filter[1] = (cudnnConvolutionBwdFilterAlgo_t)a->cand[2][i];
		a->bwd_filter_math[1] = a->cand_math[2][i];
	}
}

/* conv2's cuDNN calls at the graph's batch: each of cudnnFind's
 * candidates timed again as time_call times the calls there (a graph of
 * its runs, the least of them), the fastest kept, before the calls are
 * weighed against the project's kernels.  cudnnFind's pick fails as ever;
 * another candidate that fails to run is left out. */
static int retime_cudnn(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	if (a->n != g->graph_batch || g->conv2 == CNN_CONV_DIRECT)
		return 0;
	if (cnn_gnet_descs(g, a->n, a->nhwc) < 0)
		return -1;
	for (int c = 0; c < 3; c++) {
		if (a->ncand[c] < 2)
			continue;
		for (int i = 0; i < a->ncand[c]; i++) {
			set_cand(a, c, i);
			if (time_call(g, a, 1, c, 0, &a->cand_ms[c][i]) < 0) {
				if (!i || cudaDeviceSynchronize() != cudaSuccess)
					return -1;
				(void)cudaGetLastError();
				g->err[0] = '\0';
				a->cand_ms[c][i] = -1.f;
			}
		}
		/* the first ran (else the call failed above) */
		set_cand(a, c, cnn_choose_least(a->cand_ms[c], a->ncand[c]));
	}
	return 0;
}

static int choose_convs(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	/* with joint_bwd, conv1's weight gradient and conv2's backward pair
	 * are not timed alone */
	int j = joint_bwd(g, a->nhwc);
	if (choose_conv(g, a, 0, 2, j ? 1 : 3, g->conv1, g->m.in.c == 1, &a->direct1, a->ms1) < 0 ||
	    choose_conv(g, a, 1, 3, j ? 1 : 7, g->conv2, cnn_gnet_conv2_possible(g), &a->direct2, a->ms2) < 0)
		return -1;
	return j ? choose_bwd(g, a) : 0;
}

/* fc2's classifier for batch a->n: as asked, or (auto) the faster of cuBLAS's
 * calls and the fused kernel, timed as the convolutions' (time_call). */
static int choose_fc2(struct cnn_gnet *g, struct cnn_gnet_algos *a)
{
	a->fc2 = g->fc2 == CNN_FC2_FUSED;
	if (g->fc2 != CNN_FC2_AUTO)
		return 0;
	/* shapes the fused kernel does not take: cuBLAS's calls, untimed */
	if (!cnn_cuda_fc2_fused_fits(g->m.hidden, g->m.in.classes)) {
		a->ms_fc2[0] = a->ms_fc2[1] = 0.f;
		return 0;
	}
	/* the loss reads logp at each row's label: labels in range (the
	 * batch's own, gathered later in s's order, overwrite them) */
	cudaCheck(cudaMemsetAsync(g->y, 0, (size_t)a->n, g->s));
	for (int f = 0; f < 2; f++)
		if (time_call(g, a, 4, 0, f, &a->ms_fc2[f]) < 0)
			return -1;
	a->fc2 = cnn_choose_faster(a->ms_fc2[0], a->ms_fc2[1]);
	return 0;
}

int cnn_gnet_conv2_variants(const struct cnn_gnet *g, int n,
			    int direct1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES],
			    int direct2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES])
{
	const struct cnn_gnet_algos *a = NULL;
	for (int i = 0; i < g->nalgos && !a; i++)
		a = g->algos[i].n == n ? &g->algos[i] : NULL;
	if (!a || g->conv2 != CNN_CONV_AUTO || !cnn_gnet_conv2_possible(g))
		return 0;
	/* conv1's weight gradient timed beside each backward-data (msb) */
	int c1 = joint_bwd(g, a->nhwc) && g->conv1 == CNN_CONV_AUTO && g->m.in.c == 1;
	for (int k = 0; k < CNN_CONV2_VARIANTS + CNN_CONV2_MIXES; k++) {
		/* a mix's bits, or all direct's (7) */
		int b = k < CNN_CONV2_VARIANTS ? 7 : k - CNN_CONV2_VARIANTS + 1;
		direct1[k] = a->direct1;
		direct2[k] = k == 0 ? a->direct2 : k == 1 ? 0 : g->fallback[0] ? b & a->direct2 : b;
		int d = direct2[k] >> 1 & 1;
		if (k && c1 && a->msb[0][d] > 0.f && a->msb[1][d] > 0.f)
			direct1[k] = (a->direct1 & 1) | (a->msb[1][d] < a->msb[0][d]) << 1;
	}
	return CNN_CONV2_VARIANTS;
}

int cnn_gnet_set_conv2(struct cnn_gnet *g, int n, int direct1, int direct2)
{
	for (int i = 0; i < g->nalgos; i++)
		if (g->algos[i].n == n) {
			g->algos[i].direct1 = direct1;
			g->algos[i].direct2 = direct2;
			return 0;
		}
	snprintf(g->err, sizeof(g->err), "batch of %d: cnn_gnet_prepare was not called", n);
	return -1;
}
