/*
 * spank_ddp: the --ddp option for srun, sbatch and salloc.
 *
 * One dispatcher: each slurm_spank_* hook switches on the context and calls
 * the module for it (ddp_local.c: srun/sbatch/salloc; ddp_stepd.c: the
 * compute node's slurmstepd).  All resolution lives in libddpenv.
 */
#include <slurm/spank.h>
#include <time.h>

#include "ddp.h"

SPANK_PLUGIN(ddp, 1);

/* From 25.05: a failure of this plugin fails the job, never drains the node
 * (ddp_slurm_compat.h; before 25.05 the remote hooks avoid failing init). */
DDP_SPANK_FAILURE_MODE;

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* What a --ddp step's hook cost slurmstepd, in slurmd's log at
 * SlurmdDebug=debug (bench/launch_cost.sh reads it). */
static int timed(const char *hook, double t0, int rc)
{
	if (ddp_req.given)
		slurm_debug(DDP_PFX "%s took %.3f ms", hook, now_ms() - t0);
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
		double t0 = now_ms();
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
	double t0 = now_ms();

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return timed("user_init", t0, ddp_stepd_user_init(sp, ac, av));
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	double t0 = now_ms();

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
