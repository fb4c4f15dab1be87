/* The comm layer's multi-rank logic on CPU ranks (threads), through the
 * interface the NCCL backend plugs into (struct cnn_comm_ext): the
 * bootstrap id made by rank 0 and carried by the store, the broadcast of
 * rank 0's parameters, the reducer's averaged buckets, and peer_lost, the
 * watchdog's question, with ranks as processes (one of them dies).  The backend here is a real all-reduce done through
 * the store ("store"): slow, exact, and needing no GPU, so what the NCCL
 * backend relies on is proven where no GPU is. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "test.h"

#define WORLD 4
#define ID_LEN 128

/* ---- the "store" backend ---------------------------------------------- */

struct store_impl {
	unsigned char id[ID_LEN];
	long seq;
};

static int make_id(void *id, char *err, size_t errlen)
{
	unsigned char *p = id;
	unsigned long long z = (unsigned long long)time(NULL) * 6364136223846793005ull + (uintptr_t)id;
	for (int i = 0; i < ID_LEN; i++) {
		z = z * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (unsigned char)(z >> 56);
	}
	return 0;
}

static int store_init(struct cnn_comm *c, const void *id, int timeout_ms, char *err, size_t errlen)
{
	struct store_impl *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(s->id, id, ID_LEN);
	c->impl = s;
	return 0;
}

/* Each rank publishes its buffer, then sums everyone's in rank order:
 * every rank computes the same floats. */
static int store_allreduce(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	struct store_impl *s = c->impl;
	char key[64];
	long seq = s->seq++;
	if (c->world == 1)
		return 0;
	snprintf(key, sizeof(key), "ar/%ld/%d", seq, c->rank);
	if (ddpenv_store_set(c->store, key, buf, n * sizeof(float), err, errlen) < 0)
		return -1;
	float *sum = calloc(n, sizeof(float));
	if (!sum)
		return -1;
	for (int r = 0; r < c->world; r++) {
		void *v;
		size_t l;
		snprintf(key, sizeof(key), "ar/%ld/%d", seq, r);
		if (ddpenv_store_get(c->store, key, 5000, &v, &l, err, errlen) < 0) {
			free(sum);
			return -1;
		}
		for (size_t i = 0; i < n && i < l / sizeof(float); i++)
			sum[i] += ((float *)v)[i];
		free(v);
	}
	memcpy(buf, sum, n * sizeof(float));
	free(sum);
	return 0;
}

static void store_destroy(struct cnn_comm *c)
{
	free(c->impl);
}

static const struct cnn_comm_ops store_ops = { "store", store_allreduce, store_destroy, NULL, NULL };
static const struct cnn_comm_ext store_ext = { &store_ops, ID_LEN, make_id, store_init };

/* ---- ranks as processes ----------------------------------------------- */

struct job {
	int rank, world, port;
	int ok_open, ok_bcast, ok_reduce, lost_before, lost_after;
	unsigned char id[ID_LEN];
	char err[512];
};

static void rank_main(struct job *j)
{
	struct cnn_comm *c;
	char err[512];
	struct cnn_comm_opts o = { "store", "127.0.0.1", j->port, j->rank, j->world, NULL, NULL, 10000,
				   &store_ext, NULL, NULL };
	if (cnn_comm_open(&c, &o, j->err, sizeof(j->err)) < 0)
		return;
	j->ok_open = 1;
	memcpy(j->id, ((struct store_impl *)c->impl)->id, ID_LEN);

	/* rank 0's parameters win */
	float p[1000];
	for (int i = 0; i < 1000; i++)
		p[i] = (float)(j->rank * 1000 + i);
	j->ok_bcast = cnn_comm_broadcast(c, p, 1000, 0, err, sizeof(err)) == 0;
	for (int i = 0; i < 1000; i++)
		j->ok_bcast &= p[i] == (float)i;

	/* two buckets averaged by the reducer thread, as the backward pushes them */
	struct cnn_reducer red;
	float g[300];
	for (int i = 0; i < 300; i++)
		g[i] = (float)(j->rank + 1) * (float)i;
	if (cnn_reducer_start(&red, c) == 0) {
		cnn_reducer_push(&red, g + 100, 200);
		cnn_reducer_push(&red, g, 100);
		j->ok_reduce = cnn_reducer_wait(&red, err, sizeof(err)) == 0;
		cnn_reducer_stop(&red);
	}
	/* mean of (r+1) over 4 ranks is 2.5 */
	for (int i = 0; i < 300; i++)
		j->ok_reduce &= g[i] == 2.5f * (float)i;

	j->lost_before = c->peer_lost(c);
	if (ddpenv_store_barrier(c->store, "checked", err, sizeof(err)) < 0)
		return;
	if (j->rank == j->world - 1)
		_exit(0);   /* dies: its socket closes without a goodbye */
	int lost = 0;
	for (int t = 0; t < 50 && !lost; t++) {
		lost = c->peer_lost(c);
		if (!lost)
			usleep(100000);
	}
	j->lost_after = lost;
	if (j->rank == 0) {
		char why[512] = "NCCL all-reduce: not done after 60 s";
		cnn_comm_explain_failure(c, why, sizeof(why));
		snprintf(j->err, sizeof(j->err), "%s", why);
	}
	cnn_comm_close(c);
}

static void test_world(void)
{
	struct job *jobs = mmap(NULL, WORLD * sizeof(*jobs), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kids[WORLD];
	int port = test_free_port();
	fflush(stdout);
	for (int r = WORLD - 1; r >= 0; r--) {
		jobs[r] = (struct job){ .rank = r, .world = WORLD, .port = port };
		if ((kids[r] = fork()) == 0) {
			alarm(60);
			rank_main(&jobs[r]);
			_exit(0);
		}
	}
	for (int r = 0; r < WORLD; r++)
		waitpid(kids[r], NULL, 0);

	int open = 0, same = 0, bcast = 0, reduce = 0, before = 0, after = 0;
	for (int r = 0; r < WORLD; r++) {
		open += jobs[r].ok_open;
		same += jobs[r].ok_open && memcmp(jobs[r].id, jobs[0].id, ID_LEN) == 0;
		bcast += jobs[r].ok_bcast;
		reduce += jobs[r].ok_reduce;
		before += jobs[r].lost_before;
		after += jobs[r].lost_after;
		if (!jobs[r].ok_open)
			printf("#   rank %d: %s\n", r, jobs[r].err);
	}
	test_cond("4 ranks open an external backend through the store", open == WORLD);
	test_cond("every rank got rank 0's bootstrap id (the ncclUniqueId path)", same == WORLD);
	test_cond("broadcast: every rank has rank 0's parameters", bcast == WORLD);
	test_cond("reducer: two buckets averaged over 4 ranks on every rank", reduce == WORLD);
	test_cond("peer_lost is 0 while every rank is there", before == 0);
	test_cond("peer_lost is 1 on the 3 survivors once rank 3 died", after == WORLD - 1);
	test_err("rank 0 names the rank that died", jobs[0].err, "rank 3 (");
	test_err("and keeps the backend's own message", jobs[0].err, "NCCL all-reduce: not done");
	munmap(jobs, WORLD * sizeof(*jobs));
}

/* A rank that stops on an error of its own marks the store and leaves it
 * cleanly (cnn_run_die): its goodbye alone looks like a finished rank's,
 * and within a node NCCL never reports it, so the mark is what stops the
 * others' watchdog.  failed: the rank that fails (0 hosts the store, and
 * keeps it up a moment for the others' questions, as cnn_run_die does). */
struct fjob {
	int rank, failed, port, ok_open, before, after;
	char why[512];
};

static void failed_main(struct fjob *j)
{
	struct cnn_comm *c;
	char err[512];
	struct cnn_comm_opts o = { "store", "127.0.0.1", j->port, j->rank, 3, NULL, NULL, 10000,
				   &store_ext, NULL, NULL };
	if (cnn_comm_open(&c, &o, j->why, sizeof(j->why)) < 0)
		return;
	j->ok_open = 1;
	j->before = c->peer_lost(c);
	if (ddpenv_store_barrier(c->store, "up", err, sizeof(err)) < 0)
		return;
	if (j->rank == j->failed) {
		char why[128];
		snprintf(why, sizeof(why), "rank %d (%s): step 7: checkpoint: No space left on device", j->rank,
			 c->host);
		cnn_comm_mark_failed(c, why);
		ddpenv_store_close_within(c->store, j->rank == 0 ? 3000 : 0);
		_exit(0);
	}
	for (int t = 0; t < 50 && !j->after; t++) {
		j->after = c->peer_lost(c);
		if (!j->after)
			usleep(100000);
	}
	snprintf(j->why, sizeof(j->why), "NCCL all-reduce: not done after 60 s");
	cnn_comm_explain_failure(c, j->why, sizeof(j->why));
	/* the other survivor must not leave before this one explained: it
	 * would be named too */
	int64_t v = 0;
	ddpenv_store_add(c->store, "explained", 1, &v, err, sizeof(err));
	for (int t = 0; t < 100 && v < 2; t++) {
		usleep(20000);
		if (ddpenv_store_add(c->store, "explained", 0, &v, err, sizeof(err)) < 0)
			break;
	}
	cnn_comm_close(c);
}

static void test_failed_rank(int failed)
{
	struct fjob *jobs = mmap(NULL, 3 * sizeof(*jobs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				 -1, 0);
	pid_t kids[3];
	int port = test_free_port(), open = 0, before = 0, after = 0;
	fflush(stdout);
	for (int r = 0; r < 3; r++) {
		jobs[r] = (struct fjob){ .rank = r, .failed = failed, .port = port };
		if ((kids[r] = fork()) == 0) {
			alarm(60);
			failed_main(&jobs[r]);
			_exit(0);
		}
	}
	for (int r = 0; r < 3; r++)
		waitpid(kids[r], NULL, 0);
	for (int r = 0; r < 3; r++) {
		open += jobs[r].ok_open;
		before += jobs[r].before != CNN_PEERS_OK;
		if (r != failed) {
			after += jobs[r].after == CNN_PEER_FAILED;
			printf("#   rank %d: peer_lost %d: %s\n", r, jobs[r].after, jobs[r].why);
		}
	}
	char what[160];
	int s = failed == 1 ? 0 : 1;   /* a survivor */
	snprintf(what, sizeof(what), "rank %d marks itself failed: 3 ranks open, none lost before", failed);
	test_cond(what, open == 3 && before == 0);
	snprintf(what, sizeof(what), "rank %d marked failed: peer_lost says CNN_PEER_FAILED on both survivors",
		 failed);
	test_cond(what, after == 2);
	snprintf(what, sizeof(what), "rank %d marked failed: a survivor's explanation names it as one that left",
		 failed);
	char name[32];
	snprintf(name, sizeof(name), "rank %d (", failed);
	test_err(what, jobs[s].why, name);
	test_err("on its own error", jobs[s].why, "stopped on its own error");
	test_err("and keeps the backend's own message", jobs[s].why, "NCCL all-reduce: not done");
	munmap(jobs, 3 * sizeof(*jobs));
}

/* In a forked child: rank r of 2 on the store at port, past a barrier
 * with the other (exits 1 where it cannot); rank 0 then waits 0.2 s, so
 * that the store answers rank 1's barrier before rank 0 goes on. */
static struct cnn_comm *rank_of_two(int r, int port)
{
	struct cnn_comm *c;
	char err[512];
	struct cnn_comm_opts o = { "store", "127.0.0.1", port, r, 2, NULL, NULL, 10000, &store_ext, NULL, NULL };
	alarm(60);
	if (cnn_comm_open(&c, &o, err, sizeof(err)) < 0 || ddpenv_store_barrier(c->store, "up", err, sizeof(err)) < 0)
		_exit(1);
	if (r == 0)
		usleep(200000);
	return c;
}

/* Marking oneself failed must not wait for a store that stopped
 * answering (rank 0 stopped here: its node gone silent) for the store's
 * bound (10 s here), but for 2 s, and then not again to leave. */
static void test_mark_silent_store(void)
{
	double *secs = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int port = test_free_port();
	pid_t kids[2];
	*secs = -1;
	fflush(stdout);
	for (int r = 0; r < 2; r++) {
		if ((kids[r] = fork()) == 0) {
			struct cnn_comm *c = rank_of_two(r, port);
			if (r == 0) {
				raise(SIGSTOP);
				_exit(0);
			}
			usleep(600000);
			struct timespec t0, t1;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			cnn_comm_mark_failed(c, "rank 1 (test): step 3: checkpoint: No space left on device");
			ddpenv_store_close_within(c->store, 0);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			*secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
			_exit(0);
		}
	}
	waitpid(kids[1], NULL, 0);
	kill(kids[0], SIGKILL);
	waitpid(kids[0], NULL, 0);
	printf("#   marking and leaving took %.2f s\n", *secs);
	test_cond("a rank marks itself failed and leaves a silent store within 3 s (its bound 10 s)",
		  *secs >= 1.5 && *secs < 3);
	munmap(secs, sizeof(double));
}

/* Rank 0, which holds the store, dies: a survivor's explanation says the
 * store is unreachable, with the store client's own words for why (the
 * store closed the connection, or did not answer in time). */
static void test_store_gone(void)
{
	char *why = mmap(NULL, 1024, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int port = test_free_port();
	pid_t kids[2];
	why[0] = 0;
	fflush(stdout);
	for (int r = 0; r < 2; r++) {
		if ((kids[r] = fork()) == 0) {
			struct cnn_comm *c = rank_of_two(r, port);
			if (r == 0) {
				_exit(0);         /* the store goes with it, without a goodbye */
			}
			usleep(600000);
			snprintf(why, 1024, "NCCL all-reduce: not done after 60 s");
			cnn_comm_explain_failure(c, why, 1024);
			_exit(0);
		}
	}
	for (int r = 0; r < 2; r++)
		waitpid(kids[r], NULL, 0);
	printf("#   %s\n", why);
	test_err("rank 0 and its store gone: a survivor says the store is unreachable", why,
		 "rank 0 (the rendezvous store) is unreachable, so rank 0 died or its node is gone (");
	test_err("... in the store client's words", why, "connection closed by the store (rank 0 exited?)");
	test_err("... and keeps the backend's own message", why, "); NCCL all-reduce: not done after 60 s");
	munmap(why, 1024);
}

static int bad_init(struct cnn_comm *c, const void *id, int timeout_ms, char *err, size_t errlen)
{
	snprintf(err, errlen, "NCCL ncclCommInitRankConfig: unhandled system error");
	return -1;
}

static void test_errors(void)
{
	struct cnn_comm *c;
	char err[512] = "";
	/* world 1: no store, the backend still initializes (NCCL of one rank) */
	struct cnn_comm_opts o = { "store", "127.0.0.1", test_free_port(), 0, 1, NULL, NULL, 2000, &store_ext, NULL, NULL };
	test_cond("world 1: an external backend opens without a store",
		  cnn_comm_open(&c, &o, err, sizeof(err)) == 0 && c->store == NULL && c->impl);
	if (c)
		test_cond("world 1: peer_lost says 0", c->peer_lost(c) == 0);
	cnn_comm_close(c);

	const struct cnn_comm_ext bad = { &store_ops, ID_LEN, make_id, bad_init };
	o.ext = &bad;
	test_cond("a failing backend init fails the open",
		  cnn_comm_open(&c, &o, err, sizeof(err)) == -1 && c == NULL);
	test_err("with the backend's message", err, "ncclCommInitRankConfig");

	o.backend = "nccl";
	o.ext = &store_ext;
	o.world = 2;
	test_cond("a backend name that is not the external one's is refused",
		  cnn_comm_open(&c, &o, err, sizeof(err)) == -1);
	test_err("naming it", err, "'nccl'");
}

int main(void)
{
	test_world();
	test_failed_rank(2);
	test_failed_rank(0);
	test_mark_silent_store();
	test_store_gone();
	test_errors();
	return test_report();
}
