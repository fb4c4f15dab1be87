/*
 * srun, sbatch and salloc: a job that asks for --ddp is checked against the
 * site's configuration before it is submitted, so a broken ddp.yaml, a
 * backend the site does not allow or a bad DDP_* variable rejects the job
 * on the login node with the reason, instead of failing on compute nodes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

#include "ddp.h"

extern char **environ;

int ddp_local_post_opt(spank_t sp, int ac, char **av)
{
	struct ddpenv_config cfg;
	struct ddpenv_settings eff;
	struct ddpenv_env env;
	char err[DDPENV_ERRLEN];
	enum ddpenv_backend b = ddp_req.backend;
	int rv = -1;

	(void)sp;
	if (!ddp_req.given || !ddp_req.valid)
		return 0;
	ddpenv_config_init(&cfg);
	ddpenv_env_init(&env);
	if (ddp_config_load(&cfg, ac, av, err, sizeof(err)) < 0)
		goto fail;
	if (ddpenv_env_from_envp(&env, environ) < 0) {
		snprintf(err, sizeof(err), "out of memory reading the environment");
		goto fail;
	}
	/* The partition is known here only inside an allocation; every
	 * partition's section was validated with the file. */
	if (ddpenv_config_effective(&cfg, getenv("SLURM_JOB_PARTITION"), &env, &eff,
				    err, sizeof(err)) < 0)
		goto fail;
	if (b == DDPENV_BACKEND_AUTO)
		b = eff.default_backend;
	if (b != DDPENV_BACKEND_AUTO && !(eff.allowed_backends & 1u << b)) {
		snprintf(err, sizeof(err), "--ddp=%s: backend not allowed here: allowed_backends is [%s%s%s] (%.80s)",
			 ddpenv_backend_name(b),
			 eff.allowed_backends & 1u << DDPENV_BACKEND_NCCL ? "nccl" : "",
			 (eff.allowed_backends & 6u) == 6u ? ", " : "",
			 eff.allowed_backends & 1u << DDPENV_BACKEND_GLOO ? "gloo" : "",
			 eff.where[DDPENV_SET_ALLOWED_BACKENDS]);
		goto fail;
	}
	rv = 0;
	goto out;
fail:
	slurm_error(DDP_PFX "%s", err);
out:
	ddpenv_env_free(&env);
	ddpenv_config_free(&cfg);
	return rv;
}

/* srun, once the step exists and before its tasks start.  Under an
 * arbitrary distribution (SLURM_HOSTFILE, or srun -m arbitrary -w LIST)
 * task 0 runs on the node the list names first, while every node's
 * SLURM_STEP_NODELIST is sorted: no compute node can tell where task 0 is.
 * One RPC from here (not one per node) reads the step's layout from
 * slurmctld; SLURM_DDP_TASK0_NODE="<job>.<step>:<host>" carries the answer to
 * every node and task of the step. */
int ddp_local_user_init(spank_t sp)
{
	const char *dist = getenv("SLURM_DISTRIBUTION");
	uint32_t job = 0, step = 0;
	char host[DDPENV_HOSTLEN] = "", val[DDPENV_HOSTLEN + 32], err[DDPENV_ERRLEN] = "";
	slurm_step_layout_t *l;
	int found = 0;

	if (!ddp_req.given || !ddp_req.valid)
		return 0;
	/* ours, so never a value inherited from an outer step */
	unsetenv(DDPENV_TASK0_NODE);
	if (!dist || strncmp(dist, "arbitrary", 9) != 0)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
		slurm_error(DDP_PFX "SLURM_DISTRIBUTION=%s: srun gave no job and step id to find task 0's node",
			    dist);
		return -1;
	}
	l = slurm_job_step_layout_get(&(slurm_step_id_t){ .job_id = job, .step_id = step,
							  .step_het_comp = NO_VAL });
	if (!l) {
		slurm_error(DDP_PFX "SLURM_DISTRIBUTION=%s: cannot read step %u.%u's layout from slurmctld "
			    "(%s), so task 0's node, the head, is unknown; use a block or cyclic distribution",
			    dist, job, step, slurm_strerror(errno));
		return -1;
	}
	for (uint32_t n = 0; n < l->node_cnt && !found; n++)
		for (uint16_t t = 0; t < l->tasks[n] && !found; t++)
			if (l->tids[n][t] == 0)
				found = ddpenv_hostlist_nth(l->node_list, n, host, sizeof(host), err,
							    sizeof(err)) == 0 ? 1 : -1;
	if (found <= 0)
		slurm_error(DDP_PFX "SLURM_DISTRIBUTION=%s: step %u.%u's layout from slurmctld (%u nodes, "
			    "%.100s) %s%s", dist, job, step, l->node_cnt,
			    l->node_list ? l->node_list : "no node list",
			    found ? "names no host for task 0's node: " : "places no task 0", err);
	slurm_job_step_layout_free(l);
	if (found <= 0)
		return -1;
	snprintf(val, sizeof(val), "%u.%u:%s", job, step, host);
	setenv(DDPENV_TASK0_NODE, val, 1);
	return 0;
}

int ddp_config_load(struct ddpenv_config *cfg, int ac, char **av, char *err, size_t errlen)
{
	int named = 0;

	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "config=", 7) == 0)
			named = 1;
	/* No config=PATH: the default path, which may be absent (defaults). */
	if (!named && ddpenv_config_load_kept(cfg, cfg->path, 0, ddpenv_config_cache_arg(ac, av), NULL, err,
					       errlen) < 0)
		return -1;
	return ddpenv_config_plugstack(cfg, ac, av, err, errlen);
}
