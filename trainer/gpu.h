/* cnn_train's GPU path as the driver (main.c) sees it.  The code is in
 * trainer/cuda/ and ships as a module, cnn_train_cuda.so, that cnn_train
 * opens with dlopen on --device cuda: one cnn_train binary runs on
 * CPU-only nodes and needs no CUDA library there, as ddp-check does with
 * NCCL.  The tests link the same code statically (libcnn_gpu.a).
 *
 * The module keeps the model's parameters, gradients and optimizer state,
 * and the whole data set, in GPU memory.  A training step is: indices in,
 * gather, forward (cuDNN convolutions, cuBLAS linears, fused kernels),
 * backward with the gradient buckets all-reduced by NCCL on a second
 * stream as soon as each is final, the optimizer; captured once as a CUDA
 * graph and replayed.  The host sees parameters only when it asks. */
#ifndef CNN_GPU_H
#define CNN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "data.h"
#include "model.h"
#include "optim.h"

#define CNN_GPU_ABI 11   /* up with every change of what crosses: this header, model.h's structs */
#define CNN_GPU_MODULE "cnn_train_cuda.so"

enum cnn_precision {
	CNN_PREC_TF32 = 0,   /* fp32 storage, TF32 tensor-core math in convs and GEMMs */
	CNN_PREC_FP32,       /* fp32 everywhere (FMA math) */
	CNN_PREC_BF16,       /* bf16 convolutions and GEMMs (fp32 accumulation), bf16
			      * convolution activations; fp32 master weights, gradients,
			      * optimizer, loss.  Needs sm_80 or newer. */
};

/* "tf32", "fp32", "bf16" (the --precision names) */
static inline const char *cnn_precision_name(enum cnn_precision p)
{
	return p == CNN_PREC_FP32 ? "fp32" : p == CNN_PREC_BF16 ? "bf16" : "tf32";
}

/* How the GPU stores the convolutions' activations (--conv-layout). */
enum cnn_layout {
	CNN_LAYOUT_NCHW = 0, /* PyTorch's default; cuDNN may convert inside */
	CNN_LAYOUT_NHWC,     /* channels-last, what cuDNN's tensor-core kernels read */
	CNN_LAYOUT_AUTO,     /* per batch size, the layout whose cuDNN algorithms
			      * cudnnFind timed fastest in total */
};

/* A convolution by cuDNN, by the project's own kernels, or for each batch
 * size and each of its calls whichever runs faster, timed (--conv1: the
 * direct kernels for one input channel, kernels.h cnn_cuda_conv1_fwd and
 * _wgrad; --conv2: the tensor-core implicit GEMMs cnn_cuda_conv3_*, TF32
 * or bf16 only). */
enum cnn_conv_impl {
	CNN_CONV_AUTO = 0,
	CNN_CONV_CUDNN,
	CNN_CONV_DIRECT,
};

/* fc2 and the loss (--fc2): cuBLAS's GEMMs and the loss's kernel, or, for
 * a training batch, one launch of the project's (cnn_cuda_fc2_fused: fc1's
 * dropout, fc2's forward and backward, the loss, fc1's ReLU backward and
 * bias gradient; TF32 and fp32), or per batch size the faster. */
enum cnn_fc2_impl {
	CNN_FC2_CUBLAS = 0,
	CNN_FC2_FUSED,
	CNN_FC2_AUTO,        /* per batch size, the faster of the two, timed */
};

/* Programmatic dependent launch in the step's CUDA graph (--pdl; sm_90
 * and later; kernels.h): the graph's edges into the project's kernels from
 * other kernels made programmatic, so each of those kernels is launched
 * while the one before it still runs and waits for it on the GPU. */
enum cnn_pdl {
	CNN_PDL_OFF = 0,
	CNN_PDL_ON,
	CNN_PDL_AUTO,        /* the step's graph replayed both ways, the faster kept */
};

static inline const char *cnn_pdl_name(enum cnn_pdl p)
{
	return p == CNN_PDL_ON ? "on" : p == CNN_PDL_OFF ? "off" : "auto";
}

/* "nchw", "nhwc", "auto" (the --conv-layout names) */
static inline const char *cnn_layout_name(enum cnn_layout l)
{
	return l == CNN_LAYOUT_NHWC ? "nhwc" : l == CNN_LAYOUT_AUTO ? "auto" : "nchw";
}

struct cnn_gpu_opts {
	const struct cnn_model *m;   /* shapes and dropout; not kept */
	int batch;                   /* per-rank training batch */
	int eval_batch;              /* largest evaluation batch */
	int local_rank;              /* LOCAL_RANK: the task's GPU is entry LOCAL_RANK of
				      * CUDA_VISIBLE_DEVICES (the plugin's order), or
				      * the only one it sees */
	enum cnn_precision precision;
	int graph;                   /* capture the training step (--no-graph: 0) */
	const struct cnn_optim *opt; /* kind and hyper-parameters; state via set_state */
	uint64_t seed;
	int rank, world;
	int timeout_ms;              /* bound on every wait for the GPU or a peer */
	enum cnn_layout layout;      /* the convolutions' activations (0: NCHW) */
	int streams;                 /* --backward-streams: 2 runs the weight gradients
				      * beside the data gradients, CNN_STREAMS_AUTO
				      * whichever way the step's graph replays faster
				      * (0: 1) */
	long long profile_from;      /* --cuda-profile-steps: cudaProfilerStart before this
				      * step (counted from 1; 0: never) ... */
	long long profile_to;        /* ... and cudaProfilerStop after this one */
	enum cnn_conv_impl conv1;    /* --conv1 (0: auto) */
	enum cnn_conv_impl conv2;    /* --conv2 (0: auto) */
	const char *graph_dot;       /* --cuda-graph-dot: the captured step's graph as
				      * cudaGraphDebugDotPrint writes it (NULL: none) */
	enum cnn_fc2_impl fc2;       /* --fc2 (0: cuBLAS) */
	enum cnn_pdl pdl;            /* --pdl (0: off) */
	/* the smaller batches the run will see: an epoch's last training
	 * batch and the evaluation's last (0: none), prepared at open as batch
	 * and eval_batch are (their calls chosen, and timed, before the first
	 * step, the workspace sized for them before a graph pins it) */
	int tails[2];
};

/* --backward-streams auto: the training step is captured both ways, each
 * graph replayed on the batch it was captured on (the parameters and the
 * optimizer's state put back after), and the one whose replay takes less
 * time kept, the times summed over the ranks so that every rank keeps the
 * same.  Without a graph (--no-graph, a host all-reduce): one stream.
 * --conv2 auto times its choices so too (each call's pick, all cuDNN, all
 * the project's kernels: cnn_graph_census), by each streams count. */
#define CNN_STREAMS_AUTO 3

/* What the captured training step's CUDA graph holds (graph_census): its
 * nodes by kind, and the most of them one chain of dependencies runs one
 * after another (a replay takes at least that many launches' time; with
 * --backward-streams 2, fewer than the nodes).  A cuDNN or cuBLAS call is
 * one or more kernel nodes, a copy or memset in a library call its own. */
struct cnn_graph_census {
	int batch;                   /* the images of the step it replays */
	int nodes, kernels, copies, memsets, other;
	int chain;                   /* nodes on the longest dependency chain */
	int streams;                 /* the backward's streams in it: 1 or 2 */
	/* --backward-streams auto (streams_timed 1): a replay's least time
	 * (ms; the sum over the ranks) with 1 and with 2 streams, conv2's
	 * calls as kept; else 0 */
	int streams_timed;
	float ms[2];
	/* --conv2 auto (conv2_variants 3): the step's replay timed with
	 * conv2's calls as each was timed alone (0), all by cuDNN (1), all by
	 * the project's kernels (2), each with its faster streams: conv2's
	 * choices in each (bit 0 forward, 1 backward-data, 2 backward-filter:
	 * the project's kernels), the least time (ms; the sum over the ranks),
	 * and the one kept; else conv2_variants 0 */
	int conv2_variants, conv2_kept;
	int conv2_bits[3];
	float conv2_ms[3];
	/* where the one kept above was not the calls' picks (their times
	 * alone did not foretell the step's), the six mixes of the three
	 * calls (mix_bits[j], in conv2_bits' code) were timed beside it in
	 * its layout and streams (mixes_timed: the replays timed of each, else
	 * 0; mix_ms[j], and its own time in those replays mix_base_ms; the
	 * least time kept, a tie to it: conv2_mixed 1 where a mix won);
	 * conv2_kept_bits the kept graph's */
	int mixes_timed, conv2_mixed, conv2_kept_bits;
	int mix_bits[6];
	float mix_ms[6], mix_base_ms;
	int tuned;                   /* replays timed of each graph (0: none) */
	/* --conv-layout auto (layouts_timed 1): the convolutions' layout kept
	 * (nhwc 1: channels-last), and a replay's least time in NCHW and in
	 * NHWC, each with its own best conv2 calls and streams; else 0 */
	int nhwc, layouts_timed;
	float layout_ms[2];
	/* --pdl (cnn_pdl): the edges a copy of the kept graph made
	 * programmatic (0: none was made: pdl_none says why), whether that
	 * copy is what replays (pdl_kept), and with auto (pdl_timed: the
	 * replays timed of each, else 0) a replay's least time without and
	 * with them (ms; the sum over the ranks) */
	int pdl_edges, pdl_kept, pdl_timed;
	float pdl_ms[2];
	char pdl_none[128];
};

struct cnn_gpu;

struct cnn_gpu_api {
	int abi;   /* CNN_GPU_ABI */
	/* Selects the device, creates the streams and the cuDNN and cuBLAS
	 * handles, allocates the model.  -1 with err naming the device. */
	int (*open)(struct cnn_gpu **g, const struct cnn_gpu_opts *o, char *err, size_t errlen);
	/* "NVIDIA H100 80GB HBM3 (sm_90, 0000:1b:00.0), cuDNN 9.19, TF32, CUDA graph" */
	void (*describe)(const struct cnn_gpu *g, char *buf, size_t len);
	/* The NCCL backend of comm.h, for cnn_comm_open (after open: NCCL
	 * binds the communicator to the device open selected). */
	const struct cnn_comm_ext *comm;
	/* Gradients are all-reduced over this communicator (world > 1). */
	void (*use_comm)(struct cnn_gpu *g, struct cnn_comm *c);
	/* Copies both data sets into GPU memory. */
	int (*load_data)(struct cnn_gpu *g, const struct cnn_dataset *train,
			 const struct cnn_dataset *test, char *err, size_t errlen);
	/* Parameters (nparams floats, the CPU layout) and optimizer state to and
	 * from the host: start, resume, checkpoints, the final check. */
	int (*set_state)(struct cnn_gpu *g, const float *params, const struct cnn_optim *opt,
			 char *err, size_t errlen);
	int (*get_state)(struct cnn_gpu *g, float *params, struct cnn_optim *opt, char *err,
			 size_t errlen);
	/* One step on n training images at idx; step is the global step (the
	 * dropout masks).  Asynchronous: returns once enqueued, waiting only
	 * for the step before last. */
	int (*train_step)(struct cnn_gpu *g, const uint32_t *idx, int n, float lr, uint64_t step,
			  char *err, size_t errlen);
	/* Waits for the last step; its mean loss. */
	int (*last_loss)(struct cnn_gpu *g, float *loss, char *err, size_t errlen);
	/* Sum of losses and count of right answers over n test images at idx. */
	int (*evaluate)(struct cnn_gpu *g, const uint32_t *idx, int n, double *loss_sum,
			long long *correct, char *err, size_t errlen);
	void (*close)(struct cnn_gpu *g);
	/* 1 with c filled once the step has been captured as a graph, else 0. */
	int (*graph_census)(const struct cnn_gpu *g, struct cnn_graph_census *c);
};

/* The module's one entry point (dlsym "cnn_gpu_api"). */
extern const struct cnn_gpu_api cnn_gpu_api;

/* ---- lower level, for the tests (libcnn_gpu.a) --------------------------- */

/* One forward and backward of n images already in the device's input
 * buffer, dropout off: the golden-file test.  x and grads are host arrays
 * (n x c x h x w images in, nparams gradients out); labels on the host. */
int cnn_gpu_debug_step(struct cnn_gpu *g, const float *x, const uint8_t *labels, int n,
		       float *loss, float *logp0, float *grads, char *err, size_t errlen);
/* One optimizer update from the device's gradients with learning rate lr. */
int cnn_gpu_debug_update(struct cnn_gpu *g, float lr, char *err, size_t errlen);
/* The most nodes on one path of a graph of n nodes and ne edges from[e] ->
 * to[e] (node indices): the graph census's longest chain (Kahn's order,
 * each node one deeper than its deepest dependency); -1 for a cycle or an
 * index out of range, -2 out of memory. */
int cnn_graph_chain(size_t n, const int *from, const int *to, size_t ne);

#endif
