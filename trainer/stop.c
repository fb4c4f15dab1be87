/* Stopping on a signal, all ranks at the same step (see stop.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stop.h"

/* store keys: counters (0 while absent, so a poll is one round trip) */
#define STOP_ASKED_KEY "stop/asked"   /* ranks other than 0 that got a signal */
#define STOP_AT_KEY "stop/at"         /* rank 0's decision: steps done, plus 1 */

void cnn_stop_signals(sigset_t *set)
{
	const int sigs[] = { SIGTERM, SIGINT, SIGUSR1, SIGUSR2 };
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaddset(set, sigs[i]);
	}
}

const char *cnn_stop_name(int sig)
{
	switch (sig) {
	case SIGTERM: return "SIGTERM";
	case SIGINT: return "SIGINT";
	case SIGUSR1: return "SIGUSR1";
	case SIGUSR2: return "SIGUSR2";
	default: return "a signal on another rank";
	}
}

static __attribute__((noreturn)) void die_by(int sig)
{
	sigset_t one;
	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig);   /* (not reached: the default action ends the process) */
}

static double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void *waiter(void *arg)
{
	struct cnn_stop *s = arg;
	sigset_t set = s->set;
	int sig;
	while (sigwait(&set, &sig) != 0)
		;
	int none = 0;
	/* the first one while training asks the loop to stop; any other
	 * ends the process at once, as if nothing handled it */
	if (!atomic_load(&s->training) || !atomic_compare_exchange_strong(&s->sig, &none, sig))
		die_by(sig);
	/* a second one, or the grace running out, ends it */
	double end = mono() + (s->grace_s > 0 ? s->grace_s : 60);
	for (;;) {
		double left = end - mono();
		if (left <= 0)
			break;
		struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
		int again = sigtimedwait(&set, NULL, &ts);
		if (again > 0)
			die_by(again);
	}
	fprintf(stderr, "cnn_train: %s: %s: not stopped %d s after it (the step the ranks agree on never "
		"came: a rank hangs, or a collective does): ending now\n", s->who[0] ? s->who : "?",
		cnn_stop_name(sig), s->grace_s > 0 ? s->grace_s : 60);
	die_by(sig);
	return NULL;
}

int cnn_stop_init(struct cnn_stop *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	s->every = 8;
	s->grace_s = 60;
	s->at = -1;
	cnn_stop_signals(&s->set);
	sigset_t set = s->set;
	int e = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (e == 0)
		e = pthread_create(&s->thread, NULL, waiter, s);
	if (e != 0) {
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
		snprintf(err, errlen, "cannot start the thread that waits for signals: %s", strerror(e));
		return -1;
	}
	pthread_detach(s->thread);
	s->thread_on = 1;
	return 0;
}

long long cnn_stop_every(int batch, int gpu)
{
	long long b = batch > 0 ? batch : 1, e = (gpu ? 65536 : 1024) / b;
	return e < 8 ? 8 : e;
}

int cnn_stop_poll(struct cnn_stop *s, struct ddpenv_store *store, int rank, long long steps, char *err,
		  size_t errlen)
{
	int sig = atomic_load(&s->sig);
	int64_t v;
	if (s->at >= 0)
		return steps >= s->at;
	if (!store) {
		if (sig)
			s->at = steps;
		s->why = sig;
		return sig != 0;
	}
	if (s->every < 3)
		s->every = 3;   /* (stop.h: the least that is safe) */
	if (steps % s->every != 0)
		return 0;
	if (rank == 0) {
		int why = sig;
		if (!why) {
			if (ddpenv_store_add(store, STOP_ASKED_KEY, 0, &v, err, errlen) < 0)
				return -1;
			why = v > 0 ? -1 : 0;
		}
		if (!why)
			return 0;
		/* every other rank polls next at steps + every, and sees it */
		if (ddpenv_store_add(store, STOP_AT_KEY, steps + s->every + 1, &v, err, errlen) < 0)
			return -1;
		s->at = steps + s->every;
		s->why = why;
		return 0;
	}
	if (sig && !s->asked) {
		if (ddpenv_store_add(store, STOP_ASKED_KEY, 1, &v, err, errlen) < 0)
			return -1;
		s->asked = 1;
	}
	if (ddpenv_store_add(store, STOP_AT_KEY, 0, &v, err, errlen) < 0)
		return -1;
	if (v == 0)
		return 0;
	s->at = (long long)v - 1;
	s->why = sig ? sig : -1;
	if (steps > s->at) {
		snprintf(err, errlen, "a stop on a signal: rank 0 chose to stop after step %lld, and this rank "
			 "is past it (%lld steps done): its poll came too late", s->at, steps);
		return -1;
	}
	return steps >= s->at;
}

void cnn_stop_raise(struct cnn_stop *s)
{
	int sig = atomic_load(&s->sig);
	fflush(stdout);
	fflush(stderr);
	/* a rank stopped by another's signal ends as that one would have */
	die_by(sig > 0 ? sig : SIGTERM);
}
