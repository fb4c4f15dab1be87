/*
 * spank_ddp: the --ddp option for srun, sbatch and salloc.
 *
 * One dispatcher: each slurm_spank_* hook switches on the context and calls
 * the module for it (ddp_local.c: srun/sbatch/salloc; ddp_stepd.c: the
 * compute node's slurmstepd).  All resolution lives in libddpenv.
 */
#include <slurm/spank.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ddp.h"

SPANK_PLUGIN(ddp, 1);

/* From 25.05: a failure of this plugin fails the job, never drains the node
 * (ddp_slurm_compat.h; before 25.05 the remote hooks avoid failing init). */
DDP_SPANK_FAILURE_MODE;

/* A hook's start: the wall clock and this thread's CPU time, in ms, and
 * its page faults, waits and preemptions so far. */
struct hook_t0 {
	double wall, cpu;
	long minflt, nvcsw, nivcsw;
};

static double clock_ms(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static struct rusage thread_usage(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) < 0)
		memset(&ru, 0, sizeof(ru));
	return ru;
}

static struct hook_t0 hook_start(void)
{
	struct rusage ru;

	if (!ddp_req.given) /* timed() says nothing: a step without --ddp pays nothing */
		return (struct hook_t0){ 0, 0, 0, 0, 0 };
	ru = thread_usage();
	return (struct hook_t0){ clock_ms(CLOCK_MONOTONIC), clock_ms(CLOCK_THREAD_CPUTIME_ID), ru.ru_minflt,
				 ru.ru_nvcsw, ru.ru_nivcsw };
}

/* What a --ddp step's hook cost slurmstepd, in slurmd's log at
 * SlurmdDebug=verbose (bench/launch_cost.sh reads it; not debug, where
 * Slurm's own messages in a task's child change the heap its hook finds,
 * and with it the page faults measured): its wall time, the
 * CPU time of the thread that ran it (the wall time less the waits: for a
 * core on a busy node, for the kernel), and that thread's page faults (in
 * a task's child, each page it writes that slurmstepd's memory held is
 * copied first), waits (voluntary context switches: it blocked, for a
 * lookup's answer or to move to the core it was bound to) and preemptions
 * (involuntary ones: another thread took its core). */
static int timed(const char *hook, struct hook_t0 t0, int rc)
{
	if (ddp_req.given) {
		double wall = clock_ms(CLOCK_MONOTONIC) - t0.wall, cpu = clock_ms(CLOCK_THREAD_CPUTIME_ID) - t0.cpu;
		struct rusage ru = thread_usage();
		slurm_verbose(DDP_PFX "%s took %.3f ms, %.3f ms of CPU, %ld page faults, %ld waits, %ld preemptions",
			      hook, wall, cpu, ru.ru_minflt - t0.minflt, ru.ru_nvcsw - t0.nvcsw, ru.ru_nivcsw - t0.nivcsw);
	}
	return rc;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	return ddp_option_register(sp, ac, av);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return ddp_local_post_opt(sp, ac, av);
	case S_CTX_REMOTE: {
		struct hook_t0 t0 = hook_start();
		return timed("post_opt", t0, ddp_stepd_post_opt(sp, ac, av));
	}
	default:
		return 0;
	}
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL)
		return 0;
	return ddp_local_user_init(sp);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	struct hook_t0 t0 = hook_start();

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return timed("user_init", t0, ddp_stepd_user_init(sp, ac, av));
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	struct hook_t0 t0 = hook_start();

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return timed("task_init", t0, ddp_stepd_task_init(sp));
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE)
		ddp_stepd_exit();
	return 0;
}
