/* The trainer's communication layer: one interface, one backend per file.
 * gloo (comm_gloo.cc) serves CPU ranks; the NCCL backend implements the
 * same operations for GPU ranks.  World size 1 needs no backend at all.
 *
 * Every backend is bootstrapped from the libddpenv store (rank 0 hosts it
 * at MASTER_ADDR:MASTER_PORT), which also tells a surviving rank which
 * peer died when a collective fails. */
#ifndef CNN_COMM_H
#define CNN_COMM_H

#include <pthread.h>
#include <stddef.h>

#include "ddpenv_store.h"

struct cnn_comm;

struct cnn_comm_ops {
	const char *name;
	/* In-place sum over all ranks, blocking. */
	int (*allreduce_sum)(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen);
	void (*destroy)(struct cnn_comm *c);
	/* Cut this rank's connections to its peers now, from any thread,
	 * another one perhaps inside a collective (cnn_comm_abandon).  NULL:
	 * the backend's peers learn of it otherwise (NCCL's watchdog reads
	 * cnn_comm_mark_failed's mark). */
	void (*abandon)(struct cnn_comm *c);
	/* The sum times scale in one pass (NULL: the sum, then a pass of
	 * cnn_comm_allreduce_mean's own). */
	int (*allreduce_scaled)(struct cnn_comm *c, float *buf, size_t n, float scale, char *err, size_t errlen);
};

struct cnn_comm {
	const struct cnn_comm_ops *ops;
	int rank, world;
	struct ddpenv_store *store;   /* NULL for world size 1 */
	int owns_store;               /* cnn_comm_open's: closed with the comm */
	void *impl;
	void *local;                  /* the shared-memory all-reduce's (comm_shm.c), or NULL */
	char host[64];
	/* For a backend's watchdog (it may live in a module that cannot call
	 * the store): CNN_PEER_GONE when the store has seen a rank's
	 * connection close without a goodbye, or rank 0 is gone;
	 * CNN_PEER_FAILED when a rank marked itself failed
	 * (cnn_comm_mark_failed); 0 when all are there.  Two round trips to
	 * rank 0. */
	int (*peer_lost)(struct cnn_comm *c);
};

enum { CNN_PEERS_OK = 0, CNN_PEER_GONE = 1, CNN_PEER_FAILED = 2 };

/* Where a rank whose backend cannot start says why (rank 0 that cannot
 * make the id, a rank whose gloo cannot connect): its peers, waiting for a
 * key it will never set, stop then and name it ("a peer failed first"). */
#define CNN_COMM_FAILED_KEY "comm/failed"
/* How many ranks marked themselves failed (cnn_comm_mark_failed): one
 * round trip (an add of 0) tells a watcher whether to read the reason. */
#define CNN_COMM_FAILED_COUNT_KEY "comm/failed/count"

/* A backend from outside libcnn (NCCL, in cnn_train_cuda.so).  comm.c
 * bootstraps it: rank 0 makes an id of id_len bytes (ncclUniqueId), the
 * store carries it to every rank under "comm/<name>/id", and each rank
 * calls init with it, as NCCL_COMM_ID would. */
struct cnn_comm_ext {
	const struct cnn_comm_ops *ops;
	size_t id_len;
	int (*make_id)(void *id, char *err, size_t errlen);
	int (*init)(struct cnn_comm *c, const void *id, int timeout_ms, char *err, size_t errlen);
};

struct cnn_comm_opts {
	const char *backend;     /* "gloo", "local", or ext->ops->name */
	const char *master_addr;
	int master_port;
	int rank, world;
	const char *iface;       /* GLOO_SOCKET_IFNAME, may be NULL */
	const char *token;       /* DDP_RDZV_TOKEN, may be NULL */
	int timeout_ms;
	const struct cnn_comm_ext *ext;  /* NULL: gloo */
	/* Called once the store is joined (world > 1), before the backend's
	 * own rendezvous: where the ranks agree on what the backend must be,
	 * so that ranks that disagree fail at once instead of waiting in
	 * different rendezvous.  -1 with err: cnn_comm_open fails with it. */
	int (*joined)(void *ctx, struct ddpenv_store *store, char *err, size_t errlen);
	void *joined_ctx;
};

int cnn_comm_open(struct cnn_comm **out, const struct cnn_comm_opts *o, char *err, size_t errlen);
/* The same on a store the caller has joined and keeps (ddp-check): the
 * store outlives the comm; close it after cnn_comm_close. */
int cnn_comm_attach(struct cnn_comm **out, struct ddpenv_store *store, int rank, int world,
		    const char *backend, const char *iface, int timeout_ms, char *err, size_t errlen);
/* The same for an external backend. */
int cnn_comm_attach_ext(struct cnn_comm **out, struct ddpenv_store *store, int rank, int world,
			const struct cnn_comm_ext *ext, int timeout_ms, char *err, size_t errlen);
void cnn_comm_close(struct cnn_comm *c);
int cnn_comm_allreduce_sum(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen);
/* The same divided by the world size (the sum times 1/world: the bits of
 * the sum, then a multiply, on every backend). */
int cnn_comm_allreduce_mean(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen);
/* buf[i] *= scale, a multiply each (the mean's last step, for backends) */
void cnn_comm_scale(float *buf, size_t n, float scale);
/* Every rank gets rank root's buf (a sum with zeros elsewhere: exact). */
int cnn_comm_broadcast(struct cnn_comm *c, float *buf, size_t n, int root, char *err, size_t errlen);

/* The collectives ddp-check sweeps beside the all-reduce, on the gloo
 * backend (-1 with err on another).  n is each rank's share, in floats:
 *   allgather       in[n] of every rank into out[world*n], rank order
 *   reduce_scatter  buf[world*n] summed over ranks (a ring, in its
 *                   order); this rank's share, sum[rank*n..rank*n+n), left
 *                   in buf[0..n)
 *   alltoall        in[world*n]: share j to rank j; out[world*n]: share j
 *                   from rank j
 *   exchange        send[n] to peer and recv[n] from it at once (both
 *                   give the same tag): one link's bandwidth, both ways */
int cnn_comm_allgather(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen);
int cnn_comm_reduce_scatter_sum(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen);
int cnn_comm_alltoall(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen);
int cnn_comm_exchange(struct cnn_comm *c, int peer, unsigned tag, const float *send, float *recv, size_t n,
		      char *err, size_t errlen);
/* After a failed collective: rewrite err to name the rank(s) that died,
 * with their host, as the store saw them leave. */
void cnn_comm_explain_failure(struct cnn_comm *c, char *err, size_t errlen);

/* A rank that stops on an error of its own, before it leaves the store:
 * it says so there (why under CNN_COMM_FAILED_KEY, and a count that
 * peer_lost reads).  A clean goodbye looks the same as a finished rank's,
 * and where NCCL's kernels spin on a peer's shared memory (within a node)
 * nothing else tells the others to stop before their --timeout.  Best
 * effort: a store that failed takes nothing. */
void cnn_comm_mark_failed(struct cnn_comm *c, const char *why);

/* The same rank, after the mark and before it leaves the store: its
 * backend's connections to its peers cut, so that their collectives fail
 * now and they ask the store, which still answers, who left (gloo's peers
 * would wait on the open connections until this process exits, and by
 * then rank 0's store is gone with it).  The comm is of no more use. */
void cnn_comm_abandon(struct cnn_comm *c);

/* The gloo backend, from comm_gloo.cc (C API over C++). */
extern const struct cnn_comm_ops cnn_comm_gloo_ops;
int cnn_gloo_allgather(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen);
int cnn_gloo_reduce_scatter(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen);
int cnn_gloo_alltoall(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen);
int cnn_gloo_exchange(struct cnn_comm *c, int peer, unsigned tag, const float *send, float *recv, size_t n,
		      char *err, size_t errlen);
int cnn_comm_gloo_init(struct cnn_comm *c, const char *iface, const char *hostname,
		       int timeout_ms, char *err, size_t errlen);

/* The all-reduce of a gloo communicator whose ranks all share a node,
 * through shared memory (comm_shm.c), set up collectively: every rank
 * calls it once, after cnn_comm_open, with the same own.  1: in use; 0:
 * not (another node's rank, one rank, not gloo, a /dev/shm too small; why
 * says which); -1 with err: the store failed.  gloo's other collectives
 * are unchanged.
 *
 * own > 0: the segment also holds a buffer of own floats for each rank,
 * cnn_comm_shm_buffer's (64-byte aligned, zeros at first, unmapped by
 * cnn_comm_close).  An all-reduce of floats inside it, at the same place
 * on every rank, is done where they lie, without copies; while it runs,
 * a rank may write only outside the floats being reduced. */
int cnn_comm_use_shm(struct cnn_comm *c, int timeout_ms, size_t own, char *why, size_t whylen, char *err,
		     size_t errlen);
/* This rank's own buffer in the segment; NULL when there is none. */
float *cnn_comm_shm_buffer(struct cnn_comm *c);

/* How long a rank that waits for its peers (a barrier of the shared-memory
 * all-reduce, the trainer waiting for its reducer) keeps its core before it
 * sleeps: it yields the core to any thread that can run (its own compute or
 * communication thread) but does not give it up, which covers the usual
 * skew of a step between ranks; a longer wait (rank 0's evaluation or
 * checkpoint, a slow peer) sleeps.  On the 2-core VM, ranks that slept at
 * every step's end trained about 6% slower at 2 processes x 1 thread
 * (docs/benchmarks.md). */
#define CNN_COMM_SPIN_MS 50

/* Gradient reducer: buckets are all-reduced (and averaged) on a
 * communication thread while the backward pass goes on. */
struct cnn_reducer {
	struct cnn_comm *comm;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct { float *p; size_t n; } q[8];
	int head, tail, busy, stop, failed;
	char err[512];
	double comm_s;   /* time spent inside all-reduces */
};

int cnn_reducer_start(struct cnn_reducer *r, struct cnn_comm *c);
/* Queue a bucket: buf[0..n) averaged over ranks (cnn_comm_allreduce_mean). */
void cnn_reducer_push(struct cnn_reducer *r, float *buf, size_t n);
/* Wait for every queued bucket; -1 with err if any failed. */
int cnn_reducer_wait(struct cnn_reducer *r, char *err, size_t errlen);
void cnn_reducer_stop(struct cnn_reducer *r);

#endif
