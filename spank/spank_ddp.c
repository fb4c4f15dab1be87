/*
 * spank_ddp: the --ddp option for srun, sbatch and salloc.
 *
 * One dispatcher: each slurm_spank_* hook switches on the context and calls
 * the module for it (ddp_local.c: srun/sbatch/salloc; ddp_stepd.c: the
 * compute node's slurmstepd).  All resolution lives in libddpenv.
 */
#include <slurm/spank.h>

#include "ddp.h"

SPANK_PLUGIN(ddp, 1);

/* From 25.05: a failure of this plugin fails the job, never drains the node
 * (ddp_slurm_compat.h; before 25.05 the remote hooks avoid failing init). */
DDP_SPANK_FAILURE_MODE;

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
	case S_CTX_REMOTE:
		return ddp_stepd_post_opt(sp, ac, av);
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
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return ddp_stepd_user_init(sp, ac, av);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return ddp_stepd_task_init(sp);
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
