/* ddp-check's collectives: gloo (through the comm layer) on the host, NCCL
 * (loaded at run time) on the GPU. */
#ifndef DDP_CHECK_COLL_H
#define DDP_CHECK_COLL_H

#include <stddef.h>

#include "check.h"
#include "ddpenv_store.h"

struct ck_nccl;
struct ck_coll;
struct ck_opts;
struct self;

/* Every task: open the backend's communicator over the store (NCCL for
 * "nccl", else gloo on the task's interface), run an all-reduce of 1 and
 * of many floats whose sums are known exactly, then the bandwidth sweep
 * over sizes (ascending, bytes), and say how it went in out: set-up time,
 * time to the first collective, per-size times or what failed. */
void ck_run_colls(struct self *me, struct ddpenv_store *s, const struct ck_opts *o,
		  const size_t *sizes, size_t nsizes, struct ck_coll *out);


/* One communicator of either backend, as the collectives use it
 * (backend.c): buffers in the backend's memory, the host's for gloo, the
 * task's GPU's for NCCL (ck_comm_alloc; ck_comm_put and ck_comm_get copy
 * from and to the host).  NCCL's calls are enqueued: ck_comm_sync waits. */
struct cnn_comm;
#define CK_COMM_LATER 16
struct ck_comm {
	int nccl, rank, world;
	struct cnn_comm *gloo;
	struct ck_nccl *nc;
	void *later[CK_COMM_LATER];   /* GPU memory freed after the communicator closes */
	int nlater;
};
void *ck_comm_alloc(struct ck_comm *c, size_t bytes);
/* NCCL: freed by ck_comm_close, after the communicator (cudaFree waits
 * for the device, and a kernel waiting for a dead peer ends only when the
 * communicator is aborted). */
void ck_comm_free(struct ck_comm *c, void *p);
/* The communicator closed (NCCL: aborted where a wait failed), then the
 * memory ck_comm_free kept. */
void ck_comm_close(struct ck_comm *c);
int ck_comm_put(struct ck_comm *c, void *dst, const void *host, size_t bytes);
int ck_comm_get(struct ck_comm *c, void *host, const void *src, size_t bytes);
/* In-place float sum of n elements; sync: and wait for it. */
int ck_comm_allreduce(struct ck_comm *c, void *buf, size_t n, int sync, char *err, size_t errlen);
int ck_comm_sync(struct ck_comm *c, char *err, size_t errlen);
/* Collective op of n floats a rank (check.h's enum ck_op) from in (n x
 * world floats for a reduce-scatter): *res is where its result lands (n x
 * world floats, n for a reduce-scatter): out, or in for gloo's
 * reduce-scatter, which sums in place. */
int ck_comm_op(struct ck_comm *c, enum ck_op op, void *in, void *out, size_t n, void **res, char *err,
	       size_t errlen);
/* n floats each way with peer, done when it returns. */
int ck_comm_exchange(struct ck_comm *c, int peer, unsigned tag, const void *send, void *recv, size_t n,
		     char *err, size_t errlen);
/* After a failure: err rewritten to name the tasks that died (gloo). */
void ck_comm_explain(struct ck_comm *c, char *err, size_t errlen);

/* On either backend (coll_ops.c, pairs.c): the sweep of the other
 * collectives (check.h's enum ck_op), each size's data checked; and the
 * node pairs, timed by each node's first task (host: this task's node).
 * What failed in out->op_msg, out->pair_msg. */
void ck_run_ops(struct ck_comm *c, const struct ck_opts *o, const size_t *sizes, size_t nsizes,
		struct ck_coll *out);
void ck_run_pairs(struct ck_comm *c, const char *host, const struct ck_opts *o, struct ck_coll *out);

/* dlopen libcudart and libnccl; -1 with err naming what was tried. */
int ck_nccl_load(char *err, size_t errlen);
/* The task's GPU: entry LOCAL_RANK of what it sees (or the only one), its
 * PCI bus id as hwloc writes it, and how many GPUs the task sees. */
int ck_nccl_device(int local_rank, int *dev, int *count, char *busid, size_t len, char *err,
		   size_t errlen);
/* A communicator over the ranks of the store (rank 0 shares the unique id
 * through it); set-up bounded by timeout_ms. */
int ck_nccl_open(struct ck_nccl **out, struct ddpenv_store *s, int rank, int world,
		 int timeout_ms, char *err, size_t errlen);
/* In-place float sum of n elements of device memory (enqueued, as the
 * rest): all-gather of n floats a rank into n x world; reduce-scatter of n
 * x world into n; all-to-all (grouped sends and receives) of n floats to
 * each rank; n floats each way with one peer. */
int ck_nccl_allreduce(struct ck_nccl *c, void *dbuf, size_t n, char *err, size_t errlen);
int ck_nccl_allgather(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err, size_t errlen);
int ck_nccl_reduce_scatter(struct ck_nccl *c, const void *send, void *recv, size_t n, char *err,
			   size_t errlen);
int ck_nccl_alltoall(struct ck_nccl *c, int world, const void *send, void *recv, size_t n, char *err,
		     size_t errlen);
int ck_nccl_exchange(struct ck_nccl *c, int peer, const void *send, void *recv, size_t n, char *err,
		     size_t errlen);
/* Wait for everything enqueued, bounded by the timeout. */
int ck_nccl_sync(struct ck_nccl *c, char *err, size_t errlen);
void *ck_nccl_alloc(size_t bytes);
void ck_nccl_free(void *p);
int ck_nccl_copy(void *dst, const void *src, size_t bytes, int to_device);
void ck_nccl_close(struct ck_nccl *c);
/* Host-to-device bandwidth of the GPU at busid: the best of trials copies
 * of bytes from pinned memory, after one untimed (GB/s); -1 with err
 * (libcudart not loaded, no such device, memory short). */
int ck_cuda_h2d(const char *busid, size_t bytes, int trials, double *gbps, char *err, size_t errlen);
/* Copies of bytes between every two of the CUDA devices this task sees
 * (the first CK_P2P_MAX), each way, with peer access where the driver
 * gives it: the best of 3 after one untimed, into p; the current device
 * kept.  -1 with err. */
int ck_cuda_p2p(size_t bytes, struct ck_p2p *p, char *err, size_t errlen);
int ck_nccl_version(void);

#endif
