/* hostile_peer: what anyone who reaches a step's MASTER_PORT can do to
 * the libddpenv rendezvous store without the step's token, for the tests
 * that run it against a live job (tests/bats/security.bats).
 *
 *   hostile_peer attack HOST PORT SECONDS [CONNS]
 *       for SECONDS, at once: CONNS (10,000) idle connections kept open
 *       (a new one for each the store closes), slow handshakes (a byte a
 *       second), huge length prefixes, JOIN then pipelined GETs never
 *       read, and wrong-token handshakes; then one line of counts.  Until
 *       the store listens, it keeps trying.
 *   hostile_peer server PORT SECONDS FILE
 *       a fake store on PORT (taken before rank 0): answers each JOIN with
 *       a challenge and a proof it cannot have made, and writes all it
 *       received to FILE (the test looks there for the token).
 *
 * It speaks the wire format by hand (libddpenv/src/store_proto.h), as a
 * hostile program would; it never links libddpenv. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct addrinfo *target;
static volatile int stop;
static int conns_wanted = 10000;

struct counts {
	unsigned long made, closed, refused_replies;
};
static struct counts c_idle, c_slow, c_huge, c_pipe, c_token;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int dial(void)
{
	int fd = socket(target->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, target->ai_addr, target->ai_addrlen) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* JOIN of protocol 2 as rank of world, a nonce of noise: 53 bytes. */
static size_t join_frame(uint8_t *f, uint32_t rank, uint32_t world)
{
	put32(f, 49);
	f[4] = 9;
	put32(f + 5, 2);
	put32(f + 9, rank);
	put32(f + 13, world);
	put32(f + 17, 32);
	for (int i = 0; i < 32; i++)
		f[21 + i] = (uint8_t)rand();
	return 53;
}

/* Whether the store closed fd (EOF or reset), looking without waiting. */
static int gone(int fd)
{
	uint8_t b[256];
	ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* CONNS idle connections: a new one for each the store closes. */
static void *idle_main(void *arg)
{
	int *fds = calloc((size_t)conns_wanted, sizeof(int)), n = 0;
	(void)arg;
	while (!stop && fds) {
		if (n < conns_wanted) {
			int fd = dial();
			if (fd >= 0) {
				fds[n++] = fd;
				c_idle.made++;
			} else {
				usleep(1000);
			}
			continue;
		}
		for (int i = 0; i < n && !stop; i++)
			if (gone(fds[i])) {
				close(fds[i]);
				c_idle.closed++;
				fds[i] = dial();
				if (fds[i] < 0) {
					fds[i] = fds[--n];
					i--;
				} else {
					c_idle.made++;
				}
			}
		usleep(10000);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	return NULL;
}

/* 64 slow handshakes: a byte of JOIN a second each. */
static void *slow_main(void *arg)
{
	enum { N = 64 };
	int fds[N];
	size_t sent[N];
	uint8_t join[64];
	(void)arg;
	join_frame(join, 1, 4);
	for (int i = 0; i < N; i++) {
		fds[i] = dial();
		sent[i] = 0;
		c_slow.made += fds[i] >= 0;
	}
	while (!stop) {
		for (int i = 0; i < N; i++) {
			if (fds[i] >= 0 && (gone(fds[i]) || sent[i] == 53)) {
				c_slow.closed += sent[i] < 53;
				close(fds[i]);
				fds[i] = -1;
			}
			if (fds[i] < 0) {
				fds[i] = dial();
				sent[i] = 0;
				c_slow.made += fds[i] >= 0;
				continue;
			}
			if (send(fds[i], join + sent[i], 1, MSG_NOSIGNAL) == 1)
				sent[i]++;
		}
		sleep(1);
	}
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return NULL;
}

/* A length prefix of 4 GiB less 16, then 64 KiB of noise. */
static void *huge_main(void *arg)
{
	static uint8_t junk[65536];
	(void)arg;
	memset(junk, 0x41, sizeof(junk));
	put32(junk, 0xfffffff0u);
	while (!stop) {
		int fd = dial();
		if (fd < 0) {
			usleep(10000);
			continue;
		}
		c_huge.made++;
		struct timeval tv = { 2, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		uint8_t b[256];
		ssize_t r;
		/* (the store may close before all is sent: its answer is read
		 * either way) */
		send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
		while ((r = recv(fd, b, sizeof(b), 0)) > 0)
			c_huge.refused_replies += r > 4 && b[4] == 68 /* ERR */;
		c_huge.closed += r == 0 || errno == ECONNRESET;
		close(fd);
	}
	return NULL;
}

/* JOIN, then 2,000 GETs, none of their answers read. */
static void *pipe_main(void *arg)
{
	uint8_t *req = malloc(53 + 2000 * 10);
	(void)arg;
	while (!stop && req) {
		size_t n = join_frame(req, 2, 4);
		for (int i = 0; i < 2000; i++, n += 10) {
			put32(req + n, 6);
			req[n + 4] = 3; /* GET */
			put32(req + n + 5, 1);
			req[n + 9] = 'k';
		}
		int fd = dial();
		if (fd < 0) {
			usleep(10000);
			continue;
		}
		c_pipe.made++;
		send(fd, req, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		for (int i = 0; i < 50 && !stop && !gone(fd); i++)
			usleep(20000);
		c_pipe.closed += gone(fd);
		close(fd);
	}
	free(req);
	return NULL;
}

/* JOIN, its challenge read, a proof of noise. */
static void *token_main(void *arg)
{
	uint8_t f[128], b[256];
	(void)arg;
	while (!stop) {
		int fd = dial();
		if (fd < 0) {
			usleep(10000);
			continue;
		}
		c_token.made++;
		struct timeval tv = { 2, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		size_t n = join_frame(f, 3, 4);
		if (send(fd, f, n, MSG_NOSIGNAL) == (ssize_t)n && recv(fd, b, sizeof(b), 0) > 4 && b[4] == 69) {
			put32(f, 37);
			f[4] = 10; /* PROOF */
			put32(f + 5, 32);
			for (int i = 0; i < 32; i++)
				f[9 + i] = (uint8_t)rand();
			ssize_t r;
			if (send(fd, f, 41, MSG_NOSIGNAL) == 41)
				while ((r = recv(fd, b, sizeof(b), 0)) > 0)
					c_token.refused_replies += b[4] == 68;
			c_token.closed++;
		}
		close(fd);
	}
	return NULL;
}

static int attack(const char *host, const char *port, int secs)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	pthread_t t[5];
	void *(*fn[5])(void *) = { idle_main, slow_main, huge_main, pipe_main, token_main };
	struct rlimit rl;
	int rc = getaddrinfo(host, port, &hints, &target);

	if (rc) {
		fprintf(stderr, "hostile_peer: %s: %s\n", host, gai_strerror(rc));
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* room for CONNS and the rest */
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < (rlim_t)conns_wanted + 256)
			conns_wanted = rl.rlim_cur > 512 ? (int)rl.rlim_cur - 256 : 256;
	}
	double t0 = now();
	for (int i = 0; i < 5; i++)
		pthread_create(&t[i], NULL, fn[i], NULL);
	sleep((unsigned)secs);
	stop = 1;
	for (int i = 0; i < 5; i++)
		pthread_join(t[i], NULL);
	printf("hostile_peer: %.0f s against %s:%s: idle %lu made %lu closed by the store (up to %d kept open); "
	       "slow %lu made %lu closed; huge %lu made %lu refused; pipelined %lu made %lu closed; "
	       "wrong token %lu made %lu refused\n",
	       now() - t0, host, port, c_idle.made, c_idle.closed, conns_wanted, c_slow.made, c_slow.closed,
	       c_huge.made, c_huge.refused_replies, c_pipe.made, c_pipe.closed, c_token.made,
	       c_token.refused_replies);
	return 0;
}

/* A fake store on port for secs: challenges with a proof of noise,
 * records all it received in path. */
static int fake_server(int port, int secs, const char *path)
{
	int lfd = socket(AF_INET6, SOCK_STREAM, 0), zero = 0, one = 1;
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
				  .sin6_addr = IN6ADDR_ANY_INIT };
	FILE *rec = fopen(path, "w");
	unsigned long clients = 0, bytes = 0;

	setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (rec) /* whole on disk at once: the test may end it any time */
		setvbuf(rec, NULL, _IONBF, 0);
	if (!rec || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 64) < 0) {
		fprintf(stderr, "hostile_peer: cannot listen on port %d: %s\n", port, strerror(errno));
		return 2;
	}
	printf("hostile_peer: listening on port %d\n", port);
	fflush(stdout);
	double end = now() + secs;
	while (now() < end) {
		struct pollfd p = { lfd, POLLIN, 0 };
		if (poll(&p, 1, 200) <= 0)
			continue;
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		clients++;
		struct timeval tv = { 1, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		uint8_t b[4096], ch[81];
		ssize_t r = recv(fd, b, sizeof(b), 0);
		if (r > 0) {
			fwrite(b, 1, (size_t)r, rec);
			bytes += (size_t)r;
			put32(ch, 77);
			ch[4] = 69; /* CHALLENGE */
			put32(ch + 5, 2);
			put32(ch + 9, 32);
			put32(ch + 45, 32);
			for (int i = 13; i < 81; i++)
				if (i < 45 || i >= 49)
					ch[i] = (uint8_t)rand();
			send(fd, ch, sizeof(ch), MSG_NOSIGNAL);
			while ((r = recv(fd, b, sizeof(b), 0)) > 0) {
				fwrite(b, 1, (size_t)r, rec);
				bytes += (size_t)r;
			}
		}
		close(fd);
	}
	fclose(rec);
	printf("hostile_peer: fake store: %lu clients, %lu bytes received\n", clients, bytes);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)getpid());
	if (argc >= 5 && strcmp(argv[1], "attack") == 0) {
		if (argc >= 6)
			conns_wanted = atoi(argv[5]) > 0 ? atoi(argv[5]) : conns_wanted;
		return attack(argv[2], argv[3], atoi(argv[4]));
	}
	if (argc == 5 && strcmp(argv[1], "server") == 0)
		return fake_server(atoi(argv[2]), atoi(argv[3]), argv[4]);
	fprintf(stderr, "usage: hostile_peer attack HOST PORT SECONDS [CONNS] | server PORT SECONDS FILE\n");
	return 2;
}
