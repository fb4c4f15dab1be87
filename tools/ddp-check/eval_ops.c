/* The verdicts on the collectives swept beside the all-reduce (coll_ops.c
 * runs them): each size's data exact on every task, and the busbw at the
 * largest size. */
#include "eval.h"

const char *const ck_op_name[CK_NOPS] = { "all_gather", "reduce_scatter", "alltoall" };

double ck_op_busbw(double algbw, int n)
{
	return n > 1 ? algbw * (n - 1) / n : algbw;
}

size_t ck_op_count(size_t bytes, int world)
{
	return world > 0 ? bytes / 4 / (size_t)world : 0;
}

double ck_op_time_max(const struct ck_world *w, enum ck_op op, size_t k)
{
	double t = -1;

	for (int i = 0; i < w->n; i++) {
		const struct ck_coll *c = &w->colls[i];
		if (c->have && k < c->nop_times[op] && c->op_times[op][k] > t)
			t = c->op_times[op][k];
	}
	return t;
}

long ck_op_wrong(const struct ck_world *w, enum ck_op op, size_t k)
{
	long bad = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_coll *c = &w->colls[i];
		if (c->have && k < c->nop_times[op])
			bad += c->op_wrong[op][k];
	}
	return bad;
}

static void eval_op(struct ck_world *w, enum ck_op op, const char *failed)
{
	char name[32];
	struct msg bad = { 0 };
	size_t last = 0;

	snprintf(name, sizeof(name), "coll.%s", ck_op_name[op]);
	if (failed) {
		ck_add(w, name, CK_FAIL, "%s", failed);
		return;
	}
	for (size_t k = 0; k < w->nsizes; k++)
		for (int i = 0; i < w->n; i++) {
			const struct ck_coll *c = &w->colls[i];
			if (c->have && k < c->nop_times[op] && c->op_wrong[op][k])
				ck_say(&bad, "task %d (%s): %ld of %zu elements wrong at %zu bytes", i,
				       w->ranks[i].host, c->op_wrong[op][k],
				       ck_op_count(w->sizes[k], w->n) * (op == CK_REDUCE_SCATTER ? 1 : (size_t)w->n),
				       ck_op_count(w->sizes[k], w->n) * 4 * (size_t)w->n);
		}
	if (bad.items) {
		ck_add(w, name, CK_FAIL, "%s: WRONG data: %s", ck_op_name[op], ck_said(&bad));
		return;
	}
	for (size_t k = 0; k < w->nsizes; k++)
		if (ck_op_time_max(w, op, k) > 0)
			last = k + 1;
	if (!last) {
		ck_add(w, name, CK_SKIP, "no size of the sweep holds a float per task (-e at least %d)", 4 * w->n);
		return;
	}
	size_t bytes = ck_op_count(w->sizes[last - 1], w->n) * 4 * (size_t)w->n;
	double t = ck_op_time_max(w, op, last - 1);
	ck_add(w, name, CK_OK, "%s exact at every size on all %d tasks; busbw %.2f GB/s at %zu bytes", ck_op_name[op],
	       w->n, ck_op_busbw((double)bytes / t / 1e9, w->n), bytes);
}

void ck_eval_ops(struct ck_world *w)
{
	struct msg fail = { 0 };
	const char *skip = NULL, *failed = NULL;
	char why[CK_MSG];
	int ran = 0;

	if (!w->coll_ran) {
		skip = w->coll_skip;
	} else {
		for (int i = 0; i < w->n; i++) {
			const struct ck_coll *c = &w->colls[i];
			ran += c->have && c->ops_ran;
			if (c->have && c->op_msg[0])
				ck_say(&fail, "task %d (%s): %s", i, w->ranks[i].host, c->op_msg);
		}
		failed = fail.items ? ck_said(&fail) : NULL;
		if (!failed && !ran) {
			/* (a task of an older ddp-check swept them over gloo only) */
			snprintf(why, sizeof(why), "no task ran them (coll.allreduce%s)",
				 strcmp(w->backend, "gloo") ? "; under NCCL, a ddp-check older than its tasks'?" : "");
			skip = why;
		}
	}
	for (int op = 0; op < CK_NOPS; op++) {
		char name[32];
		snprintf(name, sizeof(name), "coll.%s", ck_op_name[op]);
		if (skip)
			ck_add(w, name, CK_SKIP, "%s", skip);
		else
			eval_op(w, (enum ck_op)op, failed);
	}
}
