/* Rendezvous fan-in of libddpenv's store: N simulated ranks as threads on
 * loopback, all started at once, each joins the store hosted by rank 0,
 * sets its key, waits on a barrier, reads rank 0's key and leaves.  Prints
 * one line per world size: the time from the start to the last rank's
 * completion, and the median rank's.
 *
 *   build/bench/rdzv_scale 256 1024 4096
 *
 * Each rank holds one socket and the server one per rank, so the process
 * needs 2N descriptors: the limit is raised as far as allowed. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv_store.h"

struct job {
	int rank, world, port, ok;
	double t0, done;
	char err[256];
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void *rank_main(void *arg)
{
	struct job *j = arg;
	struct ddpenv_store *s;
	struct ddpenv_store_opts o = { "127.0.0.1", j->port, j->rank, j->world, 60000, NULL, NULL, NULL };
	char key[32], val[32];
	void *v = NULL;
	size_t l;

	if (ddpenv_store_open(&s, &o, j->err, sizeof(j->err)) < 0)
		return NULL;
	snprintf(key, sizeof(key), "addr/%d", j->rank);
	snprintf(val, sizeof(val), "rank-%d", j->rank);
	if (ddpenv_store_set(s, key, val, strlen(val), j->err, sizeof(j->err)) == 0 &&
	    ddpenv_store_barrier(s, "joined", j->err, sizeof(j->err)) == 0 &&
	    ddpenv_store_get(s, "addr/0", -1, &v, &l, j->err, sizeof(j->err)) == 0) {
		if (l == 6 && memcmp(v, "rank-0", 6) == 0)
			j->ok = 1;
		else
			snprintf(j->err, sizeof(j->err), "rank %d read a wrong value of addr/0", j->rank);
		free(v);
	}
	j->done = now() - j->t0;
	/* rank 0 waits here until every rank has left: not part of the figure */
	ddpenv_store_close(s);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int run(int world)
{
	struct job *jobs = calloc((size_t)world, sizeof(*jobs));
	pthread_t *th = calloc((size_t)world, sizeof(*th));
	double *done = calloc((size_t)world, sizeof(*done));
	int port = free_port(), good = 0, started = 0;
	if (!jobs || !th || !done || port < 0) {
		fprintf(stderr, "rdzv_scale: out of memory or no free port\n");
		free(jobs);
		free(th);
		free(done);
		return -1;
	}
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 128 * 1024);
	double t0 = now();
	/* clients first: they must find rank 0 by retrying, as on a cluster */
	for (int r = world - 1; r >= 0; r--) {
		jobs[r] = (struct job){ .rank = r, .world = world, .port = port, .t0 = t0 };
		int e = pthread_create(&th[r], &at, rank_main, &jobs[r]);
		if (e != 0) {
			fprintf(stderr, "rdzv_scale: thread for rank %d: %s\n", r, strerror(e));
			jobs[r].rank = -1;
			continue;
		}
		started++;
	}
	pthread_attr_destroy(&at);
	int shown = 0;
	for (int r = 0; r < world; r++) {
		if (jobs[r].rank < 0)
			continue;
		pthread_join(th[r], NULL);
		if (jobs[r].ok)
			done[good++] = jobs[r].done;
		else if (shown++ < 3)
			fprintf(stderr, "rdzv_scale: rank %d: %s\n", r, jobs[r].err);
	}
	qsort(done, (size_t)good, sizeof(*done), cmp);
	printf("%-8d %10.3f %10.3f %8d\n", world, good ? done[good - 1] : 0.0,
	       good ? done[good / 2] : 0.0, world - good);
	fflush(stdout);
	free(jobs);
	free(th);
	free(done);
	return good == world && started == world ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	int maxw = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		int w = atoi(argv[i]);
		if (w < 1 || w > 65536) {
			fprintf(stderr, "usage: rdzv_scale WORLD... (each 1..65536), got '%s'\n", argv[i]);
			return 2;
		}
		maxw = w > maxw ? w : maxw;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: rdzv_scale WORLD...\n");
		return 2;
	}
	/* two descriptors per rank; root may raise the hard limit too */
	rlim_t want = (rlim_t)(2 * maxw + 64);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
		struct rlimit up = { want, rl.rlim_max > want ? rl.rlim_max : want };
		if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)(2 * maxw + 64)) {
		fprintf(stderr, "rdzv_scale: %d ranks need %d file descriptors, the limit is %llu "
			"(raise it with ulimit -n)\n", maxw, 2 * maxw + 64,
			(unsigned long long)rl.rlim_cur);
		return 2;
	}
	printf("%-8s %10s %10s %8s\n", "ranks", "last_s", "median_s", "failed");
	for (int i = 1; i < argc; i++)
		if (run(atoi(argv[i])) < 0)
			rc = 1;
	return rc;
}
