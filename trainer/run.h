/* cnn_train's run: what main.c (the driver) and report.c (what a run
 * reports at its end) share.  Internal to the cnn_train program. */
#ifndef CNN_RUN_H
#define CNN_RUN_H

#include <stdint.h>

#include "args.h"
#include "comm.h"
#include "data.h"
#include "ddpenv.h"
#include "gpu.h"
#include "model.h"
#include "optim.h"
#include "stop.h"

struct run {
	struct cnn_args args;
	char data_dir[4096];   /* args.data_dir's text (the environment's copy is freed) */
	struct ddpenv_rank rank;
	char host[64];
	struct cnn_dataset train, test;
	struct cnn_model model;
	struct cnn_acts acts;
	struct cnn_optim opt;
	struct cnn_comm *comm;
	char allreduce[320];   /* how the gradients are all-reduced, for the header and --log-json */
	struct cnn_reducer red;
	struct cnn_sampler sampler;
	const struct cnn_gpu_api *gpu_api;   /* the GPU path, when this run uses it */
	struct cnn_gpu *gpu;
	uint32_t *eval_idx;
	float *xbuf;
	uint8_t *ybuf;
	int progress_bar;   /* stderr is a terminal: a bar, else lines */
	int eval_batch;
	char device_note[1024];   /* why --device=auto stayed on the CPU */
	/* time breakdown, seconds */
	double t_data, t_compute, t_idle, t_train_wall;
	/* when (Unix time) rank 0's first step ended, its gradients
	 * all-reduced (CPU; 0 on a GPU, whose steps the host does not wait
	 * for): bench/startup.sh's end of start-up */
	double first_step_unix;
	long long timed_images, timed_steps, steps;
	double test_acc, test_loss;
	int evaluated;
	struct cnn_stop stop;   /* a signal's stop, agreed by every rank */
};

/* Errors go to stderr with host and rank, the way Slurm users grep them;
 * the rank leaves the store and exits 1. */
void cnn_run_die(struct run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* A collective failed: err explained with what the communicator knows of
 * its peers (the rank that died, named), then cnn_run_die. */
void cnn_run_comm_failed(struct run *R, char *err, size_t errlen) __attribute__((noreturn));
/* The end of a run, its state on the host (the GPU's fetched): the graph's
 * census and the autos' lines (rank 0), the ranks' parameters compared
 * (a difference is fatal), the time per rank and --log-json, --dump-params,
 * and "done: ..." (rank 0). */
void cnn_run_report(struct run *R);

#endif
