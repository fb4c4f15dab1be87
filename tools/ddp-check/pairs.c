/* ddp-check's node pairs (net.pairs; the verdict in eval_pairs.c): the
 * first task of each node exchanges --pair-bytes each way with the first
 * task of every other node, one perfect matching of nodes at a time (a
 * round-robin tournament: the pairs of a round run together, rounds one
 * after another), the best of three exchanges per pair.  A slow node is
 * slow in each of its pairs, a slow link in one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "self.h"

#define TRIALS 3

/* The host's name as 64 bits (FNV-1a) in four floats of 16 bits each
 * (exact), so an all-gather tells every task which tasks share its node. */
static void host_key(const char *host, float key[4])
{
	uint64_t h = 14695981039346656037ull;
	for (const unsigned char *p = (const unsigned char *)host; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	for (int i = 0; i < 4; i++)
		key[i] = (float)((h >> (16 * i)) & 0xffff);
}

/* Round r of a round-robin over m (even) players: player i's partner. */
static int partner(int r, int i, int m)
{
	if (i == m - 1)
		return r;
	if (i == r)
		return m - 1;
	return ((2 * r - i) % (m - 1) + (m - 1)) % (m - 1);
}

/* The first task of each node, in rank order, into first[]; how many.
 * -1 with err. */
static int node_firsts(struct cnn_comm *c, const char *host, int *first, char *err, size_t len)
{
	float mine[4], *all = malloc((size_t)c->world * 4 * sizeof(float));
	int m = 0;

	if (!all) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	host_key(host, mine);
	if (cnn_comm_allgather(c, mine, all, 4, err, len) < 0) {
		free(all);
		return -1;
	}
	for (int r = 0; r < c->world; r++) {
		int seen = 0;
		for (int q = 0; q < r && !seen; q++)
			seen = !memcmp(all + 4 * r, all + 4 * q, 4 * sizeof(float));
		if (!seen)
			first[m++] = r;
	}
	free(all);
	return m;
}

/* This task's exchanges with node b's first task: the best GB/s each way. */
static int time_pair(struct cnn_comm *c, int peer, int round, const float *send, float *recv, size_t n,
		     double *gbps, char *err, size_t len)
{
	double best = -1;

	for (int t = 0; t < TRIALS; t++) {
		double t0 = ck_mono();
		if (cnn_comm_exchange(c, peer, (unsigned)(round * TRIALS + t), send, recv, n, err, len) < 0)
			return -1;
		double d = ck_mono() - t0;
		if (best < 0 || d < best)
			best = d;
	}
	*gbps = best > 0 ? (double)n * 4 / best / 1e9 : 0;
	return 0;
}

void ck_run_pairs(struct cnn_comm *c, const char *host, const struct ck_opts *o, struct ck_coll *out)
{
	int *first = malloc((size_t)c->world * sizeof(int));
	size_t n = o->pair_bytes / 4;
	float *send = NULL, *recv = NULL, one = 1;
	char err[DDPENV_ERRLEN];
	int m, me = -1;

	if (!first) {
		snprintf(out->pair_msg, sizeof(out->pair_msg), "node pairs: out of memory");
		return;
	}
	if (n == 0 || (m = node_firsts(c, host, first, err, sizeof(err))) < 2 || m > CK_MAX_PAIRS + 1) {
		if (n && m < 0)
			snprintf(out->pair_msg, sizeof(out->pair_msg), "node pairs: which tasks share a node: %s", err);
		free(first);
		return;
	}
	for (int i = 0; i < m; i++)
		if (first[i] == c->rank)
			me = i;
	if (me >= 0 && (!(send = calloc(n, sizeof(float))) || !(recv = malloc(n * sizeof(float))))) {
		snprintf(out->pair_msg, sizeof(out->pair_msg), "node pairs: cannot allocate 2 x %zu bytes", n * 4);
		me = -2; /* still in every round's barrier, exchanging nothing */
	}
	out->pairs_ran = 1;
	int players = m + (m & 1);
	for (int r = 0; r < players - 1; r++) {
		/* a round starts when the last one ended everywhere */
		one = 1;
		if (cnn_comm_allreduce_sum(c, &one, 1, err, sizeof(err)) < 0)
			goto failed;
		int p = me >= 0 ? partner(r, me, players) : m;
		if (p >= m)
			continue;
		struct ck_pair *pr = &out->pairs[out->npairs];
		pr->peer = first[p];
		if (time_pair(c, first[p], r, send, recv, n, &pr->gbps, err, sizeof(err)) < 0)
			goto failed;
		out->npairs++;
	}
	goto done;
failed:
	cnn_comm_explain_failure(c, err, sizeof(err));
	snprintf(out->pair_msg, sizeof(out->pair_msg), "node pairs: %s", err);
done:
	free(first);
	free(send);
	free(recv);
}
