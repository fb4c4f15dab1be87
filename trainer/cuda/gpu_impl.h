/* The GPU module's own state and helpers, shared by gpu.c (the path: the
 * data, the step, the state's way to and from the host) and graph.c (the
 * step captured as a CUDA graph, its variants timed, the one kept). */
#ifndef CNN_CUDA_GPU_IMPL_H
#define CNN_CUDA_GPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "gpu.h"

#include "cuda/errors.h"
#include "cuda/net.h"

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

/* 0 where e is cudaSuccess, else -1, the call and CUDA's message noted
 * (cnn_cuda_fail) for cnn_cuda_last_error. */
int cnn_gpu_cu_ok(cudaError_t e, const char *file, int line, const char *call);
#define CUDA(call) CU(cnn_gpu_cu_ok((call), __FILE__, __LINE__, #call))


/* Everything a step enqueues after its inputs are in d_idx and d_in
 * (gpu.c); first: the run's first update. */
int cnn_gpu_step_body(struct cnn_gpu *g, int n, int first);
/* The training step of the full batch n captured as a CUDA graph into
 * g->exec: with the autos, each variant (layouts, conv2's calls, the
 * backward's streams, programmatic launch) captured and timed and the
 * fastest kept; g->census says which (graph.c).  -1 with err. */
int cnn_gpu_capture(struct cnn_gpu *g, int n, char *err, size_t errlen);

#endif
