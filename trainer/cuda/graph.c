/* The training step as a CUDA graph (cnn_gpu_capture): captured once per
 * variant the autos leave open (--conv-layout, --conv2, --backward-streams:
 * each variant's graph replayed and timed, the ranks' times summed, the
 * fastest kept; where conv2's picks lose, the mixes of its three calls
 * too), then --pdl's copy with programmatic edges, and the census of the
 * graph kept (its nodes, its longest chain, what each auto timed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/choose.h"
#include "cuda/comm_nccl.h"
#include "cuda/gpu_impl.h"
#include "cuda/pdl.h"

/* h's index in nodes (a step's graph holds tens of nodes), -1: none */
static int node_at(const cudaGraphNode_t *nodes, size_t n, cudaGraphNode_t h)
{
	for (size_t i = 0; i < n; i++)
		if (nodes[i] == h)
			return (int)i;
	return -1;
}

int cnn_graph_chain(size_t n, const int *from, const int *to, size_t ne)
{
	int *depth = calloc(n + 1, sizeof(int)), *waiting = calloc(n + 1, sizeof(int));
	int *queue = calloc(n + 1, sizeof(int)), chain = 0;
	size_t head = 0, tail = 0;
	if (!depth || !waiting || !queue) {
		chain = -2;
		goto out;
	}
	for (size_t e = 0; e < ne; e++) {
		if (from[e] < 0 || (size_t)from[e] >= n || to[e] < 0 || (size_t)to[e] >= n) {
			chain = -1;
			goto out;
		}
		waiting[to[e]]++;
	}
	for (size_t i = 0; i < n; i++)
		if (!waiting[i]) {
			queue[tail++] = (int)i;
			depth[i] = 1;
		}
	while (head < tail) {
		int a = queue[head++];
		if (depth[a] > chain)
			chain = depth[a];
		for (size_t e = 0; e < ne; e++) {
			if (from[e] != a)
				continue;
			int b = to[e];
			if (depth[a] + 1 > depth[b])
				depth[b] = depth[a] + 1;
			if (!--waiting[b])
				queue[tail++] = b;
		}
	}
	if (tail != n)
		chain = -1;
out:
	free(depth);
	free(waiting);
	free(queue);
	return chain;
}

/* c: graph's nodes by kind and its longest chain (cnn_graph_chain). */
static int census(cudaGraph_t graph, int n, struct cnn_graph_census *c, char *err, size_t errlen)
{
	size_t nn = 0, ne = 0;
	cudaGraphNode_t *nodes = NULL, *from = NULL, *to = NULL;
	/* each edge's data too: without it CUDA refuses (cudaErrorLossyQuery)
	 * a graph with a programmatic edge, which cuDNN's NHWC kernels make */
	cudaGraphEdgeData *data = NULL;
	int *fi = NULL, *ti = NULL, rv = -1;
	memset(c, 0, sizeof(*c));
	c->batch = n;
	if (cudaGraphGetNodes(graph, NULL, &nn) != cudaSuccess ||
	    cudaGraphGetEdges(graph, NULL, NULL, NULL, &ne) != cudaSuccess) {
		snprintf(err, errlen, "reading the training step's CUDA graph: %s",
			 cudaGetErrorString(cudaGetLastError()));
		return -1;
	}
	nodes = calloc(nn + 1, sizeof(*nodes));
	from = calloc(ne + 1, sizeof(*from));
	to = calloc(ne + 1, sizeof(*to));
	fi = calloc(ne + 1, sizeof(*fi));
	ti = calloc(ne + 1, sizeof(*ti));
	data = calloc(ne + 1, sizeof(*data));
	if (!nodes || !from || !to || !fi || !ti || !data) {
		snprintf(err, errlen, "no memory for a census of %zu graph nodes", nn);
		goto out;
	}
	if (cudaGraphGetNodes(graph, nodes, &nn) != cudaSuccess ||
	    cudaGraphGetEdges(graph, from, to, data, &ne) != cudaSuccess) {
		snprintf(err, errlen, "reading the training step's CUDA graph: %s",
			 cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	c->nodes = (int)nn;
	for (size_t i = 0; i < nn; i++) {
		enum cudaGraphNodeType t;
		if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
			t = cudaGraphNodeTypeCount;
		c->kernels += t == cudaGraphNodeTypeKernel;
		c->copies += t == cudaGraphNodeTypeMemcpy;
		c->memsets += t == cudaGraphNodeTypeMemset;
		c->other += t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeMemcpy &&
			    t != cudaGraphNodeTypeMemset;
	}
	for (size_t e = 0; e < ne; e++) {
		fi[e] = node_at(nodes, nn, from[e]);
		ti[e] = node_at(nodes, nn, to[e]);
	}
	c->chain = cnn_graph_chain(nn, fi, ti, ne);
	if (c->chain < 0) {
		snprintf(err, errlen, "the training step's CUDA graph: %s",
			 c->chain == -2 ? "no memory for its longest chain" :
					  "a cycle, or an edge to no node");
		goto out;
	}
	rv = 0;
out:
	free(nodes);
	free(from);
	free(to);
	free(fi);
	free(ti);
	free(data);
	return rv;
}

/* --cuda-graph-dot: CUDA's own picture of the graph, kernels named, with
 * their launch shapes (Graphviz: dot -Tsvg). */
static int dot(cudaGraph_t graph, const char *path, char *err, size_t errlen)
{
	cudaError_t e = cudaGraphDebugDotPrint(graph, path, cudaGraphDebugDotFlagsKernelNodeParams);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(err, errlen, "--cuda-graph-dot %s: %s (expected a file this rank can write)",
			 path, cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

/* The training step of n images as a CUDA graph, the backward on the
 * net's streams now; wop_in: the weights' forms current before it. */
static int capture_one(struct cnn_gpu *g, int n, unsigned wop_in, cudaGraph_t *graph, char *err,
		       size_t errlen)
{
	*graph = NULL;
	CUDA(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
	cnn_cuda_record(1);   /* the nodes of this module's kernels (--pdl) */
	int rv = cnn_gpu_step_body(g, n, 0);
	cudaError_t e = cudaStreamEndCapture(g->s, graph);
	cnn_cuda_record(0);
	g->graph_wop_out = g->net.wfresh;
	g->net.wfresh = wop_in;   /* nothing captured has run */
	if (rv < 0 || e != cudaSuccess) {
		if (e == cudaSuccess)
			cudaGraphDestroy(*graph);
		*graph = NULL;
		FAIL("capturing the training step as a CUDA graph (%d backward stream%s): %s "
		     "(--no-graph runs without)", g->net.streams, g->net.streams == 1 ? "" : "s",
		     rv < 0 ? cnn_cuda_last_error() : cudaGetErrorString(e));
	}
	g->net.ws_frozen = 1;
	return 0;
}

/* Replays of the step before tune times it: enough to warm it, and as many
 * timed as fit in about kTuneMs of replays each way (CNN_TUNE_MIN to
 * kTuneMax), by the GPU's clock and the host's: where a replay takes the
 * host longer than the GPU says (an emulated GPU, a loaded host), the
 * host's.  The emulated build (tests/Makefile) times each once: its clock
 * is a model, the same every replay, and a replay there is the CPU's
 * hundreds of milliseconds. */
#ifndef CNN_TUNE_MIN
#define CNN_TUNE_MIN 2
#endif
enum { kTuneMs = 40, kTuneMax = 10 };

static double host_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One replay of ex on g->s; with tm, its time in ms. */
static int replay(struct cnn_gpu *g, cudaGraphExec_t ex, cudaEvent_t ev[2], float *tm, char *err,
		  size_t errlen)
{
	if (cnn_gnet_wop_ensure(&g->net, g->graph_wop_in) < 0)
		FAIL("%s", cnn_cuda_last_error());
	CUDA(cudaEventRecord(ev[0], g->s));
	CUDA(cudaGraphLaunch(ex, g->s));
	CUDA(cudaEventRecord(ev[1], g->s));
	g->net.wfresh = g->graph_wop_out;
	if (cnn_nccl_wait(g->comm, ev[1], g->o.timeout_ms, "--backward-streams auto's replays", err,
			  errlen) < 0)
		return -1;
	if (tm)
		CUDA(cudaEventElapsedTime(tm, ev[0], ev[1]));
	return 0;
}

/* A variant of the step that capture() times: conv2's choices (k2, of
 * cnn_gnet_conv2_variants) by the backward's streams; the weights' forms
 * its forward takes as current and those its optimizer writes. */
struct variant {
	int nhwc, k2, streams, direct1, direct2;
	unsigned wop_in, wop_out;
	cudaGraph_t graph;
	cudaGraphExec_t ex;
	float ms;
	/* its capture's nodes of this module's kernels and NCCL's
	 * (cnn_cuda_recorded) */
	cudaGraphNode_t *rec;
	unsigned char *kinds;
	size_t nrec;
};
enum { kVariants = 2 * 2 * CNN_CONV2_VARIANTS };   /* layouts, conv2's, streams */

/* Each variant's least replay time over the timed replays (v[i].ms),
 * summed over the ranks.  The parameters and the optimizer's state are
 * put back as they were, and the weights' forms made again from them
 * before the next replay.  Every rank replays as often and in the same
 * order (each replay holds the all-reduce): the count comes from the
 * warm-up's times summed over the ranks. */
static int tune(struct cnn_gpu *g, struct variant *v, int nv, int *timed, char *err,
		size_t errlen)
{
	size_t np = g->o.m->nparams, bytes = np * sizeof(float);
	/* warm: each variant's first replay by the GPU's clock, then by the host's */
	float *keep = NULL, warm[2 * kVariants], ms[kVariants];
	cudaEvent_t ev[2] = { NULL, NULL };
	int rv = -1;
	if (cnn_gpu_cu_ok(cudaMalloc((void **)&keep, 3 * bytes), __FILE__, __LINE__, "cudaMalloc") < 0 ||
	    cnn_gpu_cu_ok(cudaEventCreate(&ev[0]), __FILE__, __LINE__, "cudaEventCreate") < 0 ||
	    cnn_gpu_cu_ok(cudaEventCreate(&ev[1]), __FILE__, __LINE__, "cudaEventCreate") < 0) {
		snprintf(err, errlen, "%s", cnn_cuda_last_error());
		goto out;
	}
	const float *state[3] = { g->net.params, g->s1, g->s2 };
	for (int i = 0; i < 3; i++)
		if (cnn_gpu_cu_ok(cudaMemcpyAsync(keep + i * np, state[i], bytes, cudaMemcpyDeviceToDevice, g->s),
			  __FILE__, __LINE__, "cudaMemcpyAsync") < 0) {
			snprintf(err, errlen, "%s", cnn_cuda_last_error());
			goto out;
		}
	/* the upload and the first run of each, timed for the count */
	float most = 0;
	for (int i = 0; i < nv; i++) {
		if (cnn_gpu_cu_ok(cudaGraphUpload(v[i].ex, g->s), __FILE__, __LINE__, "cudaGraphUpload") < 0) {
			snprintf(err, errlen, "%s", cnn_cuda_last_error());
			goto out;
		}
		g->graph_wop_in = v[i].wop_in;
		g->graph_wop_out = v[i].wop_out;
		double t0 = host_ms();
		if (replay(g, v[i].ex, ev, &warm[i], err, errlen) < 0)
			goto out;
		warm[nv + i] = (float)(host_ms() - t0);
	}
	if (g->comm && g->comm->world > 1 &&
	    g->comm->ops->allreduce_sum(g->comm, warm, (size_t)(2 * nv), err, errlen) < 0)
		goto out;
	for (int i = 0; i < 2 * nv; i++)
		most = warm[i] > most ? warm[i] : most;
	float each = most / (float)(g->comm ? g->comm->world : 1);
	int rounds = each > 0 ? (int)(kTuneMs / each) : kTuneMax;
	rounds = rounds < CNN_TUNE_MIN ? CNN_TUNE_MIN : rounds > kTuneMax ? kTuneMax : rounds;
	/* rotate which goes first, so that a drift in the GPU's clocks falls
	 * on each */
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < nv; k++) {
			int i = (r + k) % nv;
			float t;
			g->graph_wop_in = v[i].wop_in;
			g->graph_wop_out = v[i].wop_out;
			if (replay(g, v[i].ex, ev, &t, err, errlen) < 0)
				goto out;
			ms[i] = r == 0 || t < ms[i] ? t : ms[i];
		}
	*timed = rounds;
	if (g->comm && g->comm->world > 1 &&
	    g->comm->ops->allreduce_sum(g->comm, ms, (size_t)nv, err, errlen) < 0)
		goto out;
	for (int i = 0; i < nv; i++)
		v[i].ms = ms[i];
	float *put[3] = { g->net.params, g->s1, g->s2 };
	for (int i = 0; i < 3; i++)
		if (cnn_gpu_cu_ok(cudaMemcpyAsync(put[i], keep + i * np, bytes, cudaMemcpyDeviceToDevice, g->s),
			  __FILE__, __LINE__, "cudaMemcpyAsync") < 0) {
			snprintf(err, errlen, "%s", cnn_cuda_last_error());
			goto out;
		}
	g->net.wfresh = 0;   /* the forms are the replays' parameters' */
	rv = 0;
out:
	/* keep is free once the copies back are done */
	if (keep && cudaStreamSynchronize(g->s) != cudaSuccess && rv == 0) {
		snprintf(err, errlen, "timing the step's variants: %s", cnn_cuda_last_error());
		rv = -1;
	}
	if (keep)
		cudaFree(keep);
	for (int i = 0; i < 2; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	return rv;
}

/* The least time of the variants in layout nhwc (conv2's choice k2 and
 * streams s: -1 any), and the first of them in *at. */
static float least(const struct variant *v, int nv, int nhwc, int k2, int s, int *at)
{
	float best = -1.f;
	*at = -1;
	for (int i = 0; i < nv; i++) {
		if (v[i].nhwc != nhwc || (k2 >= 0 && v[i].k2 != k2) || (s >= 0 && v[i].streams != s))
			continue;
		if (*at < 0)
			*at = i;
		best = best < 0.f || v[i].ms < best ? v[i].ms : best;
	}
	return best;
}

/* The census's account of the variants timed and the one kept: each
 * dimension's times with the others as kept, a layout's with its own
 * best conv2 calls and streams. */
static void census_variants(struct cnn_graph_census *c, const struct variant *v, int nv, int nl,
			    int ns, int nc, int kept, int timed)
{
	const struct variant *k = &v[kept];
	int at;
	c->streams = k->streams;
	c->nhwc = k->nhwc;
	c->tuned = nv > 1 ? timed : 0;
	if (nl == 2) {
		c->layouts_timed = 1;
		for (int l = 0; l < 2; l++)
			c->layout_ms[l] = least(v, nv, l, -1, -1, &at);
	}
	if (ns == 2) {
		c->streams_timed = 1;
		for (int s = 0; s < 2; s++)
			c->ms[s] = least(v, nv, k->nhwc, nc ? k->k2 : -1, s + 1, &at);
	}
	if (nc) {
		c->conv2_variants = nc;
		c->conv2_kept = k->k2;
		for (int j = 0; j < nc; j++) {
			c->conv2_ms[j] = least(v, nv, k->nhwc, j, -1, &at);
			c->conv2_bits[j] = v[at].direct2;
		}
	}
}

static void pdl_drop(cudaGraph_t *pg, cudaGraphExec_t *pex, int *edges)
{
	if (*pex)
		cudaGraphExecDestroy(*pex);
	if (*pg)
		cudaGraphDestroy(*pg);
	*pex = NULL;
	*pg = NULL;
	*edges = 0;
}

/* --pdl: the kept variant k's graph with programmatic edges (cnn_pdl_graph),
 * instantiated (*pg, *pex; NULL where none is made, none says why: --pdl
 * off, a GPU before sm_90, no such edge, or CUDA refused one, which is
 * said as a warning and the run goes on as captured).  Under auto with
 * several ranks none is made unless every rank made one: the replays that
 * time it hold the all-reduce. */
static int pdl_try(struct cnn_gpu *g, const struct variant *k, cudaGraph_t *pg,
		   cudaGraphExec_t *pex, int *edges, char *none, size_t nonelen, char *err,
		   size_t errlen)
{
	char why[256];
	*pg = NULL;
	*pex = NULL;
	*edges = 0;
	if (g->o.pdl == CNN_PDL_OFF) {
		snprintf(none, nonelen, "--pdl off");
		return 0;
	}
	if (g->cc < 90) {
		snprintf(none, nonelen, "the GPU is sm_%d: programmatic launch needs sm_90 or later",
			 g->cc);
	} else if (cnn_pdl_graph(k->graph, k->rec, k->kinds, k->nrec, pg, edges, why, sizeof(why)) < 0) {
		fprintf(stderr, "cnn_train: rank %d: warning: --pdl: the step's graph with programmatic "
			"edges: %s; it replays as captured\n", g->o.rank, why);
		snprintf(none, nonelen, "CUDA refused the edges (the warning above)");
	} else if (!*edges) {
		snprintf(none, nonelen, "no edge from a kernel into one of the project's");
	} else {
		cudaError_t e = cudaGraphInstantiate(pex, *pg, 0);
		if (e != cudaSuccess) {
			cudaGetLastError();
			*pex = NULL;
			fprintf(stderr, "cnn_train: rank %d: warning: --pdl: instantiating the step's graph "
				"with %d programmatic edges: %s; it replays as captured\n", g->o.rank,
				*edges, cudaGetErrorString(e));
			snprintf(none, nonelen, "CUDA refused the graph (the warning above)");
		}
	}
	if (g->o.pdl == CNN_PDL_AUTO && g->comm && g->comm->world > 1) {
		float made = *pex != NULL;
		if (g->comm->ops->allreduce_sum(g->comm, &made, 1, err, errlen) < 0)
			goto drop;
		if ((int)made != g->comm->world && *pex) {
			snprintf(none, nonelen, "%d of the %d ranks made one: all must, to time it",
				 (int)made, g->comm->world);
			goto drop_ok;
		}
	}
	if (!*pex)
		goto drop_ok;
	return 0;
drop_ok:
	pdl_drop(pg, pex, edges);
	return 0;
drop:
	pdl_drop(pg, pex, edges);
	return -1;
}

/* Variant v's choices made the step's (nl, ns, nc: as capture() counts
 * its layouts, streams and conv2's variants); -1 with err. */
static int select_variant(struct cnn_gpu *g, int n, int nl, int ns, int nc, const struct variant *v,
			  char *err, size_t errlen)
{
	if ((nl == 2 && cnn_gnet_set_layout(&g->net, n, v->nhwc) < 0) ||
	    (ns == 2 && cnn_gnet_use_streams(&g->net, v->streams) < 0) ||
	    (nc && cnn_gnet_set_conv2(&g->net, n, v->direct1, v->direct2) < 0)) {
		snprintf(err, errlen, "%s", g->net.err);
		return -1;
	}
	return 0;
}

/* Variant v's step captured (now: what is current before it) and
 * instantiated. */
static int make_variant(struct cnn_gpu *g, int n, unsigned now, int nl, int ns, int nc,
			struct variant *v, char *err, size_t errlen)
{
	struct cnn_cuda_wop w;
	if (select_variant(g, n, nl, ns, nc, v, err, errlen) < 0)
		return -1;
	/* what this variant's optimizer keeps current: its forward takes
	 * them as current, and before each launch (replay(), the step)
	 * cnn_gnet_wop_ensure makes any that are not (a variant in the
	 * other layout, or with conv2's packs, than the eager steps
	 * before it: made once there, not in every replay) */
	v->wop_in = cnn_gnet_wop(&g->net, &w);
	g->net.wfresh = v->wop_in;
	if (capture_one(g, n, now, &v->graph, err, errlen) < 0)
		return -1;
	v->nrec = cnn_cuda_recorded(&v->rec, &v->kinds);
	v->wop_out = g->graph_wop_out;
	cudaError_t e = cudaGraphInstantiate(&v->ex, v->graph, 0);
	if (e != cudaSuccess) {
		v->ex = NULL;
		snprintf(err, errlen, "instantiating the training step's CUDA graph: %s "
			 "(--no-graph runs without)", cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

static void drop_variants(struct variant *v, int nv)
{
	for (int i = 0; i < nv; i++) {
		if (v[i].ex)
			cudaGraphExecDestroy(v[i].ex);
		if (v[i].graph)
			cudaGraphDestroy(v[i].graph);
		free(v[i].rec);
		free(v[i].kinds);
	}
}

/* What cnn_gpu_capture makes and times: the variants of the step (v), the
 * mixes of conv2's calls beside the one kept (mv[0] a copy of it, not its
 * own graph), and the graph with programmatic edges (pg, pex). */
struct capture {
	int n, nl, ns, nc;               /* batch; layouts, streams and conv2's variants timed */
	unsigned now;                    /* the weights' forms current before a replay */
	int lay[2];
	struct variant v[kVariants], mv[1 + CNN_CONV2_MIXES];
	int nv, nm, keep, mixed, timed, mix_timed;
	cudaGraph_t pg;
	cudaGraphExec_t pex;
	int pdl_edges, pdl_tuned, pdl_kept;
	float pdl_ms[2];
	char pdl_none[128];
};

/* The variants to capture: each layout (--conv-layout auto: both, NCHW
 * first on every rank), each of conv2's variants, each stream count.
 * 0, else -1 with err. */
static int list_variants(struct cnn_gpu *g, struct capture *c, char *err, size_t errlen)
{
	int d1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES], d2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES];
	if (c->nl == 2) {
		c->lay[0] = 0;
		c->lay[1] = 1;
	}
	for (int l = 0; l < (c->nl ? c->nl : 1); l++) {
		if (c->nl == 2 && cnn_gnet_set_layout(&g->net, c->n, c->lay[l]) < 0) {
			snprintf(err, errlen, "%s", g->net.err);
			return -1;
		}
		c->nc = cnn_gnet_conv2_variants(&g->net, c->n, d1, d2);
		for (int k = 0; k < (c->nc ? c->nc : 1); k++)
			for (int s = 0; s < c->ns; s++) {
				struct variant *v = &c->v[c->nv++];
				v->nhwc = c->lay[l];
				v->k2 = k;
				v->streams = c->ns == 2 ? s + 1 : g->net.streams;
				v->direct1 = c->nc ? d1[k] : 0;
				v->direct2 = c->nc ? d2[k] : 0;
			}
	}
	return 0;
}

/* Every rank times as many variants (each replay holds the all-reduce):
 * conv2's kernels need the same of each rank's GPU.  0, else -1. */
static int ranks_alike(struct cnn_gpu *g, int nv, char *err, size_t errlen)
{
	if (!g->comm || g->comm->world <= 1)
		return 0;
	float count[kVariants + 1] = { 0 };
	count[nv] = 1;
	if (g->comm->ops->allreduce_sum(g->comm, count, kVariants + 1, err, errlen) < 0)
		return -1;
	if ((int)count[nv] != g->comm->world) {
		snprintf(err, errlen, "capturing the training step: this rank times %d variant%s of it, and %d "
			 "of the %d ranks as many: expected all alike (GPUs that differ in TF32 or bf16 tensor "
			 "cores? --conv2 cudnn or direct, --backward-streams 1 or 2)", nv, nv == 1 ? "" : "s",
			 (int)count[nv], g->comm->world);
		return -1;
	}
	return 0;
}

/* Each variant captured and, where there are several, replayed: the
 * least time kept (a tie to the first: NCHW, one stream, each call's
 * pick).  0, else -1. */
static int time_variants(struct cnn_gpu *g, struct capture *c, char *err, size_t errlen)
{
	float ms[kVariants];
	for (int i = 0; i < c->nv; i++)
		if (make_variant(g, c->n, c->now, c->nl, c->ns, c->nc, &c->v[i], err, errlen) < 0)
			return -1;
	if (c->nv <= 1)
		return 0;
	if (tune(g, c->v, c->nv, &c->timed, err, errlen) < 0)
		return -1;
	for (int i = 0; i < c->nv; i++)
		ms[i] = c->v[i].ms;
	c->keep = cnn_choose_least(ms, c->nv);
	c->keep = c->keep < 0 ? 0 : c->keep;
	return 0;
}

/* conv2's calls as picked lost: their times alone did not foretell the
 * step's (the calls beside each other on two streams, the launches
 * between them), and neither all cuDNN nor all direct need be the best of
 * the rest: each mix of the three is timed beside the one kept, in its
 * layout and streams, the least time kept (a tie to it).  Every rank
 * comes here alike (the times are the ranks' sums) and times as many.
 * 0, else -1. */
static int time_mixes(struct cnn_gpu *g, struct capture *c, char *err, size_t errlen)
{
	int d1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES], d2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES];
	float ms[1 + CNN_CONV2_MIXES];
	const struct variant *k = &c->v[c->keep];
	if (c->nl == 2 && cnn_gnet_set_layout(&g->net, c->n, k->nhwc) < 0) {
		snprintf(err, errlen, "%s", g->net.err);
		return -1;
	}
	cnn_gnet_conv2_variants(&g->net, c->n, d1, d2);
	c->mv[0] = *k;
	for (int j = 0; j < CNN_CONV2_MIXES; j++) {
		struct variant *m = &c->mv[1 + j];
		m->nhwc = k->nhwc;
		m->streams = k->streams;
		m->k2 = CNN_CONV2_VARIANTS + j;
		m->direct1 = d1[CNN_CONV2_VARIANTS + j];
		m->direct2 = d2[CNN_CONV2_VARIANTS + j];
		c->nm++;
		if (make_variant(g, c->n, c->now, c->nl, c->ns, c->nc, m, err, errlen) < 0)
			return -1;
	}
	if (tune(g, c->mv, 1 + c->nm, &c->mix_timed, err, errlen) < 0)
		return -1;
	for (int j = 0; j <= c->nm; j++)
		ms[j] = c->mv[j].ms;
	c->mixed = cnn_choose_least(ms, 1 + c->nm);
	c->mixed = c->mixed < 0 ? 0 : c->mixed;
	return 0;
}

/* --pdl: the kept graph's copy with programmatic edges, timed against it
 * under auto; where kept, swapped into fin (pg, pex then hold the graph
 * without).  0, else -1. */
static int apply_pdl(struct cnn_gpu *g, struct capture *c, struct variant *fin, char *err, size_t errlen)
{
	if (pdl_try(g, fin, &c->pg, &c->pex, &c->pdl_edges, c->pdl_none, sizeof(c->pdl_none), err, errlen) < 0)
		return -1;
	if (c->pex && g->o.pdl == CNN_PDL_AUTO) {
		struct variant w[2] = { *fin, *fin };
		w[1].graph = c->pg;
		w[1].ex = c->pex;
		if (tune(g, w, 2, &c->pdl_tuned, err, errlen) < 0)
			return -1;
		c->pdl_ms[0] = w[0].ms;
		c->pdl_ms[1] = w[1].ms;
	}
	/* on, or auto where it replayed faster (a tie: as captured) */
	c->pdl_kept = cnn_choose_pdl(g->o.pdl == CNN_PDL_ON, c->pex != NULL, c->pdl_ms);
	if (c->pdl_kept) {
		cudaGraph_t tg = fin->graph;
		cudaGraphExec_t tx = fin->ex;
		fin->graph = c->pg;
		fin->ex = c->pex;
		c->pg = tg;
		c->pex = tx;
	}
	return 0;
}

/* The kept graph's census and what the autos timed, for the `# GPU:`
 * lines and --log-json; a count the run can do without: said, not fatal. */
static void record_census(struct cnn_gpu *g, const struct capture *c, const struct variant *fin)
{
	char why[256];
	struct cnn_graph_census *cs = &g->census;
	if (census(fin->graph, c->n, cs, why, sizeof(why)) < 0) {
		memset(cs, 0, sizeof(*cs));
		fprintf(stderr, "cnn_train: rank %d: warning: %s\n", g->o.rank, why);
		return;
	}
	census_variants(cs, c->v, c->nv, c->nl, c->ns, c->nc, c->keep, c->timed);
	cs->conv2_kept_bits = fin->direct2;
	if (c->nm) {
		cs->mixes_timed = c->mix_timed;
		cs->mix_base_ms = c->mv[0].ms;
		for (int j = 0; j < c->nm; j++) {
			cs->mix_bits[j] = c->mv[1 + j].direct2;
			cs->mix_ms[j] = c->mv[1 + j].ms;
		}
		cs->conv2_mixed = c->mixed != 0;
	}
	cs->pdl_edges = c->pdl_edges;
	cs->pdl_kept = c->pdl_kept;
	cs->pdl_timed = c->pdl_tuned;
	memcpy(cs->pdl_ms, c->pdl_ms, sizeof(c->pdl_ms));
	snprintf(cs->pdl_none, sizeof(cs->pdl_none), "%s", c->pdl_none);
}

/* The capture's work, in c (zeroed). */
static int capture(struct cnn_gpu *g, struct capture *c, int n, char *err, size_t errlen)
{
	struct variant *fin;
	int rv = -1;

	c->n = n;
	/* what is current now is what each replay's forward finds current:
	 * what the replay before it wrote (graph_wop_out), else made so */
	c->now = g->net.wfresh;
	c->ns = g->o.streams == CNN_STREAMS_AUTO && g->net.streams_made == 2 ? 2 : 1;
	/* --conv-layout auto: both layouts' (which one cudnnFind picked may
	 * differ between ranks; the variants' times are summed over the ranks
	 * index by index) */
	c->nl = cnn_gnet_layouts(&g->net, n, c->lay);
	if (list_variants(g, c, err, errlen) < 0 || ranks_alike(g, c->nv, err, errlen) < 0)
		return -1;
	if (time_variants(g, c, err, errlen) < 0)
		goto out;
	fin = &c->v[c->keep];
	if (cnn_choose_mixes(c->nc, c->nv, c->v[c->keep].k2)) {
		if (time_mixes(g, c, err, errlen) < 0)
			goto out;
		if (c->mixed)
			fin = &c->mv[c->mixed];
	}
	if (c->nv > 1 && select_variant(g, n, c->nl, c->ns, c->nc, fin, err, errlen) < 0)
		goto out;
	g->graph_wop_in = fin->wop_in;
	g->graph_wop_out = fin->wop_out;
	if (apply_pdl(g, c, fin, err, errlen) < 0)
		goto out;
	if (g->o.graph_dot && g->o.rank == 0 && dot(fin->graph, g->o.graph_dot, err, errlen) < 0)
		goto out;
	record_census(g, c, fin);
	g->exec = fin->ex;
	fin->ex = NULL;
	rv = 0;
out:
	if (c->pex)
		cudaGraphExecDestroy(c->pex);
	if (c->pg)
		cudaGraphDestroy(c->pg);
	/* mv[0] is v[keep]'s copy: v's to free */
	drop_variants(c->v, c->nv);
	drop_variants(c->mv + 1, c->nm);
	return rv;
}

int cnn_gpu_capture(struct cnn_gpu *g, int n, char *err, size_t errlen)
{
	struct capture *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory capturing the training step");
		return -1;
	}
	int rv = capture(g, c, n, err, errlen);
	free(c);
	return rv;
}
