/*
 * libddpenv rendezvous store: a small TCP key-value store hosted by rank 0
 * at MASTER_ADDR:MASTER_PORT (the env:// contract), for programs that need
 * to exchange a few bytes before their collective library is up (gloo's
 * full-mesh addresses, NCCL's unique id) and to learn which rank died.
 *
 * The server is one thread with epoll: no thread per client, a bounded
 * input buffer per client, so thousands of ranks can join at once.  Clients
 * connect with jittered back-off until a deadline and every wait is bounded.
 *
 * Only ranks that hold the step's token (DDP_RDZV_TOKEN) join: each side
 * proves it to the other with an HMAC over fresh nonces of both, and the
 * token never crosses the network.  A rank stops at once at a server that
 * cannot prove it ("...: the server there could not prove that it holds
 * this step's rendezvous token").  What peers that do not hold it can
 * make rank 0 hold is bounded (store_server.c; docs/security.md).
 *
 * Like the rest of libddpenv it never prints and never exits; errors come
 * back in a caller's buffer and name the address, the rank and the key:
 *   "rank 3 could not reach 10.1.0.11:29512 after 60 s: Connection refused"
 */
#ifndef DDPENV_STORE_H
#define DDPENV_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDPENV_STORE_MAX_KEY 1024
#define DDPENV_STORE_MAX_VALUE (1u << 20)  /* per value; larger is refused */

struct ddpenv_store;

struct ddpenv_store_opts {
	const char *host;   /* MASTER_ADDR: numeric address or name */
	int port;           /* MASTER_PORT */
	int rank, world;    /* RANK, WORLD_SIZE; rank 0 hosts the server */
	int timeout_ms;     /* bound on connecting and on every wait */
	const char *token;  /* DDP_RDZV_TOKEN or NULL; must match the server's */
	/* Rank 0: called from the server's thread for refused clients
	 * ("refused a client at 10.1.0.12:40312 (it said rank 1 of 2): wrong
	 * rendezvous token (DDP_RDZV_TOKEN)"), at most 10 lines at once and
	 * then one a second, each saying how many went unlogged before it;
	 * and once more as the store closes, with the counts in all.  NULL:
	 * refusals are only counted. */
	void (*log)(void *ctx, const char *msg);
	void *log_ctx;
};

/* Join the store (rank 0 first starts the server).  Every rank connects
 * and introduces itself; returns -1 with err set on failure. */
int ddpenv_store_open(struct ddpenv_store **out,
		      const struct ddpenv_store_opts *o,
		      char *err, size_t errlen);

/* Leave the store.  Rank 0 keeps the server up until every rank has left
 * (or timeout_ms passed), so a slow peer never loses its last read. */
void ddpenv_store_close(struct ddpenv_store *s);
/* The same, waiting at most wait_ms for the others (a rank that fails
 * leaves this way, so peers see it left rather than died, and rank 0
 * keeps answering "who died?" for a moment). */
void ddpenv_store_close_within(struct ddpenv_store *s, int wait_ms);

/* The bound of later calls that take none of their own (set, add,
 * barrier, the rank lists, a get's -1) and of sending any request:
 * timeout_ms > 0 (ddpenv_store_opts' until then).  Returns the previous
 * one.  For a rank about to leave, which must not wait for a store that
 * stopped answering as long as a rendezvous may take. */
int ddpenv_store_set_timeout(struct ddpenv_store *s, int timeout_ms);

int ddpenv_store_set(struct ddpenv_store *s, const char *key,
		     const void *val, size_t len, char *err, size_t errlen);

/* Wait until KEY exists (at most timeout_ms; <0 means the store's) and
 * return a malloc'd copy of its value.  A wait that times out is taken back
 * from the server: the connection stays usable (to publish the failure, to
 * ask which ranks died). */
int ddpenv_store_get(struct ddpenv_store *s, const char *key, int timeout_ms,
		     void **val, size_t *len, char *err, size_t errlen);

/* The same wait, given up as soon as ABORT_KEY exists (looked at every
 * second): where a rank that cannot go on publishes its reason there, its
 * peers stop waiting for a key it will never set.  0 with *aborted 0 and
 * KEY's value, 0 with *aborted 1 and ABORT_KEY's, or -1 (timed out, or the
 * store failed). */
int ddpenv_store_get_unless(struct ddpenv_store *s, const char *key, const char *abort_key,
			    int timeout_ms, void **val, size_t *len, int *aborted, char *err,
			    size_t errlen);

/* Atomically add delta to the integer at KEY (0 when absent). */
int ddpenv_store_add(struct ddpenv_store *s, const char *key, int64_t delta,
		     int64_t *result, char *err, size_t errlen);

/* Every rank calls it with the same name; returns once all have. */
int ddpenv_store_barrier(struct ddpenv_store *s, const char *name,
			 char *err, size_t errlen);

/* Ranks that disconnected without leaving (crashed or killed), ascending.
 * Returns how many were found (up to max stored in ranks), -1 on error. */
int ddpenv_store_dead_ranks(struct ddpenv_store *s, int *ranks, int max,
			    char *err, size_t errlen);
/* Ranks that left cleanly (ddpenv_store_close: a rank that stopped on an
 * error of its own leaves this way), ascending; as dead_ranks. */
int ddpenv_store_left_ranks(struct ddpenv_store *s, int *ranks, int max,
			    char *err, size_t errlen);

/* The numeric local address of this rank's connection to the store: the
 * address peers can reach this node on when no interface was named. */
int ddpenv_store_local_addr(const struct ddpenv_store *s, char *buf, size_t len);

/* Rank 0: the clients its server refused so far, by reason. */
struct ddpenv_store_refusals {
	unsigned token;        /* wrong or missing token */
	unsigned protocol;     /* another store protocol */
	unsigned claim;        /* a rank outside the world, or joined twice */
	unsigned malformed;    /* frames the protocol does not have */
	unsigned timed_out;    /* no handshake within 10 s */
	unsigned evicted;      /* closed unproven to make room for newer ones */
	unsigned accept_failed; /* accept(2) failures (out of descriptors) */
	unsigned peak_pending; /* most connections in their handshake at once */
};
void ddpenv_store_refusals(const struct ddpenv_store *s, struct ddpenv_store_refusals *out);

int ddpenv_store_rank(const struct ddpenv_store *s);
int ddpenv_store_world(const struct ddpenv_store *s);

#ifdef __cplusplus
}
#endif
#endif
