/* ddp-check's verdict on each task's copies to its GPU (hw.h2d): the
 * host-to-device bandwidth a task measured from pinned memory under its
 * own binding, against what its GPU's PCIe link carries (hw.c's
 * ck_pcie_gbps, at the speed and width sysfs gave right after the
 * copies), as DCGM's and the vendors' diagnostics hold it against a
 * floor.  A GPU whose link was not read is held against the step's
 * median instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

struct h2d {
	struct msg fail, warn, notrun;
	int gpus, measured;
	double lo, hi;
	double least_pct;                /* the lowest share of a link measured */
	int least;                       /* its task, -1 none */
	double *unlinked;                /* GB/s of GPUs whose link was not read */
	int *unlinked_task;
	int nunlinked;
};

static void h2d_task(struct h2d *s, const struct ck_world *w, int i)
{
	const struct ck_rank *r = &w->ranks[i];
	const struct ck_link *l = &r->h2d_link;

	s->gpus++;
	if (r->h2d_gbps <= 0) {
		if (r->h2d_err[0])
			ck_say(&s->notrun, "task %d (%s): %s", i, r->host, r->h2d_err);
		else if (r->proto && r->proto < 7)
			ck_say(&s->notrun, "task %d (%s): its ddp-check (record %d) does not measure it", i,
			       r->host, r->proto);
		return;
	}
	s->measured++;
	if (s->measured == 1 || r->h2d_gbps < s->lo)
		s->lo = r->h2d_gbps;
	if (s->measured == 1 || r->h2d_gbps > s->hi)
		s->hi = r->h2d_gbps;
	double peak = ck_pcie_gbps(ck_link_gts(l->cur_speed), l->cur_width);
	if (l->err[0] || peak <= 0) {
		s->unlinked[s->nunlinked] = r->h2d_gbps;
		s->unlinked_task[s->nunlinked++] = i;
		return;
	}
	double pct = 100 * r->h2d_gbps / peak;
	if (pct < w->opts.min_h2d)
		ck_say(&s->fail, "task %d (%s): GPU %s: host-to-device %.1f GB/s, %.0f%% of its link's %.1f GB/s "
		       "(%s x%d; --min-h2d %d%%): a slow path to the GPU (the task bound far from it, a "
		       "degraded link or switch, the IOMMU)", i, r->host, r->gpu, r->h2d_gbps, pct, peak,
		       l->cur_speed, l->cur_width, w->opts.min_h2d);
	if (s->least < 0 || pct < s->least_pct) {
		s->least_pct = pct;
		s->least = i;
	}
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* GPUs whose link was not read: against the median of every figure. */
static void h2d_unlinked(struct h2d *s, const struct ck_world *w)
{
	double *all = malloc((size_t)w->n * sizeof(double));
	int n = 0;
	if (!all || !s->nunlinked) {
		free(all);
		return;
	}
	for (int i = 0; i < w->n; i++)
		if (w->ranks[i].joined && w->ranks[i].gpu[0] && w->ranks[i].h2d_gbps > 0)
			all[n++] = w->ranks[i].h2d_gbps;
	qsort(all, (size_t)n, sizeof(double), by_value);
	double med = n % 2 ? all[n / 2] : (all[n / 2 - 1] + all[n / 2]) / 2;
	for (int k = 0; k < s->nunlinked; k++) {
		const struct ck_rank *r = &w->ranks[s->unlinked_task[k]];
		if (n > 1 && s->unlinked[k] < med * w->opts.min_h2d / 100)
			ck_say(&s->warn, "task %d (%s): GPU %s: host-to-device %.1f GB/s, %.0f%% of the step's "
			       "median %.1f GB/s (its PCIe link not read: %s)", s->unlinked_task[k], r->host, r->gpu,
			       s->unlinked[k], 100 * s->unlinked[k] / med, med,
			       r->h2d_link.err[0] ? r->h2d_link.err : "no speed or width");
	}
	free(all);
}

static void h2d_report(struct h2d *s, struct ck_world *w)
{
	if (s->fail.items) {
		ck_add(w, "hw.h2d", CK_FAIL, "%s%s%s", ck_said(&s->fail), s->warn.items ? "; " : "",
		       s->warn.items ? ck_said(&s->warn) : "");
	} else if (s->warn.items) {
		ck_add(w, "hw.h2d", CK_WARN, "%s", ck_said(&s->warn));
	} else if (s->measured && s->least >= 0) {
		const struct ck_rank *r = &w->ranks[s->least];
		ck_add(w, "hw.h2d", CK_OK, "host-to-device %.1f..%.1f GB/s on %d GPU%s; the least %.0f%% of its "
		       "PCIe link (task %d, %s: %s x%d)%s%s", s->lo, s->hi, s->measured, s->measured == 1 ? "" : "s",
		       s->least_pct, s->least, r->host, r->h2d_link.cur_speed, r->h2d_link.cur_width,
		       s->notrun.items ? "; not measured: " : "", s->notrun.items ? ck_said(&s->notrun) : "");
	} else if (s->measured) {
		ck_add(w, "hw.h2d", CK_OK, "host-to-device %.1f..%.1f GB/s on %d GPU%s (no PCIe link read: held "
		       "against the step's median)", s->lo, s->hi, s->measured, s->measured == 1 ? "" : "s");
	} else {
		ck_add(w, "hw.h2d", CK_SKIP, "not measured on any of %d GPU%s: %s", s->gpus, s->gpus == 1 ? "" : "s",
		       s->notrun.items ? ck_said(&s->notrun) : "no figure came");
	}
}

void ck_eval_h2d(struct ck_world *w)
{
	static struct h2d s;

	if (!w->opts.h2d_bytes) {
		ck_add(w, "hw.h2d", CK_SKIP, "--h2d-bytes 0: not measured");
		return;
	}
	memset(&s, 0, sizeof(s));
	s.least = -1;
	s.unlinked = malloc((size_t)w->n * sizeof(double));
	s.unlinked_task = malloc((size_t)w->n * sizeof(int));
	if (!s.unlinked || !s.unlinked_task) {
		ck_add(w, "hw.h2d", CK_SKIP, "out of memory judging %d tasks", w->n);
	} else {
		for (int i = 0; i < w->n; i++)
			if (w->ranks[i].joined && w->ranks[i].gpu[0])
				h2d_task(&s, w, i);
		h2d_unlinked(&s, w);
		if (s.gpus)
			h2d_report(&s, w);
		else
			ck_add(w, "hw.h2d", CK_OK, "no task has a GPU: nothing to copy to");
	}
	free(s.unlinked);
	free(s.unlinked_task);
}
