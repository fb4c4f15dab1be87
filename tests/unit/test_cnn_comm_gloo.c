/* The gloo backend's collectives beyond the all-reduce (comm.h), which
 * ddp-check sweeps: all-gather, reduce-scatter (a ring on gloo's unbound
 * buffers), all-to-all, and the pairwise exchange its link test times.
 * Ranks are processes on loopback, worlds of 3 to 6; every element
 * checked, and the buffer reused at once as ddp-check does (where gloo's
 * own ReduceScatterHalvingDoubling still sent from it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "test.h"

#define MAXW 6

struct job {
	int rank, world, port;
	int open, gather, scatter, scatter_again, scatter_other, alltoall, exchange, sweep;
	char err[512];
};

static int allgather_ok(struct cnn_comm *c, char *err, size_t len)
{
	enum { N = 5 };
	float in[N], out[MAXW * N];
	for (int i = 0; i < N; i++)
		in[i] = (float)(c->rank * 100 + i);
	memset(out, 0, sizeof(out));
	if (cnn_comm_allgather(c, in, out, N, err, len) < 0)
		return 0;
	for (int r = 0; r < c->world; r++)
		for (int i = 0; i < N; i++)
			if (out[r * N + i] != (float)(r * 100 + i))
				return 0;
	return 1;
}

/* buf[j] = (rank+1)*(j+1): this rank's share of the sum is T*(j+1) for j
 * in rank*n..rank*n+n, T = 1+2+..+world. */
static int reduce_scatter_ok(struct cnn_comm *c, float *buf, size_t n, char *err, size_t len)
{
	float t = (float)(c->world * (c->world + 1) / 2);
	for (size_t j = 0; j < n * (size_t)c->world; j++)
		buf[j] = (float)((c->rank + 1) * (int)(j + 1));
	if (cnn_comm_reduce_scatter_sum(c, buf, n, err, len) < 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] != t * (float)((size_t)c->rank * n + i + 1))
			return 0;
	return 1;
}

static int alltoall_ok(struct cnn_comm *c, char *err, size_t len)
{
	enum { N = 4 };
	float in[MAXW * N], out[MAXW * N];
	for (int j = 0; j < c->world; j++)
		for (int i = 0; i < N; i++)
			in[j * N + i] = (float)(c->rank * 1000 + j * 10 + i);
	if (cnn_comm_alltoall(c, in, out, N, err, len) < 0)
		return 0;
	for (int j = 0; j < c->world; j++)
		for (int i = 0; i < N; i++)
			if (out[j * N + i] != (float)(j * 1000 + c->rank * 10 + i))
				return 0;
	return 1;
}

/* Ranks paired 0-1, 2-3; in a world of 3, rank 2 sits out (1: nothing to
 * prove). */
static int exchange_ok(struct cnn_comm *c, char *err, size_t len)
{
	enum { N = 3000 };
	static float out[N], in[N];
	int peer = c->rank ^ 1;
	if (peer >= c->world)
		return 1;
	for (int i = 0; i < N; i++)
		out[i] = (float)(c->rank * 10000 + i);
	if (cnn_comm_exchange(c, peer, 7, out, in, N, err, len) < 0)
		return 0;
	for (int i = 0; i < N; i++)
		if (in[i] != (float)(peer * 10000 + i))
			return 0;
	return 1;
}

/* ddp-check's use: each size checked, the buffer zeroed at once on return
 * (a peer still sending from it would spoil another rank's share), then
 * the next size on the same buffer. */
static int sweep_ok(struct cnn_comm *c, char *err, size_t len)
{
	static float buf[MAXW * 64];
	int ok = 1;
	for (size_t n = 1; n <= 64; n++) {
		ok &= reduce_scatter_ok(c, buf, n, err, len);
		memset(buf, 0, sizeof(buf));
		if (cnn_comm_reduce_scatter_sum(c, buf, n, err, len) < 0)
			return 0;
	}
	return ok;
}

static void rank_main(struct job *j)
{
	struct cnn_comm *c;
	struct cnn_comm_opts o = { "gloo", "127.0.0.1", j->port, j->rank, j->world, "lo", NULL, 20000,
				   NULL, NULL, NULL };
	static float buf[MAXW * 1000], other[MAXW * 37];

	if (cnn_comm_open(&c, &o, j->err, sizeof(j->err)) < 0)
		return;
	j->open = 1;
	j->gather = allgather_ok(c, j->err, sizeof(j->err));
	j->scatter = reduce_scatter_ok(c, buf, 1000, j->err, sizeof(j->err));
	j->scatter_again = reduce_scatter_ok(c, buf, 1000, j->err, sizeof(j->err));
	j->scatter_other = reduce_scatter_ok(c, other, 37, j->err, sizeof(j->err));
	j->alltoall = alltoall_ok(c, j->err, sizeof(j->err));
	j->exchange = exchange_ok(c, j->err, sizeof(j->err));
	j->sweep = sweep_ok(c, j->err, sizeof(j->err));
	cnn_comm_close(c);
}

static void test_world(int world)
{
	struct job *jobs = mmap(NULL, MAXW * sizeof(*jobs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				-1, 0);
	pid_t kids[MAXW];
	int port = test_free_port(), n[8] = { 0 };
	char d[160];

	fflush(stdout);
	for (int r = world - 1; r >= 0; r--) {
		jobs[r] = (struct job){ .rank = r, .world = world, .port = port };
		if ((kids[r] = fork()) == 0) {
			alarm(60);
			rank_main(&jobs[r]);
			_exit(0);
		}
	}
	for (int r = 0; r < world; r++) {
		waitpid(kids[r], NULL, 0);
		n[0] += jobs[r].open;
		n[1] += jobs[r].gather;
		n[2] += jobs[r].scatter;
		n[3] += jobs[r].scatter_again;
		n[4] += jobs[r].scatter_other;
		n[5] += jobs[r].alltoall;
		n[6] += jobs[r].exchange;
		n[7] += jobs[r].sweep;
		if (jobs[r].err[0])
			printf("#   rank %d: %s\n", r, jobs[r].err);
	}
	static const char *const what[8] = {
		"open a gloo mesh on loopback",
		"all-gather: every rank's share in rank order",
		"reduce-scatter: this rank's share of the sum in buf[0..n)",
		"reduce-scatter again on the same buffer",
		"reduce-scatter on another buffer and count",
		"all-to-all: share j from rank j",
		"exchange: each pair's buffers swapped",
		"reduce-scatter at 64 sizes, each checked, the buffer zeroed on return",
	};
	for (int k = 0; k < 8; k++) {
		snprintf(d, sizeof(d), "world %d: %s", world, what[k]);
		test_cond(d, n[k] == world);
	}
	munmap(jobs, MAXW * sizeof(*jobs));
}

/* World 1 needs no backend: copies; another backend: refused by name. */
static void test_one(void)
{
	struct cnn_comm *c;
	char err[256] = "";
	struct cnn_comm_opts o = { "gloo", "127.0.0.1", 1, 0, 1, NULL, NULL, 1000, NULL, NULL, NULL };
	float in[3] = { 1, 2, 3 }, out[3] = { 0 };

	if (cnn_comm_open(&c, &o, err, sizeof(err)) < 0) {
		test_cond("world 1 opens", 0);
		return;
	}
	test_cond("world 1: all-gather copies", cnn_comm_allgather(c, in, out, 3, err, sizeof(err)) == 0 &&
							  out[2] == 3);
	test_cond("world 1: reduce-scatter leaves the buffer", cnn_comm_reduce_scatter_sum(c, in, 3, err,
											   sizeof(err)) == 0 && in[1] == 2);
	test_cond("world 1: exchange has no peer", cnn_comm_exchange(c, 0, 1, in, out, 3, err, sizeof(err)) < 0);
	test_err("world 1: ... and says so", err, "exchange: peer 0: expected another rank of 0..0");
	cnn_comm_close(c);
}

int main(void)
{
	test_one();
	test_world(3);
	test_world(4);
	test_world(5);
	test_world(6);
	return test_report();
}
