/* LD_PRELOAD shim for the Bats tests: a modified srun.  Every variable
 * FORGE_<NAME>=<value> in srun's environment becomes <NAME>=<value> in the
 * environment srun sends to slurmstepd with the step, as a user's own
 * build of srun could send anything there.  (srun's own options cannot:
 * it sets SLURM_JOB_ID and SLURM_STEP_ID itself.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

extern char **environ;

/* NAME=value from FORGE_NAME=value, put into env (malloc'd, leaked: srun
 * exits soon). */
static void forge(char ***env, uint32_t *envc)
{
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "FORGE_", 6) != 0)
			continue;
		const char *def = *e + 6, *eq = strchr(def, '=');
		size_t nl = eq ? (size_t)(eq - def) : 0;
		uint32_t i = 0;
		if (!nl)
			continue;
		while (i < *envc && !(strncmp((*env)[i], def, nl) == 0 && (*env)[i][nl] == '='))
			i++;
		if (i == *envc) {
			char **grown = realloc(*env, (*envc + 2) * sizeof(char *));
			if (!grown)
				return;
			*env = grown;
			(*envc)++;
			grown[*envc] = NULL;
		}
		(*env)[i] = strdup(def);
	}
}

int slurm_step_launch(slurm_step_ctx_t *ctx, const slurm_step_launch_params_t *params,
		      const slurm_step_launch_callbacks_t *callbacks)
{
	static int (*real)(slurm_step_ctx_t *, const slurm_step_launch_params_t *,
			   const slurm_step_launch_callbacks_t *);
	slurm_step_launch_params_t p = *params;
	if (!real)
		real = (int (*)(slurm_step_ctx_t *, const slurm_step_launch_params_t *,
				const slurm_step_launch_callbacks_t *))dlsym(RTLD_NEXT, "slurm_step_launch");
	/* (srun leaves envc 0: the list ends at its NULL) */
	uint32_t n = 0;
	while (p.env && p.env[n])
		n++;
	p.envc = n;
	char **env = malloc((n + 1) * sizeof(char *));
	if (env) {
		memcpy(env, p.env, n * sizeof(char *));
		env[n] = NULL;
		forge(&env, &p.envc);
		p.env = env;
	}
	return real(ctx, &p, callbacks);
}
