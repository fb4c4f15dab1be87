/* The shared-memory all-reduce of a node's gloo ranks (comm/comm_shm.c):
 * set up by every rank or by none; sums exact and the same bits on every
 * rank, at sizes around its chunk and over many calls; the bucket reducer
 * and the broadcast through it; the segment's name gone from /dev/shm
 * once mapped; a rank that cannot map it (another node: its own /dev/shm)
 * leaves every rank on gloo, saying why; a rank killed, one that
 * abandons, and one that never arrives each end the others' wait, the
 * first two within seconds, the last at --timeout; a rank that waits
 * long for a late peer sleeps after its spin; rank 0 killed in the set-up
 * leaves no name in /dev/shm.  Each rank's own buffer in the segment:
 * all-reduced where it lies, exact, the same bits as through the chunks
 * and on every rank, the mean one multiply after the sum, while the rank
 * writes elsewhere in it; none where the segment is not used; a /dev/shm
 * too small for a rank's buffer, or a buffer too large to address, leave
 * every rank on gloo, saying why.  Ranks are processes on loopback,
 * worlds of 2 to 5. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "comm.h"
#include "test.h"

#define MAXW 5

enum fate { LIVE, OWN_SHM, KILLED, ABANDONS, SLEEPS, LATE, SLOW, HUGE, TINY };

/* Floats of each rank's own buffer in the segment */
#define OWN_N (300001 + 4096)

struct job {
	int rank, world, port, timeout_ms;
	enum fate fate;          /* rank 1's, in the failure tests */
	int used;                /* cnn_comm_use_shm's answer */
	int sums, crcs_done, reducer, bcast, unlinked;
	int own_null, own_fresh;         /* cnn_comm_shm_buffer: NULL; aligned zeros */
	int own_sums, own_bits, own_mean, own_busy; /* in place: see own_tests */
	uint32_t crc;            /* of the non-integer sum */
	int failed;              /* the all-reduce after a peer's fate failed */
	double fail_s;           /* ... after this long */
	double wait_s, wait_cpu; /* SLOW: rank 0's wait for the reducer, its process's CPU in it */
	char why[256], err[512];
};

static double clock_s(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* SLOW: rank 1 pushes its bucket 1.5 s after rank 0; rank 0's wait for
 * the reducer (its thread in the barrier, the trainer's in the wait),
 * timed, with the process's CPU time in it.  1 when the mean is right. */
static int slow_peer(struct cnn_comm *c, struct job *j)
{
	static float b[1000];
	struct cnn_reducer r;
	int ok;

	for (size_t i = 0; i < 1000; i++)
		b[i] = (float)(j->rank + 1);
	if (cnn_reducer_start(&r, c) < 0)
		return 0;
	if (j->rank == 1)
		usleep(1500000);
	double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	cnn_reducer_push(&r, b, 1000);
	ok = cnn_reducer_wait(&r, j->err, sizeof(j->err)) == 0;
	j->wait_s = now_s() - t0;
	j->wait_cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	for (size_t i = 0; ok && i < 1000; i++)
		ok = b[i] == 1.5f;
	cnn_reducer_stop(&r);
	return ok;
}

/* buf[i] = (rank + 1) * (i % 1000): the sum is T * (i % 1000), exact */
static int sum_ok(struct cnn_comm *c, float *buf, size_t n, char *err, size_t len)
{
	float t = (float)(c->world * (c->world + 1) / 2);
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)((c->rank + 1) * (int)(i % 1000));
	if (cnn_comm_allreduce_sum(c, buf, n, err, len) < 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] != t * (float)(i % 1000))
			return 0;
	return 1;
}

/* The own buffer at off: exact sums at sizes and offsets (unaligned
 * ones too), then many calls.  1 when right. */
static int own_sums(struct cnn_comm *c, float *own, char *err, size_t len)
{
	static const size_t at[][2] = { { 0, 1 }, { 0, 8 }, { 13, 4097 }, { 0, OWN_N }, { 5, 262145 },
					{ OWN_N - 3, 3 }, { 1000, 0 } };
	int ok = 1;

	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]) && ok; k++)
		ok = sum_ok(c, own + at[k][0], at[k][1], err, len);
	for (int k = 0; k < 100 && ok; k++)
		ok = sum_ok(c, own + (size_t)k * 101, 1 + (size_t)k * 37, err, len);
	return ok;
}

/* Non-integers in the own buffer and in a buffer of the process's: the
 * same bits after their sums (and after their means: the sum times
 * 1/world, as a gloo rank's reducer scales).  crc: of the own sum. */
static void own_bits(struct cnn_comm *c, float *own, float *buf, struct job *j)
{
	static float ref[OWN_N];
	float inv = 1.f / (float)c->world;

	for (size_t i = 0; i < OWN_N; i++)
		own[i] = buf[i] = 1.0f / (float)(i + 1 + (size_t)j->rank * 3);
	if (cnn_comm_allreduce_sum(c, own, OWN_N, j->err, sizeof(j->err)) < 0 ||
	    cnn_comm_allreduce_sum(c, buf, OWN_N, j->err, sizeof(j->err)) < 0)
		return;
	j->own_bits = memcmp(own, buf, OWN_N * sizeof(float)) == 0;
	j->crc = (uint32_t)crc32(0, (const unsigned char *)own, OWN_N * sizeof(float));
	j->crcs_done = 1;
	for (size_t i = 0; i < OWN_N; i++)
		own[i] = buf[i] = ref[i] = 1.0f / (float)(i + 7 + (size_t)j->rank * 5);
	if (cnn_comm_allreduce_sum(c, ref, OWN_N, j->err, sizeof(j->err)) < 0 ||
	    cnn_comm_allreduce_mean(c, own, OWN_N, j->err, sizeof(j->err)) < 0 ||
	    cnn_comm_allreduce_mean(c, buf, OWN_N, j->err, sizeof(j->err)) < 0)
		return;
	for (size_t i = 0; i < OWN_N; i++)
		ref[i] *= inv;
	j->own_mean = memcmp(own, ref, OWN_N * sizeof(float)) == 0 && memcmp(buf, ref, OWN_N * sizeof(float)) == 0;
}

/* The trainer's pattern: the second half of the own buffer averaged on
 * the reducer's thread while this thread writes the first half, then the
 * first half.  1 when both means are right. */
static int own_busy(struct cnn_comm *c, float *own, struct job *j)
{
	struct cnn_reducer r;
	size_t half = OWN_N / 2;
	float t = (float)(c->world + 1) / 2.f; /* mean of rank + 1 */
	int ok = 1;

	for (size_t i = half; i < OWN_N; i++)
		own[i] = (float)((j->rank + 1) * 4);
	if (cnn_reducer_start(&r, c) < 0)
		return 0;
	cnn_reducer_push(&r, own + half, OWN_N - half);
	for (int pass = 0; pass < 20; pass++) /* writes while the peers read theirs */
		for (size_t i = 0; i < half; i++)
			own[i] = (float)((j->rank + 1) * (int)(i % 64 + pass - 19));
	cnn_reducer_push(&r, own, half);
	ok = cnn_reducer_wait(&r, j->err, sizeof(j->err)) == 0;
	cnn_reducer_stop(&r);
	for (size_t i = 0; ok && i < half; i++)
		ok = own[i] == t * (float)(int)(i % 64);
	for (size_t i = half; ok && i < OWN_N; i++)
		ok = own[i] == t * 4.f;
	return ok;
}

/* The segment this process maps, by name, is deleted: 1 */
static int segment_unlinked(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int seen = 0, deleted = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "/ddp-allreduce-")) {
			seen = 1;
			deleted = strstr(line, "(deleted)") != NULL;
		}
	if (f)
		fclose(f);
	return seen && deleted;
}

static void rank_main(struct job *j)
{
	struct cnn_comm *c;
	struct cnn_comm_opts o = { "gloo", "127.0.0.1", j->port, j->rank, j->world, "lo", NULL, j->timeout_ms,
				   NULL, NULL, NULL };
	static float buf[3 * 262144 + 77]; /* more than OWN_N */
	static const size_t sizes[] = { 1, 2, 7, 4095, 4096, 4097, 262143, 262144, 262145, 3 * 262144 + 77 };

	if (j->fate == OWN_SHM && j->rank == 1) {
		/* another node's /dev/shm: rank 0's name is not there */
		if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") < 0) {
			snprintf(j->err, sizeof(j->err), "SKIP a /dev/shm of its own: %m");
			j->fate = LIVE; /* still takes part */
		}
	}
	if (cnn_comm_open(&c, &o, j->err, sizeof(j->err)) < 0)
		return;
	if (j->fate == LATE && j->rank == 2)
		sleep(5); /* rank 0 waits for this rank's answer meanwhile */
	j->used = cnn_comm_use_shm(c, j->timeout_ms, j->fate == HUGE ? SIZE_MAX / 4 : OWN_N, j->why, sizeof(j->why),
				   j->err, sizeof(j->err));
	if (j->used < 0)
		goto out;
	j->unlinked = j->used ? segment_unlinked() : 1;
	float *own = cnn_comm_shm_buffer(c);
	j->own_null = own == NULL;
	if (own) {
		size_t z = 0;
		while (z < OWN_N && own[z] == 0.f)
			z++;
		j->own_fresh = ((uintptr_t)own & 63) == 0 && z == OWN_N;
	}
	if (j->fate == SLOW) {
		j->sums = slow_peer(c, j);
		goto out;
	}
	if (j->fate != LIVE && j->fate != OWN_SHM && j->fate != HUGE && j->fate != TINY) {
		/* the peer's fate, then rank 0's next all-reduce */
		if (j->rank == 1) {
			if (j->fate == KILLED)
				raise(SIGKILL);
			if (j->fate == ABANDONS) {
				cnn_comm_abandon(c);
				sleep(3); /* alive and in the store: only the flag tells */
			}
			if (j->fate == SLEEPS)
				sleep(3);
			goto out;
		}
		if (j->rank == 0) {
			double t0 = now_s();
			j->failed = cnn_comm_allreduce_sum(c, buf, 1000, j->err, sizeof(j->err)) < 0;
			j->fail_s = now_s() - t0;
			if (j->failed && j->fate == KILLED)
				cnn_comm_explain_failure(c, j->err, sizeof(j->err));
		}
		goto out;
	}
	j->sums = 1;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && j->sums; k++)
		j->sums = sum_ok(c, buf, sizes[k], j->err, sizeof(j->err));
	for (int k = 0; k < 200 && j->sums; k++) /* many calls: the halves take turns */
		j->sums = sum_ok(c, buf, 1 + (size_t)k * 37, j->err, sizeof(j->err));
	if (own) {
		j->own_sums = j->sums && own_sums(c, own, j->err, sizeof(j->err));
		/* non-integer values: every rank the same bits */
		own_bits(c, own, buf, j);
		j->own_busy = own_busy(c, own, j);
	} else {
		for (size_t i = 0; i < 300001; i++)
			buf[i] = 1.0f / (float)(i + 1 + (size_t)j->rank * 3);
		if (cnn_comm_allreduce_sum(c, buf, 300001, j->err, sizeof(j->err)) == 0) {
			j->crc = (uint32_t)crc32(0, (const unsigned char *)buf, 300001 * sizeof(float));
			j->crcs_done = 1;
		}
	}
	/* the reducer: buckets summed and averaged on its thread */
	struct cnn_reducer r;
	static float b1[5000], b2[300000];
	if (cnn_reducer_start(&r, c) == 0) {
		for (size_t i = 0; i < 5000; i++)
			b1[i] = (float)(j->rank * 2);
		for (size_t i = 0; i < 300000; i++)
			b2[i] = (float)(i % 7) * (float)(j->rank + 1);
		cnn_reducer_push(&r, b1, 5000);
		cnn_reducer_push(&r, b2, 300000);
		int ok = cnn_reducer_wait(&r, j->err, sizeof(j->err)) == 0;
		float mean_rank2 = (float)(j->world - 1); /* mean of 2*rank */
		float tw = (float)(j->world * (j->world + 1) / 2) / (float)j->world;
		for (size_t i = 0; ok && i < 5000; i++)
			ok = b1[i] == mean_rank2;
		for (size_t i = 0; ok && i < 300000; i++)
			ok = b2[i] == (float)(i % 7) * tw;
		j->reducer = ok;
		cnn_reducer_stop(&r);
	}
	/* broadcast: rank world-1's values everywhere */
	for (size_t i = 0; i < 4100; i++)
		buf[i] = (float)(j->rank * 10000 + (int)i);
	if (cnn_comm_broadcast(c, buf, 4100, j->world - 1, j->err, sizeof(j->err)) == 0) {
		j->bcast = 1;
		for (size_t i = 0; i < 4100 && j->bcast; i++)
			j->bcast = buf[i] == (float)((j->world - 1) * 10000 + (int)i);
	}
out:
	cnn_comm_close(c);
}

/* world ranks into jobs, each a process, waited for */
static void spawn(struct job *jobs, int world, enum fate fate, int timeout_ms)
{
	pid_t kids[MAXW];
	int port = test_free_port();

	fflush(stdout);
	for (int r = world - 1; r >= 0; r--) {
		jobs[r] = (struct job){ .rank = r, .world = world, .port = port, .timeout_ms = timeout_ms, .fate = fate };
		if ((kids[r] = fork()) == 0) {
			alarm(90);
			rank_main(&jobs[r]);
			_exit(0);
		}
	}
	for (int r = 0; r < world; r++)
		waitpid(kids[r], NULL, 0);
}

static struct job *run_world(int world, enum fate fate, int timeout_ms)
{
	struct job *jobs = mmap(NULL, MAXW * sizeof(*jobs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				-1, 0);
	spawn(jobs, world, fate, timeout_ms);
	return jobs;
}

static void test_world(int world)
{
	struct job *j = run_world(world, LIVE, 20000);
	int used = 0, sums = 0, reducer = 0, bcast = 0, unlinked = 0, same = 1;
	int fresh = 0, osums = 0, obits = 0, omean = 0, obusy = 0;
	char d[200];

	for (int r = 0; r < world; r++) {
		used += j[r].used == 1;
		sums += j[r].sums;
		reducer += j[r].reducer;
		bcast += j[r].bcast;
		unlinked += j[r].unlinked;
		same &= j[r].crcs_done && j[r].crc == j[0].crc;
		fresh += j[r].own_fresh;
		osums += j[r].own_sums;
		obits += j[r].own_bits;
		omean += j[r].own_mean;
		obusy += j[r].own_busy;
		if (j[r].err[0] || j[r].why[0])
			printf("#   rank %d: %s %s\n", r, j[r].err, j[r].why);
	}
	snprintf(d, sizeof(d), "world %d: every rank maps rank 0's segment", world);
	test_cond(d, used == world);
	snprintf(d, sizeof(d), "world %d: ... whose name is gone from /dev/shm", world);
	test_cond(d, unlinked == world);
	snprintf(d, sizeof(d), "world %d: exact sums at 10 sizes around the chunk, then 200 calls", world);
	test_cond(d, sums == world);
	snprintf(d, sizeof(d), "world %d: each rank's own buffer, 64-byte aligned, zeros at first", world);
	test_cond(d, fresh == world);
	snprintf(d, sizeof(d), "world %d: ... exact sums in place at 7 places and sizes, then 100 calls", world);
	test_cond(d, osums == world);
	snprintf(d, sizeof(d), "world %d: ... the same bits in place as through the chunks (%d non-integers)",
		 world, OWN_N);
	test_cond(d, obits == world);
	snprintf(d, sizeof(d), "world %d: ... and on every rank", world);
	test_cond(d, same);
	snprintf(d, sizeof(d), "world %d: ... the mean the bits of the sum times 1/%d, in place and not", world, world);
	test_cond(d, omean == world);
	snprintf(d, sizeof(d), "world %d: ... one half averaged on the reducer's thread while the rank writes the other",
		 world);
	test_cond(d, obusy == world);
	snprintf(d, sizeof(d), "world %d: the reducer's buckets summed and averaged", world);
	test_cond(d, reducer == world);
	snprintf(d, sizeof(d), "world %d: a broadcast from the last rank", world);
	test_cond(d, bcast == world);
	munmap(j, MAXW * sizeof(*j));
}

/* Rank 1 on a /dev/shm of its own, as on another node: gloo for all. */
static void test_other_node(void)
{
	if (geteuid() != 0) {
		test_skip("a rank that cannot map the segment", "not root (a /dev/shm of its own needs a mount)");
		return;
	}
	struct job *j = run_world(3, OWN_SHM, 20000);
	if (strncmp(j[1].err, "SKIP ", 5) == 0) {
		test_skip("a rank that cannot map the segment", j[1].err + 5);
	} else {
		printf("#   rank 0: %s\n#   rank 1: %s\n#   rank 2: %s\n", j[0].why, j[1].why, j[2].why);
		test_cond("a rank that cannot map the segment (another node's /dev/shm): no rank uses it",
			  j[0].used == 0 && j[1].used == 0 && j[2].used == 0);
		test_err("... rank 0 names it and why", j[0].why, "rank 1: /ddp-allreduce-");
		test_err("... (no such name in its /dev/shm)", j[0].why, "No such file or directory (another node's)");
		test_err("... the others say a peer could not", j[2].why, "a peer could not map rank 0's segment");
		test_cond("... and gloo sums as before", j[0].sums && j[1].sums && j[2].sums && j[0].reducer &&
			  j[0].crc == j[1].crc && j[1].crc == j[2].crc);
		test_cond("... and no rank has an own buffer", j[0].own_null && j[1].own_null && j[2].own_null);
	}
	munmap(j, MAXW * sizeof(*j));
}

/* Own buffers too large to address: every rank on gloo, saying why,
 * without asking the store. */
static void test_huge(void)
{
	struct job *j = run_world(2, HUGE, 20000);
	printf("#   rank 0: %s\n", j[0].why);
	test_cond("own buffers too large for a segment: no rank uses it", j[0].used == 0 && j[1].used == 0);
	test_err("... saying so", j[0].why, "floats a rank for 2 ranks: too large for a segment");
	test_cond("... and gloo sums", j[0].sums && j[1].sums && j[0].own_null && j[1].own_null);
	munmap(j, MAXW * sizeof(*j));
}

/* Both ranks on a /dev/shm of 10 MiB: rank 0's staging halves (8 MiB)
 * and its own buffer fit, rank 1's buffer does not.  Rank 1 says so at
 * the set-up (posix_fallocate), and every rank uses gloo. */
static void test_tiny_shm(void)
{
	struct job *j = mmap(NULL, MAXW * sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kid;
	int st = 0;

	if (geteuid() != 0) {
		test_skip("a /dev/shm too small for a rank's buffer", "not root (a /dev/shm of its own needs a mount)");
		return;
	}
	fflush(stdout);
	if ((kid = fork()) == 0) {
		if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=10m") < 0)
			_exit(3);
		spawn(j, 2, TINY, 20000);
		_exit(0);
	}
	waitpid(kid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
		test_skip("a /dev/shm too small for a rank's buffer", "cannot mount a tmpfs of its own");
	} else {
		printf("#   rank 0: %s\n#   rank 1: %s\n", j[0].why, j[1].why);
		test_cond("a /dev/shm too small for rank 1's buffer: no rank uses the segment",
			  j[0].used == 0 && j[1].used == 0);
		test_err("... rank 0 names rank 1", j[0].why, "rank 1: /ddp-allreduce-");
		test_err("... out of space at its set-up", j[1].why, "bytes for this rank's buffer: No space left on device");
		test_cond("... and gloo sums", j[0].sums && j[1].sums && j[0].reducer && j[1].reducer);
	}
	munmap(j, MAXW * sizeof(*j));
}

static void test_fates(void)
{
	struct job *j = run_world(2, KILLED, 20000);
	printf("#   killed: %s (%.2f s)\n", j[0].err, j[0].fail_s);
	test_cond("rank 1 killed: rank 0's all-reduce fails within 3 s, not at --timeout",
		  j[0].used == 1 && j[0].failed && j[0].fail_s < 3);
	test_err("... and names it", j[0].err, "rank 1 (");
	test_err("... as dead", j[0].err, ") died; shared-memory all-reduce: a peer left the rendezvous");
	munmap(j, MAXW * sizeof(*j));

	j = run_world(2, ABANDONS, 20000);
	printf("#   abandoned: %s (%.2f s)\n", j[0].err, j[0].fail_s);
	test_cond("rank 1 abandons: rank 0's all-reduce fails within a second",
		  j[0].used == 1 && j[0].failed && j[0].fail_s < 1);
	test_err("... saying so", j[0].err, "shared-memory all-reduce: a peer abandoned it");
	munmap(j, MAXW * sizeof(*j));

	j = run_world(2, SLEEPS, 1500);
	printf("#   never arrives: %s (%.2f s)\n", j[0].err, j[0].fail_s);
	test_cond("rank 1 never arrives: rank 0's all-reduce fails at --timeout (1.5 s)",
		  j[0].used == 1 && j[0].failed && j[0].fail_s >= 1.4 && j[0].fail_s < 4);
	test_err("... saying so", j[0].err, "shared-memory all-reduce: a peer did not arrive in 1.5 s (--timeout)");
	munmap(j, MAXW * sizeof(*j));
}

/* A peer 1.5 s late: rank 0 keeps its core for CNN_COMM_SPIN_MS (its
 * reducer's thread in the barrier, its trainer's thread in the wait),
 * then sleeps until the peer comes: a long wait costs no core. */
static void test_slow_peer(void)
{
	struct job *j = run_world(2, SLOW, 20000);
	printf("#   rank 0 waited %.2f s, %.3f s of CPU; %s\n", j[0].wait_s, j[0].wait_cpu, j[0].err);
	test_cond("a peer 1.5 s late: the mean right on both ranks", j[0].used == 1 && j[0].sums && j[1].sums);
	test_cond("... rank 0 waited for it", j[0].wait_s > 1.2);
	test_cond("... asleep after the spin: under 0.4 s of CPU in the wait", j[0].wait_cpu < 0.4);
	munmap(j, MAXW * sizeof(*j));
}

/* The segment's name in PID's mappings into name (its /dev/shm path):
 * 1, else 0 */
static int mapped_segment(pid_t pid, char *name, size_t len)
{
	char path[64], line[512];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "/dev/shm/ddp-allreduce-");
		if (p) {
			snprintf(name, len, "%.*s", (int)strcspn(p, " \n"), p);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/* Rank 0 SIGKILLed while it waits for rank 2's answer, once rank 1 has
 * mapped the segment whose name rank 0 would have removed: rank 1 fails
 * the set-up and removes it; nothing of the step is left in /dev/shm. */
static void test_rank0_killed_in_setup(void)
{
	struct job *j = mmap(NULL, MAXW * sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kids[3];
	int port = test_free_port(), seen = 0;
	char name[128] = "";

	fflush(stdout);
	for (int r = 2; r >= 0; r--) {
		j[r] = (struct job){ .rank = r, .world = 3, .port = port, .timeout_ms = 20000, .fate = LATE };
		if ((kids[r] = fork()) == 0) {
			alarm(90);
			rank_main(&j[r]);
			_exit(0);
		}
	}
	for (int i = 0; i < 400 && !(seen = mapped_segment(kids[1], name, sizeof(name))); i++)
		usleep(10000);
	if (seen)
		kill(kids[0], SIGKILL);
	for (int r = 0; r < 3; r++)
		waitpid(kids[r], NULL, 0);
	printf("#   rank 1: %s\n", j[1].err);
	test_cond("rank 0 killed in the set-up, after rank 1 mapped its segment", seen);
	test_cond("... rank 1's set-up fails", j[1].used == -1);
	test_cond("... and the segment's name is gone from /dev/shm", seen && access(name, F_OK) != 0);
	if (seen && access(name, F_OK) == 0)
		unlink(name);
	munmap(j, MAXW * sizeof(*j));
}

/* One rank, another backend: not used, saying why. */
static void test_not_used(void)
{
	struct cnn_comm *c;
	char err[256] = "", why[128] = "";
	struct cnn_comm_opts o = { "gloo", "127.0.0.1", 1, 0, 1, NULL, NULL, 1000, NULL, NULL, NULL };

	if (cnn_comm_open(&c, &o, err, sizeof(err)) < 0) {
		test_cond("world 1 opens", 0);
		return;
	}
	test_cond("world 1: no shared memory", cnn_comm_use_shm(c, 1000, 0, why, sizeof(why), err, sizeof(err)) == 0);
	test_streq("... one rank", why, "one rank");
	cnn_comm_close(c);
}

int main(void)
{
	test_not_used();
	for (int w = 2; w <= MAXW; w++)
		test_world(w);
	test_other_node();
	test_huge();
	test_tiny_shm();
	test_fates();
	test_slow_peer();
	test_rank0_killed_in_setup();
	return test_report();
}
