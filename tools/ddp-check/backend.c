/* ddp-check's two backends behind one set of calls (coll.h's struct
 * ck_comm): gloo through the comm layer on host memory, NCCL (nccl_dl.c)
 * on the task's GPU.  NCCL's calls are enqueued on its stream:
 * ck_comm_sync waits for them, bounded; gloo's return done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "comm.h"

void *ck_comm_alloc(struct ck_comm *c, size_t bytes)
{
	return c->nccl ? ck_nccl_alloc(bytes) : malloc(bytes);
}

void ck_comm_free(struct ck_comm *c, void *p)
{
	if (!c->nccl)
		free(p);
	else if (p && c->nlater < CK_COMM_LATER)
		c->later[c->nlater++] = p;
	else if (p)
		ck_nccl_free(p);   /* (more than ddp-check allocates) */
}

void ck_comm_close(struct ck_comm *c)
{
	if (!c->nccl) {
		cnn_comm_close(c->gloo);
		c->gloo = NULL;
		return;
	}
	ck_nccl_close(c->nc);
	c->nc = NULL;
	for (int i = 0; i < c->nlater; i++)
		ck_nccl_free(c->later[i]);
	c->nlater = 0;
}

int ck_comm_put(struct ck_comm *c, void *dst, const void *host, size_t bytes)
{
	if (!c->nccl) {
		memmove(dst, host, bytes);
		return 0;
	}
	return ck_nccl_copy(dst, host, bytes, 1);
}

int ck_comm_get(struct ck_comm *c, void *host, const void *src, size_t bytes)
{
	if (!c->nccl) {
		memmove(host, src, bytes);
		return 0;
	}
	return ck_nccl_copy(host, src, bytes, 0);
}

int ck_comm_allreduce(struct ck_comm *c, void *buf, size_t n, int sync, char *err, size_t errlen)
{
	if (!c->nccl)
		return cnn_comm_allreduce_sum(c->gloo, buf, n, err, errlen);
	if (ck_nccl_allreduce(c->nc, buf, n, err, errlen) < 0)
		return -1;
	return sync ? ck_nccl_sync(c->nc, err, errlen) : 0;
}

int ck_comm_sync(struct ck_comm *c, char *err, size_t errlen)
{
	return c->nccl ? ck_nccl_sync(c->nc, err, errlen) : 0;
}

static int gloo_op(struct ck_comm *c, enum ck_op op, float *in, float *out, size_t n, void **res,
		   char *err, size_t errlen)
{
	switch (op) {
	case CK_ALLGATHER:
		*res = out;
		return cnn_comm_allgather(c->gloo, in, out, n, err, errlen);
	case CK_REDUCE_SCATTER:
		*res = in;   /* in place: this rank's share at the front */
		return cnn_comm_reduce_scatter_sum(c->gloo, in, n, err, errlen);
	case CK_ALLTOALL:
		*res = out;
		return cnn_comm_alltoall(c->gloo, in, out, n, err, errlen);
	case CK_NOPS:
		break;
	}
	return -1;
}

static int nccl_op(struct ck_comm *c, enum ck_op op, float *in, float *out, size_t n, void **res,
		   char *err, size_t errlen)
{
	*res = out;
	switch (op) {
	case CK_ALLGATHER:
		return ck_nccl_allgather(c->nc, in, out, n, err, errlen);
	case CK_REDUCE_SCATTER:
		return ck_nccl_reduce_scatter(c->nc, in, out, n, err, errlen);
	case CK_ALLTOALL:
		return ck_nccl_alltoall(c->nc, c->world, in, out, n, err, errlen);
	case CK_NOPS:
		break;
	}
	return -1;
}

int ck_comm_op(struct ck_comm *c, enum ck_op op, void *in, void *out, size_t n, void **res, char *err,
	       size_t errlen)
{
	return c->nccl ? nccl_op(c, op, in, out, n, res, err, errlen) :
			 gloo_op(c, op, in, out, n, res, err, errlen);
}

int ck_comm_exchange(struct ck_comm *c, int peer, unsigned tag, const void *send, void *recv, size_t n,
		     char *err, size_t errlen)
{
	if (!c->nccl)
		return cnn_comm_exchange(c->gloo, peer, tag, send, recv, n, err, errlen);
	if (ck_nccl_exchange(c->nc, peer, send, recv, n, err, errlen) < 0)
		return -1;
	return ck_nccl_sync(c->nc, err, errlen);
}

void ck_comm_explain(struct ck_comm *c, char *err, size_t errlen)
{
	/* (NCCL's waits name a task that died themselves: nccl_dl.c) */
	if (!c->nccl)
		cnn_comm_explain_failure(c->gloo, err, errlen);
}
