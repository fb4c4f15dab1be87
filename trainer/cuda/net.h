/* The Net of model.h on one GPU: cuDNN convolutions (forward, backward
 * data and filter, bias gradients), cuBLAS linear layers, the project's
 * kernels (kernels.h, conv2_tc.cu).  Same flat parameter layout as the
 * CPU path, so a checkpoint or a state_dict maps onto it unchanged.
 * Internal to cnn_train_cuda.so. */
#ifndef CNN_CUDA_NET_H
#define CNN_CUDA_NET_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "cuda/kernels.h"
#include "gpu.h"
#include "model.h"

/* conv2's cuDNN calls at the graph's batch: at most this many of
 * cudnnFind's algorithms, those it timed within CNN_CUDNN_SLACK times its
 * fastest, timed again (cnn_gnet_algos.cand). */
enum { CNN_CUDNN_CANDS = 4 };
#define CNN_CUDNN_SLACK 2.0f

/* Algorithms for one batch size, found by cuDNN's benchmark, and the
 * layout of the convolutions' activations they were timed on. */
struct cnn_gnet_algos {
	int n;
	int nhwc;                                       /* 1: channels-last */
	float ms[2];                                    /* cudnnFind's total for NCHW, NHWC
							 * (0: not timed, -1: no algorithm) */
	cudnnConvolutionFwdAlgo_t fwd[2];
	cudnnConvolutionBwdDataAlgo_t bwd_data;         /* conv2 only */
	cudnnConvolutionBwdFilterAlgo_t bwd_filter[2];
	cudnnMathType_t fwd_math[2], bwd_data_math, bwd_filter_math[2];
	/* conv1 (one input channel): bit 0, its forward by the direct kernel;
	 * bit 1, its weight gradient; and what each took, cuDNN's call (with
	 * the bias and ReLU work it needs) against the direct kernel's, in ms
	 * (0: not timed) */
	int direct1;
	float ms1[2][2];
	/* conv2 (TF32 or bf16): bit 0, its forward by the tensor-core kernels;
	 * bit 1, its backward-data; bit 2, its backward-filter; and each
	 * call's times, cuDNN's against the kernels' (0: not timed), the
	 * backward-filter's with the bias gradient's.  Chosen together in
	 * NCHW (cnn_choose_bwd): conv2's backward-data with conv1's weight
	 * gradient, msb[conv1 direct][conv2 direct], and the pool's backward,
	 * which only cuDNN's calls need (ms_da2; 0: not timed) */
	int direct2;
	float ms2[3][2], ms_da2, msb[2][2];
	/* fc2's classifier (cnn_gnet.fc2): 1, the fused kernel; with auto, the
	 * unfused calls' time and the kernel's, in ms (0: not timed) */
	int fc2;
	float ms_fc2[2];
	char why[256];                                  /* auto: why the other layout had
							 * no algorithm ("" if it had) */
	/* conv2's cuDNN calls (forward, backward-data, backward-filter):
	 * cudnnFind's candidates in its order (its pick first) and, at the
	 * graph's batch, each one's time as timed here as a graph of its runs
	 * (0: not timed, -1: it failed to run); the least is the call's
	 * algorithm.  cudnnFind times each algorithm once, and at a small
	 * batch its order changes from run to run. */
	int ncand[3];
	int cand[3][CNN_CUDNN_CANDS];
	cudnnMathType_t cand_math[3][CNN_CUDNN_CANDS];
	float cand_ms[3][CNN_CUDNN_CANDS];
};

/* The backward's convolutions in NCHW, chosen together: conv2's
 * tensor-core kernels read the pool's tensors, so conv2's output gradient
 * is written (pool_bwd) only for a cuDNN call, and conv1's weight and bias
 * gradients ride on conv2's backward-data where both are the project's.
 * From dg[conv1 direct][conv2 direct] (conv2's backward-data with conv1's
 * weight gradient, as the step runs them), wg[direct] (conv2's
 * backward-filter with its bias's) and pool_bwd, the least sum: bits 1
 * and 2 of direct2, and conv1's choice in *conv1 (0 cuDNN, 1 direct).
 * A negative time is a choice not open; -1 if none is. */

struct cnn_gnet {
	struct cnn_model m;              /* shapes; m.params/grads are NULL here */
	int max_batch;
	enum cnn_precision precision;
	enum cnn_layout layout;          /* asked for: nchw, nhwc or auto */
	cudaStream_t s;
	cudnnHandle_t dnn;
	cublasHandle_t blas;
	cudnnTensorDescriptor_t tx, t1, t2;
	cudnnFilterDescriptor_t fw[2], fwh[2]; /* OIHW (NCHW), OHWI (NHWC) */
	cudnnConvolutionDescriptor_t cv[2];
	struct cnn_gnet_algos algos[8];
	/* --conv-layout auto, the graph's batch (graph_batch): others[i] has
	 * the other layout's algorithms for algos[i].n, chosen as algos[i]'s
	 * (cnn_gnet_set_layout swaps them); n 0 where none */
	struct cnn_gnet_algos others[8];
	int nalgos;
	void *ws, *blas_ws;
	size_t ws_bytes;
	int ws_frozen;                   /* a captured graph holds ws: never reallocate */
	/* The batch size whose steps replay as a CUDA graph (0: none, eager
	 * steps): auto times that batch's calls as graphs of their runs, as
	 * the replay runs them (the host's launch costs, which cuDNN's calls
	 * pay far more of than one kernel launch, out of the comparison), the
	 * other batch sizes' on the stream as an eager step runs them.
	 * graph_timed counts the calls so timed, graph_refused those whose
	 * capture failed and that were timed on the stream instead. */
	int graph_batch, graph_timed, graph_refused;
	/* --backward-streams 2: the backward's weight gradients (the linear
	 * layers' dW and db, conv2's bias gradient and backward-filter) on sw,
	 * forked from s as each one's inputs are final and joined back before
	 * the convolutions' bucket, concurrent with the data gradients on s:
	 * a cuDNN and a cuBLAS handle, workspaces and events of their own.
	 * With one stream sw is s and the handles are s's.  streams is the
	 * backward's now (cnn_gnet_use_streams), streams_made what init made:
	 * --backward-streams auto makes two and times the step both ways. */
	int streams, streams_made;
	enum cnn_conv_impl conv1;        /* asked for; algos[].direct1 has the choice */
	float *c1s;                      /* conv1's weight gradient on conv2's backward-data: its scratch */
	float *c1w;                      /* conv1's weight gradient by its own kernel: its
					  * scratch, its counters 0 between calls */
	enum cnn_conv_impl conv2;        /* asked for; algos[].direct2 has the choice */
	/* --fc2 (TF32, fp32; bf16 keeps cuBLAS's): fused, a training batch's
	 * fc1 dropout, fc2 forward, loss, fc2 backward, fc1's ReLU backward and
	 * bias gradient in one launch (cnn_cuda_fc2_fused), where seven took
	 * them; auto, per batch size the faster (algos[].fc2 has the choice) */
	enum cnn_fc2_impl fc2;
	int tc;                          /* the GPU has TF32 and bf16 tensor cores (8.0+) */
	float *c2s;                      /* the tensor-core conv2 weight gradient's scratch */
	float *fhs;                      /* fc2's fused classifier's scratch (its counter zeroed) */
	size_t fhs_n;                    /* its floats */
	void *c2w;                       /* conv2's weights packed for those kernels (the
					  * forward's, then the backward-data's): wfresh */
	cudaStream_t sw, sw_made;        /* sw_made, dnnw_made, blasw_made: the second */
	cudnnHandle_t dnnw, dnnw_made;   /* stream's, where init made it (else s's) */
	cublasHandle_t blasw, blasw_made;
	void *wsw, *blasw_ws;
	cudaEvent_t ev[4];
	float *params, *grads;           /* nparams each: the master copy (fp32 always) */
	float *x, *p, *h, *logits, *logp, *dlogits, *dh, *dp, *ones;
	/* The convolutions' activations and their gradients: float, or bf16
	 * for --precision bf16 (esize bytes each).  a2 is cuDNN's conv2
	 * output before its bias: the pool applies the bias and the ReLU
	 * (conv2's tensor-core forward pools in its epilogue: no a2). */
	void *a1, *a2, *da1, *da2;
	size_t esize;
	/* bf16 only: the weights as the convolutions and GEMMs read them
	 * (cast from params: wfresh), the GEMMs' bf16 operands, and
	 * the convolutions' weight gradients before they widen into grads. */
	cnn_bf16 *wb, *xb, *pb, *hb, *dlb, *dhb, *dwb;
	/* bf16: the caller wrote xb with x (cnn_cuda_gather's), so the next
	 * forward does not convert it; that forward clears it */
	int xb_given;
	/* The batch the next forward gathers itself (cnn_gnet_set_batch): the
	 * data set's bytes at idx.  conv1's direct forward reads the images
	 * there (cnn_cuda_conv1_fwd_gather: the gather's launch gone, its
	 * writes the same); cuDNN's reads x, gathered first. */
	struct {
		const uint8_t *xs, *ys;
		const uint32_t *idx;
		struct cnn_cuda_norm norm;
		int set;
	} batch;
	float *bgs;                      /* the bias gradients' chunk sums: conv1's, then
					  * conv2's at bgs_off (concurrent with two streams) */
	size_t bgs_off;
	/* Channels-last only: the convolutions' weights in OHWI (conv1's at 0,
	 * conv2's at its size) as the convolutions read them, their gradients
	 * before they go back to OIHW, and (input of more than one channel) the
	 * batch transposed; esize bytes each. */
	void *wt, *dwt, *xt;
	uint8_t *arg, *y;
	/* The weights' forms the forward reads besides params (CNN_WOP_*:
	 * bf16's wb, conv2's packs, channels-last's OHWI): those current with
	 * params.  A forward makes what its batch's algorithms read and is not
	 * current; the optimizer writes them as it updates params
	 * (cnn_gnet_wop); a host write of params makes none current. */
	unsigned wfresh;
	float *stats;                    /* [0] loss sum, [1] correct, of the last forward */
	/* The dropout keys of layers 1 and 2 in device memory: keys_own (zeros)
	 * until the caller points keys at its own (gpu.c: the step's inputs, so
	 * a replayed graph reads each step's without a copy). */
	const uint64_t *keys;
	uint64_t *keys_own;
	char err[512];
	/* auto's start-up timing: the first of the project's kernels that
	 * failed to launch where the context stayed sound ("conv2's forward:
	 * file:line: call: message"), those calls left to cuDNN; "" if none */
	char fallback[384];
};

/* Buckets of the flat gradient buffer, in the order the backward finishes
 * them: the linear layers (t[P_W3].off to the end), then the convolutions. */
enum { CNN_BUCKET_FC, CNN_BUCKET_CONV };
/* Not a bucket: the backward's last read of the linear layers' weights
 * this step is enqueued on the stream named (their update may follow it
 * there, beside the convolutions' backward). */
enum { CNN_FC_WEIGHTS_READ = 2 };

int cnn_gnet_init(struct cnn_gnet *g, const struct cnn_model *m, int max_batch,
		  enum cnn_precision precision, enum cnn_layout layout, int streams,
		  enum cnn_conv_impl conv1, enum cnn_conv_impl conv2, cudaStream_t s);
void cnn_gnet_free(struct cnn_gnet *g);
/* The backward's streams from the next call on: 1, or 2 where init made
 * two (the same arithmetic either way).  -1 with g->err otherwise. */
int cnn_gnet_use_streams(struct cnn_gnet *g, int streams);
/* --conv2 auto (TF32, bf16): the choices of batch n's conv2 calls that
 * the step's CUDA graph is timed with as a whole (graph.c), into
 * direct1[k] and direct2[k] (cnn_gnet_algos' bits): 0, each call as it
 * was timed alone; 1, conv2's three calls by cuDNN; 2, by the project's
 * kernels (the calls' own where one could not launch here); then the
 * CNN_CONV2_MIXES mixes, 2 + b for b 1 to 6: the calls of b's bits (bit 0
 * forward, 1 backward-data, 2 backward-filter) by the project's kernels,
 * the others by cuDNN (where one of the project's calls could not launch
 * here, only those of b that the picks have).  conv1's weight gradient,
 * where it is chosen with conv2's backward-data, is the faster beside the
 * backward-data each takes.  The count of the first kind: 3, or 0 where
 * conv2 is not auto here (or batch n not prepared); the mixes follow
 * whenever it is 3, as many on every rank. */
enum { CNN_CONV2_VARIANTS = 3, CNN_CONV2_MIXES = 6 };
int cnn_gnet_conv2_variants(const struct cnn_gnet *g, int n,
			    int direct1[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES],
			    int direct2[CNN_CONV2_VARIANTS + CNN_CONV2_MIXES]);
/* Batch n's calls from now on as those bits choose; -1 if n is not
 * prepared. */
int cnn_gnet_set_conv2(struct cnn_gnet *g, int n, int direct1, int direct2);
/* --conv-layout auto: the layouts batch n has algorithms for, the one in
 * use first, into nhwc[] (1: channels-last): the count, 2 for the batch
 * whose step replays as a graph where both layouts have algorithms (graph.c
 * times the step in each), else 1; 0 if n is not prepared. */
int cnn_gnet_layouts(const struct cnn_gnet *g, int n, int nhwc[2]);
/* Batch n's calls from now on in that layout (its own choices of conv1's
 * and conv2's calls, cnn_gnet_set_conv2's included); -1 with g->err where
 * n has no algorithms in it. */
int cnn_gnet_set_layout(struct cnn_gnet *g, int n, int nhwc);
/* cuDNN's algorithms for batch n (benchmarked once per n; not while a
 * stream is being captured), in the layout asked for, or with auto in
 * the one whose five convolution calls cudnnFind timed faster in total
 * (the graph's batch: that one in use, the other's kept beside it for
 * cnn_gnet_set_layout).  Once ws_frozen is set, only algorithms that fit the workspace are taken.
 * -1 with g->err. */
int cnn_gnet_prepare(struct cnn_gnet *g, int n);
/* The next forward's batch: images xs and labels ys (device memory, the
 * data set's) at the n indices idx, normalized by norm (cnn_cuda_gather's
 * arguments); the forward writes x, xb and y as the gather would. */
void cnn_gnet_set_batch(struct cnn_gnet *g, const uint8_t *xs, const uint8_t *ys,
			const uint32_t *idx, const struct cnn_cuda_norm *norm);
/* Forward of n images in g->x (and g->xb if xb_given) with labels in g->y
 * (or those of cnn_gnet_set_batch's batch);
 * the loss sum and the correct count into g->stats (overwritten).  train:
 * dropout with g->keys.
 * scale_n > 0: also the loss's gradient for a backward, the mean over
 * scale_n images, and from it fc2's bias gradient, in the loss's kernel
 * (0: an evaluation). */
int cnn_gnet_forward(struct cnn_gnet *g, int n, int train, float scale_n);
/* Backward of the last forward (scale_n > 0: the gradients are its mean);
 * ready(ctx, bucket, on) as each bucket's gradients are final on stream
 * on (the linear layers' on sw, the convolutions' on g->s), and
 * ready(ctx, CNN_FC_WEIGHTS_READ, g->s) between the two.  Every gradient
 * is final on g->s when it returns. */
int cnn_gnet_backward(struct cnn_gnet *g, int n,
		      int (*ready)(void *ctx, int bucket, cudaStream_t on), void *ctx);
struct cnn_stage;
/* The stages (layers.h) cnn_gnet_forward (backward 0; in training, with
 * --fc2 fused where fc2_fused) or cnn_gnet_backward runs, n of them. */
const struct cnn_stage *cnn_gnet_stages(int fc2_fused, int backward, size_t *n);
/* The weights' forms (bits of wfresh): the bf16 copy of every parameter,
 * conv2's packs for its tensor-core kernels, conv1's and conv2's OHWI
 * copies for channels-last. */
enum { CNN_WOP_BF16 = 1, CNN_WOP_PACK2 = 2, CNN_WOP_OHWI1 = 4, CNN_WOP_OHWI2 = 8 };
/* What an optimizer step writes besides params (cnn_cuda_wop): every form
 * that the algorithms of a batch size prepared so far read; the mask,
 * which the caller sets wfresh to once the step is enqueued (0: nothing,
 * pass no wop). */
unsigned cnn_gnet_wop(const struct cnn_gnet *g, struct cnn_cuda_wop *w);
/* Make the forms of mask current now, on g->s (before replaying a graph
 * whose forward took them as current). */
int cnn_gnet_wop_ensure(struct cnn_gnet *g, unsigned mask);
/* "cuDNN 9.19.0, cuBLAS 13.0.0, TF32, NCHW" (or fp32, or "bf16, fp32
 * master weights"; the layout of each batch size prepared, with auto the
 * times it was chosen by; conv1's and conv2's choices, with auto per
 * batch size and call, and their times) */
void cnn_gnet_describe(const struct cnn_gnet *g, char *buf, size_t len);

#endif
