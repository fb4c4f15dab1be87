/* ddp-check's verdicts: every check looks only at struct ck_world, the
 * records rank 0 gathered, and names the task, node and value at fault.
 * The families are eval_contract.c, eval_net.c and eval_bind.c; here the
 * result list, the order they run in, and the collectives' verdicts. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline.h"
#include "eval.h"

void ck_add(struct ck_world *w, const char *name, enum ck_level lv, const char *fmt, ...)
{
	if (w->nres == w->capres) {
		size_t cap = w->capres ? 2 * w->capres : 32;
		struct ck_result *r = realloc(w->res, cap * sizeof(*r));
		if (!r)
			return;
		w->res = r;
		w->capres = cap;
	}
	struct ck_result *r = &w->res[w->nres++];
	va_list ap;

	snprintf(r->name, sizeof(r->name), "%s", name);
	r->level = lv;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
}

static void eval_backend(struct ck_world *w)
{
	struct msg fail = { 0 };
	int lo = 0, hi = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined)
			continue;
		if (r->backend_err[0])
			ck_say(&fail, "task %d (%s): %s", i, r->host, r->backend_err);
		if (r->nccl_version && (!lo || r->nccl_version < lo))
			lo = r->nccl_version;
		if (r->nccl_version > hi)
			hi = r->nccl_version;
	}
	if (fail.items)
		ck_add(w, "coll.backend", CK_FAIL, "%s", ck_said(&fail));
	else if (strcmp(w->backend, "nccl"))
		ck_add(w, "coll.backend", CK_OK, "%s on every task", w->backend);
	else if (lo != hi)
		ck_add(w, "coll.backend", CK_WARN, "NCCL versions differ between tasks: %d.%d.%d to %d.%d.%d "
		       "(mixed versions may not interoperate)", lo / 10000, lo / 100 % 100, lo % 100,
		       hi / 10000, hi / 100 % 100, hi % 100);
	else
		ck_add(w, "coll.backend", CK_OK, "NCCL %d.%d.%d and a GPU on every task", lo / 10000,
		       lo / 100 % 100, lo % 100);
}

/* KillWait: the seconds a task has from SIGTERM (scancel, requeue,
 * preemption, the time limit) to SIGKILL to stop at a step and write its
 * checkpoint, as cnn_train does. */
static void eval_slurm(struct ck_world *w)
{
	const struct ck_slurm *s = &w->slurm;

	if (!s->have) {
		ck_add(w, "slurm.kill_wait", CK_SKIP, "KillWait not read: %s", s->err);
		return;
	}
	if (s->kill_wait >= w->opts.min_kill_wait) {
		ck_add(w, "slurm.kill_wait", CK_OK, "KillWait=%d: a task has %d s from SIGTERM to SIGKILL "
		       "(scancel, requeue, preemption, time limit) to stop and write its checkpoint",
		       s->kill_wait, s->kill_wait);
		return;
	}
	ck_add(w, "slurm.kill_wait", CK_WARN, "KillWait=%d: a task has %d s from SIGTERM to SIGKILL "
	       "(scancel, requeue, preemption, time limit), less than --min-kill-wait %d: a trainer that "
	       "stops to write its checkpoint (cnn_train, a PyTorch script with a SIGTERM handler) can be "
	       "killed before it is written; raise KillWait in slurm.conf (Slurm's default is 30); for the "
	       "time limit, a job can also ask for a signal ahead of it (srun --signal=USR1@120)",
	       s->kill_wait, s->kill_wait, w->opts.min_kill_wait);
}

void ck_eval_setup(struct ck_world *w)
{
	struct nodes nd;

	if (ck_nodes_build(w, &nd) < 0) {
		ck_add(w, "ddp-check", CK_FAIL, "out of memory evaluating %d tasks", w->n);
		ck_nodes_free(&nd);
		return;
	}
	ck_eval_contract(w, &nd);
	ck_eval_net(w, &nd);
	ck_eval_bind(w, &nd);
	ck_eval_hw(w, &nd);
	ck_eval_h2d(w);
	ck_eval_gpu(w, &nd);
	ck_eval_p2p(w, &nd);
	ck_eval_p2p_bw(w);
	eval_backend(w);
	eval_slurm(w);
	ck_nodes_free(&nd);
}

int ck_coll_safe(const struct ck_world *w, char *why, size_t len)
{
	static const char *const needed[] = { "rdzv.join", "net.iface", "net.probe", "net.shm",
					      "bind.gpus", "coll.backend" };

	for (size_t i = 0; i < w->nres; i++)
		for (size_t k = 0; k < sizeof(needed) / sizeof(needed[0]); k++)
			if (w->res[i].level == CK_FAIL && !strcmp(w->res[i].name, needed[k])) {
				snprintf(why, len, "not run: %s failed, so the collective could only hang until "
					 "its timeout", needed[k]);
				return 0;
			}
	return 1;
}

double ck_busbw(double algbw, int n)
{
	return n > 0 ? algbw * 2.0 * (n - 1) / n : 0;
}

double ck_time_max(const struct ck_world *w, size_t k)
{
	double t = -1;

	for (int i = 0; i < w->n; i++)
		if (w->colls[i].have && k < w->colls[i].ntimes && w->colls[i].times[k] > t)
			t = w->colls[i].times[k];
	return t;
}

/* The nodes of the step: its distinct hosts among the joined tasks. */
static int count_nodes(const struct ck_world *w)
{
	struct nodes nd;
	int n = ck_nodes_build(w, &nd) < 0 ? 0 : nd.n;
	ck_nodes_free(&nd);
	return n;
}

/* coll.baseline: each size of the sweep against the same size of a
 * recorded healthy run (--baseline), at least --min-baseline percent of
 * its busbw; a baseline of another shape (world, nodes, backend) is said,
 * not judged: busbw is comparable only on the same shape. */
static void eval_baseline(struct ck_world *w)
{
	static struct ck_baseline b;
	char err[CK_MSG];
	struct msg low = { 0 };
	int common = 0, nodes = count_nodes(w);
	double worst = 0;

	if (ck_baseline_read(w->opts.baseline, &b, err, sizeof(err)) < 0) {
		ck_add(w, "coll.baseline", CK_FAIL, "%s", err);
		return;
	}
	if (w->n < 2) {
		ck_add(w, "coll.baseline", CK_SKIP, "a world of one task moves nothing between ranks: no bus "
		       "bandwidth to compare with %s", w->opts.baseline);
		return;
	}
	if (b.world_size != w->n || (b.nodes && b.nodes != nodes) || strcmp(b.backend, w->backend)) {
		ck_add(w, "coll.baseline", CK_WARN, "%s was recorded at world size %d on %d nodes under %s, this "
		       "step is %d on %d under %s: its busbw is not comparable (record one of this shape)",
		       w->opts.baseline, b.world_size, b.nodes, b.backend, w->n, nodes, w->backend);
		return;
	}
	for (size_t k = 0; k < w->nsizes; k++) {
		double t = ck_time_max(w, k);
		for (size_t j = 0; t > 0 && j < b.n; j++) {
			if (b.size[j] != w->sizes[k] || b.busbw[j] <= 0)
				continue;
			double bus = ck_busbw((double)w->sizes[k] / t / 1e9, w->n), pct = 100 * bus / b.busbw[j];
			common++;
			if (pct < w->opts.min_baseline)
				ck_say(&low, "%zu bytes: busbw %.2f GB/s, %.0f%% of the baseline's %.2f", w->sizes[k], bus,
				       pct, b.busbw[j]);
			if (common == 1 || pct < worst)
				worst = pct;
		}
	}
	if (low.items)
		ck_add(w, "coll.baseline", CK_FAIL, "below %d%% of %s: %s", w->opts.min_baseline, w->opts.baseline,
		       ck_said(&low));
	else if (common)
		ck_add(w, "coll.baseline", CK_OK, "every one of %d sizes at least %d%% of %s's busbw (the least "
		       "%.0f%%)", common, w->opts.min_baseline, w->opts.baseline, worst);
	else
		ck_add(w, "coll.baseline", CK_SKIP, "no size of this sweep is in %s's table", w->opts.baseline);
}

void ck_eval_coll(struct ck_world *w)
{
	if (!w->coll_ran) {
		ck_add(w, "coll.allreduce", CK_SKIP, "%s", w->coll_skip);
		ck_add(w, "coll.busbw", CK_SKIP, "%s", w->coll_skip);
		ck_add(w, "time.first_collective", CK_SKIP, "%s", w->coll_skip);
		if (w->opts.baseline)
			ck_add(w, "coll.baseline", CK_SKIP, "%s", w->coll_skip);
		return;
	}
	struct msg fail = { 0 };
	double first = -1, init = 0;
	int slow = -1, unfinished = 0;
	/* the tasks that stopped before they reported first (killed, or their
	 * own error), then those that failed of themselves, then those that
	 * only waited for them (their communicator's set-up stopped on a peer's
	 * failure, or timed out on a key a failed task never published) */
	for (int pass = 0; pass < 3; pass++)
		for (int i = 0; i < w->n; i++) {
			const struct ck_coll *c = &w->colls[i];
			int gone = !c->have && w->gone ? w->gone[i] : CK_GONE_NO;
			int waited = c->have && !c->ok &&
				     ((strstr(c->msg, ": waiting for '") && strstr(c->msg, "': timed out after ")) ||
				      strstr(c->msg, ": a peer failed first ("));
			if ((gone ? 0 : waited ? 2 : 1) != pass)
				continue;
			if (gone == CK_GONE_DIED)
				ck_say(&fail, "task %d (%s) died before it reported its result (its connection to the "
				    "rendezvous closed: killed, or crashed)", i, w->ranks[i].host);
			else if (gone == CK_GONE_LEFT)
				ck_say(&fail, "task %d (%s) stopped before it reported its result (its stderr says why)",
				    i, w->ranks[i].host);
			else if (!c->have)
				ck_say(&fail, "task %d (%s) did not report its result", i, w->ranks[i].host);
			else if (!c->ok)
				ck_say(&fail, "task %d (%s): %s", i, w->ranks[i].host, c->msg);
			/* (a task whose sweep failed completed its first all-reduce) */
			if (!c->have || c->first_s <= 0)
				unfinished++;
			else if (c->first_s > first) {
				first = c->first_s;
				init = c->init_s;
				slow = i;
			}
		}
	if (fail.items)
		ck_add(w, "coll.allreduce", CK_FAIL, "%s", ck_said(&fail));
	else
		ck_add(w, "coll.allreduce", CK_OK, "%s all-reduce of crafted inputs exact on all %d tasks "
		       "(%s)", w->backend, w->n, w->colls[0].msg);

	if (w->nsizes == 0) {
		ck_add(w, "coll.busbw", CK_SKIP, "no sizes to sweep (-e 0)");
	} else {
		size_t k = w->nsizes - 1;
		double t = ck_time_max(w, k);
		if (t <= 0) {
			ck_add(w, "coll.busbw", fail.items ? CK_SKIP : CK_FAIL, "no time measured at %zu bytes",
			       w->sizes[k]);
		} else {
			double bus = ck_busbw((double)w->sizes[k] / t / 1e9, w->n);
			if (w->opts.min_busbw > 0 && bus < w->opts.min_busbw)
				ck_add(w, "coll.busbw", CK_FAIL, "busbw %.2f GB/s at %zu bytes is below "
				       "--min-busbw %.2f GB/s", bus, w->sizes[k], w->opts.min_busbw);
			else
				ck_add(w, "coll.busbw", CK_OK, "busbw %.2f GB/s at %zu bytes%s", bus, w->sizes[k],
				       w->opts.min_busbw > 0 ? " (at least --min-busbw)" : "");
		}
	}
	if (slow >= 0 && !unfinished)
		ck_add(w, "time.first_collective", CK_OK, "%.3f s from task start to the first completed "
		       "all-reduce (slowest: task %d on %s; its communicator set-up took %.3f s)", first,
		       slow, w->ranks[slow].host, init);
	else if (slow >= 0)
		ck_add(w, "time.first_collective", CK_SKIP, "%d of %d tasks did not report a completed all-reduce "
		       "(coll.allreduce)", unfinished, w->n);
	else
		ck_add(w, "time.first_collective", CK_SKIP, "no task completed an all-reduce");
	if (w->opts.baseline)
		eval_baseline(w);
}
