/* cnn_train's command line. */
#ifndef CNN_ARGS_H
#define CNN_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "optim.h"

struct cnn_args {
	const char *data;          /* fashion-mnist (idx), mnist, cifar10, synthetic */
	const char *data_dir;
	int epochs;
	long long max_steps;       /* 0: whole epochs */
	int eval;                  /* evaluate even with --max-steps */
	int batch;                 /* per rank */
	enum cnn_optim_kind optim;
	float lr, momentum, weight_decay;
	int lr_set;
	struct cnn_sched sched;
	int sched_set;
	unsigned long long seed;
	int threads;               /* 0: OMP_NUM_THREADS or 1 */
	const char *device;        /* cpu, cuda, auto */
	int precision;             /* enum cnn_precision: tf32 (default), fp32, bf16 */
	int no_graph;              /* GPU: run the step eagerly, not as a CUDA graph */
	int conv_layout;           /* enum cnn_layout: nchw, nhwc, auto (default) */
	int streams;               /* GPU backward streams: 1, 2 or CNN_STREAMS_AUTO (default) */
	long long profile_from, profile_to; /* --cuda-profile-steps (0: none) */
	const char *graph_dot;     /* --cuda-graph-dot FILE (NULL: none) */
	int conv1;                 /* enum cnn_conv_impl: auto (default), cudnn, direct */
	int conv2;                 /* the same for conv2 */
	int fc2;                   /* enum cnn_fc2_impl: cublas, fused, auto (default) */
	int pdl;                   /* enum cnn_pdl: auto (default), on, off */
	const char *checkpoint_dir;
	long long checkpoint_every;/* steps; 0: each epoch only */
	long long stop_every;      /* steps between stop polls; 0: stop.h's default */
	int resume;
	const char *log_json;
	const char *dump_params;
	int no_dropout;
	int timeout_s;
	int shm_allreduce;         /* gloo ranks of one node all-reduce through shared memory: 1 auto (default), 0 off */
	long long train_limit, test_limit;
	int progress;              /* -1 auto (bar on a terminal), 0 lines, 1 bar */
	int log_every;             /* plain progress line every N steps */
};

/* Parse argv; -1 with a one-line message in err on bad input, 1 when
 * --help was asked (usage already printed to stdout). */
int cnn_args_parse(struct cnn_args *a, int argc, char **argv, const char *env_data_dir,
		   const char *env_threads, char *err, size_t errlen);
void cnn_args_usage(FILE *f);

#endif
