/* cnn_train's options: getopt_long, every value checked, every error one
 * line naming the option, the value and what was expected. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "data.h"
#include "gpu.h"

void cnn_args_usage(FILE *f)
{
	fputs(
"usage: cnn_train [options]\n"
"Data-parallel training of the PyTorch MNIST example CNN, in C.  Run it as\n"
"  srun --ddp=gloo cnn_train           (ranks and rendezvous from slurm-ddp)\n"
"or alone, or with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set as torchrun does.\n"
"\n"
"data:\n"
"  --data KIND            fashion-mnist (default), mnist, idx, cifar10, synthetic\n"
"  --data-dir DIR         where the files are (default $DDP_DATA_DIR or\n"
"                         " CNN_DEFAULT_DATA_DIR ")\n"
"  --train-limit N        use only the first N training images\n"
"  --test-limit N         use only the first N test images\n"
"training:\n"
"  --epochs N             passes over the training set (default 2)\n"
"  --max-steps N          stop after N optimizer steps (skips evaluation unless --eval)\n"
"  --eval                 evaluate on the test set even with --max-steps\n"
"  --batch-size N         images per rank per step (default 64)\n"
"  --optimizer NAME       sgd (default: momentum 0.9) or adadelta (the PyTorch example's)\n"
"  --lr X                 learning rate (default 0.05 for sgd, 1.0 for adadelta)\n"
"  --momentum X           SGD momentum (default 0.9)\n"
"  --weight-decay X       L2 penalty (default 0)\n"
"  --lr-schedule KIND     none (sgd default), step (adadelta default), cosine\n"
"  --lr-step-epochs N     step schedule: every N epochs (default 1)\n"
"  --lr-gamma X           step schedule: factor (default 0.7)\n"
"  --warmup-steps N       linear warm-up over the first N steps (default 0)\n"
"  --no-dropout           turn dropout off (for equivalence tests)\n"
"  --seed N               seed of initialization, shuffling and dropout (default 1)\n"
"execution:\n"
"  --threads N            CPU threads per rank (default $OMP_NUM_THREADS, else 1)\n"
"  --device KIND          cpu, cuda or auto (default auto: cuda when this rank\n"
"                         sees a GPU and the GPU module loads, else cpu)\n"
"  --precision KIND       GPU math: tf32 (default: fp32 data, TF32 tensor cores\n"
"                         in convolutions and GEMMs), fp32 (no TF32) or bf16\n"
"                         (bf16 convolutions and GEMMs, fp32 master weights)\n"
"  --no-graph             GPU: launch the step's kernels one by one instead of\n"
"                         replaying it as a CUDA graph (to compare)\n"
"  --conv-layout KIND     GPU: the convolutions' activations nchw, nhwc\n"
"                         (channels-last, for cuDNN's tensor-core kernels) or\n"
"                         auto (default: per batch size the one cuDNN times\n"
"                         faster; with a graph, the training step timed in each)\n"
"  --backward-streams N   GPU: 1, 2 (the weight gradients on a second stream,\n"
"                         beside the data gradients) or auto (default: the\n"
"                         step's CUDA graph timed both ways, the faster kept)\n"
"  --conv1 KIND           GPU, one input channel: conv1 by cuDNN, by the direct\n"
"                         kernels, or auto (default: each call the faster, timed)\n"
"  --conv2 KIND           GPU, TF32 or bf16: conv2 by cuDNN, by the project's\n"
"                         tensor-core kernels (direct), or auto (default, timed)\n"
"  --fc2 KIND             GPU, TF32 or fp32: fc2 and the loss by cuBLAS, fused\n"
"                         (with fc1's dropout and ReLU: one launch) or auto\n"
"                         (default: per batch size the faster, timed)\n"
"  --pdl KIND             GPU, sm_90 and later, with a graph: programmatic\n"
"                         dependent launch of the project's kernels in the\n"
"                         step's graph (each launched while the kernel before\n"
"                         it runs, waiting for it on the GPU): on, off or\n"
"                         auto (default: the step timed both ways)\n"
"  --cuda-profile-steps A:B  GPU: cudaProfilerStart before step A, Stop after\n"
"                         step B (from 1, across epochs), for nsys --capture-\n"
"                         range=cudaProfilerApi or ncu --profile-from-start off\n"
"  --cuda-graph-dot FILE  GPU: rank 0 writes the captured step's CUDA graph\n"
"                         there (Graphviz, cudaGraphDebugDotPrint: dot -Tsvg)\n"
"  --timeout SECONDS      bound on rendezvous and on each collective (default 60)\n"
"  --shm-allreduce KIND   gloo ranks that all share a node all-reduce through\n"
"                         shared memory, not TCP: auto (default) or off\n"
"checkpoints and output:\n"
"  --checkpoint-dir DIR   rank 0 writes DIR/checkpoint.bin after each epoch\n"
"  --checkpoint-every N   ... and every N steps\n"
"  --stop-every N         steps between the ranks' checks for a stop signal\n"
"                         (SIGTERM, SIGINT, SIGUSR1, SIGUSR2: every rank stops\n"
"                         after one step they agree on, rank 0 keeps a checkpoint\n"
"                         there); default 65536/batch on a GPU, 1024/batch on\n"
"                         CPUs, at least 8\n"
"  --resume               continue from DIR/checkpoint.bin (automatic when Slurm\n"
"                         requeued the job: SLURM_RESTART_COUNT > 0)\n"
"  --log-json FILE        rank 0 writes a JSON summary\n"
"  --dump-params FILE     rank 0 writes the final parameters as raw float32\n"
"  --progress KIND        bar, lines or auto (bar on a terminal; default)\n"
"  --log-every N          steps between progress lines (default 50)\n"
"  -h, --help             this text\n", f);
}

static int num_ll(const char *opt, const char *s, long long lo, long long hi, long long *out,
		  char *err, size_t errlen)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi) {
		snprintf(err, errlen, "%s=%s: expected an integer from %lld to %lld", opt, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* One of an option's keywords: its value into *out, or err "--OPT=VAL:
 * expected a, b or c". */
struct keyword {
	const char *name;
	int value;
};

static int keyword(const char *opt, const char *val, const struct keyword *k, int n, int *out,
		   char *err, size_t errlen)
{
	for (int i = 0; i < n; i++)
		if (strcmp(val, k[i].name) == 0) {
			*out = k[i].value;
			return 0;
		}
	int len = snprintf(err, errlen, "%s=%s: expected ", opt, val);
	for (int i = 0; i < n && len >= 0 && (size_t)len < errlen; i++)
		len += snprintf(err + len, errlen - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
				k[i].name);
	return -1;
}

static int num_int(const char *opt, const char *s, int lo, int hi, int *out, char *err, size_t errlen)
{
	long long v;
	if (num_ll(opt, s, lo, hi, &v, err, errlen) < 0)
		return -1;
	*out = (int)v;
	return 0;
}

static int num_f(const char *opt, const char *s, double lo, double hi, float *out,
		 char *err, size_t errlen)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= lo && v <= hi)) {
		snprintf(err, errlen, "%s=%s: expected a number from %g to %g", opt, s, lo, hi);
		return -1;
	}
	*out = (float)v;
	return 0;
}

/* --cuda-profile-steps FIRST:LAST */
static int parse_profile(struct cnn_args *a, const char *v, char *err, size_t errlen)
{
	char from[32], to[32];
	const char *colon = strchr(v, ':');
	if (!colon || colon - v >= (long)sizeof(from) || strlen(colon + 1) >= sizeof(to)) {
		snprintf(err, errlen, "--cuda-profile-steps=%s: expected FIRST:LAST, such as 10:12", v);
		return -1;
	}
	snprintf(from, sizeof(from), "%.*s", (int)(colon - v), v);
	snprintf(to, sizeof(to), "%s", colon + 1);
	if (num_ll("--cuda-profile-steps' first step", from, 1, LLONG_MAX / 2, &a->profile_from, err, errlen) < 0)
		return -1;
	return num_ll("--cuda-profile-steps' last step", to, a->profile_from, LLONG_MAX / 2, &a->profile_to,
		      err, errlen);
}

static int parse_graph_dot(struct cnn_args *a, const char *v, char *err, size_t errlen)
{
	if (!*v) {
		snprintf(err, errlen, "--cuda-graph-dot: expected a file name");
		return -1;
	}
	a->graph_dot = v;
	return 0;
}

/* What an option does with its value: a flag set to 1, a string kept, a
 * number within lo..hi, a keyword's value (an int field), one of a list of
 * strings kept (CHOICE), or a function of its own. */
enum kind { FLAG, STR, INT, LL, FLOAT, KEYWORD, CHOICE, FUNC };

struct argdef {
	const char *name;                /* the long option, without "--" */
	enum kind kind;
	size_t off;                      /* the field in struct cnn_args */
	long long lo, hi;                /* INT, LL */
	double flo, fhi;                 /* FLOAT */
	const struct keyword *kw;        /* KEYWORD, CHOICE */
	int nkw;
	int (*func)(struct cnn_args *, const char *, char *, size_t);   /* FUNC */
	size_t given;                    /* an int field set to 1 when given, or NOT_GIVEN */
};
#define NOT_GIVEN ((size_t)-1)

#define KW(...) (const struct keyword[]){ __VA_ARGS__ }, \
	(int)(sizeof((const struct keyword[]){ __VA_ARGS__ }) / sizeof(struct keyword))
#define AT(f) offsetof(struct cnn_args, f)
#define N(kind, f, lo, hi) kind, AT(f), lo, hi, 0, 0, NULL, 0, NULL, NOT_GIVEN
#define F(f, lo, hi) FLOAT, AT(f), 0, 0, lo, hi, NULL, 0, NULL, NOT_GIVEN
#define K(f, ...) KEYWORD, AT(f), 0, 0, 0, 0, KW(__VA_ARGS__), NULL, NOT_GIVEN
#define S(kind, f) kind, AT(f), 0, 0, 0, 0, NULL, 0, NULL, NOT_GIVEN
static const struct argdef args[] = {
	{ "data", CHOICE, AT(data), 0, 0, 0, 0, KW({ "fashion-mnist", 0 }, { "mnist", 0 }, { "idx", 0 },
					       { "cifar10", 0 }, { "synthetic", 0 }), NULL, NOT_GIVEN },
	{ "data-dir", S(STR, data_dir) },
	{ "epochs", N(INT, epochs, 1, 100000) },
	{ "max-steps", N(LL, max_steps, 1, LLONG_MAX / 2) },
	{ "eval", S(FLAG, eval) },
	{ "batch-size", N(INT, batch, 1, 65536) },
	{ "optimizer", K(optim, { "sgd", CNN_SGD }, { "adadelta", CNN_ADADELTA }) },
	{ "lr", FLOAT, AT(lr), 0, 0, 0, 1e3, NULL, 0, NULL, AT(lr_set) },
	{ "momentum", F(momentum, 0, 0.999999) },
	{ "weight-decay", F(weight_decay, 0, 1) },
	{ "lr-schedule", KEYWORD, AT(sched.kind), 0, 0, 0, 0, KW({ "none", CNN_SCHED_NONE }, { "step", CNN_SCHED_STEP },
							     { "cosine", CNN_SCHED_COSINE }), NULL, AT(sched_set) },
	{ "lr-step-epochs", N(INT, sched.step_epochs, 1, 100000) },
	{ "lr-gamma", F(sched.gamma, 0, 1) },
	{ "warmup-steps", N(LL, sched.warmup_steps, 0, LLONG_MAX / 2) },
	{ "no-dropout", S(FLAG, no_dropout) },
	{ "seed", N(LL, seed, 0, LLONG_MAX) },
	{ "threads", N(INT, threads, 1, 1024) },
	{ "device", CHOICE, AT(device), 0, 0, 0, 0, KW({ "cpu", 0 }, { "cuda", 0 }, { "auto", 0 }), NULL, NOT_GIVEN },
	{ "precision", K(precision, { "tf32", CNN_PREC_TF32 }, { "fp32", CNN_PREC_FP32 }, { "bf16", CNN_PREC_BF16 }) },
	{ "no-graph", S(FLAG, no_graph) },
	{ "conv-layout", K(conv_layout, { "nchw", CNN_LAYOUT_NCHW }, { "nhwc", CNN_LAYOUT_NHWC },
			   { "auto", CNN_LAYOUT_AUTO }) },
	{ "backward-streams", K(streams, { "1", 1 }, { "2", 2 }, { "auto", CNN_STREAMS_AUTO }) },
	{ "cuda-profile-steps", FUNC, 0, 0, 0, 0, 0, NULL, 0, parse_profile, NOT_GIVEN },
	{ "cuda-graph-dot", FUNC, 0, 0, 0, 0, 0, NULL, 0, parse_graph_dot, NOT_GIVEN },
	{ "conv1", K(conv1, { "auto", CNN_CONV_AUTO }, { "cudnn", CNN_CONV_CUDNN }, { "direct", CNN_CONV_DIRECT }) },
	{ "conv2", K(conv2, { "auto", CNN_CONV_AUTO }, { "cudnn", CNN_CONV_CUDNN }, { "direct", CNN_CONV_DIRECT }) },
	{ "fc2", K(fc2, { "cublas", CNN_FC2_CUBLAS }, { "fused", CNN_FC2_FUSED }, { "auto", CNN_FC2_AUTO }) },
	{ "pdl", K(pdl, { "off", CNN_PDL_OFF }, { "on", CNN_PDL_ON }, { "auto", CNN_PDL_AUTO }) },
	{ "timeout", N(INT, timeout_s, 1, 86400) },
	{ "shm-allreduce", K(shm_allreduce, { "auto", 1 }, { "off", 0 }) },
	{ "checkpoint-dir", S(STR, checkpoint_dir) },
	{ "checkpoint-every", N(LL, checkpoint_every, 1, LLONG_MAX / 2) },
	{ "stop-every", N(LL, stop_every, 3, LLONG_MAX / 2) },
	{ "resume", S(FLAG, resume) },
	{ "log-json", S(STR, log_json) },
	{ "dump-params", S(STR, dump_params) },
	{ "progress", K(progress, { "bar", 1 }, { "lines", 0 }, { "auto", -1 }) },
	{ "log-every", N(INT, log_every, 1, 1000000) },
	{ "train-limit", N(LL, train_limit, 1, INT_MAX) },
	{ "test-limit", N(LL, test_limit, 1, INT_MAX) },
};
#undef S
#undef K
#undef F
#undef N
#undef AT
#undef KW
#define NARGS (sizeof(args) / sizeof(args[0]))

/* One option's value into its field: 0, else -1 with err. */
static int apply(const struct argdef *d, struct cnn_args *a, const char *v, char *err, size_t errlen)
{
	char opt[48];
	void *field = (char *)a + d->off;
	int k = 0, rv = 0;

	snprintf(opt, sizeof(opt), "--%s", d->name);
	if (d->given != NOT_GIVEN)
		*(int *)(void *)((char *)a + d->given) = 1;
	switch (d->kind) {
	case FLAG: *(int *)field = 1; break;
	case STR: *(const char **)field = v; break;
	case INT: rv = num_int(opt, v, (int)d->lo, (int)d->hi, (int *)field, err, errlen); break;
	case LL: rv = num_ll(opt, v, d->lo, d->hi, (long long *)field, err, errlen); break;
	case FLOAT: rv = num_f(opt, v, d->flo, d->fhi, (float *)field, err, errlen); break;
	case KEYWORD: rv = keyword(opt, v, d->kw, d->nkw, (int *)field, err, errlen); break;
	case CHOICE:
		rv = keyword(opt, v, d->kw, d->nkw, &k, err, errlen);
		if (rv == 0)
			*(const char **)field = v;
		break;
	case FUNC: rv = d->func(a, v, err, errlen); break;
	}
	return rv;
}

static void defaults(struct cnn_args *a, const char *env_data_dir)
{
	memset(a, 0, sizeof(*a));
	a->data = "fashion-mnist";
	a->data_dir = env_data_dir && *env_data_dir ? env_data_dir : CNN_DEFAULT_DATA_DIR;
	a->epochs = 2;
	a->batch = 64;
	a->optim = CNN_SGD;
	a->momentum = 0.9f;
	a->seed = 1;
	a->device = "auto";
	a->timeout_s = 60;
	a->shm_allreduce = 1;
	a->conv_layout = CNN_LAYOUT_AUTO;
	a->streams = CNN_STREAMS_AUTO;
	a->fc2 = CNN_FC2_AUTO;
	a->pdl = CNN_PDL_AUTO;
	a->progress = -1;
	a->log_every = 50;
	a->sched.step_epochs = 1;
	a->sched.gamma = 0.7f;
}

/* What depends on other options or the environment, once all are read. */
static int finish(struct cnn_args *a, const char *env_threads, char *err, size_t errlen)
{
	if (!a->lr_set)
		a->lr = a->optim == CNN_ADADELTA ? 1.0f : 0.05f;
	if (!a->sched_set)
		a->sched.kind = a->optim == CNN_ADADELTA ? CNN_SCHED_STEP : CNN_SCHED_NONE;
	if (a->resume && !a->checkpoint_dir) {
		snprintf(err, errlen, "--resume: needs --checkpoint-dir");
		return -1;
	}
	if (!a->threads && env_threads && *env_threads) {
		if (num_int("OMP_NUM_THREADS", env_threads, 1, 1024, &a->threads, err, errlen) < 0)
			return -1;
	}
	if (!a->threads)
		a->threads = 1;
	return 0;
}

int cnn_args_parse(struct cnn_args *a, int argc, char **argv, const char *env_data_dir,
		   const char *env_threads, char *err, size_t errlen)
{
	struct option lo[NARGS + 2];
	int c;

	for (size_t i = 0; i < NARGS; i++)
		lo[i] = (struct option){ args[i].name, args[i].kind == FLAG ? no_argument : required_argument,
					 NULL, 256 + (int)i };
	lo[NARGS] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[NARGS + 1] = (struct option){ NULL, 0, NULL, 0 };
	defaults(a, env_data_dir);

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		switch (c) {
		case 'h':
			cnn_args_usage(stdout);
			return 1;
		case ':':
			snprintf(err, errlen, "%s: needs a value", name);
			return -1;
		case '?':
			snprintf(err, errlen, "%s: unknown option", name);
			return -1;
		}
		if (c < 256 || c >= 256 + (int)NARGS || apply(&args[c - 256], a, optarg, err, errlen) < 0)
			return -1;
	}
	if (optind < argc) {
		snprintf(err, errlen, "%s: unexpected argument (cnn_train takes options only)", argv[optind]);
		return -1;
	}
	return finish(a, env_threads, err, errlen);
}
