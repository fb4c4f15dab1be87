/*
 * spank_ddp: the --ddp option for srun, sbatch and salloc.
 *
 * One dispatcher: each slurm_spank_* hook switches on the context and calls
 * the module for it (ddp_local.c: srun/sbatch/salloc; ddp_stepd.c: the
 * compute node's slurmstepd).  All resolution lives in libddpenv.
 */
#include <slurm/spank.h>
#include <sys/resource.h>
#include <time.h>

#include "ddp.h"

SPANK_PLUGIN(ddp, 1);

/* From 25.05: a failure of this plugin fails the job, never drains the node
 * (ddp_slurm_compat.h; before 25.05 the remote hooks avoid failing init). */
DDP_SPANK_FAILURE_MODE;

/* A hook's start: the wall clock and this thread's CPU time, in ms, and
 * its page faults so far. */
struct hook_t0 {
	double wall, cpu;
	long minflt;
};

static double clock_ms(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static long thread_minflt(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_minflt : 0;
}

static struct hook_t0 hook_start(void)
{
	if (!ddp_req.given) /* timed() says nothing: a step without --ddp pays nothing */
		return (struct hook_t0){ 0, 0, 0 };
	return (struct hook_t0){ clock_ms(CLOCK_MONOTONIC), clock_ms(CLOCK_THREAD_CPUTIME_ID), thread_minflt() };
}

/* What a --ddp step's hook cost slurmstepd, in slurmd's log at
 * SlurmdDebug=debug (bench/launch_cost.sh reads it): its wall time, the
 * CPU time of the thread that ran it (the wall time less the waits: for a
 * core on a busy node, for the kernel), and that thread's page faults (in
 * a task's child, each page it writes that slurmstepd's memory held is
 * copied first). */
static int timed(const char *hook, struct hook_t0 t0, int rc)
{
	if (ddp_req.given)
		slurm_debug(DDP_PFX "%s took %.3f ms, %.3f ms of CPU, %ld page faults", hook,
			    clock_ms(CLOCK_MONOTONIC) - t0.wall, clock_ms(CLOCK_THREAD_CPUTIME_ID) - t0.cpu,
			    thread_minflt() - t0.minflt);
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
