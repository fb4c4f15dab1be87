/* ddp-check's verdict on the copies between a node's GPUs (gpu.p2p_bw):
 * nvbandwidth's device-to-device matrix, timed by each node's first task
 * over the GPUs it sees (cudaMemcpyPeer with peer access where the driver
 * gives it).  A pair below --min-p2p percent of its node's best pair
 * fails, naming both GPUs and the figures: a pair that goes through the
 * host where the others have NVLink or a PCIe switch, a degraded link. */
#include <stdio.h>
#include <string.h>

#include "eval.h"

struct p2pbw {
	struct msg fail, notrun;
	int nodes, pairs;
	double lo, hi;
};

static void p2p_node(struct p2pbw *s, const struct ck_world *w, const struct ck_rank *r)
{
	const struct ck_p2p *p = &r->p2p;
	double best = 0;

	for (int x = 0; x < p->n; x++)
		for (int y = 0; y < p->n; y++)
			if (x != y && p->gbps[x * p->n + y] > best)
				best = p->gbps[x * p->n + y];
	s->nodes++;
	for (int x = 0; x < p->n; x++)
		for (int y = 0; y < p->n; y++) {
			double g = p->gbps[x * p->n + y];
			if (x == y)
				continue;
			if (!s->pairs++ || g < s->lo)
				s->lo = g;
			if (s->pairs == 1 || g > s->hi)
				s->hi = g;
			if (g < best * w->opts.min_p2p / 100)
				ck_say(&s->fail, "%s: GPU %s -> GPU %s %.1f GB/s, %.0f%% of the node's best pair (%.1f "
				       "GB/s; --min-p2p %d%%)", r->host, p->bus[x], p->bus[y], g,
				       best > 0 ? 100 * g / best : 0, best, w->opts.min_p2p);
		}
}

void ck_eval_p2p_bw(struct ck_world *w)
{
	static struct p2pbw s;
	int gpus = 0;

	if (!w->opts.p2p_bytes) {
		ck_add(w, "gpu.p2p_bw", CK_SKIP, "--p2p-bytes 0: not measured");
		return;
	}
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0])
			continue;
		gpus++;
		if (r->p2p.err[0])
			ck_say(&s.notrun, "%s (task %d): %s", r->host, i, r->p2p.err);
		else if (r->p2p.n >= 2)
			p2p_node(&s, w, r);
	}
	if (s.fail.items)
		ck_add(w, "gpu.p2p_bw", CK_FAIL, "%s", ck_said(&s.fail));
	else if (s.nodes)
		ck_add(w, "gpu.p2p_bw", CK_OK, "%d GPU pair%s on %d node%s at %.1f..%.1f GB/s each way (%zu bytes "
		       "a copy, the best of 3)%s%s", s.pairs, s.pairs == 1 ? "" : "s", s.nodes, s.nodes == 1 ? "" : "s",
		       s.lo, s.hi, w->opts.p2p_bytes, s.notrun.items ? "; not measured: " : "",
		       s.notrun.items ? ck_said(&s.notrun) : "");
	else if (s.notrun.items)
		ck_add(w, "gpu.p2p_bw", CK_SKIP, "not measured: %s", ck_said(&s.notrun));
	else if (gpus)
		ck_add(w, "gpu.p2p_bw", CK_OK, "no node's first task sees two GPUs: no pair to time");
	else
		ck_add(w, "gpu.p2p_bw", CK_OK, "no GPUs in this step");
}
