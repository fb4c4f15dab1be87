/* ddp-check's collectives beside the all-reduce (check.h's enum ck_op), on
 * gloo: per size of the sweep, one run on crafted inputs whose results are
 * known exactly (the elements that differ are nccl-tests' #wrong), then
 * the warm-up and the timed iterations, as for the all-reduce (coll.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
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

/* The elements of the result that are not what fill's inputs give. */
static long wrong(enum ck_op op, int rank, int world, const float *in, const float *out, size_t n)
{
	double tri = world > 2048 ? world : (double)world * (world + 1) / 2;
	long bad = 0;

	switch (op) {
	case CK_ALLGATHER:
		for (int r = 0; r < world; r++)
			for (size_t i = 0; i < n; i++)
				bad += out[(size_t)r * n + i] != (float)(r % 4096 + 1 + (int)(i % 7));
		break;
	case CK_REDUCE_SCATTER:
		for (size_t i = 0; i < n; i++)
			bad += in[i] != (float)(tri * (double)(((size_t)rank * n + i) % 7 + 1));
		break;
	case CK_ALLTOALL:
		for (int j = 0; j < world; j++)
			for (size_t i = 0; i < n; i++)
				bad += out[(size_t)j * n + i] != (float)((j % 4096) * 4096 + rank % 4096);
		break;
	case CK_NOPS:
		break;
	}
	return bad;
}

static int run_op(struct cnn_comm *c, enum ck_op op, float *in, float *out, size_t n, char *err, size_t len)
{
	switch (op) {
	case CK_ALLGATHER:
		return cnn_comm_allgather(c, in, out, n, err, len);
	case CK_REDUCE_SCATTER:
		return cnn_comm_reduce_scatter_sum(c, in, n, err, len);
	case CK_ALLTOALL:
		return cnn_comm_alltoall(c, in, out, n, err, len);
	case CK_NOPS:
		break;
	}
	return -1;
}

/* One size of one collective: the checked run, then the timed ones.  The
 * seconds per run, or -1 with err. */
static double one_size(struct cnn_comm *c, enum ck_op op, const struct ck_opts *o, float *in, float *out,
		       size_t n, long *bad, char *err, size_t len)
{
	size_t all = n * (size_t)c->world;

	fill(op, c->rank, c->world, in, n);
	memset(out, 0, all * sizeof(float));
	if (run_op(c, op, in, out, n, err, len) < 0)
		return -1;
	*bad = wrong(op, c->rank, c->world, in, out, n);
	/* zeros for the timed runs: reduce-scatter sums in place, and sums
	 * that grow would end in infinities */
	memset(in, 0, all * sizeof(float));
	for (int i = 0; i < o->warmup; i++)
		if (run_op(c, op, in, out, n, err, len) < 0)
			return -1;
	double t = ck_mono();
	for (int i = 0; i < o->iters; i++)
		if (run_op(c, op, in, out, n, err, len) < 0)
			return -1;
	return (ck_mono() - t) / (o->iters > 0 ? o->iters : 1);
}

void ck_run_ops(struct cnn_comm *c, const struct ck_opts *o, const size_t *sizes, size_t nsizes,
		struct ck_coll *out)
{
	size_t maxb = nsizes ? sizes[nsizes - 1] : 0;
	float *in = maxb ? malloc(maxb) : NULL, *res = maxb ? malloc(maxb) : NULL;
	char err[DDPENV_ERRLEN];

	out->ops_ran = 1;
	if (maxb && (!in || !res)) {
		snprintf(out->op_msg, sizeof(out->op_msg), "cannot allocate 2 x %zu bytes for the collectives", maxb);
		goto done;
	}
	for (int op = 0; op < CK_NOPS; op++)
		for (size_t k = 0; k < nsizes; k++) {
			/* nccl-tests' count: each rank's whole elements of the size */
			size_t n = sizes[k] / 4 / (size_t)c->world;
			double t = 0;
			long bad = 0;
			if (n && (t = one_size(c, (enum ck_op)op, o, in, res, n, &bad, err, sizeof(err))) < 0) {
				cnn_comm_explain_failure(c, err, sizeof(err));
				snprintf(out->op_msg, sizeof(out->op_msg), "%s of %zu bytes failed: %s", ck_op_name[op],
					 n * 4 * (size_t)c->world, err);
				goto done;
			}
			out->op_times[op][k] = t;
			out->op_wrong[op][k] = bad;
			out->nop_times[op] = k + 1;
		}
done:
	free(in);
	free(res);
}
