/* Rendezvous store server: one thread, epoll, non-blocking sockets.
 *
 * Anyone who reaches MASTER_PORT can connect, so what a peer can make the
 * server hold is bounded, and most tightly before it has proven that it
 * holds the step's token (the handshake, store_auth.h):
 *   - before the handshake: frames of at most STORE_PREAUTH_FRAME bytes
 *     (a longer one closes the connection), the handshake done within
 *     STORE_HANDSHAKE_MS, at most STORE_MAX_PENDING such connections
 *     (STORE_MAX_PENDING_PER_ADDR from one address): past either cap the
 *     oldest of them is closed for the new one, so a flood cannot keep a
 *     rank out, only make it connect again;
 *   - after it, a connection's input is at most one frame
 *     (STORE_MAX_FRAME), its queued answers at most STORE_OUT_HIGH before
 *     the server stops reading its requests (a client that does not read
 *     stops being read), and at most MAX_WAITING GETs wait (a client of
 *     store_client.c waits on one at a time); a closed connection's waits
 *     are dropped;
 *   - the keys and values held, with each key's bookkeeping, come to at
 *     most STORE_MAX_BYTES, past which a SET (or a GET that would create a
 *     key) is refused.
 * Accept failures (out of descriptors) close the oldest unproven
 * connection or pause accepting for a moment; they never spin.  Refused
 * clients are counted, and logged at most STORE_LOG_BURST lines at once,
 * then one a second, with a count of those not logged.
 *
 * Keys live in a chained hash table; a GET on a missing key creates a
 * pending entry carrying its waiters, answered when a SET arrives. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


#include "ddpenv_store.h"
#include "store_auth.h"
#include "store_proto.h"
#include "store_server.h"

#define NBUCKET 4096
#define MAX_WAITING 64
#ifndef STORE_MAX_BYTES
#define STORE_MAX_BYTES (1ull << 30)
#define STORE_MAX_BYTES_TEXT "1 GiB"
#endif
#ifndef STORE_HANDSHAKE_MS
#define STORE_HANDSHAKE_MS 10000
#endif
#ifndef STORE_MAX_PENDING
#define STORE_MAX_PENDING 1024
#endif
#ifndef STORE_MAX_PENDING_PER_ADDR
#define STORE_MAX_PENDING_PER_ADDR 256
#endif
/* Queued answers past which a connection's requests are not read. */
#define STORE_OUT_HIGH (2 * (size_t)STORE_MAX_FRAME)
#define STORE_LOG_BURST 10
#define ACCEPT_PAUSE_MS 100
/* Accepted at most at once, before the other connections get a turn. */
#define ACCEPT_BATCH 256
#define STORE_TEXT_(x) #x
#define STORE_TEXT(x) STORE_TEXT_(x)

enum hs { HS_NEW, HS_CHALLENGED, HS_JOINED };

struct waiter {
	int fd;
	uint64_t gen;
	struct waiter *next;
};

struct kv {
	char *key;
	uint8_t *val;        /* NULL while only waited for */
	size_t len;
	int64_t num;         /* ADD's counter, mirrored into val as text */
	struct waiter *waiters;
	struct kv *next;
};

struct conn {
	int fd;
	uint64_t gen;
	int rank;            /* -1 until the handshake is done */
	enum hs hs;
	uint32_t claim_rank, claim_world;          /* what its JOIN said */
	uint8_t cnonce[STORE_NONCE_LEN], snonce[STORE_NONCE_LEN];
	int64_t since_ms;    /* accepted at */
	struct in6_addr addr; /* its address (IPv4 as ::ffff:a.b.c.d) */
	uint16_t port;
	struct conn *prev, *next; /* the pending list, until joined */
	int pending;         /* on that list */
	int bye;
	int refused;         /* a refusal was counted for it */
	int waiting;         /* its GETs not answered yet */
	uint8_t *in;
	size_t in_len, in_cap;
	uint8_t *out;
	size_t out_len, out_off, out_cap;
};

struct store_server {
	int lfd, efd, evfd;
	int world;
	char token[256];
	int has_token;
	pthread_t thread;
	int running;
	struct kv *bucket[NBUCKET];
	struct conn **conns; /* indexed by fd */
	int nconns_cap;
	struct conn *pending_head, *pending_tail; /* not joined, oldest first */
	unsigned npending;
	int64_t accept_paused_until;
	uint64_t next_gen;
	unsigned char *joined, *left, *dead;  /* per rank */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nleft;           /* ranks that said BYE or died */
	struct ddpenv_store_refusals ref;
	unsigned long long bytes;   /* keys and values held */
	void (*log)(void *, const char *);
	void *log_ctx;
	int64_t log_at;      /* the last refusal line, ms */
	unsigned log_burst;  /* lines left before one a second */
	unsigned unlogged;   /* refusals since the last line */
	unsigned unlogged_all; /* refusals never logged line by line */
};

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;  /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* What a key costs the store beyond its value: its copy and entry. */
static size_t key_cost(size_t kl)
{
	return kl + 1 + sizeof(struct kv);
}

static struct kv *kv_find(struct store_server *sv, const char *key, int create)
{
	uint64_t b = hash(key) % NBUCKET;
	for (struct kv *e = sv->bucket[b]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	if (!create)
		return NULL;
	size_t cost = key_cost(strlen(key));
	if (sv->bytes + cost > STORE_MAX_BYTES)
		return NULL;
	struct kv *e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		return NULL;
	}
	sv->bytes += cost;
	e->next = sv->bucket[b];
	sv->bucket[b] = e;
	return e;
}

/* Give e the value v (len bytes, malloc'd, taken over): -1, v freed, where
 * the store would then hold more than STORE_MAX_BYTES. */
static int kv_set(struct store_server *sv, struct kv *e, uint8_t *v, size_t len)
{
	if (sv->bytes - e->len + len > STORE_MAX_BYTES) {
		free(v);
		return -1;
	}
	sv->bytes = sv->bytes - e->len + len;
	free(e->val);
	e->val = v;
	e->len = len;
	return 0;
}

static size_t out_pending(const struct conn *c)
{
	return c->out_len - c->out_off;
}

static int out_reserve(struct conn *c, size_t more)
{
	if (c->out_off) { /* what was sent goes first */
		memmove(c->out, c->out + c->out_off, out_pending(c));
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + more <= c->out_cap)
		return 0;
	size_t cap = c->out_cap ? c->out_cap : 256;
	while (cap < c->out_len + more)
		cap *= 2;
	uint8_t *p = realloc(c->out, cap);
	if (!p)
		return -1;
	c->out = p;
	c->out_cap = cap;
	return 0;
}

/* Queue a reply frame: op plus up to two byte strings or an integer. */
static int reply(struct conn *c, int op, const void *a, size_t alen, int with_a)
{
	size_t body = 1 + (with_a ? 4 + alen : 0);
	if (out_reserve(c, 4 + body) < 0)
		return -1;
	uint8_t *p = c->out + c->out_len;
	proto_put_u32(p, (uint32_t)body);
	p[4] = (uint8_t)op;
	if (with_a) {
		proto_put_u32(p + 5, (uint32_t)alen);
		if (alen)
			memcpy(p + 9, a, alen);
	}
	c->out_len += 4 + body;
	return 0;
}

static int reply_int(struct conn *c, int64_t v)
{
	if (out_reserve(c, 13) < 0)
		return -1;
	uint8_t *p = c->out + c->out_len;
	proto_put_u32(p, 9);
	p[4] = REP_INT;
	proto_put_i64(p + 5, v);
	c->out_len += 13;
	return 0;
}

static int reply_err(struct conn *c, const char *msg)
{
	return reply(c, REP_ERR, msg, strlen(msg), 1);
}

/* Read its requests while its answers stay under the bound; write while
 * there are answers. */
static void want_events(struct store_server *sv, struct conn *c)
{
	size_t p = out_pending(c);
	struct epoll_event ev = { .events = (p <= STORE_OUT_HIGH ? EPOLLIN : 0) | (p ? EPOLLOUT : 0),
				  .data.fd = c->fd };
	epoll_ctl(sv->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void rank_left(struct store_server *sv, int rank, int died)
{
	if (rank < 0 || sv->left[rank])
		return;
	pthread_mutex_lock(&sv->mu);
	sv->left[rank] = 1;
	sv->dead[rank] = (unsigned char)died;
	sv->nleft++;
	pthread_cond_broadcast(&sv->cv);
	pthread_mutex_unlock(&sv->mu);
}

/* Drop the waiters of connection c (its fd and generation) from every key:
 * nobody will read their answers. */
static void drop_waiters(struct store_server *sv, const struct conn *c)
{
	for (int b = 0; b < NBUCKET; b++)
		for (struct kv *e = sv->bucket[b]; e; e = e->next)
			for (struct waiter **p = &e->waiters; *p;) {
				struct waiter *w = *p;
				if (w->fd == c->fd && w->gen == c->gen) {
					*p = w->next;
					free(w);
				} else {
					p = &w->next;
				}
			}
}

static void pending_add(struct store_server *sv, struct conn *c)
{
	c->pending = 1;
	c->prev = sv->pending_tail;
	c->next = NULL;
	if (sv->pending_tail)
		sv->pending_tail->next = c;
	else
		sv->pending_head = c;
	sv->pending_tail = c;
	if (++sv->npending > sv->ref.peak_pending)
		sv->ref.peak_pending = sv->npending;
}

static void pending_del(struct store_server *sv, struct conn *c)
{
	if (!c->pending)
		return;
	c->pending = 0;
	if (c->prev)
		c->prev->next = c->next;
	else
		sv->pending_head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		sv->pending_tail = c->prev;
	c->prev = c->next = NULL;
	sv->npending--;
}

static void conn_close(struct store_server *sv, struct conn *c)
{
	if (c->rank >= 0 && !c->bye)
		rank_left(sv, c->rank, 1);
	if (c->waiting > 0)
		drop_waiters(sv, c);
	pending_del(sv, c);
	epoll_ctl(sv->efd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	sv->conns[c->fd] = NULL;
	free(c->in);
	free(c->out);
	explicit_bzero(c, sizeof(*c));
	free(c);
}

static int flush(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	return 0;
}

/* "10.1.0.12:40312", "[fe80::1]:40312" */
static void peer_name(const struct conn *c, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int v4 = IN6_IS_ADDR_V4MAPPED(&c->addr);

	if (v4) /* the dual-stack socket's IPv4 peers */
		inet_ntop(AF_INET, &c->addr.s6_addr[12], host, sizeof(host));
	else
		inet_ntop(AF_INET6, &c->addr, host, sizeof(host));
	snprintf(buf, len, v4 ? "%s:%u" : "[%s]:%u", host, (unsigned)c->port);
}

/* A refused client, for the program's log: at most STORE_LOG_BURST lines
 * at once, then one a second; a line says how many went unlogged before
 * it.  "refused a client at 10.1.0.12:40312 (it said rank 1 of 2): ..." */
static void log_refused(struct store_server *sv, const struct conn *c, const char *why)
{
	int64_t now = now_ms();
	char who[INET6_ADDRSTRLEN + 16], claim[64] = "", more[64] = "", msg[320];

	if (!sv->log)
		return;
	if (now - sv->log_at >= 1000 && sv->log_burst < STORE_LOG_BURST)
		sv->log_burst++;
	if (sv->log_burst == 0) {
		sv->unlogged++;
		sv->unlogged_all++;
		return;
	}
	sv->log_burst--;
	sv->log_at = now;
	peer_name(c, who, sizeof(who));
	if (c->hs != HS_NEW)
		snprintf(claim, sizeof(claim), " (it said rank %u of %u)", c->claim_rank, c->claim_world);
	if (sv->unlogged)
		snprintf(more, sizeof(more), " [%u more refused since the last line]", sv->unlogged);
	sv->unlogged = 0;
	snprintf(msg, sizeof(msg), "refused a client at %s%s: %s%s", who, claim, why, more);
	sv->log(sv->log_ctx, msg);
}

/* Refuse c: count, log, answer ERR (it closes after); -1. */
static int refuse(struct store_server *sv, struct conn *c, unsigned *count, const char *why,
		  const char *answer)
{
	(*count)++;
	c->refused = 1;
	log_refused(sv, c, why);
	reply_err(c, answer);
	return -1;
}

/* Wake everyone waiting on e with its value. */
static void answer_waiters(struct store_server *sv, struct kv *e)
{
	struct waiter *w = e->waiters;
	e->waiters = NULL;
	while (w) {
		struct waiter *next = w->next;
		struct conn *c = w->fd < sv->nconns_cap ? sv->conns[w->fd] : NULL;
		if (c && c->gen == w->gen) {
			c->waiting--;
			reply(c, REP_VALUE, e->val, e->len, 1);
			want_events(sv, c);
		}
		free(w);
		w = next;
	}
}

/* JOIN: the claim and the client's nonce; CHALLENGE: ours and our proof. */
static int op_join(struct store_server *sv, struct conn *c, struct rd *r)
{
	uint32_t proto = proto_rd_u32(r), rank = proto_rd_u32(r), world = proto_rd_u32(r);
	size_t nl;
	const uint8_t *cn = proto_rd_str(r, &nl);
	uint8_t body[1 + 4 + 4 + STORE_NONCE_LEN + 4 + STORE_PROOF_LEN], *p = body;
	char m[200];

	if (!r->ok || nl != STORE_NONCE_LEN || c->hs != HS_NEW)
		return refuse(sv, c, &sv->ref.malformed, "a malformed JOIN", "malformed JOIN");
	c->claim_rank = rank;
	c->claim_world = world;
	c->hs = HS_CHALLENGED;
	if (proto != STORE_PROTO) {
		snprintf(m, sizeof(m), "store protocol %u, this store (rank 0) speaks %d: every rank must run the same slurm-ddp",
			 proto, STORE_PROTO);
		return refuse(sv, c, &sv->ref.protocol, m, m);
	}
	memcpy(c->cnonce, cn, STORE_NONCE_LEN);
	if (store_nonce(c->snonce) < 0)
		return refuse(sv, c, &sv->ref.malformed, "no random nonce (getrandom failed)",
			      "the store could not make a nonce (getrandom)");
	*p++ = REP_CHALLENGE;
	proto_put_u32(p, STORE_PROTO);
	proto_put_u32(p + 4, STORE_NONCE_LEN);
	memcpy(p + 8, c->snonce, STORE_NONCE_LEN);
	p += 8 + STORE_NONCE_LEN;
	proto_put_u32(p, sv->has_token ? STORE_PROOF_LEN : 0);
	p += 4;
	if (sv->has_token &&
	    store_proof(sv->token, STORE_SERVER, c->cnonce, c->snonce, rank, world, p) < 0)
		return refuse(sv, c, &sv->ref.malformed, "HMAC failed (nettle)", "the store's HMAC failed");
	if (sv->has_token)
		p += STORE_PROOF_LEN;
	if (out_reserve(c, 4 + (size_t)(p - body)) < 0)
		return -1;
	proto_put_u32(c->out + c->out_len, (uint32_t)(p - body));
	memcpy(c->out + c->out_len + 4, body, (size_t)(p - body));
	c->out_len += 4 + (size_t)(p - body);
	return 0;
}

/* PROOF: the client's; then its claim must fit the world. */
static int op_proof(struct store_server *sv, struct conn *c, struct rd *r)
{
	size_t pl;
	const uint8_t *proof = proto_rd_str(r, &pl);
	uint32_t rank = c->claim_rank, world = c->claim_world;
	char m[160];

	if (!r->ok || c->hs != HS_CHALLENGED)
		return refuse(sv, c, &sv->ref.malformed, "a PROOF out of turn", "malformed PROOF");
	if (sv->has_token && !store_proof_ok(sv->token, STORE_CLIENT, c->cnonce, c->snonce, rank,
					     world, proof, pl))
		return refuse(sv, c, &sv->ref.token,
			      pl ? "wrong rendezvous token (DDP_RDZV_TOKEN)" : "missing rendezvous token (DDP_RDZV_TOKEN)",
			      "refused: wrong or missing rendezvous token (DDP_RDZV_TOKEN)");
	if ((int)world != sv->world || rank >= world) {
		snprintf(m, sizeof(m), "rank %u of %u does not fit this store's world of %d", rank, world,
			 sv->world);
		return refuse(sv, c, &sv->ref.claim, m, m);
	}
	if (sv->joined[rank] && !sv->left[rank]) {
		snprintf(m, sizeof(m), "rank %u joined twice", rank);
		return refuse(sv, c, &sv->ref.claim, m, m);
	}
	pending_del(sv, c);
	c->hs = HS_JOINED;
	sv->joined[rank] = 1;
	c->rank = (int)rank;
	return reply(c, REP_OK, NULL, 0, 0);
}

/* A copy of v (len bytes) as e's value, its waiters answered: 0, or -1
 * with the error queued for c (no memory, or the store would be full). */
static int store_value(struct store_server *sv, struct conn *c, struct kv *e, const void *v, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);

	if (!copy) {
		reply_err(c, "store out of memory");
		return -1;
	}
	memcpy(copy, v, len);
	if (kv_set(sv, e, copy, len) < 0) {
		reply_err(c, "store full: its keys and values would pass " STORE_MAX_BYTES_TEXT);
		return -1;
	}
	answer_waiters(sv, e);
	return 0;
}

/* A request's key into key (NUL-ended): its length, 0 malformed. */
static size_t rd_key(struct rd *r, char key[DDPENV_STORE_MAX_KEY + 1])
{
	size_t len;
	const uint8_t *s = proto_rd_str(r, &len);

	if (!r->ok || len == 0 || len > DDPENV_STORE_MAX_KEY)
		return 0;
	memcpy(key, s, len);
	key[len] = 0;
	return len;
}

/* SET, GET, ADD: a key, and a value or a delta. */
static int op_kv(struct store_server *sv, struct conn *c, int op, struct rd *r)
{
	char key[DDPENV_STORE_MAX_KEY + 1];
	size_t len = rd_key(r, key);

	if (!len)
		return 1;
	struct kv *e = kv_find(sv, key, 1);
	if (!e)
		return reply_err(c, sv->bytes + key_cost(len) > STORE_MAX_BYTES ?
			"store full: its keys and values would pass " STORE_MAX_BYTES_TEXT :
			"store out of memory");
	if (op == OP_SET) {
		const uint8_t *v = proto_rd_str(r, &len);
		if (!r->ok)
			return 1;
		return store_value(sv, c, e, v, len) < 0 ? 0 : reply(c, REP_OK, NULL, 0, 0);
	}
	if (op == OP_ADD) {
		int64_t d = proto_rd_i64(r), sum;
		if (!r->ok)
			return 1;
		/* a peer's delta must not take the counter past int64
		 * (undefined in C; found by tests/fuzz/fuzz_store) */
		if (__builtin_add_overflow(e->num, d, &sum)) {
			char m[160];
			snprintf(m, sizeof(m), "%lld + %lld passes the range of a 64-bit counter",
				 (long long)e->num, (long long)d);
			return reply_err(c, m);
		}
		char txt[24];
		int tl = snprintf(txt, sizeof(txt), "%lld", (long long)sum);
		if (store_value(sv, c, e, txt, (size_t)tl) < 0)
			return 0;
		e->num = sum;
		return reply_int(c, e->num);
	}
	if (e->val)
		return reply(c, REP_VALUE, e->val, e->len, 1);
	if (c->waiting >= MAX_WAITING) {
		char m[96];
		snprintf(m, sizeof(m), "more than %d GETs waiting on one connection", MAX_WAITING);
		reply_err(c, m);
		return -1;
	}
	struct waiter *w = malloc(sizeof(*w));
	if (!w)
		return reply_err(c, "store out of memory");
	w->fd = c->fd;
	w->gen = c->gen;
	w->next = e->waiters;
	e->waiters = w;
	c->waiting++;
	return 0;
}

/* DEAD: the ranks whose connection closed without BYE; LEFT: those that
 * said it (a rank that stopped on its own error). */
static int op_ranks(struct store_server *sv, struct conn *c, int op)
{
	int cnt = 0;
	for (int i = 0; i < sv->world; i++)
		cnt += op == OP_DEAD ? sv->dead[i] : sv->left[i] && !sv->dead[i];
	size_t body = 1 + 4 + 4 * (size_t)cnt;
	if (out_reserve(c, 4 + body) < 0)
		return -1;
	uint8_t *p = c->out + c->out_len;
	proto_put_u32(p, (uint32_t)body);
	p[4] = REP_RANKS;
	proto_put_u32(p + 5, (uint32_t)cnt);
	p += 9;
	for (int i = 0; i < sv->world; i++)
		if (op == OP_DEAD ? sv->dead[i] : sv->left[i] && !sv->dead[i]) {
			proto_put_u32(p, (uint32_t)i);
			p += 4;
		}
	c->out_len += 4 + body;
	return 0;
}

/* UNWAIT: a client's GET that timed out; its waiter goes, so no VALUE
 * comes after this OK (store_client.c: unwait). */
static int op_unwait(struct store_server *sv, struct conn *c, struct rd *r)
{
	char key[DDPENV_STORE_MAX_KEY + 1];

	if (!rd_key(r, key))
		return 1;
	struct kv *e = kv_find(sv, key, 0);
	for (struct waiter **p = e ? &e->waiters : NULL; p && *p;) {
		struct waiter *w = *p;
		if (w->fd == c->fd && w->gen == c->gen) {
			*p = w->next;
			free(w);
			c->waiting--;
		} else {
			p = &w->next;
		}
	}
	return reply(c, REP_OK, NULL, 0, 0);
}

/* Before the handshake is done: JOIN, PROOF, or a refusal. */
static int handshake(struct store_server *sv, struct conn *c, int op, struct rd *r)
{
	if (op == OP_JOIN)
		return op_join(sv, c, r);
	if (op == OP_PROOF)
		return op_proof(sv, c, r);
	if (op == OP_HELLO)
		return refuse(sv, c, &sv->ref.protocol,
			      "store protocol 1 (its HELLO sends the token in clear), this store speaks 2",
			      "store protocol 1 is refused: this store (rank 0) speaks protocol 2, which "
			      "never sends the token; every rank must run the same slurm-ddp");
	return refuse(sv, c, &sv->ref.malformed, "a request before the handshake",
		      "expected JOIN first (store protocol 2)");
}

/* Handle one complete request frame; -1 closes the connection. */
static int handle(struct store_server *sv, struct conn *c, const uint8_t *f, size_t n)
{
	struct rd r = { f + 1, n - 1, 1 };
	int op = f[0], rv = 1;

	if (c->hs != HS_JOINED)
		return handshake(sv, c, op, &r);
	switch (op) {
	case OP_SET:
	case OP_GET:
	case OP_ADD:
		rv = op_kv(sv, c, op, &r);
		break;
	case OP_DEAD:
	case OP_LEFT:
		rv = op_ranks(sv, c, op);
		break;
	case OP_UNWAIT:
		rv = op_unwait(sv, c, &r);
		break;
	case OP_BYE:
		c->bye = 1;
		rank_left(sv, c->rank, 0);
		rv = reply(c, REP_OK, NULL, 0, 0);
		break;
	case OP_JOIN:
	case OP_PROOF:
	case OP_HELLO: {
		/* one rank a connection: a second one would leave the first
		 * joined with no connection to leave by (found by
		 * tests/fuzz/fuzz_store) */
		char m[96];
		snprintf(m, sizeof(m), "a second handshake on the connection of rank %d", c->rank);
		reply_err(c, m);
		return -1;
	}
	}
	if (rv <= 0)
		return rv;
	reply_err(c, "malformed request");
	return -1;
}

/* Handle the complete frames read, while the connection's answers stay
 * under STORE_OUT_HIGH; -1 closes it. */
static int process(struct store_server *sv, struct conn *c)
{
	size_t off = 0;
	int rv = 0;

	while (c->in_len - off >= 4 && out_pending(c) <= STORE_OUT_HIGH) {
		uint32_t flen = proto_get_u32(c->in + off);
		uint32_t cap = c->hs == HS_JOINED ? STORE_MAX_FRAME : STORE_PREAUTH_FRAME;
		if (flen == 0 || flen > cap) {
			char m[160];
			snprintf(m, sizeof(m), "a frame of %u bytes%s (at most %u)", flen,
				 c->hs == HS_JOINED ? "" : " before the handshake", cap);
			rv = refuse(sv, c, &sv->ref.malformed, m, m);
			break;
		}
		if (c->in_len - off - 4 < flen)
			break;
		rv = handle(sv, c, c->in + off + 4, flen);
		off += 4 + flen;
		if (rv < 0)
			break;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	return rv < 0 ? -1 : 0;
}

/* Room to read into: before the handshake one handshake frame and its
 * length, after it the largest frame and a little more. */
static int in_room(struct conn *c)
{
	size_t cap;

	if (c->hs != HS_JOINED)
		cap = STORE_PREAUTH_FRAME + 4;
	else if (c->in_cap - c->in_len >= 4096)
		return 0;
	else if ((cap = c->in_cap * 2 > 8192 ? c->in_cap * 2 : 8192) > STORE_MAX_FRAME + 4 + 8192)
		cap = STORE_MAX_FRAME + 4 + 8192;
	if (cap <= c->in_cap)
		return c->in_len < c->in_cap ? 0 : -1;
	uint8_t *p = realloc(c->in, cap);
	if (!p)
		return -1;
	c->in = p;
	c->in_cap = cap;
	return 0;
}

/* Read what is there and handle every complete frame; -1 closes. */
static int on_readable(struct store_server *sv, struct conn *c)
{
	while (out_pending(c) <= STORE_OUT_HIGH) {
		if (in_room(c) < 0)
			return -1;
		ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n == 0)
			return -1;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
		c->in_len += (size_t)n;
		if (process(sv, c) < 0) {
			flush(c);
			return -1;
		}
	}
	if (flush(c) < 0)
		return -1;
	want_events(sv, c);
	return 0;
}

/* Its answers written: the requests it holds back are handled. */
static int on_writable(struct store_server *sv, struct conn *c)
{
	if (flush(c) < 0)
		return -1;
	if (c->in_len && process(sv, c) < 0) {
		flush(c);
		return -1;
	}
	if (flush(c) < 0)
		return -1;
	want_events(sv, c);
	return 0;
}

/* Close c, which did not finish its handshake in time or made room. */
static void drop_pending(struct store_server *sv, struct conn *c, unsigned *count, const char *why)
{
	(*count)++;
	log_refused(sv, c, why);
	conn_close(sv, c);
}

/* Room for one more unproven connection from addr: the oldest of them
 * (from addr, if that address has its share) is closed. */
static void make_room(struct store_server *sv, const struct in6_addr *addr)
{
	struct conn *oldest = NULL;
	unsigned same = 0;

	for (struct conn *c = sv->pending_head; c; c = c->next)
		if (!memcmp(&c->addr, addr, sizeof(*addr)) && same++ == 0)
			oldest = c;
	if (oldest && same >= STORE_MAX_PENDING_PER_ADDR)
		drop_pending(sv, oldest, &sv->ref.evicted,
			     "closed unproven: its address has " STORE_TEXT(STORE_MAX_PENDING_PER_ADDR)
			     " newer connections in their handshake");
	else if (sv->pending_head && sv->npending >= STORE_MAX_PENDING)
		drop_pending(sv, sv->pending_head, &sv->ref.evicted,
			     "closed unproven: " STORE_TEXT(STORE_MAX_PENDING) " newer connections in their handshake");
}

/* Handshakes past STORE_HANDSHAKE_MS are closed; the ms to the next
 * deadline (at most 1000). */
static int expire_pending(struct store_server *sv)
{
	int64_t now = now_ms();

	struct conn *c;

	while ((c = sv->pending_head) && now - c->since_ms >= STORE_HANDSHAKE_MS) {
		pending_del(sv, c); /* (conn_close would; said here for the reader) */
		drop_pending(sv, c, &sv->ref.timed_out, "no handshake within " STORE_TEXT(STORE_HANDSHAKE_MS) " ms");
	}
	if (!sv->pending_head)
		return 1000;
	int64_t left = sv->pending_head->since_ms + STORE_HANDSHAKE_MS - now;
	return left < 1000 ? (int)left + 1 : 1000;
}

static void accept_pause(struct store_server *sv, int on)
{
	struct epoll_event ev = { .events = on ? 0 : EPOLLIN, .data.fd = sv->lfd };
	epoll_ctl(sv->efd, EPOLL_CTL_MOD, sv->lfd, &ev);
	sv->accept_paused_until = on ? now_ms() + ACCEPT_PAUSE_MS : 0;
}

static int conn_slot(struct store_server *sv, int fd)
{
	if (fd < sv->nconns_cap)
		return 0;
	int cap = sv->nconns_cap;
	while (cap <= fd)
		cap *= 2;
	struct conn **p = realloc(sv->conns, (size_t)cap * sizeof(*p));
	if (!p)
		return -1;
	memset(p + sv->nconns_cap, 0, (size_t)(cap - sv->nconns_cap) * sizeof(*p));
	sv->conns = p;
	sv->nconns_cap = cap;
	return 0;
}

/* A new connection: a pending one, its handshake to come. */
static void conn_add(struct store_server *sv, int fd, const struct sockaddr_storage *ss)
{
	struct conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (!c || conn_slot(sv, fd) < 0) {
		free(c);
		close(fd);
		return;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		c->addr = a->sin6_addr;
		c->port = ntohs(a->sin6_port);
	} else if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		c->addr.s6_addr[10] = c->addr.s6_addr[11] = 0xff;
		memcpy(&c->addr.s6_addr[12], &a->sin_addr, 4);
		c->port = ntohs(a->sin_port);
	}
	make_room(sv, &c->addr);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->gen = ++sv->next_gen;
	c->rank = -1;
	c->since_ms = now_ms();
	sv->conns[fd] = c;
	pending_add(sv, c);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	if (epoll_ctl(sv->efd, EPOLL_CTL_ADD, fd, &ev) < 0)
		conn_close(sv, c);
}

static void on_accept(struct store_server *sv)
{
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		struct sockaddr_storage ss = { 0 };
		socklen_t sl = sizeof(ss);
		int fd = accept4(sv->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			conn_add(sv, fd, &ss);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		/* out of descriptors or memory: an unproven connection
		 * makes room, else accepting waits a moment (epoll would
		 * report the listener ready again at once) */
		sv->ref.accept_failed++;
		if (sv->pending_head && (errno == EMFILE || errno == ENFILE)) {
			drop_pending(sv, sv->pending_head, &sv->ref.evicted,
				     "closed unproven: out of file descriptors for new connections");
			continue;
		}
		accept_pause(sv, 1);
		return;
	}
}

static void on_event(struct store_server *sv, const struct epoll_event *e)
{
	struct conn *c = e->data.fd < sv->nconns_cap ? sv->conns[e->data.fd] : NULL;

	if (!c)
		return;
	if (e->events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		/* one whose answers are not read and that hung up is gone */
		int gone = (e->events & (EPOLLHUP | EPOLLERR)) && out_pending(c) > STORE_OUT_HIGH;
		if (gone || on_readable(sv, c) < 0) {
			/* a rank whose token is not this step's finds our
			 * proof wrong and leaves without its own */
			if (c->hs == HS_CHALLENGED && !c->refused) {
				sv->ref.token++;
				log_refused(sv, c, "it left after the challenge without a proof: its rendezvous token "
					    "(DDP_RDZV_TOKEN) is not this step's, or it is no slurm-ddp rank");
			}
			conn_close(sv, c);
			return;
		}
	}
	if ((e->events & EPOLLOUT) && on_writable(sv, c) < 0)
		conn_close(sv, c);
}

static void *loop(void *arg)
{
	struct store_server *sv = arg;
	struct epoll_event evs[256];
	for (;;) {
		int wait = expire_pending(sv);
		if (sv->accept_paused_until) {
			int64_t left = sv->accept_paused_until - now_ms();
			if (left <= 0)
				accept_pause(sv, 0);
			else if (left < wait)
				wait = (int)left;
		}
		int n = epoll_wait(sv->efd, evs, 256, wait);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == sv->evfd)
				return NULL;
			if (fd == sv->lfd)
				on_accept(sv);
			else
				on_event(sv, &evs[i]);
		}
	}
}

static int listen_on(int port, char *err, size_t errlen)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1, zero = 0, e;
	if (fd >= 0) {
		struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
					   .sin6_addr = IN6ADDR_ANY_INIT };
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0 && listen(fd, 8192) == 0)
			return fd;
		e = errno;
		close(fd);
		if (e == EADDRINUSE)
			goto busy;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "rank 0 could not create the store's socket: %s", strerror(errno));
		return -1;
	}
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) == 0 && listen(fd, 8192) == 0)
		return fd;
	e = errno;
	close(fd);
	if (e != EADDRINUSE) {
		snprintf(err, errlen, "rank 0 could not listen on port %d: %s", port, strerror(e));
		return -1;
	}
busy:
	snprintf(err, errlen, "rank 0 could not listen on port %d: %s "
		 "(another program holds it; pick a free MASTER_PORT)", port, strerror(EADDRINUSE));
	return -1;
}

/* A server's state with no socket or thread yet (fds -1): NULL with err
 * set on failure. */
static struct store_server *server_new(int world, const char *token,
				       void (*log)(void *, const char *), void *log_ctx,
				       char *err, size_t errlen)
{
	struct store_server *sv = calloc(1, sizeof(*sv));
	if (!sv || world <= 0) {
		snprintf(err, errlen, "store: %s", sv ? "world size must be positive" : "out of memory");
		free(sv);
		return NULL;
	}
	sv->lfd = sv->efd = sv->evfd = -1;
	sv->world = world;
	sv->log = log;
	sv->log_ctx = log_ctx;
	sv->log_burst = STORE_LOG_BURST;
	if (store_crypto(token, err, errlen) < 0) {
		free(sv);
		return NULL;
	}
	if (token && *token) {
		snprintf(sv->token, sizeof(sv->token), "%s", token);
		sv->has_token = 1;
	}
	pthread_mutex_init(&sv->mu, NULL);
	pthread_cond_init(&sv->cv, NULL);
	sv->nconns_cap = 1024;
	sv->conns = calloc((size_t)sv->nconns_cap, sizeof(*sv->conns));
	sv->joined = calloc((size_t)world, 1);
	sv->left = calloc((size_t)world, 1);
	sv->dead = calloc((size_t)world, 1);
	if (!sv->conns || !sv->joined || !sv->left || !sv->dead) {
		snprintf(err, errlen, "store: out of memory for %d ranks", world);
		ddpenv_store_server_stop(sv, 0);
		return NULL;
	}
	return sv;
}

struct store_server *ddpenv_store_server_start(int port, int world, const char *token,
					       void (*log)(void *, const char *), void *log_ctx,
					       char *err, size_t errlen)
{
	struct store_server *sv = server_new(world, token, log, log_ctx, err, errlen);
	if (!sv)
		return NULL;
	if ((sv->lfd = listen_on(port, err, errlen)) < 0)
		goto fail;
	sv->efd = epoll_create1(EPOLL_CLOEXEC);
	sv->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sv->efd < 0 || sv->evfd < 0) {
		snprintf(err, errlen, "store: epoll/eventfd: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = sv->lfd };
	struct epoll_event ev2 = { .events = EPOLLIN, .data.fd = sv->evfd };
	if (epoll_ctl(sv->efd, EPOLL_CTL_ADD, sv->lfd, &ev) < 0 ||
	    epoll_ctl(sv->efd, EPOLL_CTL_ADD, sv->evfd, &ev2) < 0) {
		snprintf(err, errlen, "store: epoll_ctl: %s", strerror(errno));
		goto fail;
	}
	if ((errno = pthread_create(&sv->thread, NULL, loop, sv)) != 0) {
		snprintf(err, errlen, "store: cannot start its thread: %s", strerror(errno));
		goto fail;
	}
	sv->running = 1;
	return sv;
fail:
	ddpenv_store_server_stop(sv, 0);
	return NULL;
}

/* The refusals in all, once the server stopped: one line, where any
 * client was refused. */
static void log_summary(struct store_server *sv)
{
	const struct ddpenv_store_refusals *r = &sv->ref;
	unsigned all = r->token + r->protocol + r->claim + r->malformed + r->timed_out + r->evicted;
	char msg[400];

	if (!sv->log || all == 0)
		return;
	snprintf(msg, sizeof(msg),
		 "refused %u clients in all: %u wrong or missing token, %u another protocol, %u a claim that "
		 "does not fit, %u malformed, %u handshakes timed out, %u closed unproven for newer ones "
		 "(at most %u unproven at once), %u not logged line by line",
		 all, r->token, r->protocol, r->claim, r->malformed, r->timed_out, r->evicted, r->peak_pending,
		 sv->unlogged_all);
	sv->log(sv->log_ctx, msg);
}

void ddpenv_store_server_stop(struct store_server *sv, int wait_ms)
{
	if (!sv)
		return;
	if (sv->running) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += wait_ms / 1000;
		dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&sv->mu);
		while (sv->nleft < sv->world)
			if (pthread_cond_timedwait(&sv->cv, &sv->mu, &dl) == ETIMEDOUT)
				break;
		pthread_mutex_unlock(&sv->mu);
		uint64_t one = 1;
		if (write(sv->evfd, &one, sizeof(one)) < 0) {
			/* the thread also polls every second; nothing else to do */
		}
		pthread_join(sv->thread, NULL);
	}
	log_summary(sv);
	for (int fd = 0; sv->conns && fd < sv->nconns_cap; fd++)
		if (sv->conns[fd])
			conn_close(sv, sv->conns[fd]);
	for (int b = 0; b < NBUCKET; b++) {
		struct kv *e = sv->bucket[b];
		while (e) {
			struct kv *next = e->next;
			struct waiter *w = e->waiters;
			while (w) {
				struct waiter *wn = w->next;
				free(w);
				w = wn;
			}
			free(e->key);
			free(e->val);
			free(e);
			e = next;
		}
	}
	if (sv->lfd >= 0)
		close(sv->lfd);
	if (sv->efd >= 0)
		close(sv->efd);
	if (sv->evfd >= 0)
		close(sv->evfd);
	explicit_bzero(sv->token, sizeof(sv->token));
	pthread_mutex_destroy(&sv->mu);
	pthread_cond_destroy(&sv->cv);
	free(sv->conns);
	free(sv->joined);
	free(sv->left);
	free(sv->dead);
	free(sv);
}

void ddpenv_store_server_refusals(const struct store_server *sv, struct ddpenv_store_refusals *out)
{
	memset(out, 0, sizeof(*out));
	if (sv)
		*out = sv->ref;
}
