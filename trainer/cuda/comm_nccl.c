/* The NCCL backend of the trainer's comm layer (see comm_nccl.h).  comm.c
 * carries rank 0's ncclUniqueId to every rank through the libddpenv store;
 * this file creates the communicator on the device the caller selected,
 * implements the host-buffer all-reduce of comm.h (evaluation sums, the
 * parameter broadcast, the final checks: staged through device memory on
 * a stream of its own) and the device all-reduce the training step
 * enqueues, and bounds every wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/comm_nccl.h"

#include "cuda/errors.h"

struct nccl_impl {
	ncclComm_t comm;
	cudaStream_t s;     /* host-buffer collectives */
	cudaEvent_t done;
	float *scratch;     /* device */
	float *pinned;      /* host, page-locked: no copy blocks the host */
	size_t cap;         /* floats in each */
	int timeout_ms;
	int aborted;
};

static double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int nccl_fail(struct nccl_impl *n, ncclResult_t r, const char *what, char *err, size_t errlen)
{
	/* (NCCL's last error is the process's: NULL for a call made before
	 * there is a communicator, ncclGetUniqueId; none once it is aborted) */
	const char *last = !n ? ncclGetLastError(NULL) : n->comm && !n->aborted ? ncclGetLastError(n->comm) : NULL;
	snprintf(err, errlen, "NCCL %s: %s%s%s", what, ncclGetErrorString(r), last && *last ? ": " : "",
		 last ? last : "");
	return -1;
}

/* Ends the communicator (NCCL frees it): after this, nothing may use n->comm. */
static void nccl_abort(struct nccl_impl *n)
{
	if (n && n->comm && !n->aborted) {
		n->aborted = 1;
		ncclCommAbort(n->comm);
	}
}

/* The store's word on the peers (c->peer_lost), every half second of a
 * wait: -1 with err (what failed, and why the communicator must abort)
 * once a peer is gone or failed.  Within a node NCCL's kernels spin on a
 * peer's shared memory, and no error of NCCL's ever comes. */
static int peers_gone(struct cnn_comm *c, double t, double *next, const char *prefix, const char *what,
		      char *err, size_t errlen)
{
	if (!c || !c->peer_lost || t < *next)
		return 0;
	*next = t + 0.5;
	switch (c->peer_lost(c)) {
	case CNN_PEERS_OK:
		return 0;
	case CNN_PEER_FAILED:
		snprintf(err, errlen, "%s%s: a peer stopped on an error of its own (it left the rendezvous); "
			 "the communicator aborted", prefix, what);
		return -1;
	default:
		snprintf(err, errlen, "%s%s: a peer's connection to the rendezvous closed; the communicator "
			 "aborted", prefix, what);
		return -1;
	}
}

/* Wait until the non-blocking communicator's last call is done. */
static int settle(struct cnn_comm *c, struct nccl_impl *n, const char *what, char *err, size_t errlen)
{
	double deadline = mono() + n->timeout_ms / 1000.0, next_peer_check = mono() + 0.5;
	for (;;) {
		ncclResult_t st;
		ncclResult_t r = ncclCommGetAsyncError(n->comm, &st);
		if (r != ncclSuccess)
			return nccl_fail(n, r, what, err, errlen);
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress)
			return nccl_fail(n, st, what, err, errlen);
		double t = mono();
		if (t > deadline) {
			snprintf(err, errlen, "NCCL %s: not done after %d s", what, n->timeout_ms / 1000);
			return -1;
		}
		if (peers_gone(c, t, &next_peer_check, "NCCL ", what, err, errlen) < 0)
			return -1;   /* (the callers abort) */
		usleep(1000);
	}
}

static int make_id(void *id, char *err, size_t errlen)
{
	ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
	return r == ncclSuccess ? 0 : nccl_fail(NULL, r, "ncclGetUniqueId", err, errlen);
}

static int init(struct cnn_comm *c, const void *id, int timeout_ms, char *err, size_t errlen)
{
	struct nccl_impl *n = calloc(1, sizeof(*n));
	ncclUniqueId uid;
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(&uid, id, sizeof(uid));
	n->timeout_ms = timeout_ms;
	cudaError_t e = cudaStreamCreateWithFlags(&n->s, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "NCCL set-up: %s", cudaGetErrorString(e));
		free(n);
		return -1;
	}
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	ncclResult_t r = ncclCommInitRankConfig(&n->comm, c->world, uid, c->rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		nccl_fail(n, r, "ncclCommInitRankConfig", err, errlen);
		goto fail;
	}
	c->impl = n;
	if (settle(c, n, "communicator set-up (ncclCommInitRankConfig)", err, errlen) < 0) {
		nccl_abort(n);
		goto fail;
	}
	return 0;
fail:
	c->impl = NULL;
	cudaEventDestroy(n->done);
	cudaStreamDestroy(n->s);
	free(n);
	return -1;
}

ncclComm_t cnn_nccl_comm(struct cnn_comm *c)
{
	return c && c->ops == cnn_comm_nccl_ext.ops && c->impl ? ((struct nccl_impl *)c->impl)->comm :
								 NULL;
}

/* After a collective call: an error aborts the communicator.  A
 * non-blocking communicator's operation is on the stream only once its
 * state leaves ncclInProgress (connection set-up on first use): settle
 * before anything else is enqueued or a graph capture ends. */
static int enqueued(struct cnn_comm *c, struct nccl_impl *ni, ncclResult_t r, const char *what,
		    char *err, size_t errlen)
{
	if (r != ncclSuccess && r != ncclInProgress) {
		nccl_fail(ni, r, what, err, errlen);
		nccl_abort(ni);
		return -1;
	}
	if (r == ncclInProgress && settle(c, ni, what, err, errlen) < 0) {
		nccl_abort(ni);
		return -1;
	}
	return 0;
}

int cnn_nccl_allreduce_avg(struct cnn_comm *c, float *buf, size_t n, cudaStream_t s, char *err,
			   size_t errlen)
{
	struct nccl_impl *ni = c->impl;
	if (ni->aborted) {
		snprintf(err, errlen, "NCCL: the communicator was aborted after an earlier failure");
		return -1;
	}
	ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, ni->comm, s);
	return enqueued(c, ni, r, "all-reduce of the gradients", err, errlen);
}

int cnn_nccl_wait(struct cnn_comm *c, cudaEvent_t ev, int timeout_ms, const char *what, char *err,
		  size_t errlen)
{
	struct nccl_impl *ni = c && c->ops == cnn_comm_nccl_ext.ops ? c->impl : NULL;
	if (ni && ni->aborted)
		ni = NULL;   /* ncclCommAbort freed the communicator: only the event is left */
	double deadline = mono() + timeout_ms / 1000.0, next_peer_check = mono() + 0.5;
	for (;;) {
		cudaError_t e = cudaEventQuery(ev);
		if (e == cudaSuccess) {
			/* done, but not to be trusted on a communicator that
			 * failed meanwhile (NCCL's kernels may end early once it
			 * has: their buffers are then not the ranks' sum) */
			ncclResult_t st;
			if (ni && ncclCommGetAsyncError(ni->comm, &st) == ncclSuccess && st != ncclSuccess &&
			    st != ncclInProgress) {
				nccl_fail(ni, st, what, err, errlen);
				nccl_abort(ni);
				return -1;
			}
			return 0;
		}
		if (e != cudaErrorNotReady) {
			snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
			nccl_abort(ni);
			return -1;
		}
		if (ni) {
			ncclResult_t st;
			if (ncclCommGetAsyncError(ni->comm, &st) == ncclSuccess && st != ncclSuccess &&
			    st != ncclInProgress) {
				nccl_fail(ni, st, what, err, errlen);
				nccl_abort(ni);
				return -1;
			}
		}
		double t = mono();
		if (t > deadline) {
			snprintf(err, errlen, "%s: not done after %d s%s", what, timeout_ms / 1000,
				 ni ? " (NCCL waits for a peer that is gone, hangs or is cut off)" : "");
			nccl_abort(ni);
			return -1;
		}
		if (ni && peers_gone(c, t, &next_peer_check, "", what, err, errlen) < 0) {
			nccl_abort(ni);
			return -1;
		}
		usleep(20);
	}
}

/* comm.h's all-reduce of a host buffer: staged through device memory. */
static int host_allreduce(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	struct nccl_impl *ni = c->impl;
	cudaError_t e = cudaSuccess;
	if (ni->aborted) {
		snprintf(err, errlen, "NCCL: the communicator was aborted after an earlier failure");
		return -1;
	}
	if (n > ni->cap) {
		if (ni->scratch)
			cudaFree(ni->scratch);
		if (ni->pinned)
			cudaFreeHost(ni->pinned);
		ni->scratch = ni->pinned = NULL;
		ni->cap = 0;
		if ((e = cudaMalloc((void **)&ni->scratch, n * sizeof(float))) != cudaSuccess ||
		    (e = cudaMallocHost((void **)&ni->pinned, n * sizeof(float))) != cudaSuccess)
			goto cuda;
		ni->cap = n;
	}
	memcpy(ni->pinned, buf, n * sizeof(float));
	if ((e = cudaMemcpyAsync(ni->scratch, ni->pinned, n * sizeof(float), cudaMemcpyHostToDevice,
				 ni->s)) != cudaSuccess)
		goto cuda;
	/* the copy back must come after the all-reduce is on ni->s */
	ncclResult_t r = ncclAllReduce(ni->scratch, ni->scratch, n, ncclFloat32, ncclSum, ni->comm, ni->s);
	if (enqueued(c, ni, r, "all-reduce", err, errlen) < 0)
		return -1;
	if ((e = cudaMemcpyAsync(ni->pinned, ni->scratch, n * sizeof(float), cudaMemcpyDeviceToHost,
				 ni->s)) != cudaSuccess || (e = cudaEventRecord(ni->done, ni->s)) != cudaSuccess)
		goto cuda;
	if (cnn_nccl_wait(c, ni->done, ni->timeout_ms, "NCCL all-reduce", err, errlen) < 0)
		return -1;
	memcpy(buf, ni->pinned, n * sizeof(float));
	return 0;
cuda:
	snprintf(err, errlen, "NCCL all-reduce staging: %s", cudaGetErrorString(e));
	return -1;
}

static void destroy(struct cnn_comm *c)
{
	struct nccl_impl *ni = c->impl;
	char err[256];
	if (!ni)
		return;
	if (!ni->aborted) {
		ncclResult_t r = ncclCommFinalize(ni->comm);
		if ((r == ncclSuccess || r == ncclInProgress) && settle(c, ni, "finalize", err, sizeof(err)) == 0)
			ncclCommDestroy(ni->comm);
		else
			nccl_abort(ni);
	}
	if (ni->scratch)
		cudaFree(ni->scratch);
	if (ni->pinned)
		cudaFreeHost(ni->pinned);
	cudaEventDestroy(ni->done);
	cudaStreamDestroy(ni->s);
	free(ni);
	c->impl = NULL;
}

static const struct cnn_comm_ops nccl_ops = { "nccl", host_allreduce, destroy, NULL, NULL };

const struct cnn_comm_ext cnn_comm_nccl_ext = { &nccl_ops, sizeof(ncclUniqueId), make_id, init };
