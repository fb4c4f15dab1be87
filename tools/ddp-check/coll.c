/* ddp-check's collectives (coll.h): the exact all-reduces and the
 * bandwidth sweep, over gloo (the comm layer) or NCCL; then the other
 * collectives and the node pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "self.h"

/* An all-reduce of n floats whose sum is known exactly. */
static int exact(struct ck_comm *c, void *dbuf, float *host, size_t n, char *msg, size_t len)
{
	int big = c->world > 2048;   /* keep every partial sum exact in float */
	float mine = big ? 1.0f : (float)(c->rank + 1);
	double tri = big ? c->world : (double)c->world * (c->world + 1) / 2;
	char err[DDPENV_ERRLEN];

	for (size_t i = 0; i < n; i++)
		host[i] = mine * (float)(i % 7 + 1);
	if (ck_comm_put(c, dbuf, host, n * 4) < 0) {
		snprintf(msg, len, "cudaMemcpy to the GPU failed");
		return -1;
	}
	if (ck_comm_allreduce(c, dbuf, n, 1, err, sizeof(err)) < 0) {
		ck_comm_explain(c, err, sizeof(err));
		snprintf(msg, len, "all-reduce of %zu floats failed: %s", n, err);
		return -1;
	}
	if (ck_comm_get(c, host, dbuf, n * 4) < 0) {
		snprintf(msg, len, "cudaMemcpy from the GPU failed");
		return -1;
	}
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++)
		if (host[i] != (float)(tri * (i % 7 + 1)) && bad++ == 0)
			first = i;
	if (bad) {
		snprintf(msg, len, "all-reduce of %zu floats WRONG at %zu elements, first [%zu] = %.9g, "
			 "expected %.9g", n, bad, first, host[first], tri * (first % 7 + 1));
		return -1;
	}
	return 0;
}

void ck_run_colls(struct self *me, struct ddpenv_store *s, const struct ck_opts *o,
		  const size_t *sizes, size_t nsizes, struct ck_coll *out)
{
	struct ck_comm c = { .nccl = !strcmp(me->backend, "nccl"), .rank = me->id, .world = me->n };
	char err[DDPENV_ERRLEN];
	size_t maxb = nsizes ? sizes[nsizes - 1] : 0;
	size_t nexact = maxb / 4 > (1u << 20) ? (1u << 20) : maxb / 4 > 4096 ? maxb / 4 : 4096;
	size_t bytes = (maxb > nexact * 4 ? maxb : nexact * 4);
	void *dbuf = NULL;
	float *host = NULL;
	double t0 = ck_mono();

	memset(out, 0, sizeof(*out));
	if (c.nccl) {
		if (ck_nccl_open(&c.nc, s, me->id, me->n, o->timeout_s * 1000, err, sizeof(err)) < 0) {
			snprintf(out->msg, sizeof(out->msg), "%s", err);
			return;
		}
	} else {
		const char *ifn = me->r.ifstate[0] && !strcmp(me->r.ifstate, "up") ? me->r.ifname : NULL;
		if (cnn_comm_attach(&c.gloo, s, me->id, me->n, "gloo", ifn, o->timeout_s * 1000, err,
				    sizeof(err)) < 0) {
			snprintf(out->msg, sizeof(out->msg), "%s", err);
			return;
		}
	}
	out->init_s = ck_mono() - t0;
	host = malloc(nexact * 4);
	dbuf = ck_comm_alloc(&c, bytes);
	if (!host || !dbuf) {
		snprintf(out->msg, sizeof(out->msg), "cannot allocate %zu bytes for the all-reduce", bytes);
		goto out;
	}
	/* Zeros everywhere, so the sweep never sums garbage (or slow denormals). */
	memset(host, 0, nexact * 4);
	for (size_t off = 0; off < bytes; off += nexact * 4) {
		size_t chunk = bytes - off < nexact * 4 ? bytes - off : nexact * 4;
		if (ck_comm_put(&c, (char *)dbuf + off, host, chunk) < 0) {
			snprintf(out->msg, sizeof(out->msg), "cudaMemcpy to the GPU failed");
			goto out;
		}
	}
	if (exact(&c, dbuf, host, 1, out->msg, sizeof(out->msg)) < 0)
		goto out;
	out->first_s = ck_task_age();
	if (exact(&c, dbuf, host, nexact, out->msg, sizeof(out->msg)) < 0)
		goto out;
	snprintf(out->msg, sizeof(out->msg), "1 and %zu floats, sums of %s", nexact,
		 me->n > 2048 ? "ones" : "rank+1");
	out->ok = 1;
	/* The sweep: what it sums no longer matters, only the time. */
	for (size_t k = 0; k < nsizes; k++) {
		size_t n = sizes[k] / 4;
		double t = 0;
		for (int i = 0; i < o->warmup; i++)
			if (ck_comm_allreduce(&c, dbuf, n, 0, err, sizeof(err)) < 0)
				goto sweep_failed;
		if (ck_comm_sync(&c, err, sizeof(err)) < 0)
			goto sweep_failed;
		t = ck_mono();
		for (int i = 0; i < o->iters; i++)
			if (ck_comm_allreduce(&c, dbuf, n, 0, err, sizeof(err)) < 0)
				goto sweep_failed;
		if (ck_comm_sync(&c, err, sizeof(err)) < 0)
			goto sweep_failed;
		out->times[out->ntimes++] = (ck_mono() - t) / (o->iters > 0 ? o->iters : 1);
	}
	ck_run_ops(&c, o, sizes, nsizes, out);
	ck_run_pairs(&c, me->r.host, o, out);
	goto out;
sweep_failed:
	out->ok = 0;
	ck_comm_explain(&c, err, sizeof(err));
	snprintf(out->msg, sizeof(out->msg), "bandwidth sweep failed: %s", err);
out:
	ck_comm_free(&c, dbuf);
	ck_comm_close(&c);
	free(host);
}
