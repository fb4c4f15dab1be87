/* cnn_train's GPU path behind gpu.h: the data set in GPU memory, the
 * training step (gather, forward, backward with the gradient buckets
 * all-reduced on a second stream as soon as each is final, the linear
 * layers' update there beside the convolutions' backward, the rest)
 * captured once as a CUDA graph (graph.c) and replayed, evaluation, and
 * the state's way to and from the host.
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

#include <cuda_profiler_api.h>

#include "cuda/comm_nccl.h"
#include "cuda/gpu_impl.h"
#include "cuda/kernels.h"
#include "cuda/pdl.h"
#include "rng.h"

int cnn_gpu_cu_ok(cudaError_t e, const char *file, int line, const char *call)
{
	if (e == cudaSuccess)
		return 0;
	char m[256];
	snprintf(m, sizeof(m), "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
	cnn_cuda_fail(file, line, call, m);
	return -1;
}

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
	/* the fused classifier reads fp32 h and W4 (no bf16 operands): bf16 keeps cuBLAS's */
	if (o->fc2 == CNN_FC2_FUSED && o->precision == CNN_PREC_BF16)
		FAIL("--fc2 fused: fc2's fused classifier computes in fp32 from fp32 operands: "
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
		 !g->o.graph || g->hcomm ?
			 (g->o.pdl == CNN_PDL_ON ?
				  ", programmatic launch: none (no CUDA graph to put it in)" : "") :
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
int cnn_gpu_step_body(struct cnn_gpu *g, int n, int first)
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
	    cnn_gpu_capture(g, n, err, errlen) < 0)
		return -1;
	if (g->exec && n == g->o.batch) {
		if (cnn_gnet_wop_ensure(&g->net, g->graph_wop_in) < 0)
			FAIL("%s", cnn_cuda_last_error());
		CUDA(cudaGraphLaunch(g->exec, g->s));
		g->net.wfresh = g->graph_wop_out;
	} else {
		if (cnn_gpu_step_body(g, n, first) < 0)
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
