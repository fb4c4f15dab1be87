/* Rendezvous store client: one blocking TCP connection per rank, every
 * wait bounded by poll(), connection retried with jittered back-off. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


#include "ddpenv_store.h"
#include "store_auth.h"
#include "store_proto.h"
#include "store_server.h"

struct ddpenv_store {
	int fd;
	int rank, world;
	int timeout_ms;
	int broken;           /* a timed-out or failed exchange: the stream is lost */
	int closed;           /* the store closed the connection (or reset it) */
	char lost[200];       /* that exchange and why, for the requests after it */
	char where[300];      /* "10.1.0.11:29512" for messages */
	struct store_server *server;
};

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static const char *secs(int ms, char *buf, size_t len)
{
	if (ms % 1000)
		snprintf(buf, len, "%.1f s", ms / 1000.0);
	else
		snprintf(buf, len, "%d s", ms / 1000);
	return buf;
}

/* One non-blocking connect attempt to ai, bounded by ms. */
static int try_connect(const struct addrinfo *ai, int ms, int *err_out)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			ai->ai_protocol);
	if (fd < 0) {
		*err_out = errno;
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			*err_out = errno;
			close(fd);
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int r = poll(&p, 1, ms);
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (r <= 0) {
			*err_out = r == 0 ? ETIMEDOUT : errno;
			close(fd);
			return -1;
		}
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			*err_out = soerr;
			close(fd);
			return -1;
		}
	}
	int flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void fail(struct ddpenv_store *s, char *err, size_t errlen, const char *what,
		 const char *detail)
{
	if (!s->broken)
		snprintf(s->lost, sizeof(s->lost), "%s: %s", what, detail);
	s->broken = 1;
	snprintf(err, errlen, "rank %d: store at %s: %s: %s", s->rank, s->where, what, detail);
}

static int send_all(struct ddpenv_store *s, const uint8_t *p, size_t n, int64_t deadline,
		    char *err, size_t errlen)
{
	while (n) {
		int left = (int)(deadline - now_ms());
		struct pollfd pf = { .fd = s->fd, .events = POLLOUT };
		/* at the deadline still a look (poll for 0 ms): room already
		 * there is taken */
		if (poll(&pf, 1, left > 0 ? left : 0) == 0) {
			fail(s, err, errlen, "sending", "timed out");
			return -1;
		}
		ssize_t w = send(s->fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			s->closed = errno == EPIPE || errno == ECONNRESET;
			fail(s, err, errlen, "sending", strerror(errno));
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* n bytes by the deadline (wait_ms from the request: for the message). */
static int recv_all(struct ddpenv_store *s, uint8_t *p, size_t n, int64_t deadline, int wait_ms,
		    const char *what, char *err, size_t errlen)
{
	while (n) {
		int left = (int)(deadline - now_ms());
		struct pollfd pf = { .fd = s->fd, .events = POLLIN };
		/* past the deadline still a look: bytes that came in time are
		 * read even where this thread ran late (a loaded node) */
		int r = poll(&pf, 1, left > 0 ? left : 0);
		if (r == 0) {
			char b[32], m[DDPENV_STORE_MAX_KEY + 64];
			snprintf(m, sizeof(m), "timed out after %s", secs(wait_ms, b, sizeof(b)));
			fail(s, err, errlen, what, m);
			return -1;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fail(s, err, errlen, what, strerror(errno));
			return -1;
		}
		ssize_t got = recv(s->fd, p, n, 0);
		if (got == 0) {
			s->closed = 1;
			fail(s, err, errlen, what, "connection closed by the store (rank 0 exited?)");
			return -1;
		}
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			s->closed = errno == ECONNRESET;
			fail(s, err, errlen, what, strerror(errno));
			return -1;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

static uint8_t *build(int op, size_t *outlen, const char *fmt, ...);
static int read_frame(struct ddpenv_store *s, int64_t deadline, int wait_ms, const char *what,
		      uint8_t **rep, size_t *replen, char *err, size_t errlen);

/* A GET of key that waited wait_ms for nothing: take it back (UNWAIT), so
 * the connection stays in step for what the rank does next (publish its
 * failure, ask who died).  The server answers in order: the GET's VALUE
 * first where the key came meanwhile (returned, 0), then UNWAIT's OK.
 * Timed out: -1 with err set, the connection usable; any other failure
 * loses it, as before. */
static int unwait(struct ddpenv_store *s, const char *key, int wait_ms, const char *what,
		  uint8_t **rep, size_t *replen, char *err, size_t errlen)
{
	size_t reqlen;
	uint8_t *req = build(OP_UNWAIT, &reqlen, "s", (const void *)key, strlen(key)), *first = NULL, *ok;
	/* the store's own bound, as for any answer: a server on a loaded node
	 * (a 64-rank gloo set-up on 2 cores) took more than the 2 s this
	 * once had, and a late answer loses the rank's connection */
	int64_t deadline = now_ms() + s->timeout_ms;
	size_t firstlen, oklen;
	char b[32], m[64];

	if (!req) {
		fail(s, err, errlen, what, "out of memory");
		return -1;
	}
	int rv = send_all(s, req, reqlen, deadline, err, errlen);
	free(req);
	if (rv < 0 || read_frame(s, deadline, s->timeout_ms, what, &first, &firstlen, err, errlen) < 0)
		return -1;
	if (first[0] == REP_VALUE) {
		if (read_frame(s, deadline, s->timeout_ms, what, &ok, &oklen, err, errlen) < 0) {
			free(first);
			return -1;
		}
		rv = ok[0];
		free(ok);
		if (rv != REP_OK) {
			free(first);
			fail(s, err, errlen, what, "unexpected reply");
			return -1;
		}
		*rep = first;
		*replen = firstlen;
		return 0;
	}
	rv = first[0];
	free(first);
	if (rv != REP_OK) {
		fail(s, err, errlen, what, "unexpected reply");
		return -1;
	}
	snprintf(m, sizeof(m), "timed out after %s", secs(wait_ms, b, sizeof(b)));
	snprintf(err, errlen, "rank %d: store at %s: %s: %s", s->rank, s->where, what, m);
	return -1;
}

/* Send a request frame and read its reply (malloc'd into *rep, *replen).
 * An REP_ERR reply becomes an error carrying the server's message.  A GET
 * (cancel_key: its key) that times out before any of its reply came is
 * taken back (unwait), the connection kept. */
static int exchange(struct ddpenv_store *s, const uint8_t *req, size_t reqlen,
		    int timeout_ms, const char *what, const char *cancel_key, uint8_t **rep,
		    size_t *replen, char *err, size_t errlen)
{
	if (s->broken) {
		snprintf(err, errlen, "rank %d: store at %s: %s: the connection was lost earlier (%s)",
			 s->rank, s->where, what, s->lost);
		return -1;
	}
	int wait_ms = timeout_ms < 0 ? s->timeout_ms : timeout_ms;
	int64_t deadline = now_ms() + wait_ms;
	/* a request goes out within the store's own bound, whatever the wait
	 * for its answer (0: a look at a key) */
	if (send_all(s, req, reqlen, now_ms() + (wait_ms > s->timeout_ms ? wait_ms : s->timeout_ms), err,
		     errlen) < 0)
		return -1;
	if (cancel_key) {
		struct pollfd pf = { .fd = s->fd, .events = POLLIN };
		int left, r;
		do {
			left = (int)(deadline - now_ms());
			r = left > 0 ? poll(&pf, 1, left) : 0;
		} while (r < 0 && errno == EINTR);
		if (r == 0)
			return unwait(s, cancel_key, wait_ms, what, rep, replen, err, errlen);
		/* its answer is coming: the wait was for the key, and the frame
		 * has the store's own bound, as any answer (one that began at
		 * the wait's last moment, or whose thread woke after it, must
		 * not lose the connection) */
		wait_ms = s->timeout_ms;
		deadline = now_ms() + wait_ms;
	}
	return read_frame(s, deadline, wait_ms, what, rep, replen, err, errlen);
}

/* One reply frame by the deadline (malloc'd into *rep, *replen); REP_ERR
 * becomes an error carrying the server's message. */
static int read_frame(struct ddpenv_store *s, int64_t deadline, int wait_ms, const char *what,
		      uint8_t **rep, size_t *replen, char *err, size_t errlen)
{
	uint8_t hdr[4];
	if (recv_all(s, hdr, 4, deadline, wait_ms, what, err, errlen) < 0)
		return -1;
	uint32_t n = proto_get_u32(hdr);
	if (n == 0 || n > STORE_MAX_FRAME) {
		fail(s, err, errlen, what, "malformed reply");
		return -1;
	}
	uint8_t *buf = malloc(n);
	if (!buf) {
		fail(s, err, errlen, what, "out of memory");
		return -1;
	}
	if (recv_all(s, buf, n, deadline, wait_ms, what, err, errlen) < 0) {
		free(buf);
		return -1;
	}
	if (buf[0] == REP_ERR) {
		struct rd r = { buf + 1, n - 1, 1 };
		size_t ml;
		const uint8_t *m = proto_rd_str(&r, &ml);
		char msg[256];
		snprintf(msg, sizeof(msg), "%.*s", r.ok ? (int)ml : 0, r.ok ? (const char *)m : "");
		fail(s, err, errlen, what, msg);
		free(buf);
		return -1;
	}
	*rep = buf;
	*replen = n;
	return 0;
}

/* Build a request: op, then fields described by fmt ('s' str+len, 'u' u32,
 * 'q' i64).  Returns a malloc'd frame. */
static uint8_t *build(int op, size_t *outlen, const char *fmt, ...)
{
	va_list ap;
	size_t n = 1;
	*outlen = 0; /* (NULL: simple() says out of memory) */
	va_start(ap, fmt);
	for (const char *f = fmt; *f; f++) {
		if (*f == 's') {
			(void)va_arg(ap, const void *);
			n += 4 + va_arg(ap, size_t);
		} else if (*f == 'u') {
			(void)va_arg(ap, unsigned);
			n += 4;
		} else {
			(void)va_arg(ap, int64_t);
			n += 8;
		}
	}
	va_end(ap);
	uint8_t *buf = malloc(4 + n), *p;
	if (!buf)
		return NULL;
	proto_put_u32(buf, (uint32_t)n);
	buf[4] = (uint8_t)op;
	p = buf + 5;
	va_start(ap, fmt);
	for (const char *f = fmt; *f; f++) {
		if (*f == 's') {
			const void *d = va_arg(ap, const void *);
			size_t l = va_arg(ap, size_t);
			proto_put_u32(p, (uint32_t)l);
			if (l)
				memcpy(p + 4, d, l);
			p += 4 + l;
		} else if (*f == 'u') {
			proto_put_u32(p, va_arg(ap, unsigned));
			p += 4;
		} else {
			proto_put_i64(p, va_arg(ap, int64_t));
			p += 8;
		}
	}
	va_end(ap);
	*outlen = 4 + n;
	return buf;
}

static int check_key(const struct ddpenv_store *s, const char *key, char *err, size_t errlen)
{
	size_t n = key ? strlen(key) : 0;
	if (n == 0 || n > DDPENV_STORE_MAX_KEY) {
		snprintf(err, errlen, "rank %d: store key of %zu bytes (expected 1 to %d)",
			 s->rank, n, DDPENV_STORE_MAX_KEY);
		return -1;
	}
	return 0;
}

static int simple(struct ddpenv_store *s, uint8_t *req, size_t reqlen, int timeout_ms,
		  const char *what, const char *cancel_key, int want, uint8_t **rep, size_t *replen,
		  char *err, size_t errlen)
{
	if (!req) {
		snprintf(err, errlen, "rank %d: store: out of memory", s->rank);
		return -1;
	}
	int rv = exchange(s, req, reqlen, timeout_ms, what, cancel_key, rep, replen, err, errlen);
	free(req);
	if (rv < 0)
		return -1;
	if ((*rep)[0] != want) {
		free(*rep);
		fail(s, err, errlen, what, "unexpected reply");
		return -1;
	}
	return 0;
}

/* The handshake's answer to JOIN: the server's nonce, once its proof
 * (where this rank has a token) shows that it holds the token.  0, or -1
 * with err set. */
static int check_challenge(struct ddpenv_store *s, const char *token, const uint8_t *rep, size_t replen,
			   const uint8_t cn[STORE_NONCE_LEN], uint8_t sn[STORE_NONCE_LEN], char *err,
			   size_t errlen)
{
	struct rd r = { rep + 1, replen - 1, 1 };
	uint32_t proto = proto_rd_u32(&r);
	size_t nl, pl;
	const uint8_t *n = proto_rd_str(&r, &nl), *proof = proto_rd_str(&r, &pl);

	if (rep[0] != REP_CHALLENGE || !r.ok || proto != STORE_PROTO || nl != STORE_NONCE_LEN) {
		char m[160];
		if (rep[0] == REP_CHALLENGE && r.ok && proto != STORE_PROTO)
			snprintf(m, sizeof(m), "it speaks store protocol %u, this rank %d: every rank must run the "
				 "same slurm-ddp", proto, STORE_PROTO);
		else
			snprintf(m, sizeof(m), "not a slurm-ddp store's answer to JOIN (op %u): another program on "
				 "MASTER_PORT?", rep[0]);
		fail(s, err, errlen, "joining", m);
		return -1;
	}
	memcpy(sn, n, STORE_NONCE_LEN);
	if (*token && !store_proof_ok(token, STORE_SERVER, cn, sn, (uint32_t)s->rank, (uint32_t)s->world,
				      proof, pl)) {
		fail(s, err, errlen, "joining",
		     "the server there could not prove that it holds this rank's rendezvous token "
		     "(DDP_RDZV_TOKEN): it is not this step's store (another program on MASTER_PORT?), or "
		     "this rank's token is not the step's; this rank stopped there and sent it nothing more");
		return -1;
	}
	return 0;
}

/* Join the store on the connected s->fd: JOIN, its CHALLENGE checked,
 * PROOF, OK.  0 joined; 1 the store closed the connection before it
 * answered (it made room for newer ones, or rank 0 is starting): connect
 * again; -1 with err set (refused, or a server that cannot prove that it
 * holds the token). */
static int join(struct ddpenv_store *s, const char *token, int64_t deadline, char *err, size_t errlen)
{
	uint8_t cn[STORE_NONCE_LEN], sn[STORE_NONCE_LEN], proof[STORE_PROOF_LEN], *req, *rep = NULL;
	size_t reqlen, replen;
	int wait_ms = (int)(deadline - now_ms()), rv = -1;

	if (store_nonce(cn) < 0) {
		snprintf(err, errlen, "rank %d: no random nonce for the store's handshake (getrandom: %s)", s->rank,
			 strerror(errno));
		return -1;
	}
	req = build(OP_JOIN, &reqlen, "uuus", (unsigned)STORE_PROTO, (unsigned)s->rank, (unsigned)s->world,
		    (const void *)cn, (size_t)STORE_NONCE_LEN);
	if (!req) {
		snprintf(err, errlen, "rank %d: store: out of memory", s->rank);
		return -1;
	}
	rv = send_all(s, req, reqlen, deadline, err, errlen);
	free(req);
	if (rv < 0 || read_frame(s, deadline, wait_ms > 0 ? wait_ms : 1, "joining", &rep, &replen, err, errlen) < 0) {
		if (s->closed && !rep)
			return 1;
		if (strstr(err, STORE_PROTO1_ERR)) {
			fail(s, err, errlen, "joining", "it speaks store protocol 1 (it answered \"" STORE_PROTO1_ERR
			     "\"): rank 0 runs an older slurm-ddp; every rank must run the same");
			s->closed = 0;
		}
		return -1;
	}
	rv = check_challenge(s, token, rep, replen, cn, sn, err, errlen);
	free(rep);
	if (rv < 0)
		return -1;
	if (*token && store_proof(token, STORE_CLIENT, cn, sn, (uint32_t)s->rank, (uint32_t)s->world, proof) < 0) {
		fail(s, err, errlen, "joining", "HMAC failed (nettle)");
		return -1;
	}
	req = build(OP_PROOF, &reqlen, "s", (const void *)proof, *token ? (size_t)STORE_PROOF_LEN : (size_t)0);
	explicit_bzero(proof, sizeof(proof));
	if (simple(s, req, reqlen, -1, "joining", NULL, REP_OK, &rep, &replen, err, errlen) < 0)
		return s->closed ? 1 : -1;
	free(rep);
	return 0;
}

int ddpenv_store_open(struct ddpenv_store **out, const struct ddpenv_store_opts *o,
		      char *err, size_t errlen)
{
	struct ddpenv_store *s;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *res = NULL;
	char port[16], b[32];
	int rv = -1, last = ECONNREFUSED;

	*out = NULL;
	if (!o || !o->host || !*o->host || o->port <= 0 || o->port > 65535 ||
	    o->world <= 0 || o->rank < 0 || o->rank >= o->world) {
		snprintf(err, errlen, "store: need MASTER_ADDR, a MASTER_PORT in 1..65535 and "
			 "0 <= RANK < WORLD_SIZE (got %s:%d, rank %d of %d)",
			 o && o->host ? o->host : "(none)", o ? o->port : 0,
			 o ? o->rank : -1, o ? o->world : 0);
		return -1;
	}
	if (!(s = calloc(1, sizeof(*s)))) {
		snprintf(err, errlen, "store: out of memory");
		return -1;
	}
	s->fd = -1;
	s->rank = o->rank;
	s->world = o->world;
	s->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
	snprintf(s->where, sizeof(s->where), strchr(o->host, ':') ? "[%s]:%d" : "%s:%d",
		 o->host, o->port);
	snprintf(port, sizeof(port), "%d", o->port);

	if (o->rank == 0) {
		s->server = ddpenv_store_server_start(o->port, o->world, o->token, o->log,
						      o->log_ctx, err, errlen);
		if (!s->server)
			goto out;
	}
	int r = getaddrinfo(o->host, port, &hints, &res);
	if (r != 0) {
		snprintf(err, errlen, "rank %d: MASTER_ADDR '%s' does not resolve: %s",
			 o->rank, o->host, gai_strerror(r));
		goto out;
	}
	/* Connect and join, retrying with jittered exponential back-off: rank
	 * 0 may still be starting, or have closed an unproven connection to
	 * make room for newer ones, and thousands of ranks must not retry in
	 * step. */
	unsigned seed = (unsigned)(o->rank * 2654435761u) ^ (unsigned)getpid();
	int64_t deadline = now_ms() + s->timeout_ms;
	const char *tok = o->token ? o->token : "";
	if (store_crypto(tok, err, errlen) < 0)
		goto out;
	for (int attempt = 0;; attempt++) {
		for (struct addrinfo *ai = res; ai && s->fd < 0; ai = ai->ai_next) {
			int left = (int)(deadline - now_ms());
			s->fd = try_connect(ai, left < 2000 ? (left > 0 ? left : 1) : 2000, &last);
		}
		if (s->fd >= 0) {
			int j = join(s, tok, deadline, err, errlen);
			if (j == 0)
				break;
			if (j < 0)
				goto out;
			close(s->fd);
			s->fd = -1;
			s->broken = s->closed = 0;
			last = ECONNRESET;
		}
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			snprintf(err, errlen, "rank %d could not reach %s after %s: %s",
				 o->rank, s->where, secs(s->timeout_ms, b, sizeof(b)), strerror(last));
			goto out;
		}
		int cap = attempt < 7 ? 10 << attempt : 1000;
		int64_t d = cap / 2 + rand_r(&seed) % (cap / 2 + 1);
		if (d > left)
			d = left;
		struct timespec ts = { d / 1000, (d % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	rv = 0;
out:
	if (res)
		freeaddrinfo(res);
	if (rv < 0) {
		if (s->fd >= 0)
			close(s->fd);
		ddpenv_store_server_stop(s->server, 0);
		free(s);
		return -1;
	}
	*out = s;
	return 0;
}

void ddpenv_store_close(struct ddpenv_store *s)
{
	if (s)
		ddpenv_store_close_within(s, s->timeout_ms);
}

void ddpenv_store_close_within(struct ddpenv_store *s, int wait_ms)
{
	if (!s)
		return;
	if (s->fd >= 0 && !s->broken) {
		char err[DDPENV_STORE_MAX_KEY];
		size_t reqlen, replen;
		uint8_t *rep;
		uint8_t *req = build(OP_BYE, &reqlen, "");
		if (simple(s, req, reqlen, 5000, "leaving", NULL, REP_OK, &rep, &replen, err, sizeof(err)) == 0)
			free(rep);
	}
	if (s->fd >= 0)
		close(s->fd);
	ddpenv_store_server_stop(s->server, wait_ms);
	free(s);
}

int ddpenv_store_set(struct ddpenv_store *s, const char *key, const void *val, size_t len,
		     char *err, size_t errlen)
{
	if (check_key(s, key, err, errlen) < 0)
		return -1;
	if (len > DDPENV_STORE_MAX_VALUE) {
		snprintf(err, errlen, "rank %d: store value for '%s' is %zu bytes (at most %u)",
			 s->rank, key, len, DDPENV_STORE_MAX_VALUE);
		return -1;
	}
	size_t reqlen, replen;
	uint8_t *rep;
	uint8_t *req = build(OP_SET, &reqlen, "ss", (const void *)key, strlen(key),
			     val ? val : "", len);
	char what[DDPENV_STORE_MAX_KEY + 32];
	snprintf(what, sizeof(what), "setting '%s'", key);
	if (simple(s, req, reqlen, -1, what, NULL, REP_OK, &rep, &replen, err, errlen) < 0)
		return -1;
	free(rep);
	return 0;
}

/* How often ddpenv_store_get_unless looks at its abort key. */
#define UNLESS_SLICE_MS 1000

int ddpenv_store_get_unless(struct ddpenv_store *s, const char *key, const char *abort_key,
			    int timeout_ms, void **val, size_t *len, int *aborted, char *err,
			    size_t errlen)
{
	int total = timeout_ms < 0 ? s->timeout_ms : timeout_ms;
	int64_t deadline = now_ms() + total;

	*aborted = 0;
	if (check_key(s, key, err, errlen) < 0 || check_key(s, abort_key, err, errlen) < 0)
		return -1;
	for (;;) {
		int left = (int)(deadline - now_ms());
		int slice = left < UNLESS_SLICE_MS ? (left > 0 ? left : 0) : UNLESS_SLICE_MS;
		if (ddpenv_store_get(s, key, slice, val, len, err, errlen) == 0)
			return 0;
		if (s->broken)
			return -1;
		/* the wait was taken back: has a peer given up meanwhile? */
		if (ddpenv_store_get(s, abort_key, 0, val, len, err, errlen) == 0) {
			*aborted = 1;
			return 0;
		}
		if (s->broken)
			return -1;
		if (left <= slice) {
			char b[32];
			snprintf(err, errlen, "rank %d: store at %s: waiting for '%s': timed out after %s", s->rank,
				 s->where, key, secs(total, b, sizeof(b)));
			return -1;
		}
	}
}

int ddpenv_store_get(struct ddpenv_store *s, const char *key, int timeout_ms,
		     void **val, size_t *len, char *err, size_t errlen)
{
	if (check_key(s, key, err, errlen) < 0)
		return -1;
	size_t reqlen, replen, vl;
	uint8_t *rep;
	uint8_t *req = build(OP_GET, &reqlen, "s", (const void *)key, strlen(key));
	char what[DDPENV_STORE_MAX_KEY + 32];
	snprintf(what, sizeof(what), "waiting for '%s'", key);
	if (simple(s, req, reqlen, timeout_ms, what, key, REP_VALUE, &rep, &replen, err, errlen) < 0)
		return -1;
	struct rd r = { rep + 1, replen - 1, 1 };
	const uint8_t *v = proto_rd_str(&r, &vl);
	void *copy = r.ok ? malloc(vl + 1) : NULL;
	if (!copy) {
		free(rep);
		fail(s, err, errlen, what, r.ok ? "out of memory" : "malformed reply");
		return -1;
	}
	memcpy(copy, v, vl);
	((char *)copy)[vl] = 0;  /* handy for text values */
	free(rep);
	*val = copy;
	*len = vl;
	return 0;
}

int ddpenv_store_add(struct ddpenv_store *s, const char *key, int64_t delta, int64_t *result,
		     char *err, size_t errlen)
{
	if (check_key(s, key, err, errlen) < 0)
		return -1;
	size_t reqlen, replen;
	uint8_t *rep;
	uint8_t *req = build(OP_ADD, &reqlen, "sq", (const void *)key, strlen(key), delta);
	char what[DDPENV_STORE_MAX_KEY + 32];
	snprintf(what, sizeof(what), "adding to '%s'", key);
	if (simple(s, req, reqlen, -1, what, NULL, REP_INT, &rep, &replen, err, errlen) < 0)
		return -1;
	struct rd r = { rep + 1, replen - 1, 1 };
	int64_t v = proto_rd_i64(&r);
	free(rep);
	if (!r.ok) {
		fail(s, err, errlen, what, "malformed reply");
		return -1;
	}
	if (result)
		*result = v;
	return 0;
}

int ddpenv_store_barrier(struct ddpenv_store *s, const char *name, char *err, size_t errlen)
{
	char key[DDPENV_STORE_MAX_KEY + 1], done[DDPENV_STORE_MAX_KEY + 1];
	int64_t n;
	void *v;
	size_t l;
	if (!name || strlen(name) > DDPENV_STORE_MAX_KEY - 16) {
		snprintf(err, errlen, "rank %d: barrier name too long", s->rank);
		return -1;
	}
	snprintf(key, sizeof(key), "barrier/%s", name);
	snprintf(done, sizeof(done), "barrier/%s/done", name);
	if (ddpenv_store_add(s, key, 1, &n, err, errlen) < 0)
		return -1;
	if (n == s->world && ddpenv_store_set(s, done, "1", 1, err, errlen) < 0)
		return -1;
	if (ddpenv_store_get(s, done, -1, &v, &l, err, errlen) < 0)
		return -1;
	free(v);
	return 0;
}

static int rank_list(struct ddpenv_store *s, int op, const char *what, int *ranks, int max, char *err,
		     size_t errlen)
{
	size_t reqlen, replen;
	uint8_t *rep;
	uint8_t *req = build(op, &reqlen, "");
	if (simple(s, req, reqlen, 5000, what, NULL, REP_RANKS, &rep, &replen, err, errlen) < 0)
		return -1;
	struct rd r = { rep + 1, replen - 1, 1 };
	uint32_t n = proto_rd_u32(&r);
	for (uint32_t i = 0; i < n && r.ok; i++) {
		uint32_t k = proto_rd_u32(&r);
		if ((int)i < max)
			ranks[i] = (int)k;
	}
	free(rep);
	if (!r.ok) {
		fail(s, err, errlen, what, "malformed reply");
		return -1;
	}
	return (int)n;
}

int ddpenv_store_dead_ranks(struct ddpenv_store *s, int *ranks, int max, char *err, size_t errlen)
{
	return rank_list(s, OP_DEAD, "asking which ranks died", ranks, max, err, errlen);
}

int ddpenv_store_left_ranks(struct ddpenv_store *s, int *ranks, int max, char *err, size_t errlen)
{
	return rank_list(s, OP_LEFT, "asking which ranks left", ranks, max, err, errlen);
}

int ddpenv_store_local_addr(const struct ddpenv_store *s, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (s->fd < 0 || getsockname(s->fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST) != 0)
		return -1;
	/* an IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d */
	if (strncmp(buf, "::ffff:", 7) == 0 && strchr(buf + 7, '.'))
		memmove(buf, buf + 7, strlen(buf + 7) + 1);
	return 0;
}

int ddpenv_store_set_timeout(struct ddpenv_store *s, int timeout_ms)
{
	int old = s->timeout_ms;
	if (timeout_ms > 0)
		s->timeout_ms = timeout_ms;
	return old;
}

void ddpenv_store_refusals(const struct ddpenv_store *s, struct ddpenv_store_refusals *out)
{
	ddpenv_store_server_refusals(s ? s->server : NULL, out);
}

int ddpenv_store_rank(const struct ddpenv_store *s)
{
	return s->rank;
}

int ddpenv_store_world(const struct ddpenv_store *s)
{
	return s->world;
}
