/* ddp-check's collectives: gloo (through the trainer's comm layer) on the
 * host, NCCL (loaded at run time) on the GPU. */
#ifndef DDP_CHECK_COLL_H
#define DDP_CHECK_COLL_H

#include <stddef.h>

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


/* On the gloo communicator c (coll_ops.c, pairs.c): the sweep of the
 * other collectives (check.h's enum ck_op), each size's data checked; and
 * the node pairs, timed by each node's first task (host: this task's
 * node).  What failed in out->op_msg, out->pair_msg. */
struct cnn_comm;
void ck_run_ops(struct cnn_comm *c, const struct ck_opts *o, const size_t *sizes, size_t nsizes,
		struct ck_coll *out);
void ck_run_pairs(struct cnn_comm *c, const char *host, const struct ck_opts *o, struct ck_coll *out);

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
/* In-place float sum of n elements of device memory (enqueued). */
int ck_nccl_allreduce(struct ck_nccl *c, void *dbuf, size_t n, char *err, size_t errlen);
/* Wait for everything enqueued, bounded by the timeout. */
int ck_nccl_sync(struct ck_nccl *c, char *err, size_t errlen);
void *ck_nccl_alloc(size_t bytes);
void ck_nccl_free(void *p);
int ck_nccl_copy(void *dst, const void *src, size_t bytes, int to_device);
void ck_nccl_close(struct ck_nccl *c);
int ck_nccl_version(void);

#endif
