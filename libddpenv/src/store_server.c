/* Rendezvous store server: one thread, epoll, non-blocking sockets.
 *
 * Memory is bounded whatever a peer sends: a frame larger than
 * STORE_MAX_FRAME closes the connection; a connection waits on at most
 * MAX_WAITING GETs (a client of store_client.c waits on one at a time),
 * and those of a connection that closes are dropped; the keys and values
 * held come to at most STORE_MAX_BYTES, past which a SET (or a GET that
 * would create a key) is refused.  Keys live in a chained hash table; a GET
 * on a missing key creates a pending entry carrying its waiters, answered
 * when a SET arrives. */
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
#include <unistd.h>

#include "ddpenv_store.h"
#include "store_proto.h"
#include "store_server.h"

#define NBUCKET 4096
#define MAX_WAITING 64
#ifndef STORE_MAX_BYTES
#define STORE_MAX_BYTES (1ull << 30)
#define STORE_MAX_BYTES_TEXT "1 GiB"
#endif

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
	int rank;            /* -1 until HELLO */
	int bye;
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
	uint64_t next_gen;
	unsigned char *joined, *left, *dead;  /* per rank */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nleft;           /* ranks that said BYE or died */
	unsigned refused;
	unsigned long long bytes;   /* keys and values held */
	void (*log)(void *, const char *);
	void *log_ctx;
};

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;  /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct kv *kv_find(struct store_server *sv, const char *key, int create)
{
	uint64_t b = hash(key) % NBUCKET;
	for (struct kv *e = sv->bucket[b]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	if (!create)
		return NULL;
	size_t kl = strlen(key);
	if (sv->bytes + kl > STORE_MAX_BYTES)
		return NULL;
	struct kv *e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		return NULL;
	}
	sv->bytes += kl;
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

static int out_reserve(struct conn *c, size_t more)
{
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
	put_u32(p, (uint32_t)body);
	p[4] = (uint8_t)op;
	if (with_a) {
		put_u32(p + 5, (uint32_t)alen);
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
	put_u32(p, 9);
	p[4] = REP_INT;
	put_i64(p + 5, v);
	c->out_len += 13;
	return 0;
}

static int reply_err(struct conn *c, const char *msg)
{
	return reply(c, REP_ERR, msg, strlen(msg), 1);
}

static void want_write(struct store_server *sv, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | (c->out_len > c->out_off ? EPOLLOUT : 0),
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

static void conn_close(struct store_server *sv, struct conn *c)
{
	if (c->rank >= 0 && !c->bye)
		rank_left(sv, c->rank, 1);
	if (c->waiting > 0)
		drop_waiters(sv, c);
	epoll_ctl(sv->efd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	sv->conns[c->fd] = NULL;
	free(c->in);
	free(c->out);
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

static int token_eq(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char d = alen != blen;
	for (size_t i = 0; i < alen && i < blen; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

/* Name a refused client for the program's log: its address and claim. */
static void log_refused(struct store_server *sv, const struct conn *c, uint32_t rank,
			uint32_t world, const char *what)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?", msg[256];
	int port = 0;

	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
			if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) /* the dual-stack socket's IPv4 peers */
				inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof(host));
			else
				inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		}
	}
	snprintf(msg, sizeof(msg), strchr(host, ':') ?
		 "refused a client at [%s]:%d (it said rank %u of %u): %s rendezvous token (DDP_RDZV_TOKEN)" :
		 "refused a client at %s:%d (it said rank %u of %u): %s rendezvous token (DDP_RDZV_TOKEN)",
		 host, port, rank, world, what);
	sv->log(sv->log_ctx, msg);
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
			want_write(sv, c);
		}
		free(w);
		w = next;
	}
}

/* Handle one complete request frame; -1 closes the connection. */
static int handle(struct store_server *sv, struct conn *c, const uint8_t *f, size_t n)
{
	struct rd r = { f + 1, n - 1, 1 };
	char key[DDPENV_STORE_MAX_KEY + 1];
	const uint8_t *s;
	size_t len;
	int op = f[0];

	if (c->rank < 0 && op != OP_HELLO) {
		reply_err(c, "expected HELLO first");
		return -1;
	}
	switch (op) {
	case OP_HELLO: {
		uint32_t rank = rd_u32(&r), world = rd_u32(&r);
		s = rd_str(&r, &len);
		if (!r.ok)
			break;
		if (sv->has_token && !token_eq((const char *)s, len, sv->token)) {
			sv->refused++;
			if (sv->log)
				log_refused(sv, c, rank, world, len ? "wrong" : "missing");
			reply_err(c, "refused: wrong or missing rendezvous token (DDP_RDZV_TOKEN)");
			return -1;
		}
		/* one rank a connection: a second HELLO would leave the first
		 * rank joined with no connection to leave by (found by
		 * tests/fuzz/fuzz_store) */
		if (c->rank >= 0) {
			char m[96];
			snprintf(m, sizeof(m), "HELLO as rank %u on the connection of rank %d", rank, c->rank);
			reply_err(c, m);
			return -1;
		}
		if ((int)world != sv->world || rank >= world) {
			char m[160];
			snprintf(m, sizeof(m), "rank %u of %u does not fit this store's world of %d",
				 rank, world, sv->world);
			reply_err(c, m);
			return -1;
		}
		if (sv->joined[rank] && !sv->left[rank]) {
			char m[96];
			snprintf(m, sizeof(m), "rank %u joined twice", rank);
			reply_err(c, m);
			return -1;
		}
		sv->joined[rank] = 1;
		c->rank = (int)rank;
		return reply(c, REP_OK, NULL, 0, 0);
	}
	case OP_SET:
	case OP_GET:
	case OP_ADD: {
		s = rd_str(&r, &len);
		if (!r.ok || len == 0 || len > DDPENV_STORE_MAX_KEY)
			break;
		memcpy(key, s, len);
		key[len] = 0;
		struct kv *e = kv_find(sv, key, 1);
		if (!e)
			return reply_err(c, sv->bytes + len > STORE_MAX_BYTES ?
				"store full: its keys and values would pass " STORE_MAX_BYTES_TEXT :
				"store out of memory");
		if (op == OP_SET) {
			const uint8_t *v = rd_str(&r, &len);
			if (!r.ok)
				break;
			uint8_t *copy = malloc(len ? len : 1);
			if (!copy)
				return reply_err(c, "store out of memory");
			memcpy(copy, v, len);
			if (kv_set(sv, e, copy, len) < 0)
				return reply_err(c, "store full: its keys and values would pass "
					STORE_MAX_BYTES_TEXT);
			answer_waiters(sv, e);
			return reply(c, REP_OK, NULL, 0, 0);
		}
		if (op == OP_ADD) {
			int64_t d = rd_i64(&r), sum;
			if (!r.ok)
				break;
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
			uint8_t *copy = malloc((size_t)tl);
			if (!copy)
				return reply_err(c, "store out of memory");
			memcpy(copy, txt, (size_t)tl);
			if (kv_set(sv, e, copy, (size_t)tl) < 0)
				return reply_err(c, "store full: its keys and values would pass "
					STORE_MAX_BYTES_TEXT);
			e->num = sum;
			answer_waiters(sv, e);
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
	case OP_DEAD:
	case OP_LEFT: {
		/* DEAD: the ranks whose connection closed without BYE; LEFT:
		 * those that said it (a rank that stopped on its own error) */
		int cnt = 0;
		for (int i = 0; i < sv->world; i++)
			cnt += op == OP_DEAD ? sv->dead[i] : sv->left[i] && !sv->dead[i];
		size_t body = 1 + 4 + 4 * (size_t)cnt;
		if (out_reserve(c, 4 + body) < 0)
			return -1;
		uint8_t *p = c->out + c->out_len;
		put_u32(p, (uint32_t)body);
		p[4] = REP_RANKS;
		put_u32(p + 5, (uint32_t)cnt);
		p += 9;
		for (int i = 0; i < sv->world; i++)
			if (op == OP_DEAD ? sv->dead[i] : sv->left[i] && !sv->dead[i]) {
				put_u32(p, (uint32_t)i);
				p += 4;
			}
		c->out_len += 4 + body;
		return 0;
	}
	case OP_UNWAIT: {
		/* a client's GET that timed out: its waiter goes, so no VALUE
		 * comes after this OK (store_client.c: unwait) */
		s = rd_str(&r, &len);
		if (!r.ok || len == 0 || len > DDPENV_STORE_MAX_KEY)
			break;
		memcpy(key, s, len);
		key[len] = 0;
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
	case OP_BYE:
		c->bye = 1;
		rank_left(sv, c->rank, 0);
		return reply(c, REP_OK, NULL, 0, 0);
	}
	reply_err(c, "malformed request");
	return -1;
}

/* Read what is there and handle every complete frame. */
static int on_readable(struct store_server *sv, struct conn *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
			if (cap > STORE_MAX_FRAME + 4 + 8192)
				cap = STORE_MAX_FRAME + 4 + 8192;
			if (cap <= c->in_len)
				return -1;
			uint8_t *p = realloc(c->in, cap);
			if (!p)
				return -1;
			c->in = p;
			c->in_cap = cap;
		}
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
		size_t off = 0;
		while (c->in_len - off >= 4) {
			uint32_t flen = get_u32(c->in + off);
			if (flen == 0 || flen > STORE_MAX_FRAME)
				return -1;
			if (c->in_len - off - 4 < flen)
				break;
			if (handle(sv, c, c->in + off + 4, flen) < 0) {
				flush(c);
				return -1;
			}
			off += 4 + flen;
		}
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	if (flush(c) < 0)
		return -1;
	want_write(sv, c);
	return 0;
}

static void on_accept(struct store_server *sv)
{
	for (;;) {
		int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (fd >= sv->nconns_cap) {
			int cap = sv->nconns_cap;
			while (cap <= fd)
				cap *= 2;
			struct conn **p = realloc(sv->conns, (size_t)cap * sizeof(*p));
			if (!p) {
				close(fd);
				continue;
			}
			memset(p + sv->nconns_cap, 0, (size_t)(cap - sv->nconns_cap) * sizeof(*p));
			sv->conns = p;
			sv->nconns_cap = cap;
		}
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->gen = ++sv->next_gen;
		c->rank = -1;
		sv->conns[fd] = c;
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		if (epoll_ctl(sv->efd, EPOLL_CTL_ADD, fd, &ev) < 0)
			conn_close(sv, c);
	}
}

static void *loop(void *arg)
{
	struct store_server *sv = arg;
	struct epoll_event evs[256];
	for (;;) {
		int n = epoll_wait(sv->efd, evs, 256, 1000);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == sv->evfd)
				return NULL;
			if (fd == sv->lfd) {
				on_accept(sv);
				continue;
			}
			struct conn *c = fd < sv->nconns_cap ? sv->conns[fd] : NULL;
			if (!c)
				continue;
			if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
				if (on_readable(sv, c) < 0) {
					conn_close(sv, c);
					continue;
				}
			}
			if (evs[i].events & EPOLLOUT) {
				if (flush(c) < 0)
					conn_close(sv, c);
				else
					want_write(sv, c);
			}
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
	pthread_mutex_destroy(&sv->mu);
	pthread_cond_destroy(&sv->cv);
	free(sv->conns);
	free(sv->joined);
	free(sv->left);
	free(sv->dead);
	free(sv);
}

unsigned ddpenv_store_server_refused(struct store_server *sv)
{
	return sv ? sv->refused : 0;
}
