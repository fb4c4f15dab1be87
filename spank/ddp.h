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

/* ddp_taskenv.c: the contract into the tasks' environments, the node's
 * variables once (user_init), each task's own in its child.  -1 with err,
 * or *bad the name that could not be set. */
void ddp_taskenv_reset(void);
/* the names user_init set, NULL-terminated: a task's snapshot takes them */
const char *const *ddp_taskenv_node_keys(void);
/* user_init: KEY=VALUE into the job's environment for every task; BEFORE,
 * the job's snapshot (NULL: none), keeps what was there */
int ddp_taskenv_node_put(spank_t sp, const char *key, const char *value, const struct ddpenv_env *before,
			 char *err, size_t errlen);
/* user_init: the node's variables (ddpenv_node_vars), but the user's */
int ddp_taskenv_node_vars(spank_t sp, const struct ddpenv_vars *vars, const struct ddpenv_env *before,
			  char *err, size_t errlen);
/* task_init: the task's snapshot as the job's environment was before
 * user_init (-1: out of memory); then each value of the task (skipped
 * where the task's environment holds it already); then the node's values
 * the task did not take, taken back */
int ddp_taskenv_task_prepare(struct ddpenv_env *snap);
int ddp_taskenv_task_put(spank_t sp, const char *key, const char *value);
int ddp_taskenv_task_finish(spank_t sp, const char **bad);

#endif
