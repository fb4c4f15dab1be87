#ifndef SPANK_DDP_H
#define SPANK_DDP_H

#include <slurm/spank.h>

#include "ddp_slurm_compat.h"

#include "ddpenv.h"

/* Every message the plugin writes starts with this. */
#define DDP_PFX "ddp: "

/* What the user asked for with --ddp, in any context. */
struct ddp_request {
	int given;                  /* --ddp appeared (or came from sbatch) */
	int valid;                  /* the value parsed */
	enum ddpenv_backend backend;
	char err[DDPENV_ERRLEN];    /* why it did not parse */
	int bind_given;             /* --ddp-bind appeared */
	int bind_valid;
	enum ddpenv_bind bind;
	char bind_err[DDPENV_ERRLEN];
};

extern struct ddp_request ddp_req;

/* ddp_option.c */
int ddp_option_register(spank_t sp, int ac, char **av);

/* ddp_local.c: srun, sbatch, salloc */
int ddp_local_post_opt(spank_t sp, int ac, char **av);
/* srun: task 0's node for an arbitrary distribution (SLURM_DDP_TASK0_NODE) */
int ddp_local_user_init(spank_t sp);
/* The configuration named by plugstack.conf (config=PATH, key=value). */
int ddp_config_load(struct ddpenv_config *cfg, int ac, char **av, char *err, size_t errlen);

/* ddp_stepd.c: remote context (slurmstepd) */
int ddp_stepd_post_opt(spank_t sp, int ac, char **av);
int ddp_stepd_user_init(spank_t sp, int ac, char **av);
int ddp_stepd_task_init(spank_t sp);
void ddp_stepd_exit(void);

#endif
