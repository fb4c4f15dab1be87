/* ddp-check's collectives beside the all-reduce (check.h's enum ck_op), on
 * gloo or NCCL: per size of the sweep, one run on crafted inputs whose
 * results are known exactly (the elements that differ are nccl-tests'
 * #wrong), then the warm-up and the timed iterations, as for the
 * all-reduce (coll.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "self.h"

/* Inputs whose results are exact in float: small integers, and sums of
 * at most 7 * world * (world + 1) / 2 (below 2^24 up to 2048 ranks; ones
 * beyond, summing to world). */
static void fill(enum ck_op op, int rank, int world, float *in, size_t n)
{
	float mine = world > 2048 ? 1.0f : (float)(rank + 1);

	switch (op) {
	case CK_ALLGATHER:
		for (size_t i = 0; i < n; i++)
			in[i] = (float)(rank % 4096 + 1 + (int)(i % 7));
		break;
	case CK_REDUCE_SCATTER:
		for (size_t j = 0; j < n * (size_t)world; j++)
			in[j] = mine * (float)(j % 7 + 1);
		break;
	case CK_ALLTOALL:
		for (int j = 0; j < world; j++)
			for (size_t i = 0; i < n; i++)
				in[(size_t)j * n + i] = (float)((rank % 4096) * 4096 + j % 4096);
		break;
	case CK_NOPS:
		break;
	}
}

/* The elements of the result res (n x world floats, n for a
 * reduce-scatter) that are not what fill's inputs give. */
static long wrong(enum ck_op op, int rank, int world, const float *res, size_t n)
{
	double tri = world > 2048 ? world : (double)world * (world + 1) / 2;
	long bad = 0;

	switch (op) {
	case CK_ALLGATHER:
		for (int r = 0; r < world; r++)
			for (size_t i = 0; i < n; i++)
				bad += res[(size_t)r * n + i] != (float)(r % 4096 + 1 + (int)(i % 7));
		break;
	case CK_REDUCE_SCATTER:
		for (size_t i = 0; i < n; i++)
			bad += res[i] != (float)(tri * (double)(((size_t)rank * n + i) % 7 + 1));
		break;
	case CK_ALLTOALL:
		for (int j = 0; j < world; j++)
			for (size_t i = 0; i < n; i++)
				bad += res[(size_t)j * n + i] != (float)((j % 4096) * 4096 + rank % 4096);
		break;
	case CK_NOPS:
		break;
	}
	return bad;
}

/* The buffers of the sweep: the host's, where inputs are made and
 * results checked, and the backend's (the same memory for gloo). */
struct bufs {
	float *hin, *hout;
	void *in, *out;
};

/* The run on crafted inputs: how many elements of the result are wrong,
 * or -1 with err. */
static long checked(struct ck_comm *c, enum ck_op op, struct bufs *b, size_t n, char *err, size_t len)
{
	size_t all = n * (size_t)c->world, got = op == CK_REDUCE_SCATTER ? n : all;
	void *res;

	fill(op, c->rank, c->world, b->hin, n);
	memset(b->hout, 0, all * sizeof(float));
	if (ck_comm_put(c, b->in, b->hin, all * sizeof(float)) < 0 ||
	    ck_comm_put(c, b->out, b->hout, all * sizeof(float)) < 0) {
		snprintf(err, len, "cudaMemcpy to the GPU failed");
		return -1;
	}
	if (ck_comm_op(c, op, b->in, b->out, n, &res, err, len) < 0 || ck_comm_sync(c, err, len) < 0)
		return -1;
	if (ck_comm_get(c, b->hout, res, got * sizeof(float)) < 0) {
		snprintf(err, len, "cudaMemcpy from the GPU failed");
		return -1;
	}
	return wrong(op, c->rank, c->world, b->hout, n);
}

/* One size of one collective: the checked run, then the timed ones.  The
 * seconds per run, or -1 with err. */
static double one_size(struct ck_comm *c, enum ck_op op, const struct ck_opts *o, struct bufs *b,
		       size_t n, long *bad, char *err, size_t len)
{
	size_t all = n * (size_t)c->world;
	void *res;

	if ((*bad = checked(c, op, b, n, err, len)) < 0)
		return -1;
	/* zeros for the timed runs: reduce-scatter sums in place, and sums
	 * that grow would end in infinities */
	memset(b->hin, 0, all * sizeof(float));
	if (ck_comm_put(c, b->in, b->hin, all * sizeof(float)) < 0) {
		snprintf(err, len, "cudaMemcpy to the GPU failed");
		return -1;
	}
	for (int i = 0; i < o->warmup; i++)
		if (ck_comm_op(c, op, b->in, b->out, n, &res, err, len) < 0)
			return -1;
	if (ck_comm_sync(c, err, len) < 0)
		return -1;
	double t = ck_mono();
	for (int i = 0; i < o->iters; i++)
		if (ck_comm_op(c, op, b->in, b->out, n, &res, err, len) < 0)
			return -1;
	if (ck_comm_sync(c, err, len) < 0)
		return -1;
	return (ck_mono() - t) / (o->iters > 0 ? o->iters : 1);
}

void ck_run_ops(struct ck_comm *c, const struct ck_opts *o, const size_t *sizes, size_t nsizes,
		struct ck_coll *out)
{
	size_t maxb = nsizes ? sizes[nsizes - 1] : 0;
	struct bufs b = { NULL, NULL, NULL, NULL };
	char err[DDPENV_ERRLEN];

	out->ops_ran = 1;
	if (!maxb)
		return;
	b.hin = malloc(maxb);
	b.hout = malloc(maxb);
	b.in = ck_comm_alloc(c, maxb);
	b.out = ck_comm_alloc(c, maxb);
	if (!b.hin || !b.hout || !b.in || !b.out) {
		snprintf(out->op_msg, sizeof(out->op_msg), "cannot allocate 2 x %zu bytes for the collectives%s",
			 maxb, c->nccl ? " on the host and the GPU" : "");
		goto done;
	}
	for (int op = 0; op < CK_NOPS; op++)
		for (size_t k = 0; k < nsizes; k++) {
			/* nccl-tests' count: each rank's whole elements of the size */
			size_t n = sizes[k] / 4 / (size_t)c->world;
			double t = 0;
			long bad = 0;
			if (n && (t = one_size(c, (enum ck_op)op, o, &b, n, &bad, err, sizeof(err))) < 0) {
				ck_comm_explain(c, err, sizeof(err));
				snprintf(out->op_msg, sizeof(out->op_msg), "%s of %zu bytes failed: %s", ck_op_name[op],
					 n * 4 * (size_t)c->world, err);
				goto done;
			}
			out->op_times[op][k] = t;
			out->op_wrong[op][k] = bad;
			out->nop_times[op] = k + 1;
		}
done:
	free(b.hin);
	free(b.hout);
	if (b.in)
		ck_comm_free(c, b.in);
	if (b.out)
		ck_comm_free(c, b.out);
}
