/*
 * The binding plan: which GPU each local rank gets, which CPUs and NUMA
 * nodes, and which NIC is closest to its GPU.  Pure planning on an hwloc
 * topology (this machine's or an XML export); ddpenv_bind_apply is the only
 * function that changes anything, and only for the calling process.
 *
 *   1. The step's GPUs (Slurm's GRES indices) become PCI devices: index k
 *      is the k-th GPU of the topology in bus id order (bind_gpus.c, with
 *      the driver's list and gres_order where there is one).
 *   2. Each GPU's locality is its first non-I/O ancestor (NUMA node's
 *      group, package, ...) that holds CPUs the step may use.
 *   3. Local ranks take GPUs in index order; with fewer tasks than GPUs the
 *      GPUs are picked round-robin across localities first, so tasks do not
 *      crowd onto one socket.  Under the user's --cpu-bind naming each
 *      task's CPUs, each task takes the GPU nearest them instead.
 *   4. The tasks sharing a locality split its allowed CPUs evenly, down the
 *      tree (packages, NUMA nodes, caches, cores, then hardware threads):
 *      disjoint sets, none empty; tasks share CPUs only when there are
 *      fewer CPUs than tasks (said so in the plan).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include <hwloc.h>

#include "bind.h"
#include "ddpenv.h"
#include "internal.h"
#include "topo.h"

int ddpenv_bind_parse(const char *s, enum ddpenv_bind *out, char *err, size_t errlen)
{
	if (!s || !*s || strcmp(s, "auto") == 0)
		*out = DDPENV_BIND_AUTO;
	else if (strcmp(s, "none") == 0)
		*out = DDPENV_BIND_NONE;
	else if (strcmp(s, "strict") == 0)
		*out = DDPENV_BIND_STRICT;
	else {
		snprintf(err, errlen, "--ddp-bind=%.64s: unknown policy (expected auto, none or strict)", s);
		return -1;
	}
	return 0;
}

const char *ddpenv_bind_name(enum ddpenv_bind b)
{
	switch (b) {
	case DDPENV_BIND_AUTO: return "auto";
	case DDPENV_BIND_NONE: return "none";
	case DDPENV_BIND_STRICT: return "strict";
	}
	return "?";
}

void ddpenv_bind_plan_free(struct ddpenv_bind_plan *plan)
{
	free(plan->tasks);
	plan->tasks = NULL;
	plan->ntasks = 0;
}

/* ---- the distribution of CPUs ------------------------------------------- */

/* Give k tasks disjoint, even shares of obj's CPUs within avail. */
static int distribute(hwloc_obj_t obj, hwloc_const_bitmap_t avail, hwloc_bitmap_t *sets, unsigned k)
{
	hwloc_obj_t *kids = NULL;
	unsigned *w = NULL, *cnt = NULL, m = 0, total = 0;
	unsigned char *bumped = NULL;
	hwloc_bitmap_t tmp = NULL;
	int rv = -1;

	if (k == 0)
		return 0;
	for (;;) {
		/* Descend through levels with a single usable child. */
		hwloc_obj_t only = NULL;
		unsigned usable = 0;
		for (unsigned i = 0; i < obj->arity; i++)
			if (hwloc_bitmap_intersects(obj->children[i]->cpuset, avail)) {
				usable++;
				only = obj->children[i];
			}
		if (usable != 1 || k == 1)
			break;
		obj = only;
	}
	kids = calloc(obj->arity + 1, sizeof(*kids));
	w = calloc(obj->arity + 1, sizeof(*w));
	cnt = calloc(obj->arity + 1, sizeof(*cnt));
	bumped = calloc(obj->arity + 1, 1);
	tmp = hwloc_bitmap_alloc();
	if (!kids || !w || !cnt || !bumped || !tmp)
		goto out;
	for (unsigned i = 0; i < obj->arity; i++) {
		hwloc_bitmap_and(tmp, obj->children[i]->cpuset, avail);
		if (!hwloc_bitmap_iszero(tmp)) {
			kids[m] = obj->children[i];
			w[m] = (unsigned)hwloc_bitmap_weight(tmp);
			total += w[m++];
		}
	}
	if (k == 1 || m == 0) {
		/* One task takes it all; or a leaf (a PU) that k tasks share. */
		for (unsigned j = 0; j < k; j++)
			hwloc_bitmap_and(sets[j], obj->cpuset, avail);
		rv = 0;
		goto out;
	}
	if (k <= m) {
		/* Fewer tasks than children: contiguous groups of children with
		 * near-equal CPU counts, each group one task's. */
		unsigned c = 0, taken = 0;
		for (unsigned j = 0; j < k; j++) {
			unsigned left = k - j - 1, g = 0;
			double target = (double)(total - taken) / (double)(k - j);
			do {
				hwloc_bitmap_and(tmp, kids[c]->cpuset, avail);
				hwloc_bitmap_or(sets[j], sets[j], tmp);
				g += w[c++];
			} while (c < m && m - c > left &&
				 (left == 0 || (double)g + (double)w[c] / 2.0 <= target));
			taken += g;
		}
		rv = 0;
		goto out;
	}
	/* More tasks than children: tasks in proportion to CPUs (largest
	 * remainder), each child splits its share further down. */
	unsigned given = 0;
	for (unsigned i = 0; i < m; i++) {
		cnt[i] = (unsigned)((unsigned long long)k * w[i] / total);
		given += cnt[i];
	}
	while (given < k) {
		/* k - given < m: bump the largest remainders, each child once. */
		unsigned best = m;
		unsigned long long bestrem = 0;
		for (unsigned i = 0; i < m; i++) {
			unsigned long long rem = (unsigned long long)k * w[i] % total;
			if (!bumped[i] && (best == m || rem > bestrem)) {
				bestrem = rem;
				best = i;
			}
		}
		bumped[best] = 1;
		cnt[best]++;
		given++;
	}
	for (unsigned i = 0, off = 0; i < m; off += cnt[i], i++)
		if (distribute(kids[i], avail, sets + off, cnt[i]) < 0)
			goto out;
	rv = 0;
out:
	hwloc_bitmap_free(tmp);
	free(bumped);
	free(cnt);
	free(w);
	free(kids);
	return rv;
}

/* ---- the plan --------------------------------------------------------------- */

static void left_alone(int *on, char *how, size_t n, const char *why, const char *key, const char *v)
{
	*on = 0;
	snprintf(how, n, "%s (%s=%.64s): left to Slurm", why, key, v);
}

/* N of Slurm's per-task GPU binding in a SLURMD_TRES_BIND value
 * ("gpu:per_task:1", "gpu:verbose,per_task:2", "gres/gpu:per_task:1"),
 * else 0: --gpus-per-task=N implies it, and task i gets the i-th N of the
 * step's GPUs on the node, in Slurm's order. */
static uint32_t per_task_gpus(const char *tres_bind)
{
	const char *g = strstr(tres_bind, "gpu:"), *p, *end;
	unsigned long n;
	char *e;

	if (!g)
		return 0;
	end = strchr(g, ';');
	p = strstr(g, "per_task:");
	if (!p || (end && p > end))
		return 0;
	n = strtoul(p + strlen("per_task:"), &e, 10);
	return e != p + strlen("per_task:") && n >= 1 && n <= DDPENV_MAX_GPUS ? (uint32_t)n : 0;
}

/* Slurm's map_gpu:LIST or mask_gpu:LIST in a SLURMD_TRES_BIND value
 * ("gpu:map_gpu:3,1", "gpu:verbose,mask_gpu:0xc,0x4") into out, else "":
 * --gpu-bind=map_gpu/mask_gpu, the list last in the gpu part. */
static void slurm_gpu_map(const char *tres_bind, char *out, size_t n)
{
	const char *g = strstr(tres_bind, "gpu:"), *end, *m;

	out[0] = '\0';
	if (!g)
		return;
	end = g + strcspn(g, ";");
	if (!(m = strstr(g, "map_gpu:")) || m > end)
		m = strstr(g, "mask_gpu:");
	if (m && m < end && (m[-1] == ':' || m[-1] == ','))
		snprintf(out, n, "%.*s", (int)(end - m), m);
}

/* The user's --cpu-bind.  srun passes it to the step as SLURM_CPU_BIND,
 * which is how the plugin sees it when the step starts; task/affinity then
 * sets SLURM_CPU_BIND in every task, asked or not (its auto binding, or
 * TaskPluginParam), so in a task of a --ddp step the user's is the one the
 * plugin passed on, DDP_SLURM_CPU_BIND.  Outside one, a task's
 * SLURM_CPU_BIND cannot be told apart and counts as the user's. */
static const char *user_cpu_bind(const struct ddpenv_env *env, const char **key)
{
	const char *v;

	*key = ddpenv_step_marked(env) ? DDPENV_SLURM_CPU_BIND : "SLURM_CPU_BIND";
	v = ddpenv_env_get(env, *key);
	if (!v)
		return NULL;
	/* --cpu-bind=verbose (or quiet) only asks Slurm to report. */
	for (const char *p = v; *p; p += *p == ',') {
		size_t n = strcspn(p, ",");
		if (!(n == 7 && strncmp(p, "verbose", n) == 0) && !(n == 5 && strncmp(p, "quiet", n) == 0) &&
		    !(n == 1 && (*p == 'v' || *p == 'q')) && n)
			return v;
		p += n;
	}
	return NULL;
}

static void free_sets(hwloc_bitmap_t *sets, size_t n)
{
	for (size_t i = 0; sets && i < n; i++)
		hwloc_bitmap_free(sets[i]);
	free(sets);
}

/* The entries of a --cpu-bind value that names CPUs: mask_cpu:0x3,0xc (hex
 * masks) or map_cpu:1,0 (CPU numbers, decimal or 0x hex), as task/affinity
 * writes it in every task (cores, sockets and ldoms become masks) or as the
 * user gave it; at most max.  *out (free_sets) and 1; 0 for another kind
 * of value (cores, none, ...); -1 unreadable, or out of memory. */
static int cpu_bind_sets(const char *v, size_t max, hwloc_bitmap_t **out, size_t *n)
{
	const char *m = v ? strstr(v, "mask_cpu:") : NULL;
	int map = 0;

	*out = NULL;
	*n = 0;
	if (m) {
		m += strlen("mask_cpu:");
	} else if (v && (m = strstr(v, "map_cpu:"))) {
		m += strlen("map_cpu:");
		map = 1;
	} else {
		return 0;
	}
	if (!*m || !(*out = calloc(max, sizeof(**out))))
		return -1;
	for (const char *p = m, *e; *p && *n < max; p = *e ? e + 1 : e) {
		char ent[DDPENV_CPULIST], *end;
		size_t len;
		e = p + strcspn(p, ",");
		len = (size_t)(e - p);
		if (!len || len >= sizeof(ent) || !((*out)[*n] = hwloc_bitmap_alloc()))
			goto bad;
		memcpy(ent, p, len);
		ent[len] = '\0';
		if (!map) {
			if (hwloc_bitmap_taskset_sscanf((*out)[*n], ent) < 0 || hwloc_bitmap_iszero((*out)[*n]))
				goto bad;
		} else {
			int hex = ent[0] == '0' && (ent[1] == 'x' || ent[1] == 'X');
			unsigned long c;
			errno = 0;
			c = strtoul(ent + (hex ? 2 : 0), &end, hex ? 16 : 10);
			if (errno || *end || end == ent + (hex ? 2 : 0) || c > DDPENV_MAX_CPU ||
			    hwloc_bitmap_only((*out)[*n], (unsigned)c) < 0)
				goto bad;
		}
		(*n)++;
	}
	return 1;
bad:
	free_sets(*out, *n + 1);
	*out = NULL;
	*n = 0;
	return -1;
}

/* task/affinity's own binding of this node's tasks, in a task of a --ddp
 * step: SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc, one mask per local task
 * (reused round-robin).  Their union is what Slurm gave the step's tasks
 * here; without task/cgroup's cpuset hwloc sees the whole machine, other
 * jobs' CPUs included.  Narrows allowed, saying how in plan->allowed_how. */
static void slurm_task_masks(const struct ddpenv_env *env, hwloc_bitmap_t allowed,
			     struct ddpenv_bind_plan *plan)
{
	const char *v = ddpenv_env_get(env, "SLURM_CPU_BIND");
	hwloc_bitmap_t all = hwloc_bitmap_alloc(), one = hwloc_bitmap_alloc(), *sets = NULL;
	size_t n = 0, l = strlen(plan->allowed_how);
	char buf[DDPENV_CPULIST], how[64];
	int r;

	if (!v || !ddpenv_step_marked(env) || !all || !one ||
	    (r = cpu_bind_sets(v, DDPENV_MAX_LOCAL, &sets, &n)) == 0)
		goto out;
	snprintf(how, sizeof(how), "%s%.40s", strlen(v) > 40 ? "..." : "",
		 strlen(v) > 40 ? v + strlen(v) - 40 : v);
	if (r < 0) {
		snprintf(plan->allowed_how + l, sizeof(plan->allowed_how) - l,
			 "; SLURM_CPU_BIND=%s: expected mask_cpu:0x..,0x.. (task/affinity's), not used", how);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		hwloc_bitmap_or(all, all, sets[i]);
	hwloc_bitmap_and(one, allowed, all);
	if (hwloc_bitmap_iszero(one)) {
		hwloc_bitmap_list_snprintf(buf, sizeof(buf), all);
		snprintf(plan->allowed_how + l, sizeof(plan->allowed_how) - l,
			 "; task/affinity's CPUs %.60s (SLURM_CPU_BIND) are none of them: not used", buf);
		goto out;
	}
	hwloc_bitmap_copy(allowed, one);
	snprintf(plan->allowed_how + l, sizeof(plan->allowed_how) - l,
		 ", within the CPUs task/affinity gave this node's tasks (SLURM_CPU_BIND=%s)", how);
out:
	free_sets(sets, n);
	hwloc_bitmap_free(all);
	hwloc_bitmap_free(one);
}

/* Each of the node's tasks' CPUs under the user's --cpu-bind, where its
 * value names them (task i takes entry i mod n, as Slurm does); NULL
 * where it does not.  Free with free_sets(.., ntasks). */
static hwloc_bitmap_t *user_task_cpus(const struct ddpenv_env *env, uint32_t ntasks)
{
	hwloc_bitmap_t *sets = NULL, *per = NULL;
	size_t n = 0;

	if (cpu_bind_sets(ddpenv_env_get(env, "SLURM_CPU_BIND"), ntasks, &sets, &n) <= 0 || !n ||
	    !(per = calloc(ntasks, sizeof(*per))))
		goto out;
	for (uint32_t i = 0; i < ntasks; i++)
		if (!(per[i] = hwloc_bitmap_dup(sets[i % n]))) {
			free_sets(per, ntasks);
			per = NULL;
			break;
		}
out:
	free_sets(sets, n);
	return per;
}

/* Slurm's GPU binding picks each task's GPUs from its CPU binding:
 * gpu:closest, gpu:single:N (--ntasks-per-gpu). */
static int gpus_follow_cpus(const char *tres_bind)
{
	const char *g = strstr(tres_bind, "gpu:"), *end, *c, *one;

	if (!g)
		return 0;
	end = strchr(g, ';');
	c = strstr(g, "closest");
	one = strstr(g, "single:");
	return (c && (!end || c < end)) || (one && (!end || one < end));
}

/* Each task's CPUs and NUMA nodes: the tasks sharing a locality (their
 * GPU's, else the machine's) split its allowed CPUs evenly. */
static int plan_cpus(const struct ddpenv_topo *t, hwloc_const_bitmap_t allowed,
		     struct ddpenv_bind_plan *plan, const struct bind_gpus *bg, char *err, size_t errlen)
{
	hwloc_topology_t topo = t->topo;
	uint32_t ntasks = plan->ntasks;
	size_t nids = plan->ngpus, missing = bg->missing;
	const hwloc_obj_t *gobj = bg->obj, *gdom = bg->dom;
	hwloc_bitmap_t *sets = calloc(ntasks, sizeof(*sets));
	hwloc_obj_t *tdom = calloc(ntasks, sizeof(*tdom));
	int rv = -1;

	if (!sets || !tdom) {
		snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
		goto out;
	}
	for (uint32_t i = 0; i < ntasks; i++) {
		int gi = plan->gpu || plan->slurm_binds ? plan->tasks[i].gpu : -1;
		tdom[i] = gi >= 0 ? gdom[gi] : hwloc_get_root_obj(topo);
		if (!(sets[i] = hwloc_bitmap_alloc())) {
			snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
			goto out;
		}
	}
	/* Nested localities (a GPU on the machine's root bridge beside
	 * GPUs under packages) merge into the outer one. */
	for (int changed = 1; changed;) {
		changed = 0;
		for (uint32_t i = 0; i < ntasks; i++)
			for (uint32_t j = 0; j < ntasks; j++)
				if (tdom[i] != tdom[j] &&
				    hwloc_obj_is_in_subtree(topo, tdom[i], tdom[j])) {
					tdom[i] = tdom[j];
					changed = 1;
				}
	}
	hwloc_bitmap_t *group = calloc(ntasks, sizeof(*group));
	if (!group) {
		snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
		goto out;
	}
	for (uint32_t i = 0; i < ntasks; i++) {
		unsigned k = 0;
		int first = 1;
		for (uint32_t j = 0; j < i; j++)
			first &= tdom[j] != tdom[i];
		if (!first)
			continue;
		for (uint32_t j = i; j < ntasks; j++)
			if (tdom[j] == tdom[i])
				group[k++] = sets[j];
		if (distribute(tdom[i], allowed, group, k) < 0) {
			free(group);
			snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
			goto out;
		}
	}
	free(group);
	int shared = 0, far = 0;
	for (uint32_t i = 0; i < ntasks; i++) {
		struct ddpenv_bind_task *bt = &plan->tasks[i];
		hwloc_bitmap_t ns = hwloc_bitmap_alloc();
		hwloc_bitmap_list_snprintf(bt->cpus, sizeof(bt->cpus), sets[i]);
		bt->pus = (unsigned)hwloc_bitmap_weight(sets[i]);
		for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_covering_cpuset_by_type(
					     topo, sets[i], HWLOC_OBJ_CORE, c));)
			bt->cores++;
		if (!bt->cores)
			bt->cores = bt->pus;
		for (uint32_t j = 0; j < ntasks; j++)
			if (j != i && hwloc_bitmap_intersects(sets[i], sets[j]))
				bt->shared = 1;
		shared |= bt->shared;
		if ((plan->gpu || plan->slurm_binds) && bt->gpu >= 0 && gobj[bt->gpu]) {
			hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, gobj[bt->gpu]);
			bt->near = hwloc_bitmap_isincluded(sets[i], anc->cpuset);
			far |= !bt->near;
		}
		if (ns) {
			hwloc_cpuset_to_nodeset(topo, sets[i], ns);
			hwloc_bitmap_list_snprintf(bt->mems, sizeof(bt->mems), ns);
			hwloc_bitmap_free(ns);
		}
	}
	int by_gpu = nids && !missing && !plan->mig && (plan->gpu || (plan->slurm_binds && plan->tasks[0].gpu >= 0));
	snprintf(plan->cpu_how, sizeof(plan->cpu_how), "%s%s%s%s",
		 by_gpu ? "the cores near each task's GPU, split evenly" :
			  "tasks spread evenly over packages, NUMA nodes and cores",
		 by_gpu && !plan->gpu ? " (Slurm's pick of its GPU)" : "",
		 shared ? "; fewer CPUs than tasks: some share" : "",
		 far ? "; some GPUs have no allowed CPU near them" : "");
	if (plan->mem) {
		if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) <= 1) {
			plan->mem = 0;
			snprintf(plan->mem_how, sizeof(plan->mem_how), "one NUMA node: nothing to bind");
		} else {
			snprintf(plan->mem_how, sizeof(plan->mem_how), "the NUMA nodes of the task's CPUs");
		}
	}
	rv = 0;
out:
	if (sets)
		for (uint32_t i = 0; i < ntasks; i++)
			hwloc_bitmap_free(sets[i]);
	free(sets);
	free(tdom);
	return rv;
}

/* The tasks of the step on this node: plan->tasks, each without a GPU
 * yet.  0, else -1 with err. */
static int plan_tasks(const struct ddpenv_env *env, struct ddpenv_bind_plan *plan, char *err, size_t errlen)
{
	uint32_t node_id, ntasks;
	const char *s = ddpenv_env_get(env, "SLURM_NODEID");
	if (!s) {
		snprintf(err, errlen, "SLURM_NODEID is not set: expected inside a Slurm step");
		return -1;
	}
	if (ddpenv_parse_u32("SLURM_NODEID", s, &node_id, err, errlen) < 0 ||
	    ddpenv_tasks_on_node(ddpenv_env_get(env, "SLURM_STEP_TASKS_PER_NODE"), node_id, &ntasks,
				 err, errlen) < 0)
		return -1;
	if (ntasks == 0 || ntasks > DDPENV_MAX_LOCAL) {
		snprintf(err, errlen, "%u tasks on node %u: expected 1-%d", ntasks, node_id, DDPENV_MAX_LOCAL);
		return -1;
	}
	plan->tasks = calloc(ntasks, sizeof(*plan->tasks));
	if (!plan->tasks) {
		snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
		return -1;
	}
	plan->ntasks = ntasks;
	for (uint32_t i = 0; i < ntasks; i++)
		plan->tasks[i].gpu = -1;
	return 0;
}

/* The CPUs the step may use here: the list given, else the topology's
 * allowed ones, within task/affinity's masks.  0, else -1 with err. */
static int plan_allowed(const struct ddpenv_topo *t, const struct ddpenv_env *env, enum ddpenv_bind policy,
			const char *allowed_list, hwloc_bitmap_t allowed, struct ddpenv_bind_plan *plan,
			char *err, size_t errlen)
{
	hwloc_topology_t topo = t->topo;
	const char *s;
	if (allowed_list) {
		char perr[DDPENV_ERRLEN] = "";
		if (ddpenv_cpulist_parse(allowed, allowed_list, DDPENV_MAX_CPU, perr, sizeof(perr)) < 0 ||
		    hwloc_bitmap_iszero(allowed)) {
			snprintf(err, errlen, "allowed CPUs '%.100s': expected a CPU list such as 0-27,112-139%s%.200s",
				 allowed_list, perr[0] ? ": " : "", perr);
			return -1;
		}
		if (!hwloc_bitmap_isincluded(allowed, hwloc_topology_get_complete_cpuset(topo))) {
			hwloc_bitmap_list_snprintf(plan->allowed, sizeof(plan->allowed),
						   hwloc_topology_get_complete_cpuset(topo));
			snprintf(err, errlen, "allowed CPUs '%.100s': not all in the topology %.200s (CPUs %.100s)",
				 allowed_list, t->source, plan->allowed);
			return -1;
		}
		snprintf(plan->allowed_how, sizeof(plan->allowed_how), "as given");
	} else {
		hwloc_bitmap_and(allowed, t->allowed, hwloc_topology_get_complete_cpuset(topo));
		snprintf(plan->allowed_how, sizeof(plan->allowed_how), "%.200s",
			 t->allowed_how[0] ? t->allowed_how
			 : t->thissystem ? "this process's cgroup cpuset, as hwloc reads it" : "the topology's allowed CPUs");
	}
	if (policy != DDPENV_BIND_NONE && !user_cpu_bind(env, &s))
		slurm_task_masks(env, allowed, plan);
	hwloc_bitmap_list_snprintf(plan->allowed, sizeof(plan->allowed), allowed);
	if (hwloc_bitmap_iszero(allowed)) {
		snprintf(err, errlen, "the topology %.200s allows no CPU", t->source);
		return -1;
	}
	return 0;
}

/* What the user, or Slurm's own binding, left to the plan: plan->cpu,
 * gpu and mem with why each is left alone where it is.  Returns the
 * user's --cpu-bind, or NULL. */
static const char *plan_left(const struct ddpenv_env *env, struct ddpenv_bind_plan *plan)
{
	const char *ucb_key, *ucb = user_cpu_bind(env, &ucb_key), *s;
	const char *cpu_key = ucb_key, *cpu_val = ucb, *tres = ddpenv_env_get(env, "SLURMD_TRES_BIND");
	plan->cpu = plan->gpu = plan->mem = 1;
	if (ucb) {
		left_alone(&plan->cpu, plan->cpu_how, sizeof(plan->cpu_how), "explicit --cpu-bind",
			   ucb_key, ucb);
		snprintf(plan->user_cpu_bind, sizeof(plan->user_cpu_bind), "%s", ucb);
	} else if (tres && ddpenv_env_get(env, "SLURM_CPU_BIND") && gpus_follow_cpus(tres)) {
		/* task/affinity bound the task, Slurm picked its GPUs near
		 * those CPUs: moving them would move the task off its GPUs. */
		cpu_key = "SLURMD_TRES_BIND";
		cpu_val = tres;
		left_alone(&plan->cpu, plan->cpu_how, sizeof(plan->cpu_how),
			   "Slurm picked each task's GPUs near the CPUs task/affinity gave it (--gpu-bind=closest or single, --ntasks-per-gpu): those CPUs stay",
			   cpu_key, cpu_val);
	}
	if ((s = ddpenv_env_get(env, "SLURM_MEM_BIND")))
		left_alone(&plan->mem, plan->mem_how, sizeof(plan->mem_how), "explicit --mem-bind",
			   "SLURM_MEM_BIND", s);
	else if (!plan->cpu)
		left_alone(&plan->mem, plan->mem_how, sizeof(plan->mem_how),
			   "CPUs left alone, so memory too", cpu_key, cpu_val);
	if ((s = ddpenv_env_get(env, "SLURM_GPU_BIND")))
		left_alone(&plan->gpu, plan->gpu_how, sizeof(plan->gpu_how), "explicit --gpu-bind",
			   "SLURM_GPU_BIND", s);
	else if ((s = ddpenv_env_get(env, "SLURMD_TRES_BIND")) && strstr(s, "gpu:")) {
		plan->slurm_per_task = per_task_gpus(s);
		slurm_gpu_map(s, plan->slurm_map, sizeof(plan->slurm_map));
		plan->slurm_binds = plan->slurm_per_task || plan->slurm_map[0];
		left_alone(&plan->gpu, plan->gpu_how, sizeof(plan->gpu_how),
			   plan->slurm_per_task ? "Slurm binds each task to its own GPUs (--gpus-per-task or --gpu-bind=per_task)" :
			   plan->slurm_map[0]	? "Slurm binds each task to the GPUs its --gpu-bind=map_gpu or mask_gpu entry names"
						: "Slurm binds GPUs per task (--gpu-bind, or --ntasks-per-gpu)",
			   "SLURMD_TRES_BIND", s);
	}
	return ucb;
}

/* The plan zeroed but for its GPU entries past the first, which the
 * planner zeroes as it fills them (locate): 45 KB of a 54 KB plan, that a
 * task's child would otherwise write page by page, each a copy of
 * slurmstepd's (a copy-on-write fault). */
static void plan_clear(struct ddpenv_bind_plan *plan)
{
	size_t head = offsetof(struct ddpenv_bind_plan, gpus) + sizeof(plan->gpus[0]);
	size_t tail = offsetof(struct ddpenv_bind_plan, mig);

	memset(plan, 0, head);
	memset((char *)plan + tail, 0, sizeof(*plan) - tail);
}

int ddpenv_bind_plan(const struct ddpenv_topo *t, const struct ddpenv_env *env,
		     enum ddpenv_bind policy, const char *allowed_list,
		     struct ddpenv_bind_plan *plan, char *err, size_t errlen)
{
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
	struct bind_gpus bg;
	int rv = -1;

	plan_clear(plan);
	plan->policy = policy;
	snprintf(plan->topology, sizeof(plan->topology), "%s", t->source);
	if (!allowed) {
		snprintf(err, errlen, "out of memory planning the binding");
		goto out;
	}
	if (plan_tasks(env, plan, err, errlen) < 0 ||
	    plan_allowed(t, env, policy, allowed_list, allowed, plan, err, errlen) < 0)
		goto out;
	if (policy == DDPENV_BIND_NONE) {
		plan->cpu = plan->gpu = plan->mem = 0;
		snprintf(plan->cpu_how, sizeof(plan->cpu_how), "--ddp-bind=none: left to Slurm and the user");
		snprintf(plan->gpu_how, sizeof(plan->gpu_how), "--ddp-bind=none: left to Slurm and the user");
		snprintf(plan->mem_how, sizeof(plan->mem_how), "--ddp-bind=none: left to Slurm and the user");
		rv = 0;
		goto out;
	}
	const char *ucb = plan_left(env, plan);

	/* The GPUs, and which task takes which. */
	hwloc_bitmap_t *ucpus = ucb ? user_task_cpus(env, plan->ntasks) : NULL;
	int r = ddpenv_bind_plan_gpus(t, env, allowed, ucpus, plan, &bg, err, errlen);
	free_sets(ucpus, plan->ntasks);
	if (r < 0)
		goto out;

	/* CPUs: the tasks of each locality split it. */
	if (plan->cpu && plan_cpus(t, allowed, plan, &bg, err, errlen) < 0)
		goto out;
	if (policy == DDPENV_BIND_STRICT && plan->gpu)
		snprintf(plan->gpu_how + strlen(plan->gpu_how), sizeof(plan->gpu_how) - strlen(plan->gpu_how),
			 "; --ddp-bind=strict: each task sees its GPU only");
	rv = 0;
out:
	hwloc_bitmap_free(allowed);
	return rv;
}

/* ---- applying it ----------------------------------------------------------- */

int ddpenv_bind_apply(const struct ddpenv_topo *t, const struct ddpenv_bind_plan *plan,
		      uint32_t local_rank, char *err, size_t errlen)
{
	const struct ddpenv_bind_task *bt;
	hwloc_bitmap_t set = NULL;
	cpu_set_t *mask = NULL;
	size_t size;
	int rv = -1, max;

	if (local_rank >= plan->ntasks) {
		snprintf(err, errlen, "local rank %u: the plan has %u tasks", local_rank, plan->ntasks);
		return -1;
	}
	bt = &plan->tasks[local_rank];
	if (!plan->cpu || !bt->cpus[0])
		return 0;
	set = hwloc_bitmap_alloc();
	if (!set || ddpenv_cpulist_parse(set, bt->cpus, DDPENV_MAX_CPU, err, errlen) < 0 ||
	    (max = hwloc_bitmap_last(set)) < 0) {
		snprintf(err, errlen, "CPU list '%.100s': cannot be read back", bt->cpus);
		goto out;
	}
	mask = CPU_ALLOC((size_t)max + 1);
	size = CPU_ALLOC_SIZE((size_t)max + 1);
	if (!mask) {
		snprintf(err, errlen, "out of memory binding to CPUs %.100s", bt->cpus);
		goto out;
	}
	CPU_ZERO_S(size, mask);
	for (int c = hwloc_bitmap_first(set); c >= 0; c = hwloc_bitmap_next(set, c))
		CPU_SET_S((size_t)c, size, mask);
	if (sched_setaffinity(0, size, mask) < 0) {
		snprintf(err, errlen, "binding local rank %u to CPUs %.100s: sched_setaffinity: %s (outside the step's cgroup?)",
			 local_rank, bt->cpus, strerror(errno));
		goto out;
	}
	if (plan->mem && bt->mems[0] && t && t->thissystem) {
		hwloc_bitmap_t ns = hwloc_bitmap_alloc();
		char perr[DDPENV_ERRLEN];
		int r = ns ? ddpenv_cpulist_parse(ns, bt->mems, DDPENV_MAX_CPU, perr, sizeof(perr)) : -1;
		if (r == 0)
			r = hwloc_set_membind(t->topo, ns, HWLOC_MEMBIND_BIND,
					      HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET);
		hwloc_bitmap_free(ns);
		if (r < 0) {
			snprintf(err, errlen, "binding local rank %u's memory to NUMA nodes %s: %s", local_rank,
				 bt->mems, strerror(errno));
			goto out;
		}
	}
	rv = 0;
out:
	if (mask)
		CPU_FREE(mask);
	hwloc_bitmap_free(set);
	return rv;
}
