/* The rendezvous store on loopback: ranks as threads and processes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv_store.h"
#include "store_raw.h"
#include "test.h"


/* Rank 0's log of refused clients (the server thread writes it). */
static char logged[16384];
static void record(void *ctx, const char *msg)
{
	size_t l = strlen(logged);
	(void)ctx;
	snprintf(logged + l, sizeof(logged) - l, "%s\n", msg);
}

/* Whether rank 0's log has frag within 2 s (its thread logs a client
 * that left as it sees the connection close). */
static int wait_logged(const char *frag)
{
	for (int i = 0; i < 200; i++) {
		if (strstr(logged, frag))
			return 1;
		usleep(10000);
	}
	printf("#   log '%s' lacks '%s'\n", logged, frag);
	return 0;
}

struct rank_job {
	int rank, world, port;
	int ok;
	char err[512];
};

/* What every simulated rank does: join, publish, barrier, read rank 0's
 * key and its left neighbour's, count itself. */
static void *rank_main(void *arg)
{
	struct rank_job *j = arg;
	struct ddpenv_store *s;
	struct ddpenv_store_opts o = { "127.0.0.1", j->port, j->rank, j->world, 20000, NULL, NULL, NULL };
	char key[32], want[32];
	void *v;
	size_t l;
	int64_t n;

	if (ddpenv_store_open(&s, &o, j->err, sizeof(j->err)) < 0)
		return NULL;
	snprintf(key, sizeof(key), "addr/%d", j->rank);
	snprintf(want, sizeof(want), "value-of-%d", j->rank);
	if (ddpenv_store_set(s, key, want, strlen(want), j->err, sizeof(j->err)) < 0 ||
	    ddpenv_store_add(s, "count", 1, &n, j->err, sizeof(j->err)) < 0 ||
	    ddpenv_store_barrier(s, "joined", j->err, sizeof(j->err)) < 0)
		goto out;
	int peer = (j->rank + j->world - 1) % j->world;
	snprintf(key, sizeof(key), "addr/%d", peer);
	snprintf(want, sizeof(want), "value-of-%d", peer);
	if (ddpenv_store_get(s, key, -1, &v, &l, j->err, sizeof(j->err)) < 0)
		goto out;
	int same = l == strlen(want) && memcmp(v, want, l) == 0;
	free(v);
	if (!same) {
		snprintf(j->err, sizeof(j->err), "rank %d read a wrong value for %s", j->rank, key);
		goto out;
	}
	if (ddpenv_store_get(s, "count", -1, &v, &l, j->err, sizeof(j->err)) < 0)
		goto out;
	same = atoi(v) == j->world;
	free(v);
	if (!same) {
		snprintf(j->err, sizeof(j->err), "rank %d: count after the barrier is not %d",
			 j->rank, j->world);
		goto out;
	}
	if (ddpenv_store_barrier(s, "done", j->err, sizeof(j->err)) < 0)
		goto out;
	j->ok = 1;
out:
	ddpenv_store_close(s);
	return NULL;
}

static int run_world(int world, double *secs)
{
	int port = test_free_port();
	struct rank_job *jobs = calloc((size_t)world, sizeof(*jobs));
	pthread_t *th = calloc((size_t)world, sizeof(*th));
	struct timespec a, b;
	int good = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	/* Start the clients first: they must wait for rank 0 by retrying. */
	for (int r = world - 1; r >= 0; r--) {
		jobs[r] = (struct rank_job){ .rank = r, .world = world, .port = port };
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setstacksize(&at, 256 * 1024);
		pthread_create(&th[r], &at, rank_main, &jobs[r]);
		pthread_attr_destroy(&at);
	}
	for (int r = 0; r < world; r++) {
		pthread_join(th[r], NULL);
		if (jobs[r].ok)
			good++;
		else if (good + 1 >= r) /* print a few failures only */
			printf("#   rank %d: %s\n", r, jobs[r].err);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	*secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
	free(jobs);
	free(th);
	return good;
}

static void test_worlds(void)
{
	double t;
	test_cond("world of 1: the store works for rank 0 alone", run_world(1, &t) == 1);
	test_cond("world of 4: set, add, barrier, get on every rank", run_world(4, &t) == 4);
	int good = run_world(256, &t);
	test_cond("world of 256 ranks as threads all complete", good == 256);
	printf("#   256 ranks joined, exchanged and left in %.3f s\n", t);
}

static void test_errors(void)
{
	char err[512] = "";
	struct ddpenv_store *s, *s0, *s1;
	int port = test_free_port();
	struct ddpenv_store_opts o = { "127.0.0.1", port, 1, 2, 300, NULL, NULL, NULL };

	test_cond("nobody listening: open fails", ddpenv_store_open(&s, &o, err, sizeof(err)) < 0);
	test_err("... naming the rank", err, "rank 1 could not reach 127.0.0.1:");
	test_err("... the wait", err, "after 0.3 s");
	test_err("... and the cause", err, "Connection refused");

	o = (struct ddpenv_store_opts){ "no-such-host.invalid", port, 1, 2, 300, NULL, NULL, NULL };
	test_cond("MASTER_ADDR that does not resolve", ddpenv_store_open(&s, &o, err, sizeof(err)) < 0);
	test_err("... names it", err, "MASTER_ADDR 'no-such-host.invalid' does not resolve");

	o = (struct ddpenv_store_opts){ "127.0.0.1", port, 2, 2, 300, NULL, NULL, NULL };
	test_cond("rank outside the world", ddpenv_store_open(&s, &o, err, sizeof(err)) < 0);
	test_err("... says what was expected", err, "0 <= RANK < WORLD_SIZE");

	/* A two-rank world with a token; refusals reach rank 0's log. */
	o = (struct ddpenv_store_opts){ "127.0.0.1", port, 0, 2, 2000, "s3cret", record, NULL };
	test_cond("rank 0 opens with a token", ddpenv_store_open(&s0, &o, err, sizeof(err)) == 0);

	struct ddpenv_store_opts busy = { "127.0.0.1", port, 0, 2, 300, NULL, NULL, NULL };
	test_cond("a second store on the same port fails",
		  ddpenv_store_open(&s, &busy, err, sizeof(err)) < 0);
	test_err("... naming the port", err, "could not listen on port");

	o.rank = 1;
	o.log = NULL;
	o.token = "guess";
	test_cond("a client with the wrong token is refused",
		  ddpenv_store_open(&s1, &o, err, sizeof(err)) < 0);
	test_err("... and told why: the server's proof does not fit its token", err,
		 "the server there could not prove that it holds this rank's rendezvous token (DDP_RDZV_TOKEN)");
	test_err("... whichever side is wrong", err, "or this rank's token is not the step's");
	test_cond("... and rank 0 logged it", wait_logged("it left after the challenge without a proof"));
	o.token = NULL;
	test_cond("a client without a token is refused",
		  ddpenv_store_open(&s1, &o, err, sizeof(err)) < 0);
	test_err("... and rank 0 logged both, with the client's address and claim", logged,
		 "refused a client at 127.0.0.1:");
	test_err("... the wrong one", logged,
		 "(it said rank 1 of 2): it left after the challenge without a proof: its rendezvous token "
		 "(DDP_RDZV_TOKEN) is not this step's");
	test_err("... the missing one", logged, "(it said rank 1 of 2): missing rendezvous token");
	/* over IPv6 the refused client's address is in brackets, apart from its port */
	struct ddpenv_store_opts o6 = { "::1", port, 1, 2, 300, "guess", NULL, NULL };
	int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 lo6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	if (fd6 >= 0 && bind(fd6, (struct sockaddr *)&lo6, sizeof(lo6)) == 0) {
		logged[0] = 0;
		test_cond("a wrong token over IPv6 is refused", ddpenv_store_open(&s1, &o6, err, sizeof(err)) < 0);
		test_cond("... logged as [address]:port", wait_logged("refused a client at [::1]:"));
	} else {
		test_skip("a wrong token over IPv6 is refused", "no IPv6 loopback (::1) here");
		test_skip("... logged as [address]:port", "no IPv6 loopback (::1) here");
	}
	if (fd6 >= 0)
		close(fd6);
	o.token = "s3cret";
	test_cond("the right token joins", ddpenv_store_open(&s1, &o, err, sizeof(err)) == 0);
	struct ddpenv_store *dup;
	test_cond("the same rank cannot join twice", ddpenv_store_open(&dup, &o, err, sizeof(err)) < 0);
	test_err("... says so", err, "rank 1 joined twice");

	void *v = NULL;
	size_t l;
	test_cond("waiting for a key nobody sets times out",
		  ddpenv_store_get(s1, "never", 200, &v, &l, err, sizeof(err)) < 0);
	test_err("... naming the key", err, "waiting for 'never'");
	test_err("... and the deadline, the wait's own", err, "timed out after 0.2 s");
	test_cond("the timed-out wait is taken back: the connection goes on",
		  ddpenv_store_set(s1, "k", "v", 1, err, sizeof(err)) == 0);
	/* were its waiter left on the server, this SET's answer would be
	 * 'never''s VALUE, and the connection out of step */
	test_cond("the key set later is no stray answer",
		  ddpenv_store_set(s0, "never", "late", 4, err, sizeof(err)) == 0 &&
			  ddpenv_store_set(s1, "k2", "v", 1, err, sizeof(err)) == 0);
	test_cond("... and a new wait reads it",
		  ddpenv_store_get(s1, "never", 200, &v, &l, err, sizeof(err)) == 0 && l == 4 &&
			  !memcmp(v, "late", 4));
	free(v);
	v = NULL;

	/* get_unless: the key, or the abort key a failed peer sets */
	int aborted = -1;
	test_cond("get_unless: a key already there, not aborted",
		  ddpenv_store_get_unless(s1, "never", "failed", 200, &v, &l, &aborted, err, sizeof(err)) == 0 &&
			  !aborted && l == 4 && !memcmp(v, "late", 4));
	free(v);
	v = NULL;
	test_cond("get_unless: neither, times out", ddpenv_store_get_unless(s1, "absent", "failed", 1500, &v, &l,
									   &aborted, err, sizeof(err)) < 0);
	test_err("... naming the key and the whole wait", err, "waiting for 'absent': timed out after 1.5 s");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ddpenv_store_set(s0, "failed", "rank 0: gave up", 15, err, sizeof(err));
	test_cond("get_unless: the abort key set, it stops with its value",
		  ddpenv_store_get_unless(s1, "absent", "failed", 10000, &v, &l, &aborted, err, sizeof(err)) == 0 &&
			  aborted == 1 && l == 15 && !memcmp(v, "rank 0: gave up", 15));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	free(v);
	v = NULL;
	test_cond("... within a look or two (a second each), not the 10 s wait",
		  t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9 < 5);
	test_cond("... and the connection goes on", ddpenv_store_set(s1, "k3", "v", 1, err, sizeof(err)) == 0);

	char big[DDPENV_STORE_MAX_KEY + 2];
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	test_cond("a key over the limit is refused locally",
		  ddpenv_store_set(s0, big, "v", 1, err, sizeof(err)) < 0);
	test_err("... with the limit", err, "expected 1 to 1024");
	test_cond("an empty value is fine", ddpenv_store_set(s0, "empty", "", 0, err, sizeof(err)) == 0);
	test_cond("... and reads back empty",
		  ddpenv_store_get(s0, "empty", -1, &v, &l, err, sizeof(err)) == 0 && l == 0);
	free(v);

	/* s1 kept its connection through the timed-out wait: it leaves
	 * (BYE), and is not counted dead (test_killed: one that is) */
	ddpenv_store_close(s1);
	int dead[4];
	test_cond("a rank whose wait timed out still leaves cleanly, not dead",
		  ddpenv_store_dead_ranks(s0, dead, 4, err, sizeof(err)) == 0 &&
			  ddpenv_store_left_ranks(s0, dead, 4, err, sizeof(err)) == 1 && dead[0] == 1);
	ddpenv_store_close(s0);
}

/* A rank killed by a signal is reported dead; one that left is not. */
static void test_killed(void)
{
	char err[512] = "";
	int port = test_free_port();
	struct ddpenv_store *s0;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 3, 5000, NULL, NULL, NULL };
	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	pid_t kids[2];
	for (int r = 1; r <= 2; r++) {
		kids[r - 1] = fork();
		if (kids[r - 1] == 0) {
			struct ddpenv_store *s;
			struct ddpenv_store_opts oc = { "127.0.0.1", port, r, 3, 5000, NULL, NULL, NULL };
			if (ddpenv_store_open(&s, &oc, err, sizeof(err)) < 0)
				_exit(3);
			ddpenv_store_set(s, r == 1 ? "up/1" : "up/2", "1", 1, err, sizeof(err));
			if (r == 2) {
				ddpenv_store_close(s);
				_exit(0);
			}
			pause();
			_exit(0);
		}
	}
	void *v;
	size_t l;
	int ok = ddpenv_store_get(s0, "up/1", -1, &v, &l, err, sizeof(err)) == 0;
	if (ok)
		free(v);
	ok = ok && ddpenv_store_get(s0, "up/2", -1, &v, &l, err, sizeof(err)) == 0;
	if (ok)
		free(v);
	test_cond("two child ranks joined", ok);
	kill(kids[0], SIGKILL);
	waitpid(kids[0], NULL, 0);
	waitpid(kids[1], NULL, 0);
	int dead[4], n = 0;
	for (int i = 0; i < 100 && n == 0; i++) {
		n = ddpenv_store_dead_ranks(s0, dead, 4, err, sizeof(err));
		if (n == 0)
			usleep(10000);
	}
	test_cond("the killed rank (1) is dead, the one that left (2) is not", n == 1 && dead[0] == 1);
	int left[4];
	n = ddpenv_store_left_ranks(s0, left, 4, err, sizeof(err));
	test_cond("the one that left (2) is said to have left, the killed one not", n == 1 && left[0] == 2);
	ddpenv_store_close(s0);
}

/* ADD's counter is a 64-bit integer: a delta that would take it past
 * that range is refused, naming both numbers, and the counter keeps its
 * value for the other ranks. */
static void test_add_overflow(void)
{
	char err[512] = "";
	int port = test_free_port();
	struct ddpenv_store *s0, *s1;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 2, 5000, NULL, NULL, NULL };
	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	o.rank = 1;
	int64_t n = 0;
	void *v = NULL;
	size_t l = 0;
	test_cond("rank 1 joins", ddpenv_store_open(&s1, &o, err, sizeof(err)) == 0);
	test_cond("ADD up to INT64_MAX is fine",
		  ddpenv_store_add(s0, "n", INT64_MAX, &n, err, sizeof(err)) == 0 && n == INT64_MAX);
	test_cond("ADD past it is refused", ddpenv_store_add(s1, "n", 1, &n, err, sizeof(err)) < 0);
	test_err("... naming the key", err, "adding to 'n'");
	test_err("... and both numbers", err, "9223372036854775807 + 1 passes the range of a 64-bit counter");
	test_cond("... and the counter keeps its value",
		  ddpenv_store_get(s0, "n", -1, &v, &l, err, sizeof(err)) == 0 && l == 19 &&
			  memcmp(v, "9223372036854775807", 19) == 0);
	free(v);
	test_cond("ADD down through zero to INT64_MIN is fine",
		  ddpenv_store_add(s0, "n", INT64_MIN, &n, err, sizeof(err)) == 0 && n == -1 &&
			  ddpenv_store_add(s0, "n", INT64_MIN + 1, &n, err, sizeof(err)) == 0 &&
			  n == INT64_MIN);
	ddpenv_store_close(s1);
	ddpenv_store_close(s0);
}

/* A peer that is no store client (anyone who reaches MASTER_PORT): one
 * connection may wait on MAX_WAITING (64) GETs, a store client on one at
 * a time; the 65th is refused and the connection closed, its waiters
 * dropped, and the store serves the ranks on. */
static void test_waiting_bound(void)
{
	char err[512] = "";
	int port = test_free_port();
	struct ddpenv_store *s0;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 2, 5000, NULL, NULL, NULL };
	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	uint8_t req[8192];
	size_t n = 0;
	/* 65 GETs of keys nobody sets */
	for (int i = 0; i < 65; i++) {
		char key[8];
		int kl = snprintf(key, sizeof(key), "w%d", i);
		uint8_t f[] = { 0, 0, 0, (uint8_t)(5 + kl), 3, 0, 0, 0, (uint8_t)kl };
		memcpy(req + n, f, sizeof(f));
		memcpy(req + n + sizeof(f), key, (size_t)kl);
		n += sizeof(f) + (size_t)kl;
	}
	int fd = raw_connect(port, 5000);
	char rep[512];
	size_t got = 0;
	ssize_t r = -1;
	if (raw_join(fd, 1, 2) && send(fd, req, n, MSG_NOSIGNAL) == (ssize_t)n) {
		while (got < sizeof(rep) - 1 && (r = recv(fd, rep + got, sizeof(rep) - 1 - got, 0)) > 0)
			got += (size_t)r;
	}
	rep[got] = 0;
	/* ERR: length, op 68, message length, message */
	test_cond("the 65th waiting GET on one connection is refused and the connection closed",
		  got > 9 && rep[4] == 68 && r == 0);
	test_err("... saying why", got > 9 ? rep + 9 : "", "more than 64 GETs waiting on one connection");
	if (fd >= 0)
		close(fd);
	void *v = NULL;
	size_t l = 0;
	test_cond("the store goes on serving",
		  ddpenv_store_set(s0, "after", "1", 1, err, sizeof(err)) == 0 &&
			  ddpenv_store_get(s0, "after", -1, &v, &l, err, sizeof(err)) == 0 && l == 1);
	free(v);
	ddpenv_store_close_within(s0, 0);
}

/* UNWAIT on the server: the connection's waiter goes, so a key set later
 * sends nothing; a VALUE sent before it stays before its OK. */
static void test_unwait_server(void)
{
	char err[512] = "";
	int port = test_free_port(), fd;
	struct ddpenv_store *s0;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 2, 5000, NULL, NULL, NULL };
	uint8_t f[256], rep[256];

	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	fd = raw_connect(port, 500);
	test_cond("a raw client joins as rank 1", raw_join(fd, 1, 2));
	size_t n = frame(f, 3, "y", NULL);
	n += frame(f + n, 7, "y", NULL);
	test_cond("GET then UNWAIT of a missing key: OK alone", fd >= 0 && send(fd, f, n, 0) == (ssize_t)n &&
		  read_raw(fd, rep, sizeof(rep)) == 1 && rep[0] == 64);
	test_cond("... and the key set later sends nothing",
		  ddpenv_store_set(s0, "y", "1", 1, err, sizeof(err)) == 0 && read_raw(fd, rep, sizeof(rep)) < 0);
	n = frame(f, 3, "x", NULL);
	int sent = fd >= 0 && send(fd, f, n, 0) == (ssize_t)n;
	ddpenv_store_set(s0, "x", "ab", 2, err, sizeof(err));
	n = frame(f, 7, "x", NULL);
	sent = sent && send(fd, f, n, 0) == (ssize_t)n;
	test_cond("a key set before the UNWAIT: its VALUE first", sent && read_raw(fd, rep, sizeof(rep)) == 7 &&
		  rep[0] == 65 && !memcmp(rep + 5, "ab", 2));
	test_cond("... then UNWAIT's OK", read_raw(fd, rep, sizeof(rep)) == 1 && rep[0] == 64);
	n = frame(f, 7, "nobody-waits", NULL);
	test_cond("an UNWAIT of a key never waited for: OK", fd >= 0 && send(fd, f, n, 0) == (ssize_t)n &&
		  read_raw(fd, rep, sizeof(rep)) == 1 && rep[0] == 64);
	if (fd >= 0)
		close(fd);
	ddpenv_store_close_within(s0, 0);
}

/* A stand-in store on loopback for the client's side of the wire format:
 * *lfd listening and fn(arg) on thread *t (it accepts rank 1 and answers
 * as its test wants), then rank 1 joined to it in *s1.  1 joined, 0 not
 * (said; the thread runs: shut *lfd down to end its accept), -1 with no
 * thread (said). */
static int stand_in(int *lfd, pthread_t *t, void *(*fn)(void *), void *arg, struct ddpenv_store **s1)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	char err[512] = "";

	*lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*lfd, 1) < 0 ||
	    getsockname(*lfd, (struct sockaddr *)&a, &al) < 0 || pthread_create(t, NULL, fn, arg)) {
		test_cond("a stand-in store listens", 0);
		if (*lfd >= 0)
			close(*lfd);
		return -1;
	}
	struct ddpenv_store_opts o = { "127.0.0.1", ntohs(a.sin_port), 1, 2, 5000, NULL, NULL, NULL };
	int joined = ddpenv_store_open(s1, &o, err, sizeof(err)) == 0;
	test_cond("rank 1 joins the stand-in", joined);
	if (!joined)
		printf("#   %s\n", err);
	return joined;
}

/* A stand-in's side of rank 1's joining: accepted, its reads bounded by
 * 5 s, its JOIN answered with a CHALLENGE without proof (the stand-in has
 * no token, nor has the rank), its PROOF with OK.  The connection, or -1
 * (closed). */
static int stand_in_accept(int lfd)
{
	uint8_t in[256], out[64] = { 0, 0, 0, 45, 69 /* CHALLENGE */, 0, 0, 0, 2, 0, 0, 0, 32 };
	struct timeval tv = { 5, 0 };
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* nonce 0s, an empty proof */
	if (read_raw(fd, in, sizeof(in)) == 49 && in[0] == 9 && send(fd, out, 49, 0) == 49 &&
	    read_raw(fd, in, sizeof(in)) == 5 && in[0] == 10 && send(fd, out, frame(out, 64, NULL, NULL), 0) > 0)
		return fd;
	close(fd);
	return -1;
}

/* A program on MASTER_PORT that is not the step's store (another user's
 * on the head node, come first): it records what the rank sends, and
 * answers its first frame as its mode says. */
enum impostor_mode { IMP_OK, IMP_BAD_PROOF, IMP_NO_PROOF, IMP_PROTO1 };
struct impostor {
	int lfd;
	enum impostor_mode mode;
	uint8_t seen[8192];
	size_t nseen;
};

static void *impostor_main(void *arg)
{
	struct impostor *im = arg;
	uint8_t out[128] = { 0, 0, 0, 77, 69 /* CHALLENGE */, 0, 0, 0, 2, 0, 0, 0, 32 };
	size_t n;
	ssize_t r;
	struct timeval tv = { 2, 0 };
	int fd = accept(im->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int first = read_raw(fd, im->seen, sizeof(im->seen));
	if (first > 0) {
		im->nseen = (size_t)first;
		if (im->mode == IMP_OK) {
			n = frame(out, 64, NULL, NULL);
		} else if (im->mode == IMP_PROTO1) {
			n = frame(out, 68, NULL, "expected HELLO first");
		} else {
			/* a nonce, and 32 bytes it cannot have made with the token
			 * (or no proof at all) */
			for (int i = 13; i < 13 + 32 + 4 + 32; i++)
				out[i] = (uint8_t)(i * 37);
			out[45] = out[46] = out[47] = 0;
			out[48] = im->mode == IMP_NO_PROOF ? 0 : 32;
			out[3] = im->mode == IMP_NO_PROOF ? 45 : 77;
			n = 4 + out[3];
		}
		if (send(fd, out, n, 0) == (ssize_t)n)
			while (im->nseen < sizeof(im->seen) &&
			       (r = recv(fd, im->seen + im->nseen, sizeof(im->seen) - im->nseen, 0)) > 0)
				im->nseen += (size_t)r;
	}
	close(fd);
	return NULL;
}

/* Rank 1 with a token meets an impostor: it stops at once, naming the
 * address, and the token never crossed the wire. */
static void test_impostor(enum impostor_mode mode, const char *what, const char *says)
{
	static const char token[] = "5e1f0c3a9d2b47e8a6c4f1d09b3e7a25c8d6f4e2b0a9c7e5d3f1b9a7c5e3d1f0";
	struct impostor im = { .mode = mode };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct ddpenv_store *s1 = NULL;
	char err[512] = "", desc[200], where[64];
	pthread_t t;

	im.lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (im.lfd < 0 || bind(im.lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(im.lfd, 1) < 0 ||
	    getsockname(im.lfd, (struct sockaddr *)&a, &al) < 0 || pthread_create(&t, NULL, impostor_main, &im)) {
		test_cond("an impostor listens", 0);
		return;
	}
	struct ddpenv_store_opts o = { "127.0.0.1", ntohs(a.sin_port), 1, 2, 3000, token, NULL, NULL };
	int joined = ddpenv_store_open(&s1, &o, err, sizeof(err)) == 0;
	snprintf(desc, sizeof(desc), "a rank with a token does not join %s", what);
	test_cond(desc, !joined);
	snprintf(where, sizeof(where), "store at 127.0.0.1:%d: joining: ", ntohs(a.sin_port));
	test_err("... naming the address it reached", err, where);
	test_err("... and why", err, says);
	if (joined)
		ddpenv_store_close_within(s1, 0);
	pthread_join(t, NULL);
	close(im.lfd);
	int clear = 1;
	for (size_t i = 0; i + 16 <= im.nseen && clear; i++)
		for (size_t k = 0; k + 16 <= sizeof(token) - 1; k += 16)
			if (!memcmp(im.seen + i, token + k, 16))
				clear = 0;
	test_cond("... and the token (no 16 characters of it) never crossed the wire", im.nseen > 0 && clear);
}

/* A store that answers a GET only when it is taken back, with the value
 * first: the race of a key set just as the client gave up; after delay_ms
 * (a store on a loaded node, slow to answer the UNWAIT). */
struct late_server {
	int lfd, ok, delay_ms;
};

static void *late_main(void *arg)
{
	struct late_server *ls = arg;
	uint8_t in[256], out[64];
	int fd = stand_in_accept(ls->lfd);
	if (fd < 0)
		return NULL;
	size_t n;
	/* GET: nothing; UNWAIT: VALUE then OK; SET: OK */
	if (read_raw(fd, in, sizeof(in)) > 0 && in[0] == 3 && read_raw(fd, in, sizeof(in)) > 0 && in[0] == 7) {
		usleep((useconds_t)ls->delay_ms * 1000);
		n = frame(out, 65, NULL, "late");
		n += frame(out + n, 64, NULL, NULL);
		if (send(fd, out, n, 0) == (ssize_t)n && read_raw(fd, in, sizeof(in)) > 0 && in[0] == 2 &&
		    send(fd, out, frame(out, 64, NULL, NULL), 0) > 0)
			ls->ok = 1;
	}
	close(fd);
	return NULL;
}

static void test_unwait_client(int delay_ms)
{
	struct late_server ls = { -1, 0, delay_ms };
	char err[512] = "";
	pthread_t t;
	struct ddpenv_store *s1 = NULL;
	int joined = stand_in(&ls.lfd, &t, late_main, &ls, &s1);
	if (joined < 0)
		return;
	void *v = NULL;
	size_t l = 0;
	char what[160];
	snprintf(what, sizeof(what), "a value that came as the wait was taken back is returned (the UNWAIT "
		 "answered after %d ms, the store's bound 5 s)", delay_ms);
	test_cond(what, joined && ddpenv_store_get(s1, "k", 100, &v, &l, err, sizeof(err)) == 0 && l == 4 &&
				!memcmp(v, "late", 4));
	if (err[0])
		printf("#   %s\n", err);
	free(v);
	test_cond("... and UNWAIT's OK read after it: the next request's answer is its own",
		  joined && ddpenv_store_set(s1, "k2", "v", 1, err, sizeof(err)) == 0);
	if (!joined)
		shutdown(ls.lfd, SHUT_RDWR);
	pthread_join(t, NULL);
	test_cond("... every frame in the order the store expected", ls.ok);
	if (joined)
		ddpenv_store_close_within(s1, 0);
	close(ls.lfd);
}

/* A store whose answer to a GET begins just before the client's wait ends
 * and ends after it (its thread descheduled between the two writes, or
 * the client's between its poll and its read, on a loaded node): the
 * answer is the client's, its connection kept.  A 64-rank gloo set-up on
 * 2 cores lost two ranks' connections to this ("the connection was lost
 * earlier") while their peers' addresses came at a wait's last moment. */
struct split_server {
	int lfd, ok;
};

static void *split_main(void *arg)
{
	struct split_server *ss = arg;
	uint8_t in[256], out[64];
	int fd = stand_in_accept(ss->lfd);
	if (fd < 0)
		return NULL;
	/* GET (a 300 ms wait): 3 bytes of the VALUE at 250 ms, the rest at
	 * 600; SET: OK */
	if (read_raw(fd, in, sizeof(in)) > 0 && in[0] == 3) {
		size_t n = frame(out, 65, NULL, "split");
		usleep(250000);
		int sent = send(fd, out, 3, 0) == 3;
		usleep(350000);
		if (sent && send(fd, out + 3, n - 3, 0) == (ssize_t)(n - 3) && read_raw(fd, in, sizeof(in)) > 0 &&
		    in[0] == 2 && send(fd, out, frame(out, 64, NULL, NULL), 0) > 0)
			ss->ok = 1;
	}
	close(fd);
	return NULL;
}

static void test_split_answer(void)
{
	struct split_server ss = { -1, 0 };
	char err[512] = "";
	pthread_t t;
	struct ddpenv_store *s1 = NULL;
	int joined = stand_in(&ss.lfd, &t, split_main, &ss, &s1);
	if (joined < 0)
		return;
	void *v = NULL;
	size_t l = 0;
	test_cond("an answer that began before a 300 ms wait ended and ended after it is returned",
		  joined && ddpenv_store_get(s1, "k", 300, &v, &l, err, sizeof(err)) == 0 && l == 5 &&
			  !memcmp(v, "split", 5));
	if (err[0])
		printf("#   %s\n", err);
	free(v);
	test_cond("... and the connection goes on", joined && ddpenv_store_set(s1, "k2", "v", 1, err, sizeof(err)) == 0);
	if (!joined)
		shutdown(ss.lfd, SHUT_RDWR);
	pthread_join(t, NULL);
	test_cond("... every frame in the order the store expected", ss.ok);
	/* the stand-in has closed the connection: the next request says so,
	 * and every one after it names that first failure */
	test_cond("the store gone: a request fails", joined && ddpenv_store_set(s1, "k3", "v", 1, err, sizeof(err)) < 0);
	test_err("... saying the store closed the connection", err, "setting 'k3': connection closed by the store");
	test_cond("the next request fails too", joined && ddpenv_store_add(s1, "n", 1, NULL, err, sizeof(err)) < 0);
	test_err("... naming the failure that lost the connection", err,
		 "adding to 'n': the connection was lost earlier (setting 'k3': connection closed by the store");
	if (joined)
		ddpenv_store_close_within(s1, 0);
	close(ss.lfd);
}

/* This process's resident memory in KiB (VmRSS), -1 unknown. */
static long rss_kib(void)
{
	char line[128];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* A joined client that asks for a 1 MiB value 200 times and never reads
 * the answers: the store stops reading it once about two answers wait,
 * so rank 0 does not queue 200 MiB; it goes on serving the others. */
static void test_unread_answers(void)
{
	char err[512] = "";
	int port = test_free_port();
	struct ddpenv_store *s0;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 2, 5000, NULL, NULL, NULL };
	static char big[1 << 20];
	uint8_t req[200 * 12];
	size_t n = 0;

	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	memset(big, 'v', sizeof(big));
	for (int i = 0; i < 200; i++)
		n += frame(req + n, 3, "big", NULL);
	int fd = raw_connect(port, 5000);
	long before = rss_kib();
	int sent = ddpenv_store_set(s0, "big", big, sizeof(big), err, sizeof(err)) == 0 && raw_join(fd, 1, 2) &&
		   send(fd, req, n, MSG_NOSIGNAL) == (ssize_t)n;
	usleep(1000000);
	long grew = rss_kib() - before;
	test_cond("200 GETs of a 1 MiB value never read: rank 0 grows by less than 16 MiB", sent && before > 0 &&
		  grew < 16 * 1024);
	printf("#   rank 0's resident memory grew by %ld KiB\n", grew);
	void *v = NULL;
	size_t l = 0;
	test_cond("... and serves the other ranks meanwhile",
		  ddpenv_store_set(s0, "k", "1", 1, err, sizeof(err)) == 0 &&
			  ddpenv_store_get(s0, "k", 1000, &v, &l, err, sizeof(err)) == 0 && l == 1);
	free(v);
	if (fd >= 0)
		close(fd);
	ddpenv_store_close_within(s0, 0);
}

/* 30 clients that do not hold the token: rank 0 logs 10 lines at once,
 * then one a second saying how many went unlogged, and counts all of
 * them in its last line. */
static void test_refusal_lines(void)
{
	char err[512] = "";
	int port = test_free_port();
	struct ddpenv_store *s0;
	struct ddpenv_store_opts o = { "127.0.0.1", port, 0, 2, 5000, "s3cret", record, NULL };
	uint8_t join[53] = { 0, 0, 0, 49, 9, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 32 }, rep[128];

	if (ddpenv_store_open(&s0, &o, err, sizeof(err)) < 0) {
		test_cond("rank 0 opens", 0);
		printf("#   %s\n", err);
		return;
	}
	logged[0] = 0;
	int challenged = 0;
	for (int i = 0; i < 31; i++) {
		if (i == 30)
			usleep(1100000);
		int fd = raw_connect(port, 2000);
		/* challenged, then gone without a proof */
		challenged += fd >= 0 && send(fd, join, sizeof(join), 0) == sizeof(join) &&
			      read_raw(fd, rep, sizeof(rep)) == 77 && rep[0] == 69;
		if (fd >= 0)
			close(fd);
		usleep(i == 29 ? 200000 : 1000);
	}
	wait_logged("[20 more refused since the last line]");
	int lines = 0;
	for (const char *p = logged; (p = strstr(p, "refused a client")); p++)
		lines++;
	test_cond("31 clients challenged, none with a proof", challenged == 31);
	test_cond("... 11 lines: 10 at once, then one a second later", lines == 11);
	test_err("... that one says how many went unlogged", logged, "[20 more refused since the last line]");
	ddpenv_store_close_within(s0, 0);
	test_err("... and the store's last line counts them all", logged,
		 "refused 31 clients in all: 31 wrong or missing token");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_worlds();
	test_errors();
	test_killed();
	test_add_overflow();
	test_waiting_bound();
	test_unwait_server();
	test_unwait_client(0);
	/* 2 s was UNWAIT's own bound: a 64-rank gloo set-up on 2 cores lost
	 * a rank's connection to it */
	test_unwait_client(2500);
	test_split_answer();
	test_impostor(IMP_OK, "a server that answers OK to anything",
		      "not a slurm-ddp store's answer to JOIN");
	test_impostor(IMP_BAD_PROOF, "a server whose proof is wrong",
		      "the server there could not prove that it holds this rank's rendezvous token");
	test_impostor(IMP_NO_PROOF, "a server with no proof (no token)",
		      "the server there could not prove that it holds this rank's rendezvous token");
	test_impostor(IMP_PROTO1, "a store of protocol 1", "it speaks store protocol 1");
	test_unread_answers();
	test_refusal_lines();
	return test_report();
}
