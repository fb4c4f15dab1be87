/* cnn_train's options: getopt_long, every value checked, every error one
 * line naming the option, the value and what was expected. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
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

/* field = the value of optarg among the keywords { "name", value }, ... */
#define KEYWORD(opt, field, ...)                                                               \
	do {                                                                                   \
		static const struct keyword k_[] = { __VA_ARGS__ };                           \
		int v_ = 0;                                                                    \
		rv = keyword(opt, optarg, k_, (int)(sizeof(k_) / sizeof(k_[0])), &v_, err, errlen); \
		if (rv == 0)                                                                   \
			field = v_;                                                            \
	} while (0)

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

enum {
	O_DATA = 256, O_DATA_DIR, O_EPOCHS, O_MAX_STEPS, O_EVAL, O_BATCH, O_OPTIM, O_LR,
	O_MOMENTUM, O_WD, O_SCHED, O_STEP_EPOCHS, O_GAMMA, O_WARMUP, O_NO_DROPOUT, O_SEED,
	O_THREADS, O_DEVICE, O_PRECISION, O_NO_GRAPH, O_CONV_LAYOUT, O_STREAMS, O_CONV1, O_CONV2, O_FC2, O_PDL, O_PROFILE, O_GRAPH_DOT, O_TIMEOUT, O_CKPT_DIR, O_CKPT_EVERY, O_STOP_EVERY, O_RESUME, O_LOG_JSON,
	O_DUMP, O_PROGRESS, O_LOG_EVERY, O_TRAIN_LIMIT, O_TEST_LIMIT,
};

static const struct option opts[] = {
	{ "data", required_argument, NULL, O_DATA },
	{ "data-dir", required_argument, NULL, O_DATA_DIR },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "max-steps", required_argument, NULL, O_MAX_STEPS },
	{ "eval", no_argument, NULL, O_EVAL },
	{ "batch-size", required_argument, NULL, O_BATCH },
	{ "optimizer", required_argument, NULL, O_OPTIM },
	{ "lr", required_argument, NULL, O_LR },
	{ "momentum", required_argument, NULL, O_MOMENTUM },
	{ "weight-decay", required_argument, NULL, O_WD },
	{ "lr-schedule", required_argument, NULL, O_SCHED },
	{ "lr-step-epochs", required_argument, NULL, O_STEP_EPOCHS },
	{ "lr-gamma", required_argument, NULL, O_GAMMA },
	{ "warmup-steps", required_argument, NULL, O_WARMUP },
	{ "no-dropout", no_argument, NULL, O_NO_DROPOUT },
	{ "seed", required_argument, NULL, O_SEED },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "precision", required_argument, NULL, O_PRECISION },
	{ "no-graph", no_argument, NULL, O_NO_GRAPH },
	{ "conv-layout", required_argument, NULL, O_CONV_LAYOUT },
	{ "backward-streams", required_argument, NULL, O_STREAMS },
	{ "cuda-profile-steps", required_argument, NULL, O_PROFILE },
	{ "cuda-graph-dot", required_argument, NULL, O_GRAPH_DOT },
	{ "conv1", required_argument, NULL, O_CONV1 },
	{ "conv2", required_argument, NULL, O_CONV2 },
	{ "fc2", required_argument, NULL, O_FC2 },
	{ "pdl", required_argument, NULL, O_PDL },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "checkpoint-dir", required_argument, NULL, O_CKPT_DIR },
	{ "checkpoint-every", required_argument, NULL, O_CKPT_EVERY },
	{ "stop-every", required_argument, NULL, O_STOP_EVERY },
	{ "resume", no_argument, NULL, O_RESUME },
	{ "log-json", required_argument, NULL, O_LOG_JSON },
	{ "dump-params", required_argument, NULL, O_DUMP },
	{ "progress", required_argument, NULL, O_PROGRESS },
	{ "log-every", required_argument, NULL, O_LOG_EVERY },
	{ "train-limit", required_argument, NULL, O_TRAIN_LIMIT },
	{ "test-limit", required_argument, NULL, O_TEST_LIMIT },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

int cnn_args_parse(struct cnn_args *a, int argc, char **argv, const char *env_data_dir,
		   const char *env_threads, char *err, size_t errlen)
{
	long long ll = 0;
	int c;

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
	a->conv_layout = CNN_LAYOUT_AUTO;
	a->streams = CNN_STREAMS_AUTO;
	a->fc2 = CNN_FC2_AUTO;
	a->pdl = CNN_PDL_AUTO;
	a->progress = -1;
	a->log_every = 50;
	a->sched.step_epochs = 1;
	a->sched.gamma = 0.7f;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		int rv = 0;
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
		case O_DATA:
			if (strcmp(optarg, "fashion-mnist") && strcmp(optarg, "mnist") &&
			    strcmp(optarg, "idx") && strcmp(optarg, "cifar10") &&
			    strcmp(optarg, "synthetic")) {
				snprintf(err, errlen, "--data=%s: expected fashion-mnist, mnist, idx, "
					 "cifar10 or synthetic", optarg);
				return -1;
			}
			a->data = optarg;
			break;
		case O_DATA_DIR: a->data_dir = optarg; break;
		case O_EPOCHS: rv = num_int("--epochs", optarg, 1, 100000, &a->epochs, err, errlen); break;
		case O_MAX_STEPS: rv = num_ll("--max-steps", optarg, 1, LLONG_MAX / 2, &a->max_steps, err, errlen); break;
		case O_EVAL: a->eval = 1; break;
		case O_BATCH: rv = num_int("--batch-size", optarg, 1, 65536, &a->batch, err, errlen); break;
		case O_OPTIM:
			KEYWORD("--optimizer", a->optim, { "sgd", CNN_SGD }, { "adadelta", CNN_ADADELTA });
			break;
		case O_LR: rv = num_f("--lr", optarg, 0, 1e3, &a->lr, err, errlen); a->lr_set = 1; break;
		case O_MOMENTUM: rv = num_f("--momentum", optarg, 0, 0.999999, &a->momentum, err, errlen); break;
		case O_WD: rv = num_f("--weight-decay", optarg, 0, 1, &a->weight_decay, err, errlen); break;
		case O_SCHED:
			a->sched_set = 1;
			KEYWORD("--lr-schedule", a->sched.kind, { "none", CNN_SCHED_NONE },
				{ "step", CNN_SCHED_STEP }, { "cosine", CNN_SCHED_COSINE });
			break;
		case O_STEP_EPOCHS: rv = num_int("--lr-step-epochs", optarg, 1, 100000, &a->sched.step_epochs, err, errlen); break;
		case O_GAMMA: rv = num_f("--lr-gamma", optarg, 0, 1, &a->sched.gamma, err, errlen); break;
		case O_WARMUP: rv = num_ll("--warmup-steps", optarg, 0, LLONG_MAX / 2, &a->sched.warmup_steps, err, errlen); break;
		case O_NO_DROPOUT: a->no_dropout = 1; break;
		case O_SEED:
			rv = num_ll("--seed", optarg, 0, LLONG_MAX, &ll, err, errlen);
			a->seed = (unsigned long long)ll;
			break;
		case O_THREADS: rv = num_int("--threads", optarg, 1, 1024, &a->threads, err, errlen); break;
		case O_DEVICE:
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
				snprintf(err, errlen, "--device=%s: expected cpu, cuda or auto", optarg);
				return -1;
			}
			a->device = optarg;
			break;
		case O_PRECISION:
			KEYWORD("--precision", a->precision, { "tf32", CNN_PREC_TF32 },
				{ "fp32", CNN_PREC_FP32 }, { "bf16", CNN_PREC_BF16 });
			break;
		case O_NO_GRAPH: a->no_graph = 1; break;
		case O_CONV_LAYOUT:
			KEYWORD("--conv-layout", a->conv_layout, { "nchw", CNN_LAYOUT_NCHW },
				{ "nhwc", CNN_LAYOUT_NHWC }, { "auto", CNN_LAYOUT_AUTO });
			break;
		case O_STREAMS:
			KEYWORD("--backward-streams", a->streams, { "1", 1 }, { "2", 2 },
				{ "auto", CNN_STREAMS_AUTO });
			break;
		case O_CONV1:
			KEYWORD("--conv1", a->conv1, { "auto", CNN_CONV_AUTO }, { "cudnn", CNN_CONV_CUDNN },
				{ "direct", CNN_CONV_DIRECT });
			break;
		case O_CONV2:
			KEYWORD("--conv2", a->conv2, { "auto", CNN_CONV_AUTO }, { "cudnn", CNN_CONV_CUDNN },
				{ "direct", CNN_CONV_DIRECT });
			break;
		case O_FC2:
			KEYWORD("--fc2", a->fc2, { "cublas", CNN_FC2_CUBLAS }, { "fused", CNN_FC2_FUSED },
				{ "auto", CNN_FC2_AUTO });
			break;
		case O_PDL:
			KEYWORD("--pdl", a->pdl, { "off", CNN_PDL_OFF }, { "on", CNN_PDL_ON },
				{ "auto", CNN_PDL_AUTO });
			break;
		case O_PROFILE: {
			char from[32], to[32];
			const char *colon = strchr(optarg, ':');
			if (!colon || colon - optarg >= (long)sizeof(from) || strlen(colon + 1) >= sizeof(to)) {
				snprintf(err, errlen, "--cuda-profile-steps=%s: expected FIRST:LAST, such as 10:12",
					 optarg);
				return -1;
			}
			snprintf(from, sizeof(from), "%.*s", (int)(colon - optarg), optarg);
			snprintf(to, sizeof(to), "%s", colon + 1);
			rv = num_ll("--cuda-profile-steps' first step", from, 1, LLONG_MAX / 2,
				    &a->profile_from, err, errlen);
			if (rv == 0)
				rv = num_ll("--cuda-profile-steps' last step", to, a->profile_from,
					    LLONG_MAX / 2, &a->profile_to, err, errlen);
			break;
		}
		case O_GRAPH_DOT:
			if (!*optarg) {
				snprintf(err, errlen, "--cuda-graph-dot: expected a file name");
				return -1;
			}
			a->graph_dot = optarg;
			break;
		case O_TIMEOUT: rv = num_int("--timeout", optarg, 1, 86400, &a->timeout_s, err, errlen); break;
		case O_CKPT_DIR: a->checkpoint_dir = optarg; break;
		case O_CKPT_EVERY: rv = num_ll("--checkpoint-every", optarg, 1, LLONG_MAX / 2, &a->checkpoint_every, err, errlen); break;
		case O_STOP_EVERY: rv = num_ll("--stop-every", optarg, 3, LLONG_MAX / 2, &a->stop_every, err, errlen); break;
		case O_RESUME: a->resume = 1; break;
		case O_LOG_JSON: a->log_json = optarg; break;
		case O_DUMP: a->dump_params = optarg; break;
		case O_PROGRESS:
			KEYWORD("--progress", a->progress, { "bar", 1 }, { "lines", 0 }, { "auto", -1 });
			break;
		case O_LOG_EVERY: rv = num_int("--log-every", optarg, 1, 1000000, &a->log_every, err, errlen); break;
		case O_TRAIN_LIMIT: rv = num_ll("--train-limit", optarg, 1, INT_MAX, &a->train_limit, err, errlen); break;
		case O_TEST_LIMIT: rv = num_ll("--test-limit", optarg, 1, INT_MAX, &a->test_limit, err, errlen); break;
		}
		if (rv < 0)
			return -1;
	}
	if (optind < argc) {
		snprintf(err, errlen, "%s: unexpected argument (cnn_train takes options only)", argv[optind]);
		return -1;
	}
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
