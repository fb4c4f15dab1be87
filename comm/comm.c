/* Backend-independent half of the comm layer: opening the store, the
 * local (world 1) backend, failure diagnosis and the bucket reducer. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "ddpenv.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int local_allreduce(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	(void)c; (void)buf; (void)n; (void)err; (void)errlen;
	return 0;
}

static void local_destroy(struct cnn_comm *c)
{
	(void)c;
}

static const struct cnn_comm_ops local_ops = { "local", local_allreduce, local_destroy, NULL, NULL };

/* Rank 0's store refused a client (a wrong DDP_RDZV_TOKEN): say so. */
static void log_refused(void *ctx, const char *msg)
{
	const char *host = ctx;
	fprintf(stderr, "rank 0 (%s): rendezvous %s\n", host, msg);
}

int cnn_comm_open(struct cnn_comm **out, const struct cnn_comm_opts *o, char *err, size_t errlen)
{
	struct ddpenv_store *store = NULL;
	if (o->world > 1) {
		if (strcmp(o->backend, "gloo") != 0 && !(o->ext && strcmp(o->backend, o->ext->ops->name) == 0)) {
			snprintf(err, errlen, "backend '%s' is not built into this cnn_train for CPU ranks "
				 "(expected gloo)", o->backend);
			return -1;
		}
		/* The server thread logs with it for the store's lifetime. */
		static char host[64] = "?";
		gethostname(host, sizeof(host) - 1);
		struct ddpenv_store_opts so = { o->master_addr, o->master_port, o->rank, o->world,
						o->timeout_ms, o->token, log_refused, host };
		if (ddpenv_store_open(&store, &so, err, errlen) < 0)
			return -1;
		if (o->joined && o->joined(o->joined_ctx, store, err, errlen) < 0) {
			ddpenv_store_close(store);
			return -1;
		}
	}
	int rv = o->ext ? cnn_comm_attach_ext(out, store, o->rank, o->world, o->ext, o->timeout_ms,
					      err, errlen) :
			  cnn_comm_attach(out, store, o->rank, o->world, o->backend, o->iface,
					  o->timeout_ms, err, errlen);
	if (rv < 0) {
		ddpenv_store_close(store);
		return -1;
	}
	(*out)->owns_store = 1;
	return 0;
}

/* The most marking may wait for the store. */
#define MARK_TIMEOUT_MS 2000

static int peer_lost(struct cnn_comm *c)
{
	int dead[1];
	int64_t failed = 0;
	char e[256];
	if (!c->store)
		return CNN_PEERS_OK;
	if (ddpenv_store_dead_ranks(c->store, dead, 1, e, sizeof(e)) != 0)
		return CNN_PEER_GONE;   /* (or the store is: rank 0 is gone) */
	if (ddpenv_store_add(c->store, CNN_COMM_FAILED_COUNT_KEY, 0, &failed, e, sizeof(e)) < 0)
		return CNN_PEER_GONE;
	return failed > 0 ? CNN_PEER_FAILED : CNN_PEERS_OK;
}

void cnn_comm_mark_failed(struct cnn_comm *c, const char *why)
{
	char e[256];
	int64_t n;
	if (!c || !c->store)
		return;
	/* a store that stopped answering (rank 0's node gone silent) must
	 * not hold a failing rank for a rendezvous' bound, twice */
	int old = ddpenv_store_set_timeout(c->store, MARK_TIMEOUT_MS);
	/* the reason first: a peer that sees the count may look for it */
	if (ddpenv_store_set(c->store, CNN_COMM_FAILED_KEY, why, strlen(why), e, sizeof(e)) == 0)
		ddpenv_store_add(c->store, CNN_COMM_FAILED_COUNT_KEY, 1, &n, e, sizeof(e));
	ddpenv_store_set_timeout(c->store, old);
}

void cnn_comm_abandon(struct cnn_comm *c)
{
	if (c && c->ops && c->ops->abandon)
		c->ops->abandon(c);
}

/* Who is who, for naming a dead peer later. */
static int publish_host(struct cnn_comm *c, char *err, size_t errlen)
{
	char key[32];
	snprintf(key, sizeof(key), "host/%d", c->rank);
	return ddpenv_store_set(c->store, key, c->host, strlen(c->host), err, errlen);
}

int cnn_comm_attach_ext(struct cnn_comm **out, struct ddpenv_store *store, int rank, int world,
			const struct cnn_comm_ext *ext, int timeout_ms, char *err, size_t errlen)
{
	struct cnn_comm *c = calloc(1, sizeof(*c));
	unsigned char *id = calloc(1, ext->id_len);
	char key[64];
	void *v = NULL;
	size_t l = 0;

	*out = NULL;
	if (!c || !id) {
		snprintf(err, errlen, "comm: out of memory");
		goto fail;
	}
	c->rank = rank;
	c->world = world;
	c->store = store;
	c->peer_lost = peer_lost;
	gethostname(c->host, sizeof(c->host) - 1);
	if (world > 1 && !store) {
		snprintf(err, errlen, "comm: no rendezvous store for backend '%s'", ext->ops->name);
		goto fail;
	}
	if (store && publish_host(c, err, errlen) < 0)
		goto fail;
	snprintf(key, sizeof(key), "comm/%s/id", ext->ops->name);
	if (rank == 0) {
		char why[DDPENV_ERRLEN], e2[DDPENV_ERRLEN];
		if (ext->make_id(id, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "comm: rank 0 (%s) could not make the %s id: %s", c->host,
				 ext->ops->name, why);
			/* the ranks waiting for it stop now, naming why */
			if (store)
				ddpenv_store_set(store, CNN_COMM_FAILED_KEY, err, strlen(err), e2, sizeof(e2));
			goto fail;
		}
		if (store && ddpenv_store_set(store, key, id, ext->id_len, err, errlen) < 0)
			goto fail;
	} else {
		int aborted = 0;
		if (ddpenv_store_get_unless(store, key, CNN_COMM_FAILED_KEY, timeout_ms, &v, &l, &aborted, err,
					    errlen) < 0)
			goto fail;
		if (aborted) {
			snprintf(err, errlen, "comm: the %s id from rank 0: a peer failed first (%.*s)",
				 ext->ops->name, (int)(l < 400 ? l : 400), (const char *)v);
			goto fail;
		}
		if (l != ext->id_len) {
			snprintf(err, errlen, "comm: %s id from rank 0 (store key %s): %zu bytes, expected %zu",
				 ext->ops->name, key, l, ext->id_len);
			goto fail;
		}
		memcpy(id, v, l);
	}
	c->ops = ext->ops;
	if (ext->init(c, id, timeout_ms, err, errlen) < 0) {
		c->ops = NULL;
		goto fail;
	}
	free(v);
	free(id);
	*out = c;
	return 0;
fail:
	free(v);
	free(id);
	free(c);
	return -1;
}

int cnn_comm_attach(struct cnn_comm **out, struct ddpenv_store *store, int rank, int world,
		    const char *backend, const char *iface, int timeout_ms, char *err, size_t errlen)
{
	struct cnn_comm *c = calloc(1, sizeof(*c));
	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "comm: out of memory");
		return -1;
	}
	c->rank = rank;
	c->world = world;
	gethostname(c->host, sizeof(c->host) - 1);
	if (world == 1) {
		c->ops = &local_ops;
		c->store = store;
		*out = c;
		return 0;
	}
	if (!store || strcmp(backend, "gloo") != 0) {
		snprintf(err, errlen, store ? "backend '%s' is not a CPU backend (expected gloo)" :
			 "comm: no rendezvous store for backend '%s'", backend);
		free(c);
		return -1;
	}
	c->store = store;
	c->peer_lost = peer_lost;
	if (publish_host(c, err, errlen) < 0)
		goto fail;
	c->ops = &cnn_comm_gloo_ops;
	if (cnn_comm_gloo_init(c, iface, NULL, timeout_ms, err, errlen) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	free(c);
	return -1;
}

void cnn_comm_close(struct cnn_comm *c)
{
	if (!c)
		return;
	if (c->ops)
		c->ops->destroy(c);
	if (c->owns_store)
		ddpenv_store_close(c->store);
	free(c);
}

int cnn_comm_allreduce_sum(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	return c->ops->allreduce_sum(c, buf, n, err, errlen);
}

/* 8 floats a step the compiler keeps in a vector register (GCC 12 at
 * -O2 leaves the plain loop scalar) */
void cnn_comm_scale(float *buf, size_t n, float scale)
{
	typedef float v8 __attribute__((vector_size(32), aligned(4), may_alias));
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		*(v8 *)(buf + i) *= scale;
	for (; i < n; i++)
		buf[i] *= scale;
}

int cnn_comm_allreduce_mean(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	float inv = 1.f / (float)c->world;

	if (c->world == 1)
		return 0;
	if (c->ops->allreduce_scaled)
		return c->ops->allreduce_scaled(c, buf, n, inv, err, errlen);
	if (c->ops->allreduce_sum(c, buf, n, err, errlen) < 0)
		return -1;
	cnn_comm_scale(buf, n, inv);
	return 0;
}

int cnn_comm_broadcast(struct cnn_comm *c, float *buf, size_t n, int root, char *err, size_t errlen)
{
	if (c->world == 1)
		return 0;
	if (c->rank != root)
		memset(buf, 0, n * sizeof(float));
	return c->ops->allreduce_sum(c, buf, n, err, errlen);
}

/* ddp-check's other collectives: gloo's alone (world 1: a copy). */
static int gloo_only(struct cnn_comm *c, const char *op, char *err, size_t errlen)
{
	if (c->ops == &cnn_comm_gloo_ops || (c->local && strcmp(c->ops->name, "gloo") == 0))
		return 0;
	snprintf(err, errlen, "%s: the gloo backend's alone, not %s's", op, c->ops->name);
	return -1;
}

int cnn_comm_allgather(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen)
{
	if (c->world == 1) {
		memmove(out, in, n * sizeof(float));
		return 0;
	}
	return gloo_only(c, "all-gather", err, errlen) < 0 ? -1 : cnn_gloo_allgather(c, in, out, n, err, errlen);
}

int cnn_comm_reduce_scatter_sum(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	if (c->world == 1)
		return 0;
	return gloo_only(c, "reduce-scatter", err, errlen) < 0 ? -1 : cnn_gloo_reduce_scatter(c, buf, n, err, errlen);
}

int cnn_comm_alltoall(struct cnn_comm *c, const float *in, float *out, size_t n, char *err, size_t errlen)
{
	if (c->world == 1) {
		memmove(out, in, n * sizeof(float));
		return 0;
	}
	return gloo_only(c, "all-to-all", err, errlen) < 0 ? -1 : cnn_gloo_alltoall(c, in, out, n, err, errlen);
}

int cnn_comm_exchange(struct cnn_comm *c, int peer, unsigned tag, const float *send, float *recv, size_t n,
		      char *err, size_t errlen)
{
	if (peer < 0 || peer >= c->world || peer == c->rank) {
		snprintf(err, errlen, "exchange: peer %d: expected another rank of 0..%d", peer, c->world - 1);
		return -1;
	}
	return gloo_only(c, "exchange", err, errlen) < 0 ? -1
							 : cnn_gloo_exchange(c, peer, tag, send, recv, n, err, errlen);
}

/* "rank 3 (node2)" or "ranks 1 (node1), 3 (node2)" into msg at off. */
static size_t name_ranks(struct cnn_comm *c, const int *ranks, int n, char *msg, size_t len, size_t off)
{
	off += (size_t)snprintf(msg + off, off < len ? len - off : 0, "%s", n == 1 ? "rank " : "ranks ");
	for (int i = 0; i < n && i < 16 && off < len; i++) {
		char key[32], host[80] = "?", e2[256];
		void *v;
		size_t l;
		snprintf(key, sizeof(key), "host/%d", ranks[i]);
		if (ddpenv_store_get(c->store, key, 1000, &v, &l, e2, sizeof(e2)) == 0) {
			snprintf(host, sizeof(host), "%s", (char *)v);
			free(v);
		}
		off += (size_t)snprintf(msg + off, len - off, "%s%d (%s)", i ? ", " : "", ranks[i], host);
	}
	return off;
}

void cnn_comm_explain_failure(struct cnn_comm *c, char *err, size_t errlen)
{
	char why[512], msg[1024], e2[256] = "";
	int dead[16], left[16], n = -1, nl = 0;
	if (!c->store)
		return;
	snprintf(why, sizeof(why), "%s", err);
	/* The store sees a dead rank's socket close (or a failed rank's
	 * goodbye) at about the moment the collective failed; give it a
	 * moment. */
	for (int i = 0; i < 20; i++) {
		n = ddpenv_store_dead_ranks(c->store, dead, 16, e2, sizeof(e2));
		if (n == 0)
			nl = ddpenv_store_left_ranks(c->store, left, 16, e2, sizeof(e2));
		if (n != 0 || nl != 0)
			break;
		usleep(100000);
	}
	if (n < 0 || nl < 0) {
		/* the store client's words: the store closed the connection,
		 * or did not answer in time */
		snprintf(msg, sizeof(msg), "rank 0 (the rendezvous store) is unreachable, so rank 0 "
			 "died or its node is gone (%s); %s", e2, why);
	} else if (n > 0) {
		size_t off = name_ranks(c, dead, n, msg, sizeof(msg), 0);
		if (off < sizeof(msg))
			snprintf(msg + off, sizeof(msg) - off, " died; %s", why);
	} else if (nl > 0) {
		/* they left through cnn_run_die: their own output says why */
		size_t off = name_ranks(c, left, nl, msg, sizeof(msg), 0);
		if (off < sizeof(msg))
			snprintf(msg + off, sizeof(msg) - off, " stopped on %s own error (%s output says "
				 "which) and left; %s", nl == 1 ? "its" : "their", nl == 1 ? "its" : "their", why);
	} else {
		snprintf(msg, sizeof(msg), "no rank has left the store, so a peer hangs or its "
			 "network failed; %s", why);
	}
	snprintf(err, errlen, "%s", msg);
}

static void *reducer_main(void *arg)
{
	struct cnn_reducer *r = arg;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (r->head == r->tail && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->head == r->tail && r->stop)
			break;
		float *p = r->q[r->head].p;
		size_t n = r->q[r->head].n;
		int failed = r->failed;
		pthread_mutex_unlock(&r->mu);
		if (!failed) {
			char err[512];
			double t0 = now_s();
			int rv = cnn_comm_allreduce_mean(r->comm, p, n, err, sizeof(err));
			pthread_mutex_lock(&r->mu);
			r->comm_s += now_s() - t0;
			if (rv < 0 && !r->failed) {
				r->failed = 1;
				snprintf(r->err, sizeof(r->err), "%s", err);
			}
		} else {
			pthread_mutex_lock(&r->mu);
		}
		r->head = (r->head + 1) % 8;
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int cnn_reducer_start(struct cnn_reducer *r, struct cnn_comm *c)
{
	memset(r, 0, sizeof(*r));
	r->comm = c;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (c->world == 1)
		return 0;   /* nothing to reduce: push and wait are no-ops */
	if ((errno = pthread_create(&r->thread, NULL, reducer_main, r)) != 0)
		return -1;
	r->busy = 1;
	return 0;
}

void cnn_reducer_push(struct cnn_reducer *r, float *buf, size_t n)
{
	if (!r->busy)
		return;
	pthread_mutex_lock(&r->mu);
	while ((r->tail + 1) % 8 == r->head)
		pthread_cond_wait(&r->cv, &r->mu);
	r->q[r->tail].p = buf;
	r->q[r->tail].n = n;
	r->tail = (r->tail + 1) % 8;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

int cnn_reducer_wait(struct cnn_reducer *r, char *err, size_t errlen)
{
	if (!r->busy)
		return 0;
	double t0 = now_s();
	pthread_mutex_lock(&r->mu);
	/* the core kept for the communication thread (CNN_COMM_SPIN_MS), then a sleep */
	while (r->head != r->tail && now_s() - t0 < CNN_COMM_SPIN_MS / 1e3) {
		pthread_mutex_unlock(&r->mu);
		sched_yield();
		pthread_mutex_lock(&r->mu);
	}
	while (r->head != r->tail)
		pthread_cond_wait(&r->cv, &r->mu);
	int failed = r->failed;
	if (failed)
		snprintf(err, errlen, "%s", r->err);
	pthread_mutex_unlock(&r->mu);
	return failed ? -1 : 0;
}

void cnn_reducer_stop(struct cnn_reducer *r)
{
	if (r->busy) {
		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
		r->busy = 0;
	}
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}
