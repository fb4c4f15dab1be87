/* cnn_train's GPU path behind gpu.h: the data set in GPU memory, the
 * training step (gather, forward, backward with the gradient buckets
 * all-reduced on a second stream as soon as each is final, the linear
 * layers' update there beside the convolutions' backward, the rest)
 * captured once as a CUDA graph and replayed, evaluation, and the state's
 * way to and from the host.
 *
 * Over a host backend (gloo: --ddp=gloo, or what a bare --ddp takes on MIG
 * devices and shared GPUs, where NCCL runs no ranks) the gradients go
 * through pinned host memory after the backward, as PyTorch's gloo does
 * for CUDA tensors, and the step runs without a graph.
 *
 * A step's inputs (its indices, the dropout keys, the learning rate) go
 * through two pinned host slots into fixed device buffers, so the graph
 * replays unchanged; the host runs at most one step ahead, waiting (with
 * the NCCL watchdog of comm_nccl.c) for the step that used a slot last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include <cuda_profiler_api.h>

#include "gpu.h"

#include "cuda/check.h"
#include "cuda/comm_nccl.h"
#include "cuda/kernels.h"
#include "cuda/net.h"
#include "cuda/pdl.h"
#include "rng.h"

/* A training step's inputs, in one host-to-device copy: the graph's only
 * node outside it (at batch 64 a step is ~0.36 ms on an H100; a second copy
 * was one more hop between the copy engine and the SMs). */
struct step_in {
	uint64_t key[2];   /* dropout keys of layers 1 and 2 */
	float lr;
	float pad;
	uint32_t idx[];    /* the batch's image indices */
};

struct cnn_gpu {
	struct cnn_gnet net;
	struct cnn_gpu_opts o;
	struct cnn_optim opt;       /* kind and hyper-parameters; state below */
	float *s1, *s2;             /* device optimizer state */
	long long updates;
	struct cnn_comm *comm;      /* NCCL's; NULL: no all-reduce on the GPU */
	struct cnn_comm *hcomm;     /* a host backend's (gloo, world > 1): gradients via h_grads */
	float *h_grads;             /* pinned, nparams */
	int dev, cc;                /* compute capability, major * 10 + minor */
	char name[128];
	cudaStream_t s, cs;         /* compute; the all-reduce and the linear layers' update */
	cudaEvent_t ev_fc, ev_conv, ev_reduced, ev_slot[2], ev_eval, ev_fc_read;
	/* the step being enqueued: its first update (SGD's momentum), and
	 * whether the linear layers' update is already on cs (bucket_ready) */
	int step_first, fc_updated;
	int slot, slot_used[2];
	/* data */
	uint8_t *train_x, *train_y, *test_x, *test_y;
	int ntrain, ntest;
	struct cnn_cuda_norm norm;
	/* step inputs; h_idx[k] is h_in[k]->idx, d_idx d_in->idx */
	uint32_t *h_idx[2], *d_idx;
	struct step_in *h_in[2], *d_in;
	float *h_stats;
	int last_n;
	/* the captured step */
	cudaGraphExec_t exec;
	/* the weights' forms (net.wfresh bits) the graph's forward takes as
	 * current, and those its optimizer writes */
	unsigned graph_wop_in, graph_wop_out;
	int eager_steps;            /* full-batch steps run before capture */
	struct cnn_graph_census census;   /* of the captured graph; batch 0: none */
	char err[512];
};

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
/* A CUDA call inside a function that reports through err. */
#define CU(call) do { if ((call) < 0) FAIL("%s", cnn_cuda_last_error()); } while (0)

static int cu_ok(cudaError_t e, const char *file, int line, const char *call)
{
	if (e == cudaSuccess)
		return 0;
	char m[256];
	snprintf(m, sizeof(m), "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
	cnn_cuda_fail(file, line, call, m);
	return -1;
}
#define CUDA(call) CU(cu_ok((call), __FILE__, __LINE__, #call))

/* slurm-ddp bound this task's CPUs near DDP_GPU_BUSID: say so when CUDA
 * opened another GPU (CUDA_VISIBLE_DEVICES set by hand, or a numbering
 * the plan did not foresee); training goes on, only slower. */
static void plan_check(const char *bus, int dev, const char *host, int rank)
{
	const char *want = getenv("DDP_GPU_BUSID");
	unsigned a[4], b[4];
	if (!want || !*want || sscanf(bus, "%x:%x:%x.%x", &a[0], &a[1], &a[2], &a[3]) != 4 ||
	    sscanf(want, "%x:%x:%x.%x", &b[0], &b[1], &b[2], &b[3]) != 4 || !memcmp(a, b, sizeof(a)))
		return;
	fprintf(stderr, "cnn_train: rank %d (%s): warning: CUDA device %d is %s, but slurm-ddp planned "
		"%s (DDP_GPU_BUSID) and bound this task's CPUs near it (CUDA_VISIBLE_DEVICES=%s); "
		"run ddp-check\n", rank, host, dev, bus, want,
		getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
}

static int gpu_open(struct cnn_gpu **out, const struct cnn_gpu_opts *o, char *err, size_t errlen)
{
	struct cnn_gpu *g = calloc(1, sizeof(*g));
	int count = 0;
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	cnn_cuda_where_set(host, o->rank);
	*out = NULL;
	if (!g)
		FAIL("out of memory");
	*out = g;
	g->o = *o;
	g->opt = *o->opt;
	g->opt.s1 = g->opt.s2 = NULL;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0)
		FAIL("no CUDA device visible (CUDA_VISIBLE_DEVICES=%s): %s",
		     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset",
		     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
	/* The GPU slurm-ddp planned, by bus id: entry LOCAL_RANK of its
	 * permuted list, or under Slurm's own per-task binding (--gpus-per-task)
	 * one of the few this task sees.  Never rank % count: two ranks on one
	 * GPU is what NCCL refuses. */
	const char *planned = getenv("DDP_GPU_BUSID");
	int by_bus = -1;
	if (planned && *planned && cudaDeviceGetByPCIBusId(&by_bus, planned) != cudaSuccess) {
		(void)cudaGetLastError();
		by_bus = -1;
	}
	g->dev = by_bus >= 0 ? by_bus : count == 1 ? 0 : o->local_rank;
	if (g->dev < 0 || g->dev >= count)
		FAIL("LOCAL_RANK %d names GPU %d but %d are visible "
		     "(CUDA_VISIBLE_DEVICES=%s); ask Slurm for a GPU per task (--gres=gpu:N "
		     "or --gpus-per-node=N, with N tasks per node)", o->local_rank, g->dev, count,
		     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
	/* fp32 means fp32: no library may pick TF32 behind our back (and a
	 * later TF32 open in the same process takes back what we set) */
	static int we_set_override;
	if (o->precision == CNN_PREC_FP32 && !getenv("NVIDIA_TF32_OVERRIDE")) {
		setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
		we_set_override = 1;
	} else if (o->precision != CNN_PREC_FP32 && we_set_override) {
		unsetenv("NVIDIA_TF32_OVERRIDE");
		we_set_override = 0;
	}
	CUDA(cudaSetDevice(g->dev));
	struct cudaDeviceProp p;
	char bus[32] = "?";
	CUDA(cudaGetDeviceProperties(&p, g->dev));
	cudaDeviceGetPCIBusId(bus, sizeof(bus), g->dev);
	snprintf(g->name, sizeof(g->name), "%s (sm_%d%d, %s)", p.name, p.major, p.minor, bus);
	g->cc = p.major * 10 + p.minor;
	plan_check(bus, g->dev, host, o->rank);
	if (o->precision == CNN_PREC_BF16 && p.major < 8)
		FAIL("--precision bf16 needs bf16 tensor cores (compute capability 8.0 or newer): "
		     "GPU %d is %s; use tf32 or fp32", g->dev, g->name);
	CUDA(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
	CUDA(cudaStreamCreateWithFlags(&g->cs, cudaStreamNonBlocking));
	cudaEvent_t *evs[] = { &g->ev_fc, &g->ev_conv, &g->ev_reduced, &g->ev_slot[0], &g->ev_slot[1],
			       &g->ev_eval, &g->ev_fc_read };
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		CUDA(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
	int maxb = o->batch > o->eval_batch ? o->batch : o->eval_batch;
	/* auto: both made, one used until the graph's capture times them */
	int auto_streams = o->streams == CNN_STREAMS_AUTO;
	if (o->streams != 0 && o->streams != 1 && o->streams != 2 && !auto_streams)
		FAIL("%d backward streams: expected 1, 2 or auto", o->streams);
	if (cnn_gnet_init(&g->net, o->m, maxb, o->precision, o->layout,
			  auto_streams ? (o->graph ? 2 : 1) : o->streams ? o->streams : 1, o->conv1,
			  o->conv2, g->s) < 0 ||
	    cnn_gnet_use_streams(&g->net, auto_streams ? 1 : g->net.streams) < 0)
		FAIL("%s", g->net.err[0] ? g->net.err : cnn_cuda_last_error());
	/* the head reads fp32 h and W4 (no bf16 operands): bf16 keeps cuBLAS's */
	if (o->fc2 == CNN_FC2_FUSED && o->precision == CNN_PREC_BF16)
		FAIL("--fc2 fused: fc2's fused head computes in fp32 from fp32 operands: "
		     "TF32 or fp32 (bf16 keeps cuBLAS's bf16 GEMMs: --fc2 cublas)");
	g->net.fc2 = o->precision == CNN_PREC_BF16 ? CNN_FC2_CUBLAS : o->fc2;
	g->net.graph_batch = o->graph ? o->batch : 0;
	size_t n = o->m->nparams;
	CUDA(cudaMalloc((void **)&g->s1, n * 4));
	CUDA(cudaMalloc((void **)&g->s2, n * 4));
	CUDA(cudaMemset(g->s1, 0, n * 4));
	CUDA(cudaMemset(g->s2, 0, n * 4));
	size_t in_bytes = sizeof(struct step_in) + (size_t)maxb * 4;
	for (int i = 0; i < 2; i++) {
		CUDA(cudaMallocHost((void **)&g->h_in[i], in_bytes));
		g->h_idx[i] = g->h_in[i]->idx;
	}
	CUDA(cudaMallocHost((void **)&g->h_stats, 2 * sizeof(float)));
	CUDA(cudaMalloc((void **)&g->d_in, in_bytes));
	CUDA(cudaMemset(g->d_in, 0, in_bytes));
	g->d_idx = g->d_in->idx;
	CUDA(cudaDeviceSynchronize());   /* the legacy stream's, before s uses it */
	/* dropout reads each step's keys where the step's inputs land */
	g->net.keys = g->d_in->key;
	/* every batch size the run will see first: the workspace is sized
	 * for each before a graph pins it, and no step waits for a size's
	 * cudnnFind and timings */
	int sizes[4] = { o->batch, o->eval_batch, o->tails[0], o->tails[1] };
	for (int i = 0; i < 4; i++)
		if (sizes[i] > 0 && cnn_gnet_prepare(&g->net, sizes[i]) < 0)
			FAIL("%s", g->net.err[0] ? g->net.err : cnn_cuda_last_error());
	return 0;
}

static void gpu_describe(const struct cnn_gpu *g, char *buf, size_t len)
{
	char lib[3584];   /* main.c prints it in 4096 with the rest */
	cnn_gnet_describe(&g->net, lib, sizeof(lib));
	snprintf(buf, len, "%s, %s, %s%s%s", g->name, lib,
		 g->hcomm ? "no graph (gradients all-reduced through host memory)" :
		 g->o.graph ? "CUDA graph" : "no graph",
		 g->o.streams != CNN_STREAMS_AUTO ?
			 (g->net.streams == 2 ? ", weight gradients on a second stream" : "") :
		 g->o.graph ? ", backward streams auto (1 or 2: the step's graph timed both ways)" :
			      ", backward streams auto: 1 (no graph to time both ways)",
		 g->o.pdl == CNN_PDL_OFF ? "" :
		 !g->o.graph || g->hcomm ? ", programmatic launch: none (no CUDA graph to put it in)" :
		 g->o.pdl == CNN_PDL_ON ? ", programmatic launch on" :
		 ", programmatic launch auto (the step's graph timed with and without)");
}

static void gpu_use_comm(struct cnn_gpu *g, struct cnn_comm *c)
{
	/* NCCL even for a world of 1 (an all-reduce that copies): the path
	 * a multi-GPU run takes, testable on one GPU */
	g->comm = cnn_nccl_comm(c) ? c : NULL;
	/* Another backend's all-reduce is a host call, which no graph can
	 * hold: each step is launched eagerly. */
	g->hcomm = !g->comm && c && c->world > 1 && c->ops && c->ops->allreduce_sum ? c : NULL;
	if (g->hcomm)
		g->o.graph = 0;
}

/* The host backend's all-reduce of the whole gradient, once the backward
 * is done: to pinned memory, summed over the ranks, averaged, back. */
static int host_reduce(struct cnn_gpu *g)
{
	size_t n = g->o.m->nparams;
	char err[512];
	size_t errlen = sizeof(err);
	if (!g->h_grads)
		CUDA(cudaMallocHost((void **)&g->h_grads, n * sizeof(float)));
	CUDA(cudaMemcpyAsync(g->h_grads, g->net.grads, n * sizeof(float), cudaMemcpyDeviceToHost, g->s));
	CUDA(cudaEventRecord(g->ev_reduced, g->s));
	if (cnn_nccl_wait(NULL, g->ev_reduced, g->o.timeout_ms, "the gradients' copy to the host", err,
			  errlen) < 0 ||
	    g->hcomm->ops->allreduce_sum(g->hcomm, g->h_grads, n, err, errlen) < 0) {
		cnn_cuda_fail(__FILE__, __LINE__, g->hcomm->ops->name, err);
		return -1;
	}
	float inv = 1.f / (float)g->hcomm->world;
	for (size_t i = 0; i < n; i++)
		g->h_grads[i] *= inv;
	/* the next step's copy to the host is behind this one on g->s */
	CUDA(cudaMemcpyAsync(g->net.grads, g->h_grads, n * sizeof(float), cudaMemcpyHostToDevice, g->s));
	return 0;
}

/* Copies between the host's memory and the device's go on the compute
 * stream, then wait for it: the streams are non-blocking, so a plain
 * cudaMemcpy (the legacy stream) would not be ordered with their kernels. */
static int copy(struct cnn_gpu *g, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
		char *err, size_t errlen)
{
	if (!bytes)
		return 0;
	CUDA(cudaMemcpyAsync(dst, src, bytes, k, g->s));
	CUDA(cudaStreamSynchronize(g->s));
	return 0;
}

static int upload(struct cnn_gpu *g, uint8_t **d, const void *h, size_t bytes, char *err,
		  size_t errlen)
{
	CUDA(cudaMalloc((void **)d, bytes ? bytes : 1));
	return copy(g, *d, h, bytes, cudaMemcpyHostToDevice, err, errlen);
}

static int gpu_load_data(struct cnn_gpu *g, const struct cnn_dataset *train,
			 const struct cnn_dataset *test, char *err, size_t errlen)
{
	size_t img = (size_t)train->c * train->h * train->w;
	if (upload(g, &g->train_x, train->x, (size_t)train->n * img, err, errlen) < 0 ||
	    upload(g, &g->train_y, train->y, (size_t)train->n, err, errlen) < 0 ||
	    upload(g, &g->test_x, test->x, (size_t)test->n * img, err, errlen) < 0 ||
	    upload(g, &g->test_y, test->y, (size_t)test->n, err, errlen) < 0)
		return -1;
	g->ntrain = train->n;
	g->ntest = test->n;
	cnn_cuda_norm_set(&g->norm, train->c, train->mean, train->std);
	return 0;
}

static int sync_all(struct cnn_gpu *g, const char *what, char *err, size_t errlen)
{
	CUDA(cudaEventRecord(g->ev_eval, g->s));
	return cnn_nccl_wait(g->comm, g->ev_eval, g->o.timeout_ms, what, err, errlen);
}

static int gpu_set_state(struct cnn_gpu *g, const float *params, const struct cnn_optim *opt,
			 char *err, size_t errlen)
{
	size_t n = g->o.m->nparams;
	if (sync_all(g, "setting the parameters", err, errlen) < 0)
		return -1;
	g->net.wfresh = 0;   /* the weights' other forms are the old parameters' */
	if (copy(g, g->net.params, params, n * 4, cudaMemcpyHostToDevice, err, errlen) < 0 ||
	    (opt && opt->s1 && copy(g, g->s1, opt->s1, n * 4, cudaMemcpyHostToDevice, err, errlen) < 0) ||
	    (opt && opt->s2 && copy(g, g->s2, opt->s2, n * 4, cudaMemcpyHostToDevice, err, errlen) < 0))
		return -1;
	if (opt)
		g->updates = opt->updates;
	return 0;
}

static int gpu_get_state(struct cnn_gpu *g, float *params, struct cnn_optim *opt, char *err,
			 size_t errlen)
{
	size_t n = g->o.m->nparams;
	if (sync_all(g, "reading the parameters", err, errlen) < 0)
		return -1;
	if (copy(g, params, g->net.params, n * 4, cudaMemcpyDeviceToHost, err, errlen) < 0 ||
	    (opt && opt->s1 && copy(g, opt->s1, g->s1, n * 4, cudaMemcpyDeviceToHost, err, errlen) < 0) ||
	    (opt && opt->s2 && copy(g, opt->s2, g->s2, n * 4, cudaMemcpyDeviceToHost, err, errlen) < 0))
		return -1;
	if (opt)
		opt->updates = g->updates;
	return 0;
}

/* The update of parameters [lo, hi) on stream on, writing the weights as
 * the next forward reads them (bf16, conv2's packs, OHWI: cnn_gnet_wop) in
 * the same pass. */
static int update(struct cnn_gpu *g, size_t lo, size_t hi, cudaStream_t on)
{
	const float *lr = &g->d_in->lr;
	struct cnn_cuda_wop w;
	unsigned mask = cnn_gnet_wop(&g->net, &w);
	return g->opt.kind == CNN_ADADELTA ?
		cnn_cuda_adadelta_step_range(g->net.params, g->net.grads, g->s1, g->s2, lo, hi, lr,
					     g->opt.rho, g->opt.eps, g->opt.weight_decay,
					     mask ? &w : NULL, on) :
		cnn_cuda_sgd_step_range(g->net.params, g->net.grads, g->s1, lo, hi, lr,
					g->opt.momentum, g->opt.weight_decay, g->step_first,
					mask ? &w : NULL, on);
}

/* Backward's hook.  The linear layers' gradients (98% of the parameters:
 * fc1's 1.18M weights) go to the comm stream cs as soon as they are final
 * (on sw), for NCCL's all-reduce where there are peers; once the backward
 * has read those layers' weights for the last time (on s), their update
 * follows on cs, beside the convolutions' backward, where it took the
 * step's last launch whole.  The convolutions' bucket follows it to cs,
 * and s waits for cs before the rest of the update.  Through a host
 * backend (gloo) all of it waits for the host's all-reduce (host_reduce)
 * and the update runs whole at the end. */
static int bucket_ready(void *ctx, int bucket, cudaStream_t on)
{
	struct cnn_gpu *g = ctx;
	const struct cnn_model *m = g->o.m;
	size_t fc = m->t[P_W3].off;
	char err[512];
	size_t errlen = sizeof(err);
	if (g->hcomm)
		return bucket == CNN_BUCKET_CONV ? host_reduce(g) : 0;
	if (bucket == CNN_FC_WEIGHTS_READ) {
		CUDA(cudaEventRecord(g->ev_fc_read, on));
		CUDA(cudaStreamWaitEvent(g->cs, g->ev_fc_read, 0));
		if (update(g, fc, m->nparams, g->cs) < 0)
			return -1;
		g->fc_updated = 1;
		return 0;
	}
	cudaEvent_t ev = bucket == CNN_BUCKET_FC ? g->ev_fc : g->ev_conv;
	if (bucket == CNN_BUCKET_FC || g->comm) {
		CUDA(cudaEventRecord(ev, on));
		CUDA(cudaStreamWaitEvent(g->cs, ev, 0));
	}
	float *buf = bucket == CNN_BUCKET_FC ? g->net.grads + fc : g->net.grads;
	size_t n = bucket == CNN_BUCKET_FC ? m->nparams - fc : fc;
	if (g->comm && cnn_nccl_allreduce_avg(g->comm, buf, n, g->cs, err, errlen) < 0) {
		cnn_cuda_fail(__FILE__, __LINE__, "cnn_nccl_allreduce_avg", err);
		return -1;
	}
	/* NCCL's last node keeps its edges as captured (--pdl) */
	if (g->comm)
		cnn_cuda_note(g->cs, CNN_NODE_NCCL);
	if (bucket == CNN_BUCKET_CONV) {
		/* join: the rest of the update waits for cs */
		CUDA(cudaEventRecord(g->ev_reduced, g->cs));
		CUDA(cudaStreamWaitEvent(g->s, g->ev_reduced, 0));
	}
	return 0;
}

/* The update, or what bucket_ready left of it (the convolutions'). */
static int optimizer(struct cnn_gpu *g, int first)
{
	g->step_first = first;
	struct cnn_cuda_wop w;
	unsigned mask = cnn_gnet_wop(&g->net, &w);
	int rv = update(g, 0, g->fc_updated ? g->o.m->t[P_W3].off : g->o.m->nparams, g->s);
	g->fc_updated = 0;
	g->net.wfresh = rv == 0 ? mask : 0;
	return rv;
}

/* Everything a step enqueues after its inputs are in d_idx and d_in. */
static int step_body(struct cnn_gpu *g, int n, int first)
{
	struct cnn_gnet *net = &g->net;
	g->step_first = first;
	g->fc_updated = 0;
	/* the batch, gathered by the forward (by conv1's direct forward
	 * itself where it runs: one launch fewer) */
	cnn_gnet_set_batch(net, g->train_x, g->train_y, g->d_idx, &g->norm);
	/* mean over this rank's n; NCCL's average makes it the global mean */
	if (cnn_gnet_forward(net, n, 1, (float)n) < 0 ||
	    cnn_gnet_backward(net, n, bucket_ready, g) < 0 ||
	    optimizer(g, first) < 0)
		return -1;
	return 0;
}

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
	int rv = step_body(g, n, 0);
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
 * timed as fit in about kTuneMs of replays each way (2 to kTuneMax), by the
 * GPU's clock and the host's: where a replay takes the host longer than the
 * GPU says (an emulated GPU, a loaded host), the host's. */
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
	if (cu_ok(cudaMalloc((void **)&keep, 3 * bytes), __FILE__, __LINE__, "cudaMalloc") < 0 ||
	    cu_ok(cudaEventCreate(&ev[0]), __FILE__, __LINE__, "cudaEventCreate") < 0 ||
	    cu_ok(cudaEventCreate(&ev[1]), __FILE__, __LINE__, "cudaEventCreate") < 0) {
		snprintf(err, errlen, "%s", cnn_cuda_last_error());
		goto out;
	}
	const float *state[3] = { g->net.params, g->s1, g->s2 };
	for (int i = 0; i < 3; i++)
		if (cu_ok(cudaMemcpyAsync(keep + i * np, state[i], bytes, cudaMemcpyDeviceToDevice, g->s),
			  __FILE__, __LINE__, "cudaMemcpyAsync") < 0) {
			snprintf(err, errlen, "%s", cnn_cuda_last_error());
			goto out;
		}
	/* the upload and the first run of each, timed for the count */
	float most = 0;
	for (int i = 0; i < nv; i++) {
		if (cu_ok(cudaGraphUpload(v[i].ex, g->s), __FILE__, __LINE__, "cudaGraphUpload") < 0) {
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
	rounds = rounds < 2 ? 2 : rounds > kTuneMax ? kTuneMax : rounds;
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
		if (cu_ok(cudaMemcpyAsync(put[i], keep + i * np, bytes, cudaMemcpyDeviceToDevice, g->s),
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

static int capture(struct cnn_gpu *g, int n, char *err, size_t errlen)
{
	/* what is current now is what each replay's forward finds current:
	 * what the replay before it wrote (graph_wop_out), else made so */
	unsigned now = g->net.wfresh;
	int ns = g->o.streams == CNN_STREAMS_AUTO && g->net.streams_made == 2 ? 2 : 1;
	int d1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES], d2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES];
	int lay[2] = { 0, 0 };
	/* --conv-layout auto: both layouts', NCHW first on every rank (which
	 * one cudnnFind picked may differ between ranks; the variants' times
	 * are summed over the ranks index by index) */
	int nl = cnn_gnet_layouts(&g->net, n, lay), nc = 0, nv = 0, keep = 0, rv = -1, timed = 0;
	cudaGraph_t pg = NULL;
	cudaGraphExec_t pex = NULL;
	int pdl_edges = 0, pdl_tuned = 0;
	float pdl_ms[2] = { 0.f, 0.f };
	char pdl_none[128] = "";
	if (nl == 2) {
		lay[0] = 0;
		lay[1] = 1;
	}
	/* mv: the mixes of conv2's calls (cnn_gnet_conv2_variants), after
	 * the one kept from v (mv[0], a copy of it: not its own graph) */
	struct variant v[kVariants], mv[1 + CNN_CONV2_MIXES], *fin;
	int nm = 0, mixed = 0, mix_timed = 0;
	memset(v, 0, sizeof(v));
	memset(mv, 0, sizeof(mv));
	for (int l = 0; l < (nl ? nl : 1); l++) {
		if (nl == 2 && cnn_gnet_set_layout(&g->net, n, lay[l]) < 0) {
			snprintf(err, errlen, "%s", g->net.err);
			return -1;
		}
		nc = cnn_gnet_conv2_variants(&g->net, n, d1, d2);
		for (int k = 0; k < (nc ? nc : 1); k++)
			for (int s = 0; s < ns; s++) {
				v[nv].nhwc = lay[l];
				v[nv].k2 = k;
				v[nv].streams = ns == 2 ? s + 1 : g->net.streams;
				v[nv].direct1 = nc ? d1[k] : 0;
				v[nv].direct2 = nc ? d2[k] : 0;
				nv++;
			}
	}
	/* every rank times as many variants (each replay holds the
	 * all-reduce): conv2's kernels need the same of each rank's GPU */
	if (g->comm && g->comm->world > 1) {
		float count[kVariants + 1] = { 0 };
		count[nv] = 1;
		if (g->comm->ops->allreduce_sum(g->comm, count, kVariants + 1, err, errlen) < 0)
			return -1;
		if ((int)count[nv] != g->comm->world)
			FAIL("capturing the training step: this rank times %d variant%s of it, and %d of "
			     "the %d ranks as many: expected all alike (GPUs that differ in TF32 or bf16 "
			     "tensor cores? --conv2 cudnn or direct, --backward-streams 1 or 2)", nv,
			     nv == 1 ? "" : "s", (int)count[nv], g->comm->world);
	}
	for (int i = 0; i < nv; i++)
		if (make_variant(g, n, now, nl, ns, nc, &v[i], err, errlen) < 0)
			goto out;
	if (nv > 1) {
		if (tune(g, v, nv, &timed, err, errlen) < 0)
			goto out;
		/* the least time; a tie to the first (NCHW, one stream, each
		 * call's pick) */
		for (int i = 1; i < nv; i++)
			keep = v[i].ms < v[keep].ms ? i : keep;
	}
	fin = &v[keep];
	/* conv2's calls as picked lost: their times alone did not foretell
	 * the step's (the calls beside each other on two streams, the
	 * launches between them), and neither all cuDNN nor all direct need
	 * be the best of the rest: each mix of the three is timed beside
	 * the one kept, in its layout and streams, the least time kept (a
	 * tie to it).  Every rank comes here alike (the times are the
	 * ranks' sums) and times as many. */
	if (nc && nv > 1 && v[keep].k2 != 0) {
		if (nl == 2 && cnn_gnet_set_layout(&g->net, n, v[keep].nhwc) < 0) {
			snprintf(err, errlen, "%s", g->net.err);
			goto out;
		}
		cnn_gnet_conv2_variants(&g->net, n, d1, d2);
		mv[0] = v[keep];
		for (int j = 0; j < CNN_CONV2_MIXES; j++) {
			struct variant *m = &mv[1 + j];
			m->nhwc = v[keep].nhwc;
			m->streams = v[keep].streams;
			m->k2 = CNN_CONV2_VARIANTS + j;
			m->direct1 = d1[CNN_CONV2_VARIANTS + j];
			m->direct2 = d2[CNN_CONV2_VARIANTS + j];
			nm++;
			if (make_variant(g, n, now, nl, ns, nc, m, err, errlen) < 0)
				goto out;
		}
		if (tune(g, mv, 1 + nm, &mix_timed, err, errlen) < 0)
			goto out;
		for (int j = 1; j <= nm; j++)
			mixed = mv[j].ms < mv[mixed].ms ? j : mixed;
		if (mixed)
			fin = &mv[mixed];
	}
	if (nv > 1 && select_variant(g, n, nl, ns, nc, fin, err, errlen) < 0)
		goto out;
	g->graph_wop_in = fin->wop_in;
	g->graph_wop_out = fin->wop_out;
	/* --pdl: the kept graph's copy with programmatic edges, timed
	 * against it under auto */
	if (pdl_try(g, fin, &pg, &pex, &pdl_edges, pdl_none, sizeof(pdl_none), err, errlen) < 0)
		goto out;
	if (pex && g->o.pdl == CNN_PDL_AUTO) {
		struct variant w[2] = { *fin, *fin };
		w[1].graph = pg;
		w[1].ex = pex;
		if (tune(g, w, 2, &pdl_tuned, err, errlen) < 0)
			goto out;
		pdl_ms[0] = w[0].ms;
		pdl_ms[1] = w[1].ms;
	}
	/* on, or auto where it replayed faster (a tie: as captured) */
	int pdl_kept = pex && (g->o.pdl == CNN_PDL_ON || pdl_ms[1] < pdl_ms[0]);
	if (pdl_kept) {
		cudaGraph_t tg = fin->graph;
		cudaGraphExec_t tx = fin->ex;
		fin->graph = pg;
		fin->ex = pex;
		pg = tg;
		pex = tx;
	}
	if (g->o.graph_dot && g->o.rank == 0 && dot(fin->graph, g->o.graph_dot, err, errlen) < 0)
		goto out;
	/* a count the run can do without: said, not fatal */
	char why[256];
	if (census(fin->graph, n, &g->census, why, sizeof(why)) < 0) {
		memset(&g->census, 0, sizeof(g->census));
		fprintf(stderr, "cnn_train: rank %d: warning: %s\n", g->o.rank, why);
	} else {
		census_variants(&g->census, v, nv, nl, ns, nc, keep, timed);
		g->census.conv2_kept_bits = fin->direct2;
		if (nm) {
			g->census.mixes_timed = mix_timed;
			g->census.mix_base_ms = mv[0].ms;
			for (int j = 0; j < nm; j++) {
				g->census.mix_bits[j] = mv[1 + j].direct2;
				g->census.mix_ms[j] = mv[1 + j].ms;
			}
			g->census.conv2_mixed = mixed != 0;
		}
		g->census.pdl_edges = pdl_edges;
		g->census.pdl_kept = pdl_kept;
		g->census.pdl_timed = pdl_tuned;
		memcpy(g->census.pdl_ms, pdl_ms, sizeof(pdl_ms));
		snprintf(g->census.pdl_none, sizeof(g->census.pdl_none), "%s", pdl_none);
	}
	g->exec = fin->ex;
	fin->ex = NULL;
	rv = 0;
out:
	if (pex)
		cudaGraphExecDestroy(pex);
	if (pg)
		cudaGraphDestroy(pg);
	/* mv[0] is v[keep]'s copy: v's to free */
	drop_variants(v, nv);
	drop_variants(mv + 1, nm);
	return rv;
}

static int gpu_graph_census(const struct cnn_gpu *g, struct cnn_graph_census *c)
{
	if (!g->census.batch)
		return 0;
	*c = g->census;
	return 1;
}

static int gpu_train_step(struct cnn_gpu *g, const uint32_t *idx, int n, float lr, uint64_t step,
			  char *err, size_t errlen)
{
	int k = g->slot;
	if (n < 1 || n > g->o.batch)
		FAIL("training step of %d images: expected 1 to %d", n, g->o.batch);
	/* the slot's pinned buffers are free once the step that used them is done */
	if (g->slot_used[k] &&
	    cnn_nccl_wait(g->comm, g->ev_slot[k], g->o.timeout_ms, "training step", err, errlen) < 0)
		return -1;
	memcpy(g->h_idx[k], idx, (size_t)n * 4);
	g->h_in[k]->key[0] = cnn_dropout_key(g->o.seed, step, g->o.rank, 1);
	g->h_in[k]->key[1] = cnn_dropout_key(g->o.seed, step, g->o.rank, 2);
	g->h_in[k]->lr = lr;
	CUDA(cudaMemcpyAsync(g->d_in, g->h_in[k], sizeof(struct step_in) + (size_t)n * 4,
			     cudaMemcpyHostToDevice, g->s));
	if (cnn_gnet_prepare(&g->net, n) < 0)
		FAIL("%s", g->net.err[0] ? g->net.err : cnn_cuda_last_error());
	int first = g->updates == 0;
	/* --cuda-profile-steps: the range a profiler captures (step numbers
	 * from 1, counting the steps a resumed run did before) */
	long long num = g->updates + 1;
	if (g->o.profile_from > 0 && num == g->o.profile_from)
		CUDA(cudaProfilerStart());
	/* Replay the graph for full batches once two eager steps have warmed
	 * up cuDNN, cuBLAS and NCCL's connections (and the first SGD update,
	 * which differs, is done). */
	if (g->o.graph && n == g->o.batch && !first && g->eager_steps >= 2 && !g->exec &&
	    capture(g, n, err, errlen) < 0)
		return -1;
	if (g->exec && n == g->o.batch) {
		if (cnn_gnet_wop_ensure(&g->net, g->graph_wop_in) < 0)
			FAIL("%s", cnn_cuda_last_error());
		CUDA(cudaGraphLaunch(g->exec, g->s));
		g->net.wfresh = g->graph_wop_out;
	} else {
		if (step_body(g, n, first) < 0)
			FAIL("%s", g->net.err[0] ? g->net.err : cnn_cuda_last_error());
		if (n == g->o.batch)
			g->eager_steps++;
	}
	CUDA(cudaEventRecord(g->ev_slot[k], g->s));
	if (g->o.profile_from > 0 && num == g->o.profile_to)
		CUDA(cudaProfilerStop());
	g->slot_used[k] = 1;
	g->slot = k ^ 1;
	g->last_n = n;
	g->updates++;
	return 0;
}

static int gpu_last_loss(struct cnn_gpu *g, float *loss, char *err, size_t errlen)
{
	*loss = 0;
	if (!g->last_n)
		return 0;
	CUDA(cudaMemcpyAsync(g->h_stats, g->net.stats, 2 * sizeof(float), cudaMemcpyDeviceToHost, g->s));
	if (sync_all(g, "training step", err, errlen) < 0)
		return -1;
	*loss = g->h_stats[0] / (float)g->last_n;
	return 0;
}

static int gpu_evaluate(struct cnn_gpu *g, const uint32_t *idx, int n, double *loss_sum,
			long long *correct, char *err, size_t errlen)
{
	struct cnn_gnet *net = &g->net;
	*loss_sum = 0;
	*correct = 0;
	if (n == 0)
		return 0;
	if (n > net->max_batch)
		FAIL("evaluation batch of %d images: expected at most %d", n, net->max_batch);
	/* after the last step: the slots are not in use until the next one */
	if (sync_all(g, "evaluation", err, errlen) < 0)
		return -1;
	if (cnn_gnet_prepare(net, n) < 0)
		FAIL("%s", net->err[0] ? net->err : cnn_cuda_last_error());
	/* every slot is free after sync_all: stage the indices in one */
	memcpy(g->h_idx[g->slot], idx, (size_t)n * 4);
	CUDA(cudaMemcpyAsync(g->d_idx, g->h_idx[g->slot], (size_t)n * 4, cudaMemcpyHostToDevice, g->s));
	cnn_gnet_set_batch(net, g->test_x, g->test_y, g->d_idx, &g->norm);
	if (cnn_gnet_forward(net, n, 0, 0.f) < 0)
		FAIL("%s", net->err[0] ? net->err : cnn_cuda_last_error());
	CUDA(cudaMemcpyAsync(g->h_stats, net->stats, 2 * sizeof(float), cudaMemcpyDeviceToHost, g->s));
	if (sync_all(g, "evaluation", err, errlen) < 0)
		return -1;
	*loss_sum = g->h_stats[0];
	*correct = (long long)g->h_stats[1];
	return 0;
}

static void gpu_close(struct cnn_gpu *g)
{
	if (!g)
		return;
	if (g->s)
		cudaStreamSynchronize(g->s);
	if (g->exec)
		cudaGraphExecDestroy(g->exec);
	cnn_gnet_free(&g->net);
	void *d[] = { g->s1, g->s2, g->train_x, g->train_y, g->test_x, g->test_y, g->d_in };
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		if (d[i])
			cudaFree(d[i]);
	for (int i = 0; i < 2; i++) {
		if (g->h_in[i])
			cudaFreeHost(g->h_in[i]);
	}
	if (g->h_stats)
		cudaFreeHost(g->h_stats);
	if (g->h_grads)
		cudaFreeHost(g->h_grads);
	cudaEvent_t evs[] = { g->ev_fc, g->ev_conv, g->ev_reduced, g->ev_slot[0], g->ev_slot[1], g->ev_eval,
			      g->ev_fc_read };
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i])
			cudaEventDestroy(evs[i]);
	if (g->cs)
		cudaStreamDestroy(g->cs);
	if (g->s)
		cudaStreamDestroy(g->s);
	free(g);
}

int cnn_gpu_debug_step(struct cnn_gpu *g, const float *x, const uint8_t *labels, int n,
		       float *loss, float *logp0, float *grads, char *err, size_t errlen)
{
	struct cnn_gnet *net = &g->net;
	const struct cnn_model *m = g->o.m;
	size_t img = (size_t)m->in.c * m->in.h * m->in.w;
	if (cnn_gnet_prepare(net, n) < 0)
		FAIL("%s", net->err[0] ? net->err : cnn_cuda_last_error());
	if (copy(g, net->x, x, (size_t)n * img * 4, cudaMemcpyHostToDevice, err, errlen) < 0 ||
	    copy(g, net->y, labels, (size_t)n, cudaMemcpyHostToDevice, err, errlen) < 0)
		return -1;
	if (cnn_gnet_forward(net, n, 0, (float)n) < 0 || cnn_gnet_backward(net, n, NULL, NULL) < 0)
		FAIL("%s", net->err[0] ? net->err : cnn_cuda_last_error());
	CUDA(cudaStreamSynchronize(g->s));
	float st[2];
	if (copy(g, st, net->stats, sizeof(st), cudaMemcpyDeviceToHost, err, errlen) < 0 ||
	    copy(g, logp0, net->logp, (size_t)m->in.classes * 4, cudaMemcpyDeviceToHost, err, errlen) < 0 ||
	    copy(g, grads, net->grads, m->nparams * 4, cudaMemcpyDeviceToHost, err, errlen) < 0)
		return -1;
	*loss = st[0] / (float)n;
	return 0;
}

int cnn_gpu_debug_update(struct cnn_gpu *g, float lr, char *err, size_t errlen)
{
	g->h_in[0]->lr = lr;
	if (copy(g, g->d_in, g->h_in[0], sizeof(struct step_in), cudaMemcpyHostToDevice, err, errlen) < 0)
		return -1;
	if (optimizer(g, g->updates == 0) < 0)
		FAIL("%s", cnn_cuda_last_error());
	CUDA(cudaStreamSynchronize(g->s));
	g->updates++;
	return 0;
}

const struct cnn_gpu_api cnn_gpu_api = {
	.abi = CNN_GPU_ABI,
	.open = gpu_open,
	.describe = gpu_describe,
	.comm = &cnn_comm_nccl_ext,
	.use_comm = gpu_use_comm,
	.load_data = gpu_load_data,
	.set_state = gpu_set_state,
	.get_state = gpu_get_state,
	.train_step = gpu_train_step,
	.last_loss = gpu_last_loss,
	.evaluate = gpu_evaluate,
	.close = gpu_close,
	.graph_census = gpu_graph_census,
};
