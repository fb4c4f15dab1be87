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

/* ddp_getenv.c: KEY of the job's environment (slurmstepd), a copy in *out
 * (the caller frees it), NULL when unset.  0, else -1 with err. */
int ddp_getenv(spank_t sp, const char *key, char **out, char *err, size_t errlen);

/* ddp_preset.c: the node's variables, set once in user_init for all of
 * its tasks.  ddp_preset_node: VARS' node-wide ones not the user's, and
 * EXPLAIN's {key, value} pairs (ending with {NULL, NULL}); 0, else -1 with
 * err.  In a task's child, ddp_preset_restore: the snapshot as before
 * user_init (0, else -1: out of memory); ddp_preset_same: 1 when KEY is
 * already VALUE (no setenv needed); ddp_preset_finish: the keys this task
 * did not set back as the job had them (0, else -1 said);
 * ddp_preset_count: how many user_init set. */
int ddp_preset_node(spank_t sp, const struct ddpenv_vars *vars, const char *const explain[][2],
		    char *err, size_t errlen);
int ddp_preset_restore(struct ddpenv_env *env);
int ddp_preset_same(const char *key, const char *value);
int ddp_preset_finish(spank_t sp);
size_t ddp_preset_count(void);
void ddp_preset_free(void);

#endif
