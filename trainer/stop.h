/* Stopping on a signal, all ranks at the same step, with a checkpoint.
 *
 * Slurm signals every task of a step: SIGTERM when the job is cancelled,
 * preempted, requeued or reaches its time limit (then SIGKILL after the
 * cluster's KillWait, 30 s by default), SIGUSR1 (or another) ahead of the
 * limit with --signal=USR1@SECONDS, SIGINT on srun's Ctrl-C.  A rank that
 * stops where it is leaves its peers in a collective and the work since
 * the last --checkpoint-every is lost.  Here the ranks agree on a step
 * through the rendezvous store, stop after it (rank 0 writes the
 * checkpoint there), and each then dies by its signal as it would have.
 *
 * The agreement costs a store round trip every `every` steps, at the same
 * step counts on every rank: rank 0, at such a step k, on its own signal or
 * a request another rank left there, publishes "stop after step k+every";
 * every rank polls at k+every and sees it.  No rank can pass step k+every
 * before rank 0 published: a step's all-reduce needs rank 0 in it, and a
 * rank's host is at most two steps ahead of its own finished steps (the
 * GPU path's two slots), so every >= 3 suffices. */
#ifndef CNN_STOP_H
#define CNN_STOP_H

#include <pthread.h>
#include <stdatomic.h>

#include "ddpenv_store.h"

struct cnn_stop {
	atomic_int sig;        /* the first stop signal this rank got, 0: none */
	atomic_int training;   /* 1: a signal asks for the stop; 0: it ends the process */
	long long every;       /* steps between polls (the same on every rank) */
	long long at;          /* stop after this many steps; -1 until agreed */
	int asked;             /* a rank other than 0: its request is in the store */
	int why;               /* the signal that decided it (rank 0: -1 another rank's) */
	int grace_s;           /* after a signal taken, the most the stop may take (default 60) */
	char who[96];          /* "host rank N", for the thread's one message */
	sigset_t set;          /* the signals taken (those not ignored on entry) */
	pthread_t thread;
	int thread_on;
};

/* The signals asked for: SIGTERM, SIGINT, SIGUSR1 and SIGUSR2, less any
 * ignored on entry (nohup's, a shell's background job's SIGINT): as a
 * well-behaved program, it keeps ignoring those. */
void cnn_stop_signals(sigset_t *set);

/* Blocks the stop signals in the calling thread (threads created after it
 * inherit the mask: none of them sees EINTR) and starts the thread that
 * waits for them.  First thing in main, before any other thread.  A
 * signal while s->training is 0, or a second one, ends the process by it;
 * so does the first one grace_s after it (a rank hung in a collective, or
 * a stop that never comes, must not outlive the signal for long). */
int cnn_stop_init(struct cnn_stop *s, char *err, size_t errlen);

/* The poll period for a run (s->every, before the first poll; 8 until
 * then): a few tenths of a second of steps, from the batch size and the
 * device, which every rank shares (same_options compares them). */
long long cnn_stop_every(int batch, int gpu);

/* At the top of each step, with the steps done: 1 when this rank stops
 * here (every rank does at the same count), 0 to go on, -1 with err (the
 * store failed).  store NULL (world 1): stops at the first step after a
 * signal. */
int cnn_stop_poll(struct cnn_stop *s, struct ddpenv_store *store, int rank, long long steps, char *err,
		  size_t errlen);

/* The signal's name ("SIGTERM"), or "a signal on another rank". */
const char *cnn_stop_name(int sig);

/* Ends the process by the signal that stopped it, as without a handler
 * (a batch script, srun and Slurm see the same status). */
void cnn_stop_raise(struct cnn_stop *s) __attribute__((noreturn));

#endif
