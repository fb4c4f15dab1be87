/* The --ddp option: registered in every context, validated at submit time. */
#include <stdio.h>
#include <string.h>

#include "ddp.h"

struct ddp_request ddp_req;

static int on_ddp(int val, const char *optarg, int remote)
{
	(void)val;
	ddp_req.given = 1;
	/* In slurmstepd a bare --ddp arrives as "", and a bad value cannot
	 * arrive (srun/sbatch rejected it).  Never fail here in the remote
	 * context: a failing remote init drains the node for batch jobs. */
	if (remote && optarg && !*optarg)
		optarg = NULL;
	/* A bare #SBATCH --ddp or salloc --ddp reaches the job's sruns
	 * through SLURM_SPANK__SLURM_SPANK_OPTION_ddp_ddp, which Slurm 22.05
	 * sets to "(null)" (its printf of the missing argument): bare too. */
	if (optarg && !strcmp(optarg, "(null)"))
		optarg = NULL;
	if (ddpenv_backend_parse(optarg, &ddp_req.backend, ddp_req.err,
				 sizeof(ddp_req.err)) < 0) {
		ddp_req.valid = 0;
		if (remote)
			return 0; /* reported by task_init, which fails the step */
		slurm_error(DDP_PFX "%s", ddp_req.err);
		return -1;
	}
	ddp_req.valid = 1;
	return 0;
}

static int on_ddp_bind(int val, const char *optarg, int remote)
{
	(void)val;
	ddp_req.bind_given = 1;
	if (ddpenv_bind_parse(optarg, &ddp_req.bind, ddp_req.bind_err, sizeof(ddp_req.bind_err)) < 0) {
		ddp_req.bind_valid = 0;
		if (remote)
			return 0; /* reported by task_init */
		slurm_error(DDP_PFX "%s", ddp_req.bind_err);
		return -1;
	}
	ddp_req.bind_valid = 1;
	return 0;
}

static struct spank_option opt_ddp_bind = {
	.name = "ddp-bind",
	.arginfo = "auto|none|strict",
	.usage = "With --ddp: bind each task to one GPU (by PCI bus id) and the CPU "
		 "cores and memory near it (hwloc). auto (the site's default): "
		 "CUDA_VISIBLE_DEVICES lists all the step's GPUs, the task's own at "
		 "LOCAL_RANK; strict: only its own; none: leave binding to Slurm. An "
		 "explicit --cpu-bind, --gpu-bind or --mem-bind is always left alone.",
	.has_arg = 1,
	.val = 0,
	.cb = on_ddp_bind,
};

static struct spank_option opt_ddp = {
	.name = "ddp",
	.arginfo = "[nccl|gloo|auto]",
	.usage = "Set up data-parallel training: MASTER_ADDR, MASTER_PORT, RANK, "
		 "LOCAL_RANK, WORLD_SIZE, ... (the torchrun contract) and the "
		 "NCCL/gloo interface for every task. auto (the default): nccl "
		 "when the step has GPUs, else gloo.",
	.has_arg = 2,
	.val = 0,
	.cb = on_ddp,
};

int ddp_option_register(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	memset(&ddp_req, 0, sizeof(ddp_req));
	if (spank_option_register(sp, &opt_ddp) != ESPANK_SUCCESS ||
	    spank_option_register(sp, &opt_ddp_bind) != ESPANK_SUCCESS) {
		slurm_error(DDP_PFX "cannot register the --ddp and --ddp-bind options");
		/* Never fail init in slurmstepd: it would drain the node. */
		return spank_context() == S_CTX_REMOTE ? 0 : -1;
	}
	return 0;
}
