/* The step's facts, read from the environment snapshot. */
#include <ctype.h>
#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_slurm_compat.h"

#include "ddpenv.h"
#include "internal.h"

int ddpenv_step_is_parallel(uint32_t step_id)
{
	return step_id != DDPENV_STEP_BATCH && step_id != DDPENV_STEP_EXTERN &&
	       step_id != DDPENV_STEP_INTERACTIVE;
}

int ddpenv_parse_u32(const char *key, const char *s, uint32_t *out,
		     char *err, size_t errlen)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || !isdigit((unsigned char)*s)) {
		snprintf(err, errlen, "%s=%.64s: expected an unsigned integer",
			 key, s ? s : "(unset)");
		return -1;
	}
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX) {
		snprintf(err, errlen,
			 "%s=%.64s: expected an unsigned integer below 2^32",
			 key, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* A required unsigned variable. */
static int need_u32(const struct ddpenv_env *env, const char *key,
		    uint32_t *out, char *err, size_t errlen)
{
	const char *s = ddpenv_env_get(env, key);

	if (!s) {
		snprintf(err, errlen, "%s is not set: not inside a Slurm step?",
			 key);
		return -1;
	}
	return ddpenv_parse_u32(key, s, out, err, errlen);
}

/* An optional one, first of several names. */
static int opt_u32(const struct ddpenv_env *env, const char *const *keys,
		   uint32_t dflt, uint32_t *out, char *err, size_t errlen)
{
	for (; *keys; keys++) {
		const char *s = ddpenv_env_get(env, *keys);
		if (s)
			return ddpenv_parse_u32(*keys, s, out, err, errlen);
	}
	*out = dflt;
	return 0;
}

int ddpenv_hostlist_first(const char *list, char *out, size_t len,
			  char *err, size_t errlen)
{
	ddp_hostlist_t hl;
	char *host;
	int rv = -1;

	if (!list || !*list) {
		snprintf(err, errlen, "empty node list: expected a Slurm host list");
		return -1;
	}
	hl = slurm_hostlist_create(list);
	if (!hl) {
		snprintf(err, errlen,
			 "node list '%.200s' does not expand: expected a Slurm host list such as node[1-4]",
			 list);
		return -1;
	}
	host = slurm_hostlist_shift(hl);
	if (!host || !*host) {
		snprintf(err, errlen, "node list '%.200s' has no host", list);
		goto out;
	}
	for (const char *c = host; *c; c++) {
		/* libslurm is lenient: "node[1-" yields a host "node]" */
		if (!isalnum((unsigned char)*c) && !strchr("-_.", *c)) {
			snprintf(err, errlen,
				 "node list '%.200s' does not expand: first host '%.64s' is not a host name (expected a Slurm host list such as node[1-4])",
				 list, host);
			goto out;
		}
	}
	if (strlen(host) >= len) {
		snprintf(err, errlen, "node list '%.200s': first host name is longer than %zu characters",
			 list, len - 1);
		goto out;
	}
	strcpy(out, host);
	rv = 0;
out:
	free(host);
	slurm_hostlist_destroy(hl);
	return rv;
}

int ddpenv_hostlist_nth(const char *list, uint32_t n, char *out, size_t len, char *err,
			size_t errlen)
{
	ddp_hostlist_t hl = list ? slurm_hostlist_create(list) : NULL;
	char *h = NULL;
	uint32_t i;

	if (!hl) {
		snprintf(err, errlen, "node list '%.200s' does not expand: expected a Slurm host list",
			 list ? list : "(null)");
		return -1;
	}
	for (i = 0; i <= n; i++) {
		free(h);
		if (!(h = slurm_hostlist_shift(hl)))
			break;
	}
	slurm_hostlist_destroy(hl);
	if (!h) {
		snprintf(err, errlen, "node list '%.200s' has %u hosts: expected more than %u", list, i, n);
		return -1;
	}
	if (strlen(h) >= len) {
		snprintf(err, errlen, "node list '%.200s': host %u is longer than %zu characters", list, n,
			 len - 1);
		free(h);
		return -1;
	}
	strcpy(out, h);
	free(h);
	return 0;
}

int ddpenv_hostlist_contains(const char *list, const char *host)
{
	ddp_hostlist_t hl = slurm_hostlist_create(list);
	int found;

	if (!hl)
		return -1;
	found = slurm_hostlist_find(hl, host) >= 0;
	slurm_hostlist_destroy(hl);
	return found;
}

/*
 * SLURM_STEP_TASKS_PER_NODE is Slurm's run-length form "2(x3),1": counts
 * per node id, in node id order.  libslurm has no public parser for it.
 * tpn_scan walks it for the count of node_id (count not NULL), or for the
 * largest count of any node (max).
 */
static int tpn_scan(const char *tpn, uint32_t node_id, uint32_t *count, uint32_t *max,
		    char *err, size_t errlen)
{
	const char *p = tpn;
	uint64_t seen = 0;

	if (!tpn || !*tpn) {
		snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE is empty: expected e.g. 2(x3),1");
		return -1;
	}
	while (*p) {
		char *end;
		unsigned long n, rep = 1;

		if (!isdigit((unsigned char)*p))
			goto bad;
		n = strtoul(p, &end, 10);
		p = end;
		if (*p == '(') {
			if (p[1] != 'x' || !isdigit((unsigned char)p[2]))
				goto bad;
			rep = strtoul(p + 2, &end, 10);
			if (*end != ')' || rep == 0)
				goto bad;
			p = end + 1;
		}
		if (n > UINT32_MAX)
			goto bad;
		if (count && node_id < seen + rep) {
			*count = (uint32_t)n;
			return 0;
		}
		if (max && n > *max)
			*max = (uint32_t)n;
		seen += rep;
		if (*p == ',')
			p++;
		else if (*p)
			goto bad;
	}
	if (!count)
		return 0;
	snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE=%.64s covers %llu nodes, not node id %u",
		 tpn, (unsigned long long)seen, node_id);
	return -1;
bad:
	snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE=%.64s: expected counts such as 2(x3),1",
		 tpn);
	return -1;
}

int ddpenv_tasks_on_node(const char *tpn, uint32_t node_id, uint32_t *count,
			 char *err, size_t errlen)
{
	return tpn_scan(tpn, node_id, count, NULL, err, errlen);
}

int ddpenv_tasks_max(const char *tpn, uint32_t *max, char *err, size_t errlen)
{
	*max = 0;
	return tpn_scan(tpn, 0, NULL, max, err, errlen);
}

/* The most hosts a node list from the environment is walked for: more
 * than any Slurm cluster has nodes, far fewer than a list such as
 * n[0-999999999] names. */
#define MAX_WALK_HOSTS 65536u

/* The hosts of list, which key names, into a table to look them up (and
 * *names, to free): at most MAX_WALK_HOSTS. */
static int host_set(const char *key, const char *list, struct hsearch_data *set, char ***names,
		    size_t *n, char *err, size_t errlen)
{
	ddp_hostlist_t hl = slurm_hostlist_create(list);
	int count = hl ? slurm_hostlist_count(hl) : -1;
	char *h;

	*names = NULL;
	*n = 0;
	memset(set, 0, sizeof(*set));
	if (count < 0 || (unsigned)count > MAX_WALK_HOSTS) {
		snprintf(err, errlen, count < 0 ? "%s=%.100s does not expand: expected a Slurm host list" :
			 "%s=%.100s names %d hosts: expected at most %u", key, list, count, MAX_WALK_HOSTS);
		if (hl)
			slurm_hostlist_destroy(hl);
		return -1;
	}
	if (!(*names = calloc((size_t)count + 1, sizeof(char *))) || !hcreate_r((size_t)count * 2 + 1, set)) {
		snprintf(err, errlen, "out of memory for the %d hosts of %s", count, key);
		free(*names);
		*names = NULL;
		slurm_hostlist_destroy(hl);
		return -1;
	}
	while (*n < (size_t)count && (h = slurm_hostlist_shift(hl))) {
		ENTRY e = { h, NULL }, *found;
		(*names)[(*n)++] = h;
		hsearch_r(e, ENTER, &found, set);
	}
	slurm_hostlist_destroy(hl);
	return 0;
}

static void host_set_free(struct hsearch_data *set, char **names, size_t n)
{
	hdestroy_r(set);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* The head of a heterogeneous step: the first host of component 0's
 * allocation that the step uses (rank 0 runs there).  Both lists come
 * from the environment: each is walked once, at most MAX_WALK_HOSTS. */
static int het_head(const struct ddpenv_env *env, const char *steplist,
		    struct ddpenv_step *step, char *err, size_t errlen)
{
	static const char *const keys[] = {
		"SLURM_JOB_NODELIST_HET_GROUP_0",
		"SLURM_JOB_NODELIST_PACK_GROUP_0", NULL,
	};
	const char *comp0 = NULL, *key = NULL;
	struct hsearch_data in_step;
	char **names = NULL, *host;
	size_t nnames = 0;
	ddp_hostlist_t hl;
	int rv = -1;

	for (const char *const *k = keys; *k && !comp0; k++)
		if ((comp0 = ddpenv_env_get(env, *k)))
			key = *k;
	if (!comp0)
		return 1; /* no component lists: use the step's first host */
	hl = slurm_hostlist_create(comp0);
	if (!hl || slurm_hostlist_count(hl) < 0 || (unsigned)slurm_hostlist_count(hl) > MAX_WALK_HOSTS) {
		snprintf(err, errlen, hl ? "%s=%.200s names %d hosts: expected at most %u" :
			 "%s=%.200s does not expand: expected a Slurm host list", key, comp0,
			 hl ? slurm_hostlist_count(hl) : 0, MAX_WALK_HOSTS);
		if (hl)
			slurm_hostlist_destroy(hl);
		return -1;
	}
	if (host_set("SLURM_STEP_NODELIST", steplist, &in_step, &names, &nnames, err, errlen) < 0) {
		slurm_hostlist_destroy(hl);
		return -1;
	}
	while ((host = slurm_hostlist_shift(hl))) {
		ENTRY e = { host, NULL }, *found = NULL;
		if (hsearch_r(e, FIND, &found, &in_step) && found && strlen(host) < sizeof(step->head)) {
			strcpy(step->head, host);
			snprintf(step->head_how, sizeof(step->head_how),
				 "first host of het component 0 (%.80s) in SLURM_STEP_NODELIST=%.80s",
				 comp0, steplist);
			free(host);
			rv = 0;
			break;
		}
		free(host);
	}
	slurm_hostlist_destroy(hl);
	host_set_free(&in_step, names, nnames);
	if (rv < 0)
		snprintf(err, errlen, "heterogeneous step: no host of %s=%.100s is in SLURM_STEP_NODELIST=%.100s",
			 key, comp0, steplist);
	return rv;
}

/* The head under an arbitrary distribution (SLURM_HOSTFILE, or srun -m
 * arbitrary -w LIST): task 0 runs on the node the list names first, which
 * need not be the first host of SLURM_STEP_NODELIST (a sorted list), and
 * no node can tell which from its environment.  srun --ddp asks slurmctld
 * for the step's layout and passes DDPENV_TASK0_NODE="<job>.<step>:<host>";
 * a value for another step was inherited from an outer one and is not
 * this step's.  1: not an arbitrary step and no value (the first host). */
static int task0_head(const struct ddpenv_env *env, const char *steplist,
		      struct ddpenv_step *step, char *err, size_t errlen)
{
	const char *v = ddpenv_env_get(env, DDPENV_TASK0_NODE);
	const char *dist = ddpenv_env_get(env, "SLURM_DISTRIBUTION");
	char want[32];
	size_t wl = (size_t)snprintf(want, sizeof(want), "%u.%u:", step->job_id, step->step_id);

	if (v && strncmp(v, want, wl) == 0) {
		const char *host = v + wl;
		int in = *host ? ddpenv_hostlist_contains(steplist, host) : 0;
		if (in <= 0 || strlen(host) >= sizeof(step->head)) {
			snprintf(err, errlen, "%s=%.100s: expected a host of SLURM_STEP_NODELIST=%.100s after "
				 "\"%s\"", DDPENV_TASK0_NODE, v, steplist, want);
			return -1;
		}
		strcpy(step->head, host);
		snprintf(step->head_how, sizeof(step->head_how),
			 "node of task 0 in the step's layout (%.40s, from srun --ddp)",
			 dist ? dist : "SLURM_DISTRIBUTION unset");
		return 0;
	}
	if (dist && strncmp(dist, "arbitrary", 9) == 0 && step->num_nodes > 1) {
		snprintf(err, errlen, "SLURM_DISTRIBUTION=%.40s: task 0 runs on the node the host file or "
			 "-w list names first, not necessarily the first of SLURM_STEP_NODELIST=%.100s, and "
			 "only srun knows which: launch the step with srun --ddp (it asks slurmctld for the "
			 "step's layout and passes %s), or use a block or cyclic distribution",
			 dist, steplist, DDPENV_TASK0_NODE);
		return -1;
	}
	return 1;
}

int ddpenv_step_parse(const struct ddpenv_env *env, struct ddpenv_step *step,
		      char *err, size_t errlen)
{
	static const char *const k_step[] = { "SLURM_STEP_ID", "SLURM_STEPID", NULL };
	static const char *const k_tasks[] = { "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL };
	static const char *const k_nodes[] = { "SLURM_STEP_NUM_NODES", "SLURM_NNODES", NULL };
	static const char *const k_restart[] = { "SLURM_RESTART_COUNT", NULL };
	static const char *const k_het[] = { "SLURM_HET_SIZE", "SLURM_PACK_SIZE", NULL };
	const char *list, *gpus;
	int r;

	memset(step, 0, sizeof(*step));
	if (need_u32(env, "SLURM_JOB_ID", &step->job_id, err, errlen) < 0)
		return -1;
	if (!ddpenv_env_get(env, "SLURM_STEP_ID") && !ddpenv_env_get(env, "SLURM_STEPID")) {
		snprintf(err, errlen, "SLURM_STEP_ID is not set: run inside a job step (srun), not the batch shell");
		return -1;
	}
	if (opt_u32(env, k_step, 0, &step->step_id, err, errlen) < 0 ||
	    opt_u32(env, k_tasks, 0, &step->num_tasks, err, errlen) < 0 ||
	    opt_u32(env, k_nodes, 0, &step->num_nodes, err, errlen) < 0 ||
	    opt_u32(env, k_restart, 0, &step->restart_count, err, errlen) < 0 ||
	    opt_u32(env, k_het, 0, &step->het_size, err, errlen) < 0)
		return -1;
	if (step->num_tasks == 0) {
		snprintf(err, errlen, "SLURM_STEP_NUM_TASKS is %s: expected the step's task count (1 or more)",
			 ddpenv_env_get(env, "SLURM_STEP_NUM_TASKS") ? "0" : "not set");
		return -1;
	}
	gpus = ddpenv_env_get(env, "SLURM_STEP_GPUS");
	step->gpus_key = "SLURM_STEP_GPUS";
	if (gpus && *gpus && ddpenv_step_marked(env) && ddpenv_env_get(env, DDPENV_SLURM_STEP_GPUS)) {
		/* In a task that Slurm bound to its own GPUs: the node's. */
		gpus = ddpenv_env_get(env, DDPENV_SLURM_STEP_GPUS);
		step->gpus_key = DDPENV_SLURM_STEP_GPUS;
	}
	if (!gpus || !*gpus) {
		gpus = ddpenv_env_get(env, "CUDA_VISIBLE_DEVICES");
		step->gpus_key = "CUDA_VISIBLE_DEVICES";
	}
	step->has_gpus = gpus && *gpus && strcmp(gpus, "NoDevFiles") != 0;
	/* Slurm names MIG GRES by their UUIDs in CUDA_VISIBLE_DEVICES; in a
	 * task of a --ddp step that holds the task's own one. */
	{
		const char *cvd = ddpenv_env_get(env, "CUDA_VISIBLE_DEVICES");
		step->mig = step->has_gpus && cvd && ddpenv_is_mig(cvd);
	}
	/* GPU sharing GRES: Slurm gives a step shares, and several tasks
	 * may get the same GPU. */
	if (step->has_gpus && ddpenv_env_get(env, "SLURM_SHARDS_ON_NODE"))
		step->shared = "gres/shard";
	else if (step->has_gpus && ddpenv_env_get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
		step->shared = "gres/mps";
	{
		const char *tpn = ddpenv_env_get(env, "SLURM_STEP_TASKS_PER_NODE");
		char terr[DDPENV_ERRLEN];
		if (!tpn || ddpenv_tasks_max(tpn, &step->max_local, terr, sizeof(terr)) < 0)
			step->max_local = 0; /* the task's own check names a bad list */
	}
	step->gpus = 0;
	if (step->has_gpus) /* "0,1,3": the node's GPUs for this step */
		for (const char *p = gpus; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
			step->gpus++;
	else
		step->gpus_key = "SLURM_STEP_GPUS";
	{
		/* A task's list under Slurm's per-task GPU binding (--gpus-per-task,
		 * --gpu-bind) is its own GPUs; SLURM_GPUS_ON_NODE counts the node's. */
		const char *tb = ddpenv_env_get(env, "SLURMD_TRES_BIND");
		const char *on = ddpenv_env_get(env, "SLURM_GPUS_ON_NODE");
		uint32_t n = 0;
		char perr[DDPENV_ERRLEN];
		if (step->has_gpus && !step->mig && !step->shared && tb && strstr(tb, "gpu:") &&
		    !strstr(tb, "gpu:none") && on &&
		    ddpenv_parse_u32("SLURM_GPUS_ON_NODE", on, &n, perr, sizeof(perr)) == 0 &&
		    n > step->gpus) {
			step->gpus = n;
			step->gpus_key = "SLURM_GPUS_ON_NODE";
		}
	}

	list = ddpenv_env_get(env, "SLURM_STEP_NODELIST");
	if (!list) {
		snprintf(err, errlen, "SLURM_STEP_NODELIST is not set: run inside a job step (srun)");
		return -1;
	}
	if (step->het_size > 1) {
		r = het_head(env, list, step, err, errlen);
		if (r <= 0)
			return r;
	} else {
		r = task0_head(env, list, step, err, errlen);
		if (r <= 0)
			return r;
	}
	if (ddpenv_hostlist_first(list, step->head, sizeof(step->head), err, errlen) < 0) {
		char tmp[DDPENV_ERRLEN];
		snprintf(tmp, sizeof(tmp), "SLURM_STEP_NODELIST: %s", err);
		snprintf(err, errlen, "%s", tmp);
		return -1;
	}
	snprintf(step->head_how, sizeof(step->head_how),
		 "first host of SLURM_STEP_NODELIST=%.160s", list);
	return 0;
}
