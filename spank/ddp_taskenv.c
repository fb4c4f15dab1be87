/*
 * The contract into the tasks' environments (slurmstepd side).  Each
 * spank_setenv is Slurm's setenvf, which allocates and clears 256 KiB
 * (9 us here); a task's child made some 30 of them.  The variables every
 * task of the node gets alike (ddpenv_node_vars) go into the job's
 * environment once, in user_init, before the tasks start; each task's
 * child then sets only what differs: its ranks, its binding, DDP_STEP.
 *
 * A task's plan and its user checks read the job's environment as it was
 * before: where the task's still holds what user_init set, the snapshot
 * gets the earlier value back (or loses the name).  A value is left to
 * the node's only where the task's environment holds it exactly as
 * user_init set it; any other is set in the task, so the task's
 * environment is what setting all of them there would give.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

#define NODE_MAX (DDPENV_MAX_VARS + 4)
#define KEY_MAX 64

static struct {
	struct ddpenv_env set;       /* KEY=VALUE as user_init set them, in order */
	struct ddpenv_env prev;      /* their values in the job's snapshot before, where it had one */
	char key_buf[NODE_MAX][KEY_MAX];
	const char *keys[NODE_MAX + 1]; /* set's names, NULL-terminated: for the tasks' snapshots */
	/* in a task's child, by set's entry: */
	unsigned char held[NODE_MAX]; /* its environment still holds set's value */
	unsigned char seen[NODE_MAX]; /* the task put a value under that name */
} nv;

/* set's entry for KEY, or -1 */
static ssize_t node_find(const char *key)
{
	for (size_t i = 0; i < nv.set.n; i++)
		if (strcmp(nv.keys[i], key) == 0)
			return (ssize_t)i;
	return -1;
}

/* set's value of entry i */
static const char *node_value(size_t i)
{
	return nv.set.kv[i] + strlen(nv.keys[i]) + 1;
}

void ddp_taskenv_reset(void)
{
	ddpenv_env_free(&nv.set);
	ddpenv_env_free(&nv.prev);
	nv.keys[0] = NULL;
}

const char *const *ddp_taskenv_node_keys(void)
{
	return nv.keys;
}

int ddp_taskenv_node_put(spank_t sp, const char *key, const char *value, const struct ddpenv_env *before,
			 char *err, size_t errlen)
{
	const char *was = before ? ddpenv_env_get(before, key) : NULL;
	ssize_t i = node_find(key);
	size_t n = nv.set.n;

	if (i < 0 && (n >= NODE_MAX || strlen(key) >= KEY_MAX)) {
		snprintf(err, errlen, "%.64s: more than %d variables for the node, or a name over %d bytes",
			 key, NODE_MAX, KEY_MAX - 1);
		return -1;
	}
	if (spank_setenv(sp, key, value, 1) != ESPANK_SUCCESS) {
		snprintf(err, errlen, "cannot set %s=%.200s in the job's environment", key,
			 strcmp(key, "DDP_RDZV_TOKEN") ? value : "(hidden)");
		return -1;
	}
	if (i < 0) {
		snprintf(nv.key_buf[n], KEY_MAX, "%s", key);
		nv.keys[n] = nv.key_buf[n];
		nv.keys[n + 1] = NULL;
	}
	if (ddpenv_env_set(&nv.set, key, value) < 0 || (i < 0 && was && ddpenv_env_set(&nv.prev, key, was) < 0)) {
		nv.keys[nv.set.n] = NULL;
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

int ddp_taskenv_node_vars(spank_t sp, const struct ddpenv_vars *vars, const struct ddpenv_env *before,
			  char *err, size_t errlen)
{
	for (size_t i = 0; i < vars->n; i++)
		if (!vars->v[i].user &&
		    ddp_taskenv_node_put(sp, vars->v[i].key, vars->v[i].value, before, err, errlen) < 0)
			return -1;
	return 0;
}

int ddp_taskenv_task_prepare(struct ddpenv_env *snap)
{
	for (size_t i = 0; i < nv.set.n; i++) {
		const char *cur = ddpenv_env_get(snap, nv.keys[i]), *was;

		nv.seen[i] = 0;
		nv.held[i] = cur && strcmp(cur, node_value(i)) == 0;
		if (!nv.held[i])
			continue; /* changed since (Slurm's, another plugin's): the task's as it is */
		was = ddpenv_env_get(&nv.prev, nv.keys[i]);
		if (!was)
			ddpenv_env_unset(snap, nv.keys[i]);
		else if (ddpenv_env_set(snap, nv.keys[i], was) < 0)
			return -1;
	}
	return 0;
}

int ddp_taskenv_task_put(spank_t sp, const char *key, const char *value)
{
	ssize_t i = node_find(key);

	if (i >= 0) {
		nv.seen[i] = 1;
		if (nv.held[i] && strcmp(node_value((size_t)i), value) == 0)
			return 0;
	}
	return spank_setenv(sp, key, value, 1) == ESPANK_SUCCESS ? 0 : -1;
}

int ddp_taskenv_task_finish(spank_t sp, const char **bad)
{
	for (size_t i = 0; i < nv.set.n; i++) {
		const char *was;

		if (!nv.held[i] || nv.seen[i])
			continue;
		/* the node's, not this task's: the job's value back */
		was = ddpenv_env_get(&nv.prev, nv.keys[i]);
		if ((was ? spank_setenv(sp, nv.keys[i], was, 1) : spank_unsetenv(sp, nv.keys[i])) != ESPANK_SUCCESS) {
			*bad = nv.keys[i];
			return -1;
		}
	}
	return 0;
}
