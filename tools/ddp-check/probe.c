/* The probe mesh: one task per node listens on its node's chosen interface
 * address; every node's prober connects to every other node's listener
 * (in parallel, each attempt bounded), checks that the right node answered,
 * asks it for one packet of the full size (a path that carries a greeting
 * but drops the frames of the interfaces' MTU, a switch or bridge with a
 * smaller MTU, lets a connection open and then stalls every large
 * transfer, which is how gloo and NCCL would hang), and measures its
 * clock against the head node's (Cristian's algorithm: the reply with the
 * shortest round trip, offset +- half of it). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define HELLO "ddp-check "
#define CLOCK_ROUNDS 8
#define BATCH 128

static int64_t realtime_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t mono_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* "10.0.0.1:4000" or "[fe80::1]:4000" into a socket address. */
static int endpoint_parse(const char *ep, struct sockaddr_storage *ss, socklen_t *sl)
{
	char host[80];
	const char *port;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM },
			*ai;

	if (ep[0] == '[') {
		const char *e = strchr(ep, ']');
		if (!e || e[1] != ':' || (size_t)(e - ep - 1) >= sizeof(host))
			return -1;
		memcpy(host, ep + 1, (size_t)(e - ep - 1));
		host[e - ep - 1] = 0;
		port = e + 2;
	} else {
		const char *c = strrchr(ep, ':');
		if (!c || (size_t)(c - ep) >= sizeof(host))
			return -1;
		memcpy(host, ep, (size_t)(c - ep));
		host[c - ep] = 0;
		port = c + 1;
	}
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -1;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sl = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* A connection's full-size reply: one TCP segment of its MSS, the first 4
 * bytes its length (big-endian), the rest zeros, sent whole in one send()
 * and nothing behind it.  With TCP_NODELAY it leaves as one packet of the
 * path's full size, as a switch that drops frames above its MTU sees it; a
 * larger send would go down to the driver as one segmentation-offload
 * batch (which a Linux bridge forwards whatever its MTU), and a segment
 * with others queued behind it could be retransmitted merged with them. */
struct conn {
	size_t owed;     /* bytes of the reply still to send */
	size_t total;    /* its length */
};

static void bulk_start(int fd, struct conn *c)
{
	int mss = 0;
	socklen_t ml = sizeof(mss);

	if (c->owed)
		return; /* one reply at a time */
	if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml) < 0 || mss < 536)
		mss = 536;
	c->total = c->owed = (size_t)mss < CK_PROBE_BULK ? (size_t)mss : CK_PROBE_BULK;
}

/* What the reply still owes, as far as the socket takes it now; -1 when
 * the connection failed. */
static int bulk_send(int fd, struct conn *c, unsigned char *buf)
{
	while (c->owed) {
		for (int j = 0; j < 4; j++)
			buf[j] = (unsigned char)(c->total >> (24 - 8 * j));
		size_t off = c->total - c->owed;
		ssize_t s = send(fd, buf + off, c->owed, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (s < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		c->owed -= (size_t)s;
	}
	return 0;
}

static void *serve(void *arg)
{
	struct ck_listener *l = arg;
	size_t cap = 64, n = 1;
	struct pollfd *p = calloc(cap, sizeof(*p));
	struct conn *cs = calloc(cap, sizeof(*cs));
	unsigned char *buf = calloc(1, CK_PROBE_BULK);
	char hello[CK_HOST + 16];
	int hl = snprintf(hello, sizeof(hello), HELLO "%s\n", l->host);

	if (!p || !cs || !buf || hl < 0 || (size_t)hl >= sizeof(hello)) {
		free(p);
		free(cs);
		free(buf);
		return NULL;
	}
	p[0].fd = l->fd;
	p[0].events = POLLIN;
	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		if (poll(p, n, 100) <= 0)
			continue;
		for (size_t i = n; i-- > 1;) {
			short ev = p[i].revents;
			int drop = 0;
			if (!ev)
				continue;
			if ((ev & POLLOUT) && bulk_send(p[i].fd, &cs[i], buf) < 0)
				drop = 1;
			if (!drop && (ev & (POLLIN | POLLHUP | POLLERR))) {
				char req[64];
				ssize_t r = recv(p[i].fd, req, sizeof(req), MSG_DONTWAIT);
				if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
					drop = 1;
				for (ssize_t k = 0; k < r; k++) {
					if (req[k] == 'B') {
						bulk_start(p[i].fd, &cs[i]);
						continue;
					}
					/* (a clock request behind a reply: not ours) */
					if (req[k] != 'T' || cs[i].owed)
						continue;
					uint64_t t = (uint64_t)realtime_ns();
					unsigned char b[8];
					for (int j = 0; j < 8; j++)
						b[j] = (unsigned char)(t >> (56 - 8 * j));
					if (send(p[i].fd, b, 8, MSG_NOSIGNAL | MSG_DONTWAIT) != 8)
						break;
				}
				if (!drop && cs[i].owed && bulk_send(p[i].fd, &cs[i], buf) < 0)
					drop = 1;
			}
			if (drop) {
				close(p[i].fd);
				p[i] = p[--n];
				cs[i] = cs[n];
				continue;
			}
			p[i].events = (short)(POLLIN | (cs[i].owed ? POLLOUT : 0));
		}
		if (p[0].revents & POLLIN) {
			int c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (c < 0)
				continue;
			int one = 1, sndbuf = 4 * CK_PROBE_BULK;
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			/* room for a full-size reply in one send (IPoIB's 65520) */
			setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
			if (send(c, hello, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT) != hl) {
				close(c);
				continue;
			}
			if (n == cap) {
				struct pollfd *np = realloc(p, 2 * cap * sizeof(*p));
				struct conn *nc = np ? realloc(cs, 2 * cap * sizeof(*cs)) : NULL;
				if (np)
					p = np;
				if (!nc) {
					close(c);
					continue;
				}
				cs = nc;
				cap *= 2;
			}
			p[n].fd = c;
			p[n].events = POLLIN;
			p[n].revents = 0;
			cs[n].owed = cs[n].total = 0;
			n++;
		}
	}
	for (size_t i = 1; i < n; i++)
		close(p[i].fd);
	free(p);
	free(cs);
	free(buf);
	return NULL;
}

int ck_listen_start(struct ck_listener *l, const char *addr, const char *host, char *err,
		    size_t errlen)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM },
			*ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	memset(&ss, 0, sizeof(ss));
	memset(l, 0, sizeof(*l));
	l->fd = -1;
	snprintf(l->host, sizeof(l->host), "%s", host);
	if (getaddrinfo(addr, "0", &hints, &ai) != 0) {
		snprintf(err, errlen, "probe listener: '%s' is not a numeric address", addr);
		return -1;
	}
	l->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0 || bind(l->fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l->fd, 1024) < 0 ||
	    getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0) {
		snprintf(err, errlen, "probe listener on %s: %s", addr, strerror(errno));
		freeaddrinfo(ai);
		if (l->fd >= 0)
			close(l->fd);
		l->fd = -1;
		return -1;
	}
	freeaddrinfo(ai);
	int port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
					     ntohs(((struct sockaddr_in *)&ss)->sin_port);
	snprintf(l->endpoint, sizeof(l->endpoint), ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d",
		 addr, port);
	fcntl(l->fd, F_SETFL, fcntl(l->fd, F_GETFL) | O_NONBLOCK);
	if (pthread_create(&l->th, NULL, serve, l) != 0) {
		snprintf(err, errlen, "probe listener: cannot start its thread");
		close(l->fd);
		l->fd = -1;
		return -1;
	}
	l->running = 1;
	return 0;
}

void ck_listen_stop(struct ck_listener *l)
{
	if (!l->running)
		return;
	__atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
	pthread_join(l->th, NULL);
	close(l->fd);
	l->running = 0;
}

static void conn_err(struct ck_peer *q, int e, int ms)
{
	if (e == ETIMEDOUT)
		snprintf(q->err, sizeof(q->err), "no answer within %d ms (packets dropped: a firewall, a "
			 "down link or no route back)", ms);
	else if (e == ECONNREFUSED)
		snprintf(q->err, sizeof(q->err), "connection refused (a firewall rejecting the port?)");
	else if (e == EINVAL || e == ENETUNREACH || e == EHOSTUNREACH)
		snprintf(q->err, sizeof(q->err), "no route to it from here (%s)", strerror(e));
	else
		snprintf(q->err, sizeof(q->err), "%s", strerror(e));
}

/* Clock against the head node's listener on an open connection. */
static void measure_clock(int fd, struct ck_probe *out, int ms)
{
	double best_rtt = -1, best_off = 0;

	for (int k = 0; k < CLOCK_ROUNDS; k++) {
		unsigned char b[8];
		size_t got = 0;
		int64_t t0 = realtime_ns();
		if (send(fd, "T", 1, MSG_NOSIGNAL) != 1)
			return;
		while (got < 8) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, ms) <= 0)
				return;
			ssize_t r = recv(fd, b + got, 8 - got, MSG_DONTWAIT);
			if (r <= 0 && !(r < 0 && errno == EAGAIN))
				return;
			if (r > 0)
				got += (size_t)r;
		}
		int64_t t1 = realtime_ns();
		uint64_t ts = 0;
		for (int j = 0; j < 8; j++)
			ts = ts << 8 | b[j];
		double rtt = (double)(t1 - t0);
		if (best_rtt < 0 || rtt < best_rtt) {
			best_rtt = rtt;
			/* our clock minus the head's at the moment it answered */
			best_off = (double)t0 + rtt / 2 - (double)(int64_t)ts;
		}
	}
	out->have_clock = 1;
	out->clock_off_us = best_off / 1000;
	out->clock_unc_us = best_rtt / 2000;
}

/* One probe connection of a batch, and where it stands. */
struct probe_conn {
	int fd;
	enum { CONNECTING, READING_HELLO, READING_BULK, DONE } state;
	char hello[CK_HOST + 16];
	size_t hlen, got, want;          /* of the greeting; of the full-size reply */
	unsigned char len4[4];
	int64_t t_start;
};

/* A non-blocking connect to t's listener; q->err said where it fails. */
static void conn_start(struct probe_conn *c, const struct ck_target *t, struct ck_peer *q, int ms)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	snprintf(q->node, sizeof(q->node), "%s", t->node);
	snprintf(q->addr, sizeof(q->addr), "%s", t->addr);
	c->fd = -1;
	c->state = DONE;
	c->hlen = c->got = c->want = 0;
	c->t_start = mono_us();
	if (endpoint_parse(t->addr, &ss, &sl) < 0) {
		snprintf(q->err, sizeof(q->err), "'%s' is not an address:port", t->addr);
		return;
	}
	c->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		conn_err(q, errno, ms);
		return;
	}
	if (connect(c->fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		conn_err(q, errno, ms);
		close(c->fd);
		c->fd = -1;
		return;
	}
	c->state = CONNECTING;
}

static void on_connected(struct probe_conn *c, struct ck_peer *q, int ms)
{
	int e = 0;
	socklen_t el = sizeof(e);
	getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el);
	if (e) {
		conn_err(q, e, ms);
		c->state = DONE;
	} else {
		c->state = READING_HELLO;
	}
}

/* The full-size reply: its 4-byte length, then as many bytes. */
static void on_bulk(struct probe_conn *c, struct ck_peer *q)
{
	unsigned char sink[16384];
	ssize_t r = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		snprintf(q->err, sizeof(q->err), "it closed the connection after %zu bytes of its full-size "
			 "reply", c->got);
		c->state = DONE;
		return;
	}
	for (ssize_t j = 0; j < r && c->got + (size_t)j < 4; j++)
		c->len4[c->got + (size_t)j] = sink[j];
	c->got += (size_t)r;
	if (!c->want && c->got >= 4) {
		c->want = (size_t)c->len4[0] << 24 | (size_t)c->len4[1] << 16 | (size_t)c->len4[2] << 8 | c->len4[3];
		if (c->want < 5 || c->want > CK_PROBE_BULK) {
			snprintf(q->err, sizeof(q->err), "its reply says %zu bytes: expected 5 to %d (not "
				 "ddp-check there?)", c->want, CK_PROBE_BULK);
			c->state = DONE;
			return;
		}
	}
	if (c->want && c->got >= c->want) {
		q->ok = 1;
		c->state = DONE;
	}
}

/* The listener's greeting line: the node it says it is, then "B" asks
 * for the full-size reply. */
static void on_hello(struct probe_conn *c, const struct ck_target *t, struct ck_peer *q)
{
	ssize_t r = recv(c->fd, c->hello + c->hlen, sizeof(c->hello) - 1 - c->hlen, MSG_DONTWAIT);
	if (r <= 0) {
		if (r < 0 && errno == EAGAIN)
			return;
		snprintf(q->err, sizeof(q->err), "it closed the connection without a greeting (not ddp-check "
			 "listening there?)");
		c->state = DONE;
		return;
	}
	c->hlen += (size_t)r;
	c->hello[c->hlen] = 0;
	char *nl = strchr(c->hello, '\n');
	if (!nl && c->hlen < sizeof(c->hello) - 1)
		return;
	c->state = DONE;
	if (nl)
		*nl = 0;
	if (strncmp(c->hello, HELLO, strlen(HELLO)) != 0) {
		snprintf(q->err, sizeof(q->err), "something else answered there (not ddp-check)");
	} else if (strcmp(c->hello + strlen(HELLO), t->node) != 0) {
		snprintf(q->err, sizeof(q->err), "%.64s answered instead (two nodes with one address?)",
			 c->hello + strlen(HELLO));
	} else if (send(c->fd, "B", 1, MSG_NOSIGNAL) != 1) {
		snprintf(q->err, sizeof(q->err), "greeted, then the connection failed: %s", strerror(errno));
	} else {
		/* reached: now the full-size packets */
		q->rtt_us = (double)(mono_us() - c->t_start);
		c->state = READING_BULK;
	}
}

/* A connection the deadline caught: what its state says of the path. */
static void conn_timed_out(const struct probe_conn *c, struct ck_peer *q, int ms)
{
	if (c->state == CONNECTING) {
		conn_err(q, ETIMEDOUT, ms);
	} else if (c->state == READING_HELLO) { /* TCP got through: the network is not at fault */
		snprintf(q->err, sizeof(q->err), "connected, but no greeting within %d ms (another program "
			 "holds that port, or ddp-check there is stalled)", ms);
	} else if (c->state == READING_BULK) { /* small packets pass, full-size ones do not */
		int mss = 0;
		socklen_t ml = sizeof(mss);
		getsockopt(c->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
		q->bulk_short = 1;
		snprintf(q->err, sizeof(q->err), "greeted, but its reply in one full-size packet (%d bytes "
			 "of TCP payload) did not come within %d ms: packets of the interfaces' MTU are lost "
			 "on the way (a link, switch or bridge between with a smaller MTU)", mss, ms);
	}
}

static void probe_batch(const struct ck_target *t, size_t n, int ms, struct ck_probe *out,
			struct ck_peer *peers)
{
	struct probe_conn c[BATCH];

	for (size_t i = 0; i < n; i++)
		conn_start(&c[i], &t[i], &peers[i], ms);
	int64_t deadline = mono_us() + (int64_t)ms * 1000;
	for (int last = 0;;) {
		struct pollfd p[BATCH];
		size_t idx[BATCH], np = 0;
		for (size_t i = 0; i < n; i++)
			if (c[i].state != DONE) {
				p[np].fd = c[i].fd;
				p[np].events = c[i].state == CONNECTING ? POLLOUT : POLLIN;
				p[np].revents = 0;
				idx[np++] = i;
			}
		int64_t left = deadline - mono_us();
		if (!np || last)
			break;
		/* at the deadline one more look (poll for 0 ms): what came in
		 * time is read even where this thread ran late (a loaded node),
		 * not taken for a lost answer */
		last = left <= 0;
		if (poll(p, np, last ? 0 : (int)((left + 999) / 1000)) <= 0)
			continue;
		for (size_t k = 0; k < np; k++) {
			size_t i = idx[k];
			if (!p[k].revents)
				continue;
			if (c[i].state == CONNECTING)
				on_connected(&c[i], &peers[i], ms);
			else if (c[i].state == READING_BULK)
				on_bulk(&c[i], &peers[i]);
			else
				on_hello(&c[i], &t[i], &peers[i]);
		}
	}
	for (size_t i = 0; i < n; i++) {
		conn_timed_out(&c[i], &peers[i], ms);
		if (peers[i].ok && t[i].head && c[i].fd >= 0)
			measure_clock(c[i].fd, out, ms);
		if (c[i].fd >= 0)
			close(c[i].fd);
	}
}

int ck_probe_run(const struct ck_target *t, size_t n, int ms, struct ck_probe *out)
{
	memset(out, 0, sizeof(*out));
	out->have = 1;
	if (!n)
		return 0;
	out->peers = calloc(n, sizeof(*out->peers));
	if (!out->peers)
		return -1;
	out->npeers = n;
	for (size_t i = 0; i < n; i += BATCH)
		probe_batch(t + i, n - i < BATCH ? n - i : BATCH, ms, out, out->peers + i);
	return 0;
}
