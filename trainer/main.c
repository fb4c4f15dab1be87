/* cnn_train: data-parallel training of a CNN, in C.
 *
 * Reads its rank and rendezvous from the environment (what slurm-ddp's
 * plugin, torchrun or a person set), trains with gradients averaged over
 * all ranks, evaluates each epoch, checkpoints, and reports where the time
 * went (report.c).  This file drives both paths: the CPU's kernels are in
 * ops_cpu.c and its network in model.c; the GPU path is a module behind gpu.h
 * (cnn_train_cuda.so, opened on --device cuda or auto); communication is
 * behind comm.h (gloo on CPUs, NCCL from the module on GPUs). */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "ckpt.h"
#include "comm.h"
#include "data.h"
#include "gpu.h"
#include "ddpenv.h"
#include "conv_dnnl.h"
#include "model.h"
#include "optim.h"
#include "run.h"

extern char **environ;


static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* wall-clock time, comparable across processes and nodes */
static double unix_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void cnn_run_die(struct run *R, const char *fmt, ...)
{
	va_list ap, ap2;
	char why[1024];
	int off = snprintf(why, sizeof(why), "rank %d (%s): ", R->rank.rank, R->host);
	fprintf(stderr, "cnn_train: %s rank %d: ", R->host, R->rank.rank);
	va_start(ap, fmt);
	va_copy(ap2, ap);
	vfprintf(stderr, fmt, ap);
	vsnprintf(why + off, sizeof(why) - (size_t)off, fmt, ap2);
	va_end(ap2);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stdout);
	/* Leave the store cleanly, saying why first: peers then name only
	 * ranks that really died, a peer that NCCL's kernels keep waiting
	 * (within a node) stops now, gloo's peers stop now too (their
	 * connections to this rank reset), and rank 0 answers their
	 * questions for a few seconds. */
	if (R->comm && R->comm->store) {
		cnn_comm_mark_failed(R->comm, why);
		cnn_comm_abandon(R->comm);
		ddpenv_store_close_within(R->comm->store, R->rank.rank == 0 ? 5000 : 0);
	}
	/* A failed rank must not wait for peers that wait for it: leave now,
	 * the store sees us gone and the survivors name us. */
	_exit(1);
}

void cnn_run_comm_failed(struct run *R, char *err, size_t errlen)
{
	cnn_comm_explain_failure(R->comm, err, errlen);
	cnn_run_die(R, "%s", err);
}

/* A GPU call failed.  The module's watchdog words its failures "NCCL
 * ...", "... a peer's connection to the rendezvous closed; ..." or "... not done after N s" (the
 * communicator is already aborted), and an NCCL call that returned
 * ncclRemoteError says "remote process exited or there was a network
 * error": name the rank that died or left then.  Anything else is CUDA's,
 * cuDNN's or this rank's own NCCL error. */
static void gpu_failed(struct run *R, char *err, size_t errlen)
{
	if (strncmp(err, "NCCL", 4) == 0 || strstr(err, "peer") || strstr(err, "not done after") ||
	    strstr(err, "remote process exited"))
		cnn_run_comm_failed(R, err, errlen);
	cnn_run_die(R, "step %lld: %s", R->steps, err);
}

static void on_fc_ready(void *ctx)
{
	struct run *R = ctx;
	struct cnn_model *m = &R->model;
	size_t off = m->t[P_W3].off;
	cnn_reducer_push(&R->red, m->grads + off, m->nparams - off);
}

static void progress(struct run *R, int epoch, long long b, long long nb, float loss, double ips,
		     int final)
{
	if (R->rank.rank != 0)
		return;
	if (R->progress_bar) {
		int width = 30, done = nb ? (int)(width * b / nb) : width;
		char bar[64];
		for (int i = 0; i < width; i++)
			bar[i] = i < done ? '#' : '.';
		bar[width] = 0;
		printf("\repoch %d/%d [%s] %lld/%lld loss %.4f %.0f img/s%s", epoch + 1,
		       R->args.epochs, bar, b, nb, loss, ips, final ? "\n" : "");
	} else {
		printf("epoch %d/%d step %lld/%lld loss %.4f images/s %.0f\n", epoch + 1,
		       R->args.epochs, b, nb, loss, ips);
	}
	fflush(stdout);
}

/* Sharded evaluation: rank r takes r, r+world, ... (no padding, so every
 * test image counts once); sums are all-reduced. */
static void evaluate(struct run *R)
{
	char err[1024];
	int world = R->rank.world, rank = R->rank.rank;
	int nloc = 0;
	for (int i = rank; i < R->test.n; i += world)
		R->eval_idx[nloc++] = (uint32_t)i;
	double loss = 0;
	long long good = 0;
	for (int off = 0; off < nloc; off += R->eval_batch) {
		int n = nloc - off < R->eval_batch ? nloc - off : R->eval_batch;
		int correct = 0;
		if (R->gpu) {
			double ls;
			long long c;
			if (R->gpu_api->evaluate(R->gpu, R->eval_idx + off, n, &ls, &c, err, sizeof(err)) < 0)
				gpu_failed(R, err, sizeof(err));
			loss += ls;
			good += c;
			continue;
		}
		cnn_data_gather(&R->test, R->eval_idx + off, n, R->acts.x, R->ybuf);
		float l;
		if (cnn_forward(&R->model, &R->acts, R->ybuf, n, 0, 0, 0, rank, &l, &correct) < 0)
			cnn_run_die(R, "evaluation: %s", R->acts.err);
		loss += (double)l * n;
		good += correct;
	}
	/* floats hold these sums exactly up to 2^24 images */
	float s[3] = { (float)loss, (float)good, (float)nloc };
	if (cnn_comm_allreduce_sum(R->comm, s, 3, err, sizeof(err)) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	R->test_loss = s[2] > 0 ? s[0] / s[2] : 0;
	R->test_acc = s[2] > 0 ? s[1] / s[2] : 0;
	R->evaluated = 1;
	if (rank == 0) {
		printf("test: loss %.4f accuracy %.2f%% (%d images)\n", R->test_loss,
		       100.0 * R->test_acc, (int)s[2]);
		fflush(stdout);
	}
}

/* The GPU's parameters and optimizer state into R->model and R->opt. */
static void fetch_state(struct run *R)
{
	char err[1024];
	if (R->gpu && R->gpu_api->get_state(R->gpu, R->model.params, &R->opt, err, sizeof(err)) < 0)
		gpu_failed(R, err, sizeof(err));
}

static void save_ckpt(struct run *R, int epoch, long long step_in_epoch)
{
	if (!R->args.checkpoint_dir || R->rank.rank != 0)
		return;
	char err[1024];
	struct cnn_ckpt_pos pos = { epoch, step_in_epoch, R->steps, R->args.seed, R->rank.world, R->args.batch };
	fetch_state(R);
	if (cnn_ckpt_save(R->args.checkpoint_dir, &R->model, &R->opt, &pos, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);
}

/* Every rank must run the same schedule of collectives on the same kind
 * of backend: compare the options that shape them, and the device each
 * rank ended up on, with rank 0's, once the store is joined and before
 * any backend's rendezvous (cnn_comm_opts.joined).  Every rank learns the
 * verdict at a barrier, so a disagreement stops them all at once, rank 0
 * naming the first rank that differs, instead of leaving some waiting in
 * a rendezvous the others never join. */
static int same_options(void *ctx, struct ddpenv_store *st, char *err, size_t errlen)
{
	struct run *R = ctx;
	const struct cnn_args *a = &R->args;
	char mine[512];
	void *v = NULL;
	size_t l = 0;
	int64_t bad = 0;
	snprintf(mine, sizeof(mine), "data=%s epochs=%d max-steps=%lld eval=%d batch-size=%d "
		 "optimizer=%d lr=%g momentum=%g weight-decay=%g schedule=%d seed=%llu "
		 "train=%d test=%d dropout=%d checkpoint-every=%lld stop-every=%lld device=%s precision=%s "
		 "shm-allreduce=%d",
		 a->data, a->epochs, a->max_steps, a->eval, a->batch, (int)a->optim, a->lr,
		 a->momentum, a->weight_decay, (int)a->sched.kind, a->seed, R->train.n,
		 R->test.n, !a->no_dropout, a->checkpoint_every, a->stop_every, R->gpu ? "cuda" : "cpu",
		 R->gpu ? cnn_precision_name((enum cnn_precision)a->precision) : "fp32", a->shm_allreduce);
	if (R->rank.rank == 0) {
		if (ddpenv_store_set(st, "options/0", mine, strlen(mine), err, errlen) < 0)
			return -1;
	} else {
		if (ddpenv_store_get(st, "options/0", -1, &v, &l, err, errlen) < 0)
			return -1;
		if (l != strlen(mine) || memcmp(v, mine, l) != 0) {
			char who[600];
			int64_t nth = 0;
			snprintf(who, sizeof(who), "rank %d on %s: %s", R->rank.rank, R->host, mine);
			if (ddpenv_store_add(st, "options/bad", 1, &nth, err, errlen) < 0 ||
			    (nth == 1 && ddpenv_store_set(st, "options/first-bad", who, strlen(who), err,
							 errlen) < 0)) {
				free(v);
				return -1;
			}
			snprintf(err, errlen, "options differ from rank 0's, so the ranks would not run "
				 "the same collectives%s:\n  rank 0: %.*s\n  this:   %s",
				 !R->gpu != !strstr((char *)v, "device=cuda") ? " (device=auto puts a rank on "
				 "its GPU only where it sees one: give every node GPUs, or say --device)" : "",
				 (int)l, (char *)v, mine);
			free(v);
			/* at the barrier with the others, so none waits for us */
			char e2[256];
			ddpenv_store_barrier(st, "options", e2, sizeof(e2));
			return -1;
		}
		free(v);
	}
	if (ddpenv_store_barrier(st, "options", err, errlen) < 0 ||
	    ddpenv_store_add(st, "options/bad", 0, &bad, err, errlen) < 0)
		return -1;
	if (bad == 0)
		return 0;
	if (R->rank.rank != 0) {
		snprintf(err, errlen, "stopping: %lld rank%s options differ from rank 0's (rank 0 "
			 "names %s)", (long long)bad, bad == 1 ? "'s" : "s'", bad == 1 ? "it" : "the first");
		return -1;
	}
	if (ddpenv_store_get(st, "options/first-bad", -1, &v, &l, err, errlen) < 0)
		return -1;
	snprintf(err, errlen, "%lld rank%s options differ from rank 0's, so the ranks would not "
		 "run the same collectives; the first:\n  rank 0: %s\n  %.*s", (long long)bad,
		 bad == 1 ? "'s" : "s'", mine, (int)l, (char *)v);
	free(v);
	return -1;
}

/* The GPU module: $CNN_TRAIN_CUDA_MODULE, else next to this program
 * (../lib, the build tree), else where make install put it. */
static const struct cnn_gpu_api *load_gpu_module(char *why, size_t len)
{
	char exe[4096], cand[3][4200];
	const char *env = getenv("CNN_TRAIN_CUDA_MODULE");
	int n = 0;
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (env && *env)
		snprintf(cand[n++], sizeof(cand[0]), "%s", env);
	else {
		if (l > 0) {
			exe[l] = 0;
			snprintf(cand[n++], sizeof(cand[0]), "%s/../lib/" CNN_GPU_MODULE, dirname(exe));
		}
		snprintf(cand[n++], sizeof(cand[0]), "%s/" CNN_GPU_MODULE, CNN_MODULE_DIR);
	}
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		void *h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			const char *e = dlerror();
			if (access(cand[i], F_OK) == 0 || i == n - 1 || env)
				off += (size_t)snprintf(why + off, off < len ? len - off : 0, "%s%s%s%s",
							off ? "; " : "", e ? "" : cand[i],
							e ? "" : ": dlopen failed", e ? e : "");
			continue;
		}
		const struct cnn_gpu_api *api = dlsym(h, "cnn_gpu_api");
		if (!api || api->abi != CNN_GPU_ABI) {
			snprintf(why, len, "%s: %s", cand[i], !api ? "has no cnn_gpu_api" :
				 "built for another cnn_train (GPU module ABI differs)");
			dlclose(h);
			return NULL;
		}
		return api;
	}
	return NULL;
}

#ifndef CNN_MODULE_DIR
#define CNN_MODULE_DIR "/usr/local/lib/slurm-ddp"
#endif

/* --device cuda or auto: open this rank's GPU; 0 when the run stays on
 * the CPU (auto without a GPU), dies when cuda cannot be had. */
static int open_gpu(struct run *R, int maxb)
{
	char why[1024] = "", err[1024];
	int want = strcmp(R->args.device, "cuda") == 0;
	if (strcmp(R->args.device, "cpu") == 0)
		return 0;
	/* auto on a node without the NVIDIA driver: do not load CUDA at all */
	if (!want && access("/dev/nvidiactl", F_OK) != 0) {
		snprintf(R->device_note, sizeof(R->device_note), "no NVIDIA driver here: /dev/nvidiactl "
			 "is absent");
		return 0;
	}
	const struct cnn_gpu_api *api = load_gpu_module(why, sizeof(why));
	if (!api) {
		if (want)
			cnn_run_die(R, "--device=cuda: the GPU module does not load: %s", why);
		snprintf(R->device_note, sizeof(R->device_note), "GPU module: %s", why);
		return 0;
	}
	/* the step runs as a CUDA graph unless asked not to, or unless its
	 * all-reduce is gloo's host call (several ranks not on NCCL: see the
	 * backend's choice below), which no graph holds */
	int graph = !R->args.no_graph && !(R->rank.world > 1 && R->rank.backend == DDPENV_BACKEND_GLOO);
	struct cnn_gpu_opts o = { &R->model, R->args.batch, maxb, R->rank.local_rank,
				  (enum cnn_precision)R->args.precision, graph, &R->opt, R->args.seed,
				  R->rank.rank, R->rank.world, R->args.timeout_s * 1000,
				  (enum cnn_layout)R->args.conv_layout, R->args.streams, R->args.profile_from,
				  R->args.profile_to, (enum cnn_conv_impl)R->args.conv1,
				  (enum cnn_conv_impl)R->args.conv2, R->args.graph_dot,
				  (enum cnn_fc2_impl)R->args.fc2, (enum cnn_pdl)R->args.pdl, { 0, 0 } };
	/* an epoch's last batch (the sampler's share of each rank) and the
	 * evaluation's (this rank's test images), where smaller */
	int world = R->rank.world, per_rank = (R->train.n + world - 1) / world;
	int nloc = (R->test.n - R->rank.rank + world - 1) / world;
	o.tails[0] = per_rank % R->args.batch;
	o.tails[1] = nloc > 0 ? nloc % maxb : 0;
	struct cnn_gpu *gpu = NULL;
	if (api->open(&gpu, &o, err, sizeof(err)) < 0) {
		api->close(gpu);
		if (want)
			cnn_run_die(R, "--device=cuda: %s", err);
		snprintf(R->device_note, sizeof(R->device_note), "%s", err);
		return 0;
	}
	R->gpu_api = api;
	R->gpu = gpu;
	/* an unwritable --cuda-graph-dot said now, not after the first steps */
	if (R->args.graph_dot && R->rank.rank == 0) {
		FILE *f = fopen(R->args.graph_dot, "w");
		if (!f)
			cnn_run_die(R, "--cuda-graph-dot %s: %s", R->args.graph_dot, strerror(errno));
		fclose(f);
	}
	return 1;
}

/* The rank from the environment and the options (their defaults from
 * DDP_DATA_DIR and OMP_NUM_THREADS); exits 0 after --help, 2 on a usage
 * error. */
static void read_args(struct run *R, int argc, char **argv)
{
	char err[1024];
	struct ddpenv_env env;

	ddpenv_env_init(&env);
	if (ddpenv_env_from_envp(&env, environ) < 0)
		cnn_run_die(R, "out of memory reading the environment");
	if (ddpenv_rank_read(&env, &R->rank, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnn_train: %s: %s\n", R->host, err);
		exit(2);
	}
	const char *ddir = ddpenv_env_get(&env, "DDP_DATA_DIR");
	const char *omp = ddpenv_env_get(&env, "OMP_NUM_THREADS");
	char ompbuf[16] = "";
	if (omp) {   /* "8,2" (nested levels): the first level is ours */
		snprintf(ompbuf, sizeof(ompbuf), "%.*s", (int)strcspn(omp, ","), omp);
		omp = ompbuf;
	}
	int rv = cnn_args_parse(&R->args, argc, argv, ddir, omp, err, sizeof(err));
	if (rv == 1)
		exit(0);
	if (rv < 0) {
		fprintf(stderr, "cnn_train: %s\n", err);
		cnn_args_usage(stderr);
		exit(2);
	}
	/* the environment snapshot's strings back the defaults: keep them */
	size_t dl = strlen(R->args.data_dir);
	if (dl >= sizeof(R->data_dir)) {
		fprintf(stderr, "cnn_train: the data folder (--data-dir or DDP_DATA_DIR) is %zu bytes long; expected "
			"a path under %zu bytes\n", dl, sizeof(R->data_dir));
		exit(2);
	}
	memcpy(R->data_dir, R->args.data_dir, dl + 1);
	R->args.data_dir = R->data_dir;
	ddpenv_env_free(&env);
}

/* The data set (cut to --train-limit and --test-limit), the model and its
 * initial parameters, the optimizer.  Returns the data's kind. */
static const char *load_model(struct run *R)
{
	char err[1024];
	const char *kind = strcmp(R->args.data, "cifar10") == 0 || strcmp(R->args.data, "synthetic") == 0
			   ? R->args.data : "idx";
	if (cnn_data_load(kind, R->args.data_dir, &R->train, &R->test, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);
	if (R->args.train_limit && R->args.train_limit < R->train.n)
		R->train.n = (int)R->args.train_limit;
	if (R->args.test_limit && R->args.test_limit < R->test.n)
		R->test.n = (int)R->args.test_limit;

	struct cnn_shape sh = { R->train.c, R->train.h, R->train.w, R->train.classes };
	if (cnn_model_init(&R->model, sh, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);
	if (R->args.no_dropout)
		R->model.p_drop1 = R->model.p_drop2 = 0.f;
	cnn_model_init_params(&R->model, R->args.seed);
	R->opt.lr = R->args.lr;
	R->opt.momentum = R->args.momentum;
	R->opt.weight_decay = R->args.weight_decay;
	if (cnn_optim_init(&R->opt, R->args.optim, R->model.nparams) < 0)
		cnn_run_die(R, "out of memory for the optimizer");
	return kind;
}

/* gloo's ranks all on this node: their all-reduce through shared memory
 * (comm_shm.c), unless --shm-allreduce off; R->allreduce says which.  The
 * CPU's gradients then live in the segment, where the all-reduce sums
 * them without a copy. */
static void use_shm(struct run *R, int nccl)
{
	char why[256] = "", err[1024];
	int r = 0;

	if (R->rank.world == 1 || nccl) {
		snprintf(R->allreduce, sizeof(R->allreduce), "%s", nccl ? "nccl" : "none (one rank)");
		return;
	}
	if (R->args.shm_allreduce &&
	    (r = cnn_comm_use_shm(R->comm, R->args.timeout_s * 1000, R->gpu ? 0 : R->model.nparams, why, sizeof(why), err,
				  sizeof(err))) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	if (r > 0 && cnn_comm_shm_buffer(R->comm))
		cnn_model_lend_grads(&R->model, cnn_comm_shm_buffer(R->comm));
	if (r > 0)
		snprintf(R->allreduce, sizeof(R->allreduce), "shared memory (every rank on this node)");
	else
		snprintf(R->allreduce, sizeof(R->allreduce), "gloo (%.300s)",
			 R->args.shm_allreduce ? why : "--shm-allreduce off");
}

/* The communicator.  GPUs all-reduce with NCCL, unless the step said gloo
 * (--ddp=gloo, or a bare --ddp on MIG devices or shared GPUs, where NCCL
 * runs no ranks): then through host memory, as PyTorch's gloo does.  One
 * rank has nothing to average: no communicator (NCCL's set-up takes ~0.4
 * s) and no collectives (NCCL's one-rank average is still a kernel over
 * every gradient), as a single-process PyTorch script. */
static void open_comm(struct run *R, int gpu)
{
	char err[1024];
	int nccl = gpu && R->rank.world > 1 && R->rank.backend != DDPENV_BACKEND_GLOO;
	const char *backend = nccl ? "nccl" : "gloo";
	if (R->rank.backend == DDPENV_BACKEND_NCCL && !gpu && R->rank.rank == 0 && R->rank.world > 1)
		fprintf(stderr, "cnn_train: DDP_BACKEND=nccl but this run is on CPUs: using gloo\n");
	struct cnn_comm_opts co = { backend, R->rank.master_addr, R->rank.master_port, R->rank.rank,
				    R->rank.world, R->rank.gloo_ifname[0] ? R->rank.gloo_ifname : NULL,
				    R->rank.token[0] ? R->rank.token : NULL, R->args.timeout_s * 1000,
				    nccl ? R->gpu_api->comm : NULL, same_options, R };
	if (cnn_comm_open(&R->comm, &co, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);
	use_shm(R, nccl);
	if (gpu) {
		R->gpu_api->use_comm(R->gpu, R->comm);
		if (R->gpu_api->load_data(R->gpu, &R->train, &R->test, err, sizeof(err)) < 0)
			cnn_run_die(R, "%s", err);
	} else if (cnn_reducer_start(&R->red, R->comm) < 0) {
		cnn_run_die(R, "cannot start the communication thread: %s", strerror(errno));
	}
}

/* On the CPU: the GPU's options a user gave, said, not silently dropped. */
static void say_gpu_options_unused(const struct cnn_args *a)
{
	const char *set[] = {
		a->no_graph ? "--no-graph" : NULL,
		a->conv_layout != CNN_LAYOUT_AUTO ? "--conv-layout" : NULL,
		a->streams != CNN_STREAMS_AUTO ? "--backward-streams" : NULL,
		a->conv1 != CNN_CONV_AUTO ? "--conv1" : NULL,
		a->conv2 != CNN_CONV_AUTO ? "--conv2" : NULL,
		a->fc2 != CNN_FC2_AUTO ? "--fc2" : NULL,
		a->pdl != CNN_PDL_AUTO ? "--pdl" : NULL,
		a->profile_from ? "--cuda-profile-steps" : NULL,
		a->graph_dot ? "--cuda-graph-dot" : NULL,
	};
	char names[160] = "";
	size_t k = 0;
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
		if (set[i] && k < sizeof(names))
			k += (size_t)snprintf(names + k, sizeof(names) - k, "%s%s", k ? ", " : "", set[i]);
	if (k)
		printf("# %s: GPU options, not used by this run on the CPU\n", names);
}

/* Rank 0's header lines: the world, the model, the data, the device. */
static void print_header(struct run *R, int gpu, const char *kind)
{
	char desc[128];
	cnn_model_describe(&R->model, desc, sizeof(desc));
	printf("# cnn_train: world %d (%s), model %s, data %s (%d train, %d test) from %s\n",
	       R->rank.world, R->comm->ops->name, desc, R->args.data, R->train.n, R->test.n,
	       strcmp(kind, "synthetic") ? R->args.data_dir : "memory");
	if (R->rank.world > 1)
		printf("# all-reduce: %s\n", R->allreduce);
	printf("# batch %d per rank, %s lr %g, %d thread%s per rank, seed %llu%s\n",
	       R->args.batch, R->args.optim == CNN_ADADELTA ? "adadelta" : "sgd", R->args.lr,
	       R->args.threads, R->args.threads == 1 ? "" : "s", R->args.seed,
	       R->rank.world > 1 ? "" : " (single process)");
	if (gpu) {
		char d[4096];
		R->gpu_api->describe(R->gpu, d, sizeof(d));
		printf("# GPU: %s\n", d);
	} else {
		printf("# convolutions: oneDNN %s\n", cnn_convnet_describe(R->acts.conv));
		if (R->device_note[0])
			printf("# device auto: cpu (%s)\n", R->device_note);
		if (R->args.precision == CNN_PREC_BF16)
			printf("# --precision bf16 is GPU math: on the CPU this run computes in fp32\n");
		say_gpu_options_unused(&R->args);
	}
	fflush(stdout);
}

static void setup(struct run *R, int argc, char **argv)
{
	char err[1024];

	gethostname(R->host, sizeof(R->host) - 1);
	read_args(R, argc, argv);
	omp_set_num_threads(R->args.threads);
	R->progress_bar = R->args.progress == 1 || (R->args.progress == -1 && isatty(STDOUT_FILENO));
	const char *kind = load_model(R);
	/* evaluation in batches of 256, or of the rank's whole share of a
	 * smaller test set (what the GPU path's start-up times its
	 * convolutions at, and both paths size their buffers for) */
	int share = (R->test.n + R->rank.world - 1) / R->rank.world;
	int evalb = share < 256 ? (share > 1 ? share : 1) : 256;
	int maxb = R->args.batch > evalb ? R->args.batch : evalb;
	R->eval_batch = maxb;
	int gpu = open_gpu(R, maxb);
	if (!gpu && cnn_acts_init(&R->acts, &R->model, maxb, R->args.threads, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);
	R->ybuf = malloc((size_t)maxb);
	R->eval_idx = malloc((size_t)R->test.n * sizeof(uint32_t) + 4);
	if (!R->ybuf || !R->eval_idx)
		cnn_run_die(R, "out of memory");
	if (cnn_sampler_init(&R->sampler, (uint32_t)R->train.n, (uint32_t)R->rank.world,
			     (uint32_t)R->rank.rank, R->args.seed, 1) < 0)
		cnn_run_die(R, "out of memory for the sampler");
	open_comm(R, gpu);
	if (R->rank.rank == 0)
		print_header(R, gpu, kind);
}

/* --resume, or a requeued job (SLURM_RESTART_COUNT > 0): the checkpoint's
 * parameters, optimizer state and place, in this run's steps. */
static void resume(struct run *R, int *start_epoch, long long *start_b)
{
	char err[1024];
	struct cnn_ckpt_pos pos;
	int got = cnn_ckpt_load(R->args.checkpoint_dir, &R->model, &R->opt, &pos, err, sizeof(err));
	if (got < 0)
		cnn_run_die(R, "%s", err);
	if (got != 1) {
		if (R->rank.rank == 0)
			printf("# no checkpoint in %s yet: starting fresh\n", R->args.checkpoint_dir);
		return;
	}
	*start_epoch = pos.epoch;
	/* another world size or batch: the same place in the epoch's order,
	 * in this run's steps */
	cnn_ckpt_resume_at(&pos, (uint32_t)R->train.n, R->rank.world, R->args.batch, start_b, &R->steps);
	if ((*start_b != pos.step_in_epoch || R->steps != pos.global_step) && R->rank.rank == 0)
		printf("# note: checkpoint written by %d rank%s of batch %d, this run is %d of "
		       "%d: its step %lld of epoch %d is this run's step %lld (%lld steps done "
		       "in this run's count)\n", pos.world, pos.world == 1 ? "" : "s",
		       pos.batch, R->rank.world, R->args.batch, (long long)pos.step_in_epoch,
		       pos.epoch + 1, *start_b, R->steps);
	if (pos.seed != R->args.seed && R->rank.rank == 0)
		printf("# note: checkpoint seed %llu, this run's %llu: shuffling follows "
		       "the checkpoint\n", (unsigned long long)pos.seed, R->args.seed);
	R->args.seed = pos.seed;
	R->sampler.seed = pos.seed;
	if (R->rank.rank == 0)
		printf("# resumed from %s/%s: epoch %d, step %lld of it, %lld steps done%s\n",
		       R->args.checkpoint_dir, CNN_CKPT_NAME, pos.epoch + 1, *start_b, R->steps,
		       R->rank.restart_count > 0 ? " (Slurm requeue)" : "");
}

/* The training loop's state across epochs. */
struct loop {
	long long nb;                    /* batches per epoch and rank */
	long long timed_from;            /* the first step timed */
	int stop;                        /* 1 at --max-steps, 2 on a signal (stop.h) */
	int said_stop;
	int cur_epoch;                   /* where the loop is (a checkpoint's place) */
	long long cur_b;
	double last_print;
};

/* Rank 0 says once at which step a signal stops every rank. */
static void say_stop(struct run *R, struct loop *L)
{
	if (R->stop.at < 0 || L->said_stop || R->rank.rank != 0)
		return;
	if (R->stop.at < R->args.sched.total_steps)
		printf("# %s: every rank stops after step %lld%s\n", cnn_stop_name(R->stop.why),
		       R->stop.at, R->args.checkpoint_dir ? " and rank 0 writes a checkpoint there" :
		       " (no --checkpoint-dir: nothing is kept)");
	else
		printf("# %s: the run ends at step %lld, before the step every rank could stop "
		       "after (%lld)\n", cnn_stop_name(R->stop.why), R->args.sched.total_steps,
		       R->stop.at);
	fflush(stdout);
	L->said_stop = 1;
}

/* One step on n images from first, its times into t[0..4] (start, data
 * gathered, computed, all-reduced, updated). */
static void train_step(struct run *R, long long first, int n, float lr, int print, float *loss,
		       double t[5])
{
	char err[1024];
	if (R->gpu) {
		/* the GPU does it all (the all-reduce inside the step); the
		 * host waits only for the step before last, and for the loss
		 * when it prints */
		if (R->gpu_api->train_step(R->gpu, R->sampler.mine + first, n, lr, (uint64_t)R->steps, err,
					   sizeof(err)) < 0 ||
		    (print && R->gpu_api->last_loss(R->gpu, loss, err, sizeof(err)) < 0))
			gpu_failed(R, err, sizeof(err));
		t[1] = t[0];
		t[2] = t[3] = t[4] = now_s();
		return;
	}
	cnn_data_gather(&R->train, R->sampler.mine + first, n, R->acts.x, R->ybuf);
	t[1] = now_s();
	if (cnn_forward(&R->model, &R->acts, R->ybuf, n, 1, R->args.seed, (uint64_t)R->steps, R->rank.rank,
			loss, NULL) < 0 ||
	    cnn_backward(&R->model, &R->acts, R->ybuf, n, (float)n, on_fc_ready, R) < 0)
		cnn_run_die(R, "step %lld: %s", R->steps, R->acts.err);
	cnn_reducer_push(&R->red, R->model.grads, R->model.t[P_W3].off);
	t[2] = now_s();
	if (cnn_reducer_wait(&R->red, err, sizeof(err)) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	t[3] = now_s();
	cnn_optim_step(&R->opt, R->model.params, R->model.grads, lr);
	t[4] = now_s();
}

/* GPU: the time once the device is idle, every step launched so far done
 * (last_loss waits for them): an end of a timed window, where PyTorch's
 * benchmark calls torch.cuda.synchronize(). */
static double gpu_idle_now(struct run *R)
{
	char err[1024];
	float loss;
	if (R->gpu_api->last_loss(R->gpu, &loss, err, sizeof(err)) < 0)
		gpu_failed(R, err, sizeof(err));
	return now_s();
}

/* GPU: the timed window open since *win0 closed (its seconds into
 * t_train_wall); none open: nothing. */
static void gpu_window_close(struct run *R, double *win0)
{
	if (*win0 < 0)
		return;
	R->t_train_wall += gpu_idle_now(R) - *win0;
	*win0 = -1;
}

/* One epoch from batch b0 (until its end, --max-steps or a signal's stop);
 * the last loss and images/s into *loss and *ips.  The timed steps' time:
 * on the CPU each step's, from its start to its update; on the GPU, whose
 * steps the host does not wait for, windows between device
 * synchronizations (the first timed step's start, the epoch's end, around
 * a checkpoint). */
static void train_epoch(struct run *R, struct loop *L, int epoch, long long b0, float *loss, double *ips)
{
	char err[1024];
	double wall0 = now_s(), win0 = -1;
	long long imgs0 = 0;
	for (long long b = b0; b < L->nb; b++) {
		L->cur_epoch = epoch;
		L->cur_b = b;
		if (R->args.max_steps && R->steps >= R->args.max_steps) {
			L->stop = 1;
			break;
		}
		int st = cnn_stop_poll(&R->stop, R->comm->store, R->rank.rank, R->steps, err, sizeof(err));
		if (st < 0)
			cnn_run_comm_failed(R, err, sizeof(err));
		if (st > 0) {
			L->stop = 2;
			break;
		}
		say_stop(R, L);
		if (R->gpu && win0 < 0 && R->steps >= L->timed_from)
			win0 = gpu_idle_now(R);
		double t[5];
		t[0] = now_s();
		long long first = b * R->args.batch;
		int n = (int)(R->sampler.per_rank - first < R->args.batch ? R->sampler.per_rank - first
									  : R->args.batch);
		float lr = cnn_sched_lr(&R->args.sched, epoch, R->steps);
		int print = R->progress_bar ? t[0] - L->last_print > 0.25 || b + 1 == L->nb
					    : (b + 1) % R->args.log_every == 0;
		train_step(R, first, n, lr, print, loss, t);
		R->steps++;
		if (R->steps == 1 && !R->gpu)
			R->first_step_unix = unix_now();
		if (R->steps > L->timed_from) {
			R->t_data += t[1] - t[0];
			R->t_compute += (t[2] - t[1]) + (t[4] - t[3]);
			R->t_idle += t[3] - t[2];
			if (!R->gpu)
				R->t_train_wall += t[4] - t[0];
			R->timed_images += n;
			R->timed_steps++;
		} else {
			wall0 = t[4];
			imgs0 = b + 1;
		}
		*ips = t[4] > wall0 ? (double)(b + 1 - imgs0) * R->args.batch * R->rank.world / (t[4] - wall0) : 0;
		if (print) {
			progress(R, epoch, b + 1, L->nb, *loss, *ips, 0);
			L->last_print = t[4];
		}
		if (R->args.checkpoint_every && R->steps % R->args.checkpoint_every == 0) {
			gpu_window_close(R, &win0);
			save_ckpt(R, epoch, b + 1);
		}
	}
	gpu_window_close(R, &win0);
}

/* The epochs from start_epoch, batch start_b, each evaluated and
 * checkpointed at its end. */
static void train(struct run *R, struct loop *L, int start_epoch, long long start_b)
{
	for (int epoch = start_epoch; epoch < R->args.epochs && !L->stop; epoch++) {
		double ips = 0;
		float loss = 0;
		cnn_sampler_epoch(&R->sampler, (uint32_t)epoch);
		train_epoch(R, L, epoch, epoch == start_epoch ? start_b : 0, &loss, &ips);
		if (R->progress_bar && R->rank.rank == 0)
			progress(R, epoch, L->stop ? 0 : L->nb, L->nb, loss, ips, 1);
		if (!L->stop) {
			evaluate(R);
			save_ckpt(R, epoch + 1, 0);
			/* --max-steps reached with the epoch's last step: the
			 * epoch's evaluation and checkpoint above are the run's
			 * last, not followed by the same again */
			if (R->args.max_steps && R->steps >= R->args.max_steps)
				break;
		}
	}
}

/* After the loop: the evaluation and checkpoint a stop owes, said. */
static void after_stop(struct run *R, const struct loop *L)
{
	if (L->stop == 1 && R->args.eval)
		evaluate(R);
	if ((L->stop == 1 && R->args.checkpoint_dir && !R->args.checkpoint_every) ||
	    (L->stop == 2 && R->args.checkpoint_dir)) {
		/* --max-steps ended mid-epoch, or a signal: keep the place */
		save_ckpt(R, L->cur_epoch, L->cur_b);
	}
	if (L->stop == 2 && R->rank.rank == 0) {
		if (R->args.checkpoint_dir)
			printf("# stopped on %s after step %lld (epoch %d, step %lld of it): %s/%s holds it; "
			       "--resume, or the job requeued, continues from there\n", cnn_stop_name(R->stop.why),
			       R->steps, L->cur_epoch + 1, L->cur_b, R->args.checkpoint_dir, CNN_CKPT_NAME);
		else
			printf("# stopped on %s after step %lld (epoch %d, step %lld of it); no "
			       "--checkpoint-dir: nothing kept\n", cnn_stop_name(R->stop.why), R->steps,
			       L->cur_epoch + 1, L->cur_b);
		fflush(stdout);
	}
	/* a profiling range the run never reached captured nothing, or ran on
	 * to the end of the run (its evaluation too): said, since ncu's empty
	 * report does not say why */
	if (R->gpu && R->rank.rank == 0 && R->args.profile_from && R->steps < R->args.profile_to)
		fprintf(stderr, "cnn_train: warning: --cuda-profile-steps %lld:%lld: the run ended at "
			"step %lld, %s\n", R->args.profile_from, R->args.profile_to, R->steps,
			R->steps < R->args.profile_from ?
				"before the range: no step was profiled (more --epochs or --max-steps)" :
				"inside the range: the profiler ran on to the run's end");
}

static void teardown(struct run *R)
{
	if (R->gpu) {
		R->gpu_api->close(R->gpu);
	} else {
		cnn_reducer_stop(&R->red);
		cnn_acts_free(&R->acts);
	}
	cnn_comm_close(R->comm);
	cnn_sampler_free(&R->sampler);
	cnn_optim_free(&R->opt);
	cnn_model_free(&R->model);
	cnn_data_free(&R->train);
	cnn_data_free(&R->test);
	free(R->ybuf);
	free(R->eval_idx);
}

int main(int argc, char **argv)
{
	static struct run run;
	struct run *R = &run;
	char err[1024];
	int start_epoch = 0;
	long long start_b = 0;

	signal(SIGPIPE, SIG_IGN);
	/* before any thread starts: they all inherit its signal mask */
	if (cnn_stop_init(&R->stop, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnn_train: %s\n", err);
		return 1;
	}
	setup(R, argc, argv);
	R->stop.every = R->args.stop_every ? R->args.stop_every : cnn_stop_every(R->args.batch, R->gpu != NULL);
	R->stop.grace_s = R->args.timeout_s;
	snprintf(R->stop.who, sizeof(R->stop.who), "%s rank %d", R->host, R->rank.rank);
	if (R->args.checkpoint_dir && (R->args.resume || R->rank.restart_count > 0))
		resume(R, &start_epoch, &start_b);
	/* Same start everywhere, as DDP does: rank 0's parameters win. */
	if (cnn_comm_broadcast(R->comm, R->model.params, R->model.nparams, 0, err, sizeof(err)) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	if (R->gpu && R->gpu_api->set_state(R->gpu, R->model.params, &R->opt, err, sizeof(err)) < 0)
		cnn_run_die(R, "%s", err);

	struct loop L = { .nb = (R->sampler.per_rank + R->args.batch - 1) / R->args.batch,
			  .cur_epoch = start_epoch, .cur_b = start_b };
	R->args.sched.base_lr = R->args.lr;
	R->args.sched.total_steps = R->args.max_steps ? R->args.max_steps : L.nb * R->args.epochs;
	/* steps not timed: first-touch, thread start-up; on the GPU also
	 * cuDNN's first calls and the graph's capture */
	L.timed_from = R->steps + (R->gpu ? 5 : 3);

	/* from here a signal stops every rank after one step they agree on */
	atomic_store(&R->stop.training, 1);
	train(R, &L, start_epoch, start_b);
	/* a signal now ends the process at once */
	atomic_store(&R->stop.training, 0);
	after_stop(R, &L);
	fetch_state(R);
	cnn_run_report(R);
	teardown(R);
	if (L.stop == 2)
		cnn_stop_raise(&R->stop);   /* as the signal would have, now that all is kept */
	return 0;
}
