/* The verdict on the node pairs (pairs.c times them): a node whose every
 * pair is below --min-pair percent of the best pair, while other pairs
 * are not, is named slow; a slow pair between nodes that are not is a
 * slow link.  With two nodes there is one pair, and nothing to compare it
 * with: its figure is said, not judged. */
#include "eval.h"

/* The first task of each node that timed pairs, as the index of its row
 * and column: idx[task], -1 for the others. */
static int node_index(const struct ck_world *w, int *idx, int *task)
{
	int m = 0;

	for (int i = 0; i < w->n; i++)
		idx[i] = -1;
	for (int i = 0; i < w->n; i++) {
		const struct ck_coll *c = &w->colls[i];
		if (!c->have)
			continue;
		for (size_t k = 0; k < c->npairs && k < CK_MAX_PAIRS; k++) {
			int t[2] = { i, c->pairs[k].peer };
			for (int j = 0; j < 2; j++)
				if (t[j] >= 0 && t[j] < w->n && idx[t[j]] < 0 && m <= CK_MAX_PAIRS) {
					task[m] = t[j];
					idx[t[j]] = m++;
				}
		}
	}
	return m;
}

size_t ck_pair_rows(const struct ck_world *w, struct ck_pair_row *rows, size_t max)
{
	int *idx = malloc((size_t)w->n * sizeof(int)), task[CK_MAX_PAIRS + 1];
	double *g = NULL;
	size_t n = 0;
	int m;

	if (!idx)
		return 0;
	m = node_index(w, idx, task);
	if (m < 2 || !(g = calloc((size_t)m * (size_t)m, sizeof(double)))) {
		free(idx);
		return 0;
	}
	/* both sides timed the same exchanges: the lower of the two */
	for (int i = 0; i < w->n; i++) {
		const struct ck_coll *c = &w->colls[i];
		for (size_t k = 0; c->have && k < c->npairs && k < CK_MAX_PAIRS; k++) {
			int p = c->pairs[k].peer;
			if (p < 0 || p >= w->n || idx[i] < 0 || idx[p] < 0 || p == i)
				continue;
			int a = idx[i] < idx[p] ? idx[i] : idx[p], b = idx[i] < idx[p] ? idx[p] : idx[i];
			double *v = &g[(size_t)a * (size_t)m + (size_t)b];
			if (*v == 0 || c->pairs[k].gbps < *v)
				*v = c->pairs[k].gbps > 0 ? c->pairs[k].gbps : 1e-12;
		}
	}
	for (int a = 0; a < m; a++)
		for (int b = a + 1; b < m && n < max; b++)
			if (g[(size_t)a * (size_t)m + (size_t)b] > 0) {
				int ta = task[a], tb = task[b];
				rows[n++] = (struct ck_pair_row){ ta < tb ? ta : tb, ta < tb ? tb : ta,
								  g[(size_t)a * (size_t)m + (size_t)b] };
			}
	free(g);
	free(idx);
	return n;
}

/* The nodes of rows: their first tasks in tasks[], how many. */
static int row_nodes(const struct ck_pair_row *rows, size_t n, int *tasks, int max)
{
	int m = 0;

	for (size_t k = 0; k < n; k++) {
		int t[2] = { rows[k].a, rows[k].b };
		for (int j = 0; j < 2; j++) {
			int seen = 0;
			for (int q = 0; q < m && !seen; q++)
				seen = tasks[q] == t[j];
			if (!seen && m < max)
				tasks[m++] = t[j];
		}
	}
	return m;
}

/* Node t slow: every one of its pairs slow, and some pair without it not. */
static int node_slow(const struct ck_pair_row *rows, size_t n, double thr, int t, double *lo, double *hi)
{
	int mine = 0, fast_mine = 0, fast_other = 0;

	*lo = -1;
	*hi = 0;
	for (size_t k = 0; k < n; k++) {
		int in = rows[k].a == t || rows[k].b == t;
		int fast = rows[k].gbps >= thr;
		if (in) {
			mine++;
			fast_mine += fast;
			if (*lo < 0 || rows[k].gbps < *lo)
				*lo = rows[k].gbps;
			if (rows[k].gbps > *hi)
				*hi = rows[k].gbps;
		} else {
			fast_other += fast;
		}
	}
	return mine > 0 && !fast_mine && fast_other > 0;
}

/* The verdict on rows (at least one), m nodes. */
static void judge(struct ck_world *w, const struct ck_pair_row *rows, size_t n)
{
	int tasks[CK_MAX_PAIRS + 1], slow[CK_MAX_PAIRS + 1] = { 0 };
	int m = row_nodes(rows, n, tasks, CK_MAX_PAIRS + 1);
	double best = 0, lo = -1, flo = -1, fhi = 0;
	struct msg bad = { 0 };

	for (size_t k = 0; k < n; k++) {
		best = rows[k].gbps > best ? rows[k].gbps : best;
		lo = lo < 0 || rows[k].gbps < lo ? rows[k].gbps : lo;
	}
	double thr = best * w->opts.min_pair / 100.0;
	if (m == 2) {
		ck_add(w, "net.pairs", CK_OK, "1 node pair (%s-%s): %.2f GB/s each way (with two nodes a slow node and "
		       "a slow link look alike: --baseline compares with a healthy run)", w->ranks[rows[0].a].host,
		       w->ranks[rows[0].b].host, rows[0].gbps);
		return;
	}
	for (size_t k = 0; k < n; k++)
		if (rows[k].gbps >= thr) {
			flo = flo < 0 || rows[k].gbps < flo ? rows[k].gbps : flo;
			fhi = rows[k].gbps > fhi ? rows[k].gbps : fhi;
		}
	for (int j = 0; j < m; j++) {
		double a, b;
		if ((slow[j] = node_slow(rows, n, thr, tasks[j], &a, &b)))
			ck_say(&bad, "node %s is slow: its %d pairs at %.3f..%.3f GB/s each way, the other pairs at "
			       "%.2f..%.2f", w->ranks[tasks[j]].host, m - 1, a, b, flo, fhi);
	}
	for (size_t k = 0; k < n; k++) {
		int named = 0;
		for (int j = 0; j < m; j++)
			named |= slow[j] && (rows[k].a == tasks[j] || rows[k].b == tasks[j]);
		if (rows[k].gbps < thr && !named)
			ck_say(&bad, "the link %s-%s at %.3f GB/s each way, %.0f%% of the best pair's %.2f",
			       w->ranks[rows[k].a].host, w->ranks[rows[k].b].host, rows[k].gbps,
			       100 * rows[k].gbps / best, best);
	}
	if (bad.items)
		ck_add(w, "net.pairs", CK_FAIL, "%s (--min-pair %d%% of the best pair, %.2f GB/s)", ck_said(&bad),
		       w->opts.min_pair, best);
	else
		ck_add(w, "net.pairs", CK_OK, "%zu node pairs of %d nodes: %.2f..%.2f GB/s each way (%zu bytes each "
		       "way, the best of 5; each at least %d%% of the best)", n, m, lo, best, w->opts.pair_bytes,
		       w->opts.min_pair);
}

void ck_eval_pairs(struct ck_world *w)
{
	struct ck_pair_row *rows;
	struct msg fail = { 0 };
	size_t n;

	if (!w->coll_ran) {
		ck_add(w, "net.pairs", CK_SKIP, "%s", w->coll_skip);
		return;
	}
	if (w->opts.pair_bytes < 4) {
		ck_add(w, "net.pairs", CK_SKIP, "--pair-bytes %zu: no pairs timed", w->opts.pair_bytes);
		return;
	}
	int ran = 0;
	for (int i = 0; i < w->n; i++) {
		ran += w->colls[i].have && w->colls[i].pairs_ran;
		if (w->colls[i].have && w->colls[i].pair_msg[0])
			ck_say(&fail, "task %d (%s): %s", i, w->ranks[i].host, w->colls[i].pair_msg);
	}
	if (fail.items) {
		ck_add(w, "net.pairs", CK_FAIL, "%s", ck_said(&fail));
		return;
	}
	if (!ran) {
		struct nodes nd;
		int nodes = ck_nodes_build(w, &nd) < 0 ? 0 : nd.n;
		ck_nodes_free(&nd);
		ck_add(w, "net.pairs", CK_SKIP, "%s", nodes < 2 ? "one node: no link between nodes to time"
			: "no task reached them (coll.allreduce)");
		return;
	}
	rows = malloc((size_t)CK_MAX_PAIRS * (CK_MAX_PAIRS + 1) / 2 * sizeof(*rows));
	n = rows ? ck_pair_rows(w, rows, (size_t)CK_MAX_PAIRS * (CK_MAX_PAIRS + 1) / 2) : 0;
	if (n > 0) {
		judge(w, rows, n);
	} else {
		struct nodes nd;
		int nodes = ck_nodes_build(w, &nd) < 0 ? 0 : nd.n;
		ck_nodes_free(&nd);
		ck_add(w, "net.pairs", CK_SKIP, "%s", nodes < 2 ? "one node: no link between nodes to time"
			: nodes > CK_MAX_PAIRS + 1 ? "more than 257 nodes: pairs not timed" : "no pair timed");
	}
	free(rows);
}
