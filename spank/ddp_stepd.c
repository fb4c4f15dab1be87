/*
 * slurmstepd side.  user_init runs once per node and step: it resolves the
 * head, the port and the interface (the only DNS query, none when the
 * name resolves from /etc/hosts or Slurm's NodeAddr).  task_init runs in
 * each task's child before exec and only sets variables.
 *
 * Nothing here may crash or hang slurmstepd: no exit, bounded system calls
 * (one getaddrinfo, one netlink query with a 2 s timeout).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

/* Slurm's configuration, already loaded in slurmstepd (libslurm, 22.05). */
extern char *slurm_conf_get_address(const char *node_name);
extern void slurm_xfree(void **p);

static struct {
	int active;                  /* this step gets the contract */
	int failed;                  /* user_init could not resolve: fail tasks */
	char err[DDPENV_ERRLEN];
	struct ddpenv_node node;
} st;

static int nodeaddr(void *ctx, const char *node, char *out, size_t len)
{
	char *a = slurm_conf_get_address(node);
	int rv = -1;

	(void)ctx;
	if (a && strlen(a) < len) {
		strcpy(out, a);
		rv = 0;
	}
	if (a)
		slurm_xfree((void **)&a);
	return rv;
}

/* The snapshot: the variables libddpenv reads, through spank_getenv. */
static int snapshot(spank_t sp, struct ddpenv_env *env)
{
	char buf[4096];

	for (const char *const *k = ddpenv_env_keys; *k; k++) {
		spank_err_t rc = spank_getenv(sp, *k, buf, sizeof(buf));
		if (rc == ESPANK_ENV_NOEXIST)
			continue;
		if (rc != ESPANK_SUCCESS) {
			snprintf(st.err, sizeof(st.err),
				 "%s: value longer than %zu bytes or unreadable: %s",
				 *k, sizeof(buf) - 1, spank_strerror(rc));
			return -1;
		}
		if (ddpenv_env_set(env, *k, buf) < 0) {
			snprintf(st.err, sizeof(st.err), "out of memory copying %s", *k);
			return -1;
		}
	}
	return 0;
}

/* plugstack.conf arguments that set a default the job's environment may
 * override: head_from=auto|name|nodeaddr (DDP_HEAD_FROM). */
static int plugstack_defaults(struct ddpenv_env *env, int ac, char **av)
{
	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "head_from=", 10) == 0 && !ddpenv_env_get(env, "DDP_HEAD_FROM") &&
		    ddpenv_env_set(env, "DDP_HEAD_FROM", av[i] + 10) < 0) {
			snprintf(st.err, sizeof(st.err), "out of memory copying %s", av[i]);
			return -1;
		}
	return 0;
}

int ddp_stepd_user_init(spank_t sp, int ac, char **av)
{
	struct ddpenv_env env;
	struct ddpenv_sys sys = ddpenv_sys_default;
	uint32_t step_id = 0;

	memset(&st, 0, sizeof(st));
	if (!ddp_req.given)
		return 0;
	if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS ||
	    !ddpenv_step_is_parallel(step_id))
		return 0; /* the batch shell and the extern step get nothing */
	st.active = 1;
	if (!ddp_req.valid) {
		st.failed = 1;
		snprintf(st.err, sizeof(st.err), "%s", ddp_req.err);
		return 0;
	}
	ddpenv_env_init(&env);
	sys.nodeaddr = nodeaddr;
	if (snapshot(sp, &env) < 0 || plugstack_defaults(&env, ac, av) < 0 ||
	    ddpenv_node_resolve(&env, ddp_req.backend, &sys, &st.node,
				st.err, sizeof(st.err)) < 0)
		st.failed = 1;
	ddpenv_env_free(&env);
	/* Report in task_init, where the message reaches the user's stderr
	 * and only this step fails. */
	return 0;
}

int ddp_stepd_task_init(spank_t sp)
{
	struct ddpenv_env env;
	struct ddpenv_vars vars;
	char err[DDPENV_ERRLEN];
	int rv = -1;

	if (!st.active)
		return 0;
	if (st.failed) {
		slurm_error(DDP_PFX "%s", st.err);
		return -1;
	}
	ddpenv_env_init(&env);
	if (snapshot(sp, &env) < 0) {
		slurm_error(DDP_PFX "%s", st.err);
		goto out;
	}
	if (ddpenv_task_vars(&st.node, &env, &vars, err, sizeof(err)) < 0) {
		slurm_error(DDP_PFX "%s", err);
		goto out;
	}
	/* All or nothing: a task never starts with half the contract. */
	for (size_t i = 0; i < vars.n; i++) {
		if (vars.v[i].user)
			continue;
		if (spank_setenv(sp, vars.v[i].key, vars.v[i].value, 1) != ESPANK_SUCCESS) {
			slurm_error(DDP_PFX "cannot set %s=%s in the task's environment",
				    vars.v[i].key, vars.v[i].value);
			goto out;
		}
	}
	rv = 0;
out:
	ddpenv_env_free(&env);
	return rv;
}
