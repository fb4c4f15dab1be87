/* The rendezvous store's bounds against peers that do not hold the token,
 * with its limits made small (the server's source included, as
 * tests/fuzz/fuzz_store does): frames before the handshake, its deadline,
 * the caps on unproven connections in all and per address, and accepting
 * when out of file descriptors. */
#define STORE_HANDSHAKE_MS 400
#define STORE_MAX_PENDING 16
#define STORE_MAX_PENDING_PER_ADDR 8
#include "../../libddpenv/src/store_server.c"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "store_raw.h"
#include "test.h"

static char logged[8192];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void record(void *ctx, const char *msg)
{
	(void)ctx;
	pthread_mutex_lock(&log_mu);
	size_t l = strlen(logged);
	snprintf(logged + l, sizeof(logged) - l, "%s\n", msg);
	pthread_mutex_unlock(&log_mu);
}

/* A connection to port from the loopback address 127.0.0.<host>. */
static int connect_from(int host, int port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host) };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { timeout_ms / 1000, timeout_ms % 1000 * 1000 };
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Whether the server closed fd: EOF (after whatever it sent) within its
 * receive timeout. */
static int closed_by_server(int fd)
{
	uint8_t b[512];
	ssize_t r;
	while ((r = recv(fd, b, sizeof(b), 0)) > 0)
		;
	return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* Whether fd is still open at the server: nothing to read, no EOF, now. */
static int still_open(int fd)
{
	uint8_t b;
	ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
	return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static double elapsed(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Before the handshake only small frames: a length prefix past it closes
 * the connection at once, its body never waited for (nor buffered). */
static void test_preauth_frame(int port)
{
	static const uint8_t huge[] = { 0, 1, 0x86, 0xa0 }; /* 100,000 bytes to come */
	uint8_t rep[256];
	int fd = connect_from(1, port, 2000);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int n = fd >= 0 && send(fd, huge, sizeof(huge), 0) == 4 ? read_raw(fd, rep, sizeof(rep)) : -1;
	rep[n > 0 ? n : 0] = 0;
	test_cond("a 100,000-byte frame announced before the handshake is refused at its length",
		  n > 9 && rep[0] == 68 && closed_by_server(fd) && elapsed(&t0) < 1.5);
	test_err("... saying so", n > 9 ? (char *)rep + 5 : "",
		 "a frame of 100000 bytes before the handshake (at most 160)");
	if (fd >= 0)
		close(fd);
	fd = connect_from(1, port, 2000);
	uint8_t f[64];
	size_t fl = frame(f, 3, "k", NULL); /* GET before JOIN */
	n = fd >= 0 && send(fd, f, fl, 0) == (ssize_t)fl ? read_raw(fd, rep, sizeof(rep)) : -1;
	rep[n > 0 ? n : 0] = 0;
	test_cond("a request before the handshake is refused", n > 9 && rep[0] == 68 && closed_by_server(fd));
	test_err("... saying what comes first", n > 9 ? (char *)rep + 5 : "", "expected JOIN first (store protocol 2)");
	if (fd >= 0)
		close(fd);
}

/* A handshake not done within STORE_HANDSHAKE_MS (400 ms here) closes. */
static void test_deadline(int port)
{
	uint8_t join[53] = { 0, 0, 0, 49, 9, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 32 }, rep[128];
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int quiet = connect_from(1, port, 3000), halfway = connect_from(1, port, 3000);
	int challenged = halfway >= 0 && send(halfway, join, sizeof(join), 0) == sizeof(join) &&
			 read_raw(halfway, rep, sizeof(rep)) == 45 && rep[0] == 69;
	test_cond("a client that sends nothing is closed after the handshake's deadline",
		  quiet >= 0 && closed_by_server(quiet));
	double t = elapsed(&t0);
	test_cond("a client challenged that never proves is closed too", challenged && closed_by_server(halfway));
	test_cond("... both within the deadline and a look (0.4 to 2 s)", t >= 0.35 && t < 2.0);
	if (quiet >= 0)
		close(quiet);
	if (halfway >= 0)
		close(halfway);
}

/* Unproven connections: at most 8 from one address, 16 in all; past a
 * cap the oldest goes for the new one. */
static void test_caps(struct store_server *sv, int port)
{
	int fd[12], ok = 1;
	for (int i = 0; i < 12; i++)
		fd[i] = connect_from(1, port, 1000);
	usleep(200000);
	for (int i = 0; i < 4; i++)
		ok = ok && fd[i] >= 0 && closed_by_server(fd[i]);
	test_cond("12 unproven connections from one address: the 4 oldest closed", ok);
	ok = 1;
	for (int i = 4; i < 12; i++)
		ok = ok && fd[i] >= 0 && still_open(fd[i]);
	test_cond("... the 8 newest held", ok);
	int more[4][4];
	for (int h = 0; h < 4; h++)
		for (int i = 0; i < 4; i++)
			more[h][i] = connect_from(2 + h, port, 1000);
	usleep(200000);
	int open = 0;
	for (int i = 4; i < 12; i++)
		open += fd[i] >= 0 && still_open(fd[i]);
	for (int h = 0; h < 4; h++)
		for (int i = 0; i < 4; i++)
			open += more[h][i] >= 0 && still_open(more[h][i]);
	test_cond("16 more from 4 other addresses: 16 held in all, the oldest closed", open == 16);
	struct ddpenv_store_refusals r;
	ddpenv_store_server_refusals(sv, &r);
	test_cond("... counted: 12 closed unproven, at most 16 at once", r.evicted == 12 && r.peak_pending == 16);
	for (int i = 0; i < 12; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	for (int h = 0; h < 4; h++)
		for (int i = 0; i < 4; i++)
			if (more[h][i] >= 0)
				close(more[h][i]);
}

/* A flood of unproven connections cannot keep a rank out: the rank joins
 * while they come (each one closed makes it connect again). */
struct flood {
	int port, stop;
	unsigned made;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	int fds[64] = { 0 };
	for (unsigned i = 0; !__atomic_load_n(&f->stop, __ATOMIC_RELAXED); i++) {
		if (fds[i % 64] > 0)
			close(fds[i % 64]);
		fds[i % 64] = connect_from(1 + (int)(i % 3), f->port, 1000);
		f->made++;
	}
	for (int i = 0; i < 64; i++)
		if (fds[i] > 0)
			close(fds[i]);
	return NULL;
}

static void test_flood_join(int port)
{
	struct flood f = { port, 0, 0 };
	struct ddpenv_store *s1;
	char err[512] = "";
	pthread_t t;
	pthread_create(&t, NULL, flood_main, &f);
	usleep(100000);
	struct ddpenv_store_opts o = { "127.0.0.1", port, 1, 2, 10000, NULL, NULL, NULL };
	int joined = ddpenv_store_open(&s1, &o, err, sizeof(err)) == 0;
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	test_cond("a rank joins during a flood of unproven connections", joined);
	printf("#   %u connections made meanwhile%s%s\n", f.made, joined ? "" : "; ", joined ? "" : err);
	if (joined)
		ddpenv_store_close_within(s1, 0);
}

/* A store out of file descriptors with no unproven connection to close:
 * accepting pauses, the thread does not spin, and goes on once there are
 * descriptors again.  The store runs in a child with a low limit. */
static void test_out_of_fds(void)
{
	int port = test_free_port(), ready[2], go[2];
	if (pipe(ready) < 0 || pipe(go) < 0)
		return;
	pid_t kid = fork();
	if (kid == 0) {
		char err[256];
		struct rlimit rl = { 64, 64 };
		setrlimit(RLIMIT_NOFILE, &rl);
		struct store_server *sv = ddpenv_store_server_start(port, 2, NULL, NULL, NULL, err, sizeof(err));
		int spare[64], n = 0, fd;
		while (sv && n < 64 && (fd = dup(0)) >= 0)
			spare[n++] = fd;
		char c = sv ? 'y' : 'n';
		if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(2);
		while (n > 0)
			close(spare[--n]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		ddpenv_store_server_stop(sv, 0);
		_exit(0);
	}
	char c = 0;
	if (read(ready[0], &c, 1) != 1 || c != 'y') {
		test_cond("a store out of file descriptors starts", 0);
		return;
	}
	int fd = raw_connect(port, 2000); /* in the listen backlog: accept fails, EMFILE */
	char path[64];
	unsigned long u0 = 0, s0 = 0, u1 = 0, s1 = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)kid);
	FILE *f = fopen(path, "r");
	int got = f && fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &u0, &s0) == 2;
	if (f)
		fclose(f);
	usleep(1000000);
	f = fopen(path, "r");
	got = got && f && fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &u1, &s1) == 2;
	if (f)
		fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	double cpu = got ? (double)(u1 + s1 - u0 - s0) / (double)hz : -1;
	test_cond("out of descriptors with a client waiting: the store's thread does not spin (< 0.3 s of CPU in 1 s)",
		  got && cpu < 0.3);
	printf("#   %.2f s of CPU in 1 s\n", cpu);
	if (write(go[1], "g", 1) != 1)
		return;
	test_cond("... and with descriptors again the waiting client is served", raw_join(fd, 1, 2));
	if (fd >= 0)
		close(fd);
	if (write(go[1], "g", 1) != 1)
		return;
	int st = -1;
	waitpid(kid, &st, 0);
	test_cond("... and the store stops cleanly", WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
}

int main(void)
{
	char err[256] = "";
	int port = test_free_port();

	signal(SIGPIPE, SIG_IGN);
	struct store_server *sv = ddpenv_store_server_start(port, 2, NULL, record, NULL, err, sizeof(err));
	test_cond("a store with small limits starts", sv != NULL);
	if (!sv) {
		printf("#   %s\n", err);
		return test_report();
	}
	test_preauth_frame(port);
	test_deadline(port);
	test_caps(sv, port);
	test_flood_join(port);
	ddpenv_store_server_stop(sv, 0);
	test_err("the store's last line counts the refusals in all", logged, "clients in all:");
	test_out_of_fds();
	return test_report();
}
