/*
 * The node's variables, set once: user_init puts into the step's
 * environment, which every task of the node inherits, the variables that
 * are alike for all of them (ddpenv_var_node_wide) and the plugin's
 * choices; task_init then sets only what differs for its task.  Each
 * spank_setenv costs 8 to 17 us in slurmstepd (Slurm's setenvf allocates
 * 256 KiB per call), paid by every task's child before exec: 27 of them a
 * task before, about 5 now.
 *
 * So that each task computes its contract from the environment as it was
 * before user_init (whether the user set MASTER_PORT, say), task_init puts
 * the values from before back into its snapshot; a key its task does not
 * set goes back to what it was.  The task's environment is then exactly
 * what setting everything in task_init gave.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

#define PRESET_MAX (DDPENV_MAX_VARS + 4)

static struct {
	size_t n;
	struct {
		char key[64];
		char *value;   /* as set */
		char *before;  /* in the job's environment before, or NULL */
		int covered;   /* this task's contract has it, or set it anew */
	} v[PRESET_MAX];
} pre;

void ddp_preset_free(void)
{
	for (size_t i = 0; i < pre.n; i++) {
		if (pre.v[i].value)
			explicit_bzero(pre.v[i].value, strlen(pre.v[i].value)); /* the token */
		free(pre.v[i].value);
		free(pre.v[i].before);
	}
	memset(&pre, 0, sizeof(pre));
}

/* KEY=VALUE into the step's environment, what it held before kept.  0,
 * else -1 with err. */
static int preset_one(spank_t sp, const char *key, const char *value, char *err, size_t errlen)
{
	if (pre.n >= PRESET_MAX || strlen(key) >= sizeof(pre.v[0].key)) {
		snprintf(err, errlen, "%s: more than %d node variables, or a name of over 63 characters",
			 key, PRESET_MAX);
		return -1;
	}
	char *before = NULL, *copy = NULL;
	if (ddp_getenv(sp, key, &before, err, errlen) < 0)
		return -1;
	copy = strdup(value);
	if (!copy) {
		free(before);
		snprintf(err, errlen, "out of memory copying %s", key);
		return -1;
	}
	snprintf(pre.v[pre.n].key, sizeof(pre.v[0].key), "%s", key);
	pre.v[pre.n].value = copy;
	pre.v[pre.n].before = before;
	pre.n++;
	if (spank_setenv(sp, key, value, 1) != ESPANK_SUCCESS) {
		snprintf(err, errlen, "cannot set %s in the step's environment", key);
		return -1;
	}
	return 0;
}

int ddp_preset_node(spank_t sp, const struct ddpenv_vars *vars, const char *const explain[][2],
		    char *err, size_t errlen)
{
	for (size_t i = 0; i < vars->n; i++)
		if (!vars->v[i].user && ddpenv_var_node_wide(vars->v[i].key) &&
		    preset_one(sp, vars->v[i].key, vars->v[i].value, err, errlen) < 0)
			return -1;
	for (size_t i = 0; explain && explain[i][0]; i++)
		if (preset_one(sp, explain[i][0], explain[i][1], err, errlen) < 0)
			return -1;
	slurm_debug(DDP_PFX "user_init: %zu variables set once for the node's tasks", pre.n);
	return 0;
}

size_t ddp_preset_count(void)
{
	return pre.n;
}

/* In a task's child: the snapshot as it was before user_init. 0, else -1
 * (out of memory). */
int ddp_preset_restore(struct ddpenv_env *env)
{
	for (size_t i = 0; i < pre.n; i++) {
		pre.v[i].covered = 0;
		if (!pre.v[i].before)
			ddpenv_env_unset(env, pre.v[i].key);
		else if (ddpenv_env_get(env, pre.v[i].key) && ddpenv_env_set(env, pre.v[i].key, pre.v[i].before) < 0)
			return -1;
	}
	return 0;
}

int ddp_preset_same(const char *key, const char *value)
{
	for (size_t i = 0; i < pre.n; i++)
		if (strcmp(pre.v[i].key, key) == 0) {
			pre.v[i].covered = 1;
			return strcmp(pre.v[i].value, value) == 0;
		}
	return 0;
}

int ddp_preset_finish(spank_t sp)
{
	for (size_t i = 0; i < pre.n; i++) {
		if (pre.v[i].covered)
			continue;
		if (pre.v[i].before ? spank_setenv(sp, pre.v[i].key, pre.v[i].before, 1) != ESPANK_SUCCESS
				    : spank_unsetenv(sp, pre.v[i].key) != ESPANK_SUCCESS) {
			slurm_error(DDP_PFX "cannot put %s back as the job had it in the task's environment",
				    pre.v[i].key);
			return -1;
		}
	}
	return 0;
}
