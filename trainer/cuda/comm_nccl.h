/* The NCCL backend of comm.h (internal to cnn_train_cuda.so).
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL
 * call can hang the host: every wait goes through cnn_nccl_wait, which
 * polls the CUDA event, NCCL's asynchronous error, the store's view of the
 * peers (comm->peer_lost) and a deadline, and aborts the communicator
 * (ncclCommAbort) on the first sign of trouble, so a dead rank never
 * hangs the others: they fail within the timeout and name it. */
#ifndef CNN_CUDA_COMM_NCCL_H
#define CNN_CUDA_COMM_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm.h"

extern const struct cnn_comm_ext cnn_comm_nccl_ext;

/* The communicator of a comm opened with cnn_comm_nccl_ext; NULL for any
 * other (world 1 on the local backend). */
ncclComm_t cnn_nccl_comm(struct cnn_comm *c);
/* Enqueue an in-place average over the ranks of n floats of device memory
 * on stream s (capturable in a CUDA graph). */
int cnn_nccl_allreduce_avg(struct cnn_comm *c, float *buf, size_t n, cudaStream_t s, char *err,
			   size_t errlen);
/* Wait for ev, bounded: -1 with err (and the communicator aborted) on a
 * CUDA or NCCL error, a lost peer, or timeout_ms.  c may be NULL (a world
 * of 1: the GPU alone, still bounded). */
int cnn_nccl_wait(struct cnn_comm *c, cudaEvent_t ev, int timeout_ms, const char *what, char *err,
		  size_t errlen);

#endif
