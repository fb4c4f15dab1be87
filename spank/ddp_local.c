/*
 * srun, sbatch and salloc: a job that asks for --ddp is checked against the
 * site's configuration before it is submitted, so a broken ddp.yaml, a
 * backend the site does not allow or a bad DDP_* variable rejects the job
 * on the login node with the reason, instead of failing on compute nodes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int ddp_config_load(struct ddpenv_config *cfg, int ac, char **av, char *err, size_t errlen)
{
	int named = 0;

	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "config=", 7) == 0)
			named = 1;
	/* No config=PATH: the default path, which may be absent (defaults). */
	if (!named && ddpenv_config_load(cfg, cfg->path, 0, err, errlen) < 0)
		return -1;
	return ddpenv_config_plugstack(cfg, ac, av, err, errlen);
}
