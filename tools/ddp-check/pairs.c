/* ddp-check's node pairs (net.pairs; the verdict in eval_pairs.c): the
 * first task of each node exchanges --pair-bytes each way with the first
 * task of every other node, one perfect matching of nodes at a time (a
 * round-robin tournament: the pairs of a round run together, rounds one
 * after another), the best of five exchanges per pair.  The five passes
 * over the rounds are interleaved (every round once, then every round
 * again), so a burst of other work on the nodes costs every pair alike
 * instead of all five samples of one.  A slow node is slow in each of its
 * pairs, a slow link in one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "self.h"

#define TRIALS 5

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
static int node_firsts(struct ck_comm *c, const char *host, int *first, char *err, size_t len)
{
	size_t all = (size_t)c->world * 4 * sizeof(float);
	float mine[4], *h = malloc(all);
	void *din = ck_comm_alloc(c, 4 * sizeof(float)), *dout = ck_comm_alloc(c, all), *res;
	int m = -1;

	if (!h || !din || !dout) {
		snprintf(err, len, "out of memory");
		goto out;
	}
	host_key(host, mine);
	if (ck_comm_put(c, din, mine, sizeof(mine)) < 0 ||
	    ck_comm_op(c, CK_ALLGATHER, din, dout, 4, &res, err, len) < 0 || ck_comm_sync(c, err, len) < 0 ||
	    ck_comm_get(c, h, res, all) < 0) {
		if (!err[0])
			snprintf(err, len, "cudaMemcpy failed");
		goto out;
	}
	m = 0;
	for (int r = 0; r < c->world; r++) {
		int seen = 0;
		for (int q = 0; q < r && !seen; q++)
			seen = !memcmp(h + 4 * r, h + 4 * q, 4 * sizeof(float));
		if (!seen)
			first[m++] = r;
	}
out:
	free(h);
	ck_comm_free(c, din);
	ck_comm_free(c, dout);
	return m;
}

/* One exchange with the peer: its seconds, kept in *best when below it
 * (*best < 0: none yet). */
static int time_exchange(struct ck_comm *c, int peer, unsigned tag, const void *send, void *recv, size_t n,
			 double *best, char *err, size_t len)
{
	double t0 = ck_mono();
	if (ck_comm_exchange(c, peer, tag, send, recv, n, err, len) < 0)
		return -1;
	double d = ck_mono() - t0;
	if (*best < 0 || d < *best)
		*best = d;
	return 0;
}

/* Every task's buffers for the pairs: n floats each way (the node's first
 * task only; zeros), one float for the rounds' barrier.  -1 with msg. */
static int pair_bufs(struct ck_comm *c, int first, size_t n, void **send, void **recv, void **one,
		     char *msg, size_t len)
{
	float *zeros = first ? calloc(n, sizeof(float)) : NULL;
	int rv = 0;

	*one = ck_comm_alloc(c, sizeof(float));
	if (first) {
		*send = ck_comm_alloc(c, n * sizeof(float));
		*recv = ck_comm_alloc(c, n * sizeof(float));
	}
	if (!*one || (first && (!zeros || !*send || !*recv || ck_comm_put(c, *send, zeros, n * 4) < 0))) {
		snprintf(msg, len, "node pairs: cannot allocate 2 x %zu bytes%s", n * 4,
			 c->nccl ? " on the GPU" : "");
		rv = -1;
	}
	free(zeros);
	return rv;
}

/* The rounds' barrier: an all-reduce of one float (its value unread). */
static int barrier(struct ck_comm *c, void *one, char *err, size_t len)
{
	static const float v = 1;
	return ck_comm_put(c, one, &v, sizeof(v)) < 0 ? (snprintf(err, len, "cudaMemcpy failed"), -1) :
	       ck_comm_allreduce(c, one, 1, 1, err, len);
}

void ck_run_pairs(struct ck_comm *c, const char *host, const struct ck_opts *o, struct ck_coll *out)
{
	int *first = malloc((size_t)c->world * sizeof(int));
	double best[CK_MAX_PAIRS + 2];
	size_t n = o->pair_bytes / 4;
	void *send = NULL, *recv = NULL, *one = NULL;
	char err[DDPENV_ERRLEN] = "";
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
	if (pair_bufs(c, me >= 0, n, &send, &recv, &one, out->pair_msg, sizeof(out->pair_msg)) < 0 && one)
		me = -2; /* still in every round's barrier, exchanging nothing */
	else if (!one)
		goto done;
	out->pairs_ran = 1;
	int players = m + (m & 1);
	for (int r = 0; r < players - 1; r++)
		best[r] = -1;
	for (int t = 0; t < TRIALS; t++)
		for (int r = 0; r < players - 1; r++) {
			/* a round starts when the last one ended everywhere */
			if (barrier(c, one, err, sizeof(err)) < 0)
				goto failed;
			int p = me >= 0 ? partner(r, me, players) : m;
			if (p < m && time_exchange(c, first[p], (unsigned)(r * TRIALS + t), send, recv, n, &best[r], err,
						   sizeof(err)) < 0)
				goto failed;
		}
	for (int r = 0; r < players - 1; r++) {
		int p = me >= 0 ? partner(r, me, players) : m;
		if (p >= m)
			continue;
		struct ck_pair *pr = &out->pairs[out->npairs++];
		pr->peer = first[p];
		pr->gbps = best[r] > 0 ? (double)n * 4 / best[r] / 1e9 : 0;
	}
	goto done;
failed:
	ck_comm_explain(c, err, sizeof(err));
	snprintf(out->pair_msg, sizeof(out->pair_msg), "node pairs: %s", err);
done:
	free(first);
	ck_comm_free(c, send);
	ck_comm_free(c, recv);
	ck_comm_free(c, one);
}
