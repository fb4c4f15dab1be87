/* The stop on a signal (trainer/stop.c): ranks as processes, the store as
 * in a run.  Each rank's steps are coupled as a run's are: a rank starts
 * step s only once every rank has started step s-2 (the GPU path's two
 * slots: its host is at most two steps ahead of its finished steps, which
 * needed every rank's all-reduce), with jitter, so the ranks drift apart
 * as far as a run lets them.  A signal on some ranks at some step must
 * stop every rank after the same step, soon after it.  Then the signal
 * thread, with real signals, in children. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv_store.h"
#include "stop.h"
#include "test.h"

#define WORLD 4
#define EVERY 8

struct job {
	int rank, port, sig_at;   /* sig_at: the step this rank gets a signal at; -1 never */
	long long stopped;        /* steps done when it stopped; -1 it ran out */
	long long at;
	int why;
	char err[256];
};

static void rank_main(struct job *j, unsigned seed)
{
	struct ddpenv_store *s;
	struct ddpenv_store_opts o = { "127.0.0.1", j->port, j->rank, WORLD, 10000, NULL, NULL, NULL };
	struct cnn_stop st;
	memset(&st, 0, sizeof(st));
	st.every = EVERY;
	st.at = -1;
	j->stopped = -1;
	if (ddpenv_store_open(&s, &o, j->err, sizeof(j->err)) < 0)
		return;
	for (long long steps = 0; steps < 400; steps++) {
		char key[32];
		int64_t v;
		if (steps == j->sig_at)
			atomic_store(&st.sig, SIGTERM);
		int r = cnn_stop_poll(&st, s, j->rank, steps, j->err, sizeof(j->err));
		if (r < 0)
			break;
		if (r > 0) {
			j->stopped = steps;
			break;
		}
		/* start step `steps` (0-based index) once all started steps-2 */
		snprintf(key, sizeof(key), "started/%lld", steps);
		if (ddpenv_store_add(s, key, 1, &v, j->err, sizeof(j->err)) < 0)
			break;
		if (steps >= 2) {
			snprintf(key, sizeof(key), "started/%lld", steps - 2);
			do {
				if (ddpenv_store_add(s, key, 0, &v, j->err, sizeof(j->err)) < 0)
					goto out;
			} while (v < WORLD && usleep(100) == 0);
		}
		seed = seed * 1103515245u + 12345u;
		usleep((seed >> 16) % 700);   /* up to 0.7 ms a step, different on each rank */
	}
out:
	j->at = st.at;
	j->why = st.why;
	/* the run's end: wait for all, so that rank 0's store stays up */
	char e2[256];
	ddpenv_store_barrier(s, "end", e2, sizeof(e2));
	ddpenv_store_close(s);
}

static void run_world(const char *name, const int *sig_at)
{
	struct job *jobs = mmap(NULL, WORLD * sizeof(*jobs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				-1, 0);
	pid_t kids[WORLD];
	int port = test_free_port(), first = 1 << 30;
	fflush(stdout);
	for (int r = 0; r < WORLD; r++) {
		jobs[r] = (struct job){ .rank = r, .port = port, .sig_at = sig_at[r] };
		if (sig_at[r] >= 0 && sig_at[r] < first)
			first = sig_at[r];
		if ((kids[r] = fork()) == 0) {
			alarm(60);
			rank_main(&jobs[r], 7919u * (unsigned)(r + 1) + (unsigned)time(NULL));
			_exit(0);
		}
	}
	for (int r = 0; r < WORLD; r++)
		waitpid(kids[r], NULL, 0);
	int same = 1;
	for (int r = 0; r < WORLD; r++) {
		printf("#   rank %d: signal at %d, stopped after %lld (agreed %lld, why %d)%s%s\n", r, sig_at[r],
		       jobs[r].stopped, jobs[r].at, jobs[r].why, jobs[r].err[0] ? ": " : "", jobs[r].err);
		same &= jobs[r].stopped == jobs[0].stopped && jobs[r].stopped >= 0;
	}
	char what[200];
	snprintf(what, sizeof(what), "%s: every rank stops after the same step", name);
	test_cond(what, same);
	/* rank 0 learns it at its next poll (or a request's: one more), and
	 * stops a period later */
	snprintf(what, sizeof(what), "%s: after the signal, within three poll periods (%d steps)", name,
		 3 * EVERY);
	test_cond(what, jobs[0].stopped >= first && jobs[0].stopped <= first + 3 * EVERY);
	snprintf(what, sizeof(what), "%s: at a step a poll period after one that is a multiple of it", name);
	test_cond(what, jobs[0].stopped % EVERY == 0);
	munmap(jobs, WORLD * sizeof(*jobs));
}

static void test_agreement(void)
{
	int on0[WORLD] = { 37, -1, -1, -1 }, on3[WORLD] = { -1, -1, -1, 41 },
	    all[WORLD] = { 52, 50, 55, 49 }, edge[WORLD] = { 16, -1, -1, -1 };
	run_world("a signal on rank 0 alone", on0);
	run_world("a signal on rank 3 alone (rank 0 learns it from the store)", on3);
	run_world("a signal on every rank, at different steps", all);
	run_world("a signal on rank 0 at a poll step", edge);
}

static void test_world1(void)
{
	struct cnn_stop st;
	char err[256];
	memset(&st, 0, sizeof(st));
	st.every = EVERY;
	st.at = -1;
	int r1 = cnn_stop_poll(&st, NULL, 0, 5, err, sizeof(err));
	atomic_store(&st.sig, SIGUSR1);
	int r2 = cnn_stop_poll(&st, NULL, 0, 6, err, sizeof(err));
	test_cond("world 1: no signal, no stop; a signal stops it at the next step",
		  r1 == 0 && r2 == 1 && st.at == 6 && st.why == SIGUSR1);
	test_cond("stop_every: 65536/batch on a GPU, 1024/batch on CPUs, at least 8",
		  cnn_stop_every(64, 1) == 1024 && cnn_stop_every(64, 0) == 16 && cnn_stop_every(1024, 0) == 8 &&
			  cnn_stop_every(1 << 20, 1) == 8);
	test_cond("the signals' names", !strcmp(cnn_stop_name(SIGTERM), "SIGTERM") &&
					       !strcmp(cnn_stop_name(-1), "a signal on another rank"));
}

/* In a child: the signal thread started (ignore: that signal ignored
 * before, as a shell does for a background job's SIGINT), training set or
 * not, the signal first sent, and after it has been taken: then (0: none)
 * sent, or cnn_stop_raise (-1).  The child's wait status, and the seconds
 * it lived in *secs. */
struct child {
	int ignore, training, first, then, grace_s;
};

static int run_child(const struct child *c, double *secs)
{
	struct timespec t0, t1;
	int status = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		struct cnn_stop st;
		char err[256];
		alarm(20);
		/* each case's own disposition on entry: a shell's background
		 * job (make check under nohup ... &) starts with SIGINT and
		 * SIGQUIT ignored */
		signal(SIGINT, SIG_DFL);
		signal(SIGQUIT, SIG_DFL);
		if (c->ignore)
			signal(c->ignore, SIG_IGN);
		if (cnn_stop_init(&st, err, sizeof(err)) < 0)
			_exit(2);
		if (c->grace_s)
			st.grace_s = c->grace_s;
		snprintf(st.who, sizeof(st.who), "test rank 0");
		atomic_store(&st.training, c->training);
		kill(getpid(), c->first);
		for (int i = 0; i < 300 && !atomic_load(&st.sig); i++)
			usleep(1000);
		if (c->then < 0)
			cnn_stop_raise(&st);
		if (c->then > 0)
			kill(getpid(), c->then);
		sleep(c->grace_s ? 10 : 1);
		_exit(atomic_load(&st.sig) == 0 ? 0 : atomic_load(&st.sig) == c->first ? 3 : 4);
	}
	waitpid(p, &status, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if (WIFSIGNALED(status))
		printf("#   the child ended by signal %d after %.2f s\n", WTERMSIG(status), *secs);
	else
		printf("#   the child exited %d after %.2f s\n", WEXITSTATUS(status), *secs);
	return status;
}

static int ended_by(int status, int sig)
{
	return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

static void test_signals(void)
{
	double secs;
	int st;
	st = run_child(&(struct child){ .training = 1, .first = SIGUSR1 }, &secs);
	test_cond("a signal while training is taken: the process goes on (the loop stops it)",
		  WIFEXITED(st) && WEXITSTATUS(st) == 3);
	st = run_child(&(struct child){ .training = 1, .first = SIGUSR1, .then = SIGTERM }, &secs);
	test_cond("a second one ends the process by it", ended_by(st, SIGTERM) && secs < 1);
	/* a stop that never comes (a rank hung in a collective) */
	st = run_child(&(struct child){ .training = 1, .first = SIGTERM, .grace_s = 1 }, &secs);
	test_cond("a signal taken but no stop within the grace: the process ends by it then",
		  ended_by(st, SIGTERM) && secs >= 0.9 && secs < 8);
	st = run_child(&(struct child){ .first = SIGINT }, &secs);
	test_cond("a signal outside training ends the process by it at once", ended_by(st, SIGINT) && secs < 1);
	st = run_child(&(struct child){ .ignore = SIGINT, .training = 1, .first = SIGINT }, &secs);
	test_cond("a signal ignored on entry stays ignored (the run goes on)", WIFEXITED(st) && WEXITSTATUS(st) == 0);
	st = run_child(&(struct child){ .training = 1, .first = SIGUSR2, .then = -1 }, &secs);
	test_cond("cnn_stop_raise ends the process by the signal that stopped it", ended_by(st, SIGUSR2));
}

int main(void)
{
	test_world1();
	test_agreement();
	test_signals();
	return test_report();
}
