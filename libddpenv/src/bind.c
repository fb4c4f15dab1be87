/*
 * The binding plan: which GPU each local rank gets, which CPUs and NUMA
 * nodes, and which NIC is closest to its GPU.  Pure planning on an hwloc
 * topology (this machine's or an XML export); ddpenv_bind_apply is the only
 * function that changes anything, and only for the calling process.
 *
 *   1. The step's GPUs (Slurm's GRES indices) become PCI devices: index k
 *      is the k-th GPU of the topology in bus id order.
 *   2. Each GPU's locality is its first non-I/O ancestor (NUMA node's
 *      group, package, ...) that holds CPUs the step may use.
 *   3. Local ranks take GPUs in index order; with fewer tasks than GPUs the
 *      GPUs are picked round-robin across localities first, so tasks do not
 *      crowd onto one socket.
 *   4. The tasks sharing a locality split its allowed CPUs evenly, down the
 *      tree (packages, NUMA nodes, caches, cores, then hardware threads):
 *      disjoint sets, none empty; tasks share CPUs only when there are
 *      fewer CPUs than tasks (said so in the plan).
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hwloc.h>

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

/* ---- inputs ------------------------------------------------------------- */

/* Split a comma-separated list into at most max items of itemlen bytes. */
static int split(const char *key, const char *s, char *items, size_t itemlen, size_t max, size_t *n,
		 char *err, size_t errlen)
{
	const char *p = s;

	*n = 0;
	while (*p) {
		size_t l = strcspn(p, ",");
		if (l == 0 || l >= itemlen || *n >= max) {
			snprintf(err, errlen, "%s=%.100s: %s: expected at most %zu comma-separated GPU ids", key, s,
				 l == 0 ? "an empty entry" : l >= itemlen ? "an entry too long for a GPU id" : "too many",
				 max);
			return -1;
		}
		memcpy(items + *n * itemlen, p, l);
		items[*n * itemlen + l] = '\0';
		(*n)++;
		p += l;
		if (*p == ',')
			p++;
	}
	return 0;
}

int ddpenv_is_mig(const char *v)
{
	return v && strncmp(v, "MIG-", 4) == 0;
}

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

static int value_cmp(const void *a, const void *b)
{
	const char *x = a, *y = b;
	unsigned long p = strtoul(x, NULL, 10), q = strtoul(y, NULL, 10);

	return p < q ? -1 : p > q;
}

/* DDP_STEP names this step: the plugin set the task's variables. */
static int this_step_marked(const struct ddpenv_env *env)
{
	const char *m = ddpenv_env_get(env, DDPENV_MARKER);
	const char *j = ddpenv_env_get(env, "SLURM_JOB_ID");
	const char *st = ddpenv_env_get(env, "SLURM_STEP_ID");
	char want[64];

	if (!st)
		st = ddpenv_env_get(env, "SLURM_STEPID");
	if (!m || !j || !st)
		return 0;
	snprintf(want, sizeof(want), "%s.%s", j, st);
	return strcmp(m, want) == 0;
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

/* ---- NIC closest to a GPU ------------------------------------------------ */

static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
	for (hwloc_obj_t x = a; x; x = x->parent)
		for (hwloc_obj_t y = b; y; y = y->parent)
			if (x == y)
				return x;
	return NULL;
}

static unsigned obj_depth(hwloc_obj_t o)
{
	unsigned d = 0;
	for (; o; o = o->parent)
		d++;
	return d;
}

static void closest_nic(hwloc_topology_t topo, hwloc_obj_t gpu, struct ddpenv_bind_gpu *g,
			const unsigned char *taken, unsigned char *mark, size_t nmark)
{
	hwloc_obj_t best = NULL, best_lca = NULL;
	unsigned best_depth = 0;
	int best_taken = 1;
	size_t idx = 0, best_idx = 0;

	/* NICs are PCI functions with a network or OpenFabrics OS device. */
	for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, NULL); pci;
	     pci = hwloc_get_next_pcidev(topo, pci)) {
		int nic = 0;
		for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
			if (c->type == HWLOC_OBJ_OS_DEVICE &&
			    (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
			     c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS))
				nic = 1;
		if (!nic)
			continue;
		hwloc_obj_t lca = common_ancestor(gpu, pci);
		unsigned d = obj_depth(lca);
		int t = idx < nmark && taken[idx];
		/* Closest first; among equals, one no other GPU took. */
		if (!best || d > best_depth || (d == best_depth && best_taken && !t)) {
			best = pci;
			best_lca = lca;
			best_depth = d;
			best_taken = t;
			best_idx = idx;
		}
		idx++;
	}
	if (!best)
		return;
	if (best_idx < nmark)
		mark[best_idx] = 1;
	for (hwloc_obj_t c = best->io_first_child; c; c = c->next_sibling) {
		if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
			continue;
		if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
			snprintf(g->nic, sizeof(g->nic), "%s", c->name);
			g->nic_hca = 1;
		} else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
			snprintf(g->nic_netdev, sizeof(g->nic_netdev), "%s", c->name);
		}
	}
	if (!g->nic[0])
		snprintf(g->nic, sizeof(g->nic), "%s", g->nic_netdev);
	if (best_lca->type == HWLOC_OBJ_BRIDGE &&
	    best_lca->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
		snprintf(g->nic_how, sizeof(g->nic_how), "same PCIe switch");
	else if (best_lca->type == HWLOC_OBJ_BRIDGE)
		snprintf(g->nic_how, sizeof(g->nic_how), "same PCIe host bridge");
	else if (hwloc_bitmap_weight(best_lca->nodeset) == 1)
		snprintf(g->nic_how, sizeof(g->nic_how), "same NUMA node");
	else
		snprintf(g->nic_how, sizeof(g->nic_how), "across NUMA nodes or sockets");
}

/* ---- the plan --------------------------------------------------------------- */

static void left_alone(int *on, char *how, size_t n, const char *why, const char *key, const char *v)
{
	*on = 0;
	snprintf(how, n, "%s (%s=%.64s): left to Slurm", why, key, v);
}

/* A PCI bus id's place in bus order ("0000:1b:00.0", normalised). */
static unsigned long long bus_key(const char *busid)
{
	unsigned d = 0, b = 0, dev = 0, f = 0;
	sscanf(busid, "%x:%x:%x.%x", &d, &b, &dev, &f);
	return (unsigned long long)d << 16 | b << 8 | dev << 3 | f;
}

/* Slurm's GPU idx in the driver's list (gres_order), NULL past its end. */
static const struct ddpenv_nvgpu *nv_of(const struct ddpenv_topo *t, uint32_t idx)
{
	const struct ddpenv_nvgpu *o[DDPENV_MAX_GPUS];
	size_t n = ddpenv_nvidia_slurm_order(t->nv, t->nnv, (enum ddpenv_gres_order)t->gres_order, o,
					     DDPENV_MAX_GPUS);
	return idx < n ? o[idx] : NULL;
}

/* The shortest prefix of u, "GPU-" and at least 8 digits, that no other
 * GPU's UUID starts with (CUDA takes abbreviated UUIDs); the whole UUID
 * when some GPU's is unknown. */
static void uuid_abbrev(const struct ddpenv_topo *t, const char *u, char *out, size_t len)
{
	size_t n = 12, full = strlen(u);
	for (size_t i = 0; i < t->nnv; i++)
		if (!t->nv[i].uuid[0])
			n = full;
	for (int clash = 1; clash && n < full;) {
		clash = 0;
		for (size_t i = 0; i < t->nnv; i++)
			clash |= strcmp(t->nv[i].uuid, u) && !strncasecmp(t->nv[i].uuid, u, n);
		n += clash;
	}
	snprintf(out, len, "%.*s", (int)n, u);
}

/* What CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) calls each of the step's GPUs.
 * CUDA numbers the GPUs it can open in bus order, skipping the ones the
 * driver excludes.  In bus order (AutoDetect=nvml) Slurm's numbers are
 * CUDA's.  In minor order (gres_order: minor) they are not where the
 * driver numbered /dev/nvidiaN out of bus order.  Under ConstrainDevices
 * Slurm's CUDA_VISIBLE_DEVICES counts the step's GPUs 0..n-1 and CUDA
 * opens only those; without it, it holds Slurm's GPU numbers and CUDA
 * sees every GPU.  So values that are 0..n-1 other than the step's GPU
 * numbers (mode 0) mean ConstrainDevices; GPU numbers other than 0..n-1
 * (mode 1) mean none; for GPUs 0..n-1 the values cannot tell, and where
 * the two counts differ the GPUs' UUIDs name them.  Mode -1 (neither):
 * Slurm's values stand.  Sets each gpus[k].cuda; how: why they differ
 * from Slurm's values, "" when they do not. */
static void cuda_names(const struct ddpenv_topo *t, struct ddpenv_bind_plan *p, int mode,
		       const char *ids_key, const char *ids, char *how, size_t len)
{
	long rall[DDPENV_MAX_GPUS], rstep[DDPENV_MAX_GPUS];
	const struct ddpenv_nvgpu *nv[DDPENV_MAX_GPUS];
	int ids_local = 1, same = 1, uuids = 1, changed = 0, values_are_ids = mode == 1;
	size_t n = p->ngpus, off = 0, need = 0;

	how[0] = 0;
	for (size_t k = 0; k < n; k++)
		snprintf(p->gpus[k].cuda, sizeof(p->gpus[k].cuda), "%s", p->gpus[k].value);
	if (!t->nnv || mode < 0 || t->gres_order != DDPENV_GRES_ORDER_MINOR)
		return;
	for (size_t k = 0; k < n; k++) {
		if (!(nv[k] = nv_of(t, p->gpus[k].index)))
			return;   /* said by the caller */
		ids_local &= p->gpus[k].index == k;
		uuids &= nv[k]->uuid[0] != 0;
	}
	for (size_t k = 0; k < n; k++) {
		unsigned long long key = bus_key(nv[k]->busid);
		rall[k] = rstep[k] = 0;
		for (size_t i = 0; i < t->nnv; i++)
			rall[k] += !t->nv[i].excluded && bus_key(t->nv[i].busid) < key;
		for (size_t j = 0; j < n; j++)
			rstep[k] += bus_key(nv[j]->busid) < key;
		same &= rall[k] == rstep[k];
	}
	if (!values_are_ids || !ids_local || same) {
		const long *r = values_are_ids ? rall : rstep;
		for (size_t k = 0; k < n; k++) {
			snprintf(p->gpus[k].cuda, sizeof(p->gpus[k].cuda), "%ld", r[k]);
			changed |= strcmp(p->gpus[k].cuda, p->gpus[k].value) != 0;
		}
		if (!changed)
			return;
		off = (size_t)snprintf(how, len, "%s=%.64s: gres_order minor, and the NVIDIA driver numbered "
				       "/dev/nvidiaN out of bus order; CUDA%s numbers", ids_key, ids,
				       values_are_ids ? "" : " (ConstrainDevices)");
		for (size_t k = 0; k < n && off < len; k++)
			off += (size_t)snprintf(how + off, len - off, "%s /dev/nvidia%d %s", k ? "," : "",
						nv[k]->minor, p->gpus[k].cuda);
		return;
	}
	/* GPUs 0..n-1, out of bus order: which count CUDA uses depends on
	 * ConstrainDevices, which the step's variables do not show. */
	for (size_t k = 0; k < n && uuids; k++) {
		uuid_abbrev(t, nv[k]->uuid, p->gpus[k].cuda, sizeof(p->gpus[k].cuda));
		need += strlen(p->gpus[k].cuda) + 1;
	}
	if (uuids && need <= sizeof(p->visible)) {
		snprintf(how, len, "%s=%.64s: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN "
			 "out of bus order; Slurm's numbers can mean either count: CUDA_VISIBLE_DEVICES names "
			 "them by UUID", ids_key, ids);
		return;
	}
	for (size_t k = 0; k < n; k++)
		snprintf(p->gpus[k].cuda, sizeof(p->gpus[k].cuda), "%s", p->gpus[k].value);
	snprintf(how, len, "%s=%.64s: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN out of "
		 "bus order, and %s: CUDA may take Slurm's numbers for other GPUs than planned", ids_key, ids,
		 uuids ? "their UUIDs do not fit in CUDA_VISIBLE_DEVICES" :
		 "the driver gives no UUIDs (GPUs not initialised: persistence mode off?)");
}

/* The topology's GPU that Slurm's GPU number idx names: with the NVIDIA
 * driver's list, the idx-th of its GPUs in gres order (busid set even
 * when the topology lacks it; *unlisted counts numbers past the list's
 * end); without it, the idx-th GPU of the topology in bus order. */
static hwloc_obj_t gpu_of(const struct ddpenv_topo *t, hwloc_obj_t *tgpu, size_t ntg, uint32_t idx,
			  char *busid, size_t len, size_t *unlisted)
{
	const struct ddpenv_nvgpu *g;
	busid[0] = 0;
	if (!t->nnv)
		return idx < ntg ? tgpu[idx] : NULL;
	if (!(g = nv_of(t, idx))) {
		(*unlisted)++;
		return NULL;
	}
	snprintf(busid, len, "%s", g->busid);
	for (size_t k = 0; k < ntg; k++) {
		char b[DDPENV_BUSIDLEN];
		ddpenv_topo_busid(tgpu[k], b, sizeof(b));
		if (!strcasecmp(b, busid))
			return tgpu[k];
	}
	return NULL;
}

int ddpenv_bind_plan(const struct ddpenv_topo *t, const struct ddpenv_env *env,
		     enum ddpenv_bind policy, const char *allowed_list,
		     struct ddpenv_bind_plan *plan, char *err, size_t errlen)
{
	hwloc_topology_t topo = t->topo;
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc(), tmp = hwloc_bitmap_alloc();
	hwloc_bitmap_t *sets = NULL;
	hwloc_obj_t tgpu[DDPENV_MAX_GPUS], gobj[DDPENV_MAX_GPUS], gdom[DDPENV_MAX_GPUS];
	hwloc_obj_t *tdom = NULL;
	char ids[DDPENV_MAX_GPUS][16], vals[DDPENV_MAX_GPUS][DDPENV_GPUVAL];
	size_t nids = 0, nvals = 0, ntg;
	size_t order[DDPENV_MAX_GPUS], norder = 0;
	uint32_t node_id, ntasks;
	const char *s, *ids_key = "SLURM_STEP_GPUS";
	int rv = -1;

	memset(plan, 0, sizeof(*plan));
	plan->policy = policy;
	snprintf(plan->topology, sizeof(plan->topology), "%s", t->source);
	if (!allowed || !tmp) {
		snprintf(err, errlen, "out of memory planning the binding");
		goto out;
	}

	/* The tasks of the step on this node. */
	s = ddpenv_env_get(env, "SLURM_NODEID");
	if (!s) {
		snprintf(err, errlen, "SLURM_NODEID is not set: expected inside a Slurm step");
		goto out;
	}
	if (ddpenv_parse_u32("SLURM_NODEID", s, &node_id, err, errlen) < 0 ||
	    ddpenv_tasks_on_node(ddpenv_env_get(env, "SLURM_STEP_TASKS_PER_NODE"), node_id, &ntasks,
				 err, errlen) < 0)
		goto out;
	if (ntasks == 0 || ntasks > DDPENV_MAX_LOCAL) {
		snprintf(err, errlen, "%u tasks on node %u: expected 1-%d", ntasks, node_id, DDPENV_MAX_LOCAL);
		goto out;
	}
	plan->tasks = calloc(ntasks, sizeof(*plan->tasks));
	sets = calloc(ntasks, sizeof(*sets));
	tdom = calloc(ntasks, sizeof(*tdom));
	if (!plan->tasks || !sets || !tdom) {
		snprintf(err, errlen, "out of memory planning %u tasks", ntasks);
		goto out;
	}
	plan->ntasks = ntasks;
	for (uint32_t i = 0; i < ntasks; i++)
		plan->tasks[i].gpu = -1;

	/* The CPUs the step may use here. */
	if (allowed_list) {
		if (hwloc_bitmap_list_sscanf(allowed, allowed_list) < 0 || hwloc_bitmap_iszero(allowed)) {
			snprintf(err, errlen, "allowed CPUs '%.100s': expected a CPU list such as 0-27,112-139",
				 allowed_list);
			goto out;
		}
		if (!hwloc_bitmap_isincluded(allowed, hwloc_topology_get_complete_cpuset(topo))) {
			hwloc_bitmap_list_snprintf(plan->allowed, sizeof(plan->allowed),
						   hwloc_topology_get_complete_cpuset(topo));
			snprintf(err, errlen, "allowed CPUs '%.100s': not all in the topology %.200s (CPUs %.100s)",
				 allowed_list, t->source, plan->allowed);
			goto out;
		}
	} else {
		hwloc_bitmap_and(allowed, hwloc_topology_get_allowed_cpuset(topo),
				 hwloc_topology_get_complete_cpuset(topo));
	}
	hwloc_bitmap_list_snprintf(plan->allowed, sizeof(plan->allowed), allowed);
	if (hwloc_bitmap_iszero(allowed)) {
		snprintf(err, errlen, "the topology %.200s allows no CPU", t->source);
		goto out;
	}

	/* What the user left to us. */
	plan->cpu = plan->gpu = plan->mem = 1;
	if (policy == DDPENV_BIND_NONE) {
		plan->cpu = plan->gpu = plan->mem = 0;
		snprintf(plan->cpu_how, sizeof(plan->cpu_how), "--ddp-bind=none: left to Slurm and the user");
		snprintf(plan->gpu_how, sizeof(plan->gpu_how), "--ddp-bind=none: left to Slurm and the user");
		snprintf(plan->mem_how, sizeof(plan->mem_how), "--ddp-bind=none: left to Slurm and the user");
		rv = 0;
		goto out;
	}
	if ((s = ddpenv_env_get(env, "SLURM_CPU_BIND")))
		left_alone(&plan->cpu, plan->cpu_how, sizeof(plan->cpu_how), "explicit --cpu-bind",
			   "SLURM_CPU_BIND", s);
	if ((s = ddpenv_env_get(env, "SLURM_MEM_BIND")))
		left_alone(&plan->mem, plan->mem_how, sizeof(plan->mem_how), "explicit --mem-bind",
			   "SLURM_MEM_BIND", s);
	else if (!plan->cpu)
		left_alone(&plan->mem, plan->mem_how, sizeof(plan->mem_how),
			   "CPUs left alone, so memory too", "SLURM_CPU_BIND",
			   ddpenv_env_get(env, "SLURM_CPU_BIND"));
	if ((s = ddpenv_env_get(env, "SLURM_GPU_BIND")))
		left_alone(&plan->gpu, plan->gpu_how, sizeof(plan->gpu_how), "explicit --gpu-bind",
			   "SLURM_GPU_BIND", s);
	else if ((s = ddpenv_env_get(env, "SLURMD_TRES_BIND")) && strstr(s, "gpu:"))
		left_alone(&plan->gpu, plan->gpu_how, sizeof(plan->gpu_how), "explicit --gpu-bind",
			   "SLURMD_TRES_BIND", s);

	/* The step's GPUs and the values Slurm gave CUDA. */
	s = ddpenv_env_get(env, "SLURM_STEP_GPUS");
	if ((!s || !*s) && plan->gpu) {
		/* GPUs not from Slurm's GRES: the user's choice. */
		s = ddpenv_env_get(env, "CUDA_VISIBLE_DEVICES");
		if (s && *s) {
			plan->gpu = 0;
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "CUDA_VISIBLE_DEVICES=%.64s set without GPUs from Slurm (no SLURM_STEP_GPUS): left alone", s);
		}
		s = NULL;
	}
	if (s && *s && split(ids_key, s, ids[0], sizeof(ids[0]), DDPENV_MAX_GPUS, &nids, err, errlen) < 0)
		goto out;
	for (size_t i = 0; i < nids; i++)
		if (!all_digits(ids[i])) {
			if (plan->gpu)
				snprintf(plan->gpu_how, sizeof(plan->gpu_how),
					 "%s=%.64s does not name GPUs by index: left to Slurm",
					 ids_key, s);
			plan->gpu = 0;
			nids = 0;
			break;
		}
	if (nids) {
		/* In a task of a --ddp step, what Slurm set before we permuted it. */
		const char *cvd = ddpenv_env_get(env, DDPENV_SLURM_CVD);
		size_t need = 0;
		int numeric = 1, mig = 0;
		if (!cvd || !this_step_marked(env))
			cvd = ddpenv_env_get(env, "CUDA_VISIBLE_DEVICES");
		if (!cvd || split("CUDA_VISIBLE_DEVICES", cvd, vals[0], sizeof(vals[0]), DDPENV_MAX_GPUS, &nvals,
				  err, errlen) < 0)
			nvals = 0;
		for (size_t i = 0; i < nvals; i++) {
			numeric &= all_digits(vals[i]);
			mig |= ddpenv_is_mig(vals[i]);
			need += strlen(vals[i]) + 1;
		}
		if (mig && nvals == nids) {
			/* MIG devices by UUID, in the order of Slurm's GRES
			 * indices: paired by position, never sorted. */
			plan->mig = 1;
		} else {
			qsort(ids, nids, sizeof(ids[0]), value_cmp);
			if (plan->gpu && (nvals != nids || !numeric)) {
				plan->gpu = 0;
				if (mig)
					snprintf(plan->gpu_how, sizeof(plan->gpu_how),
						 "CUDA_VISIBLE_DEVICES=%.64s names MIG devices, but not one for each of the step's %zu GPUs (%s): left to Slurm",
						 cvd, nids, ids_key);
				else
					snprintf(plan->gpu_how, sizeof(plan->gpu_how),
						 "CUDA_VISIBLE_DEVICES=%.64s does not list the step's %zu GPUs (%s) by index: Slurm bound GPUs per task; left alone",
						 cvd ? cvd : "(unset)", nids, ids_key);
			}
			if (nvals == nids && numeric)
				qsort(vals, nvals, sizeof(vals[0]), value_cmp);
			else
				for (size_t i = 0; i < nids; i++)
					snprintf(vals[i], sizeof(vals[i]), "%s", ids[i]);
		}
		if (plan->gpu && need > DDPENV_VALLEN) {
			/* The tasks carry Slurm's list (DDP_SLURM_CUDA_VISIBLE_DEVICES). */
			plan->gpu = 0;
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "CUDA_VISIBLE_DEVICES=%.64s...: %zu characters, more than the %d a variable of the plugin holds: left to Slurm",
				 cvd, need - 1, DDPENV_VALLEN - 1);
		}
	}
	plan->ngpus = nids;
	ntg = ddpenv_topo_gpus(t, tgpu, DDPENV_MAX_GPUS);
	size_t missing = 0, unlisted = 0;
	for (size_t k = 0; k < nids; k++) {
		struct ddpenv_bind_gpu *g = &plan->gpus[k];
		g->index = (uint32_t)strtoul(ids[k], NULL, 10);
		snprintf(g->value, sizeof(g->value), "%s", vals[k]);
		g->numa = -1;
		if (plan->mig) {
			/* Which GPU a MIG device is on only NVML knows. */
			gobj[k] = NULL;
			gdom[k] = ddpenv_topo_locality(topo, NULL, allowed);
			continue;
		}
		gobj[k] = gpu_of(t, tgpu, ntg, g->index, g->busid, sizeof(g->busid), &unlisted);
		missing += gobj[k] == NULL;
		gdom[k] = ddpenv_topo_locality(topo, gobj[k], allowed);
		if (gobj[k]) {
			hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, gobj[k]);
			ddpenv_topo_busid(gobj[k], g->busid, sizeof(g->busid));
			if (hwloc_bitmap_weight(anc->nodeset) >= 1)
				g->numa = hwloc_bitmap_first(anc->nodeset);
			hwloc_bitmap_and(tmp, anc->cpuset, allowed);
			hwloc_bitmap_list_snprintf(g->near, sizeof(g->near), tmp);
		}
	}
	char names_how[DDPENV_HOWLEN] = "";
	if (plan->gpu && nids && plan->mig) {
		cuda_names(t, plan, -1, ids_key, s ? s : "", names_how, sizeof(names_how));
	} else if (plan->gpu && nids) {
		int are_ids = 1, local = 1;
		for (size_t k = 0; k < nids; k++) {
			unsigned long v = strtoul(vals[k], NULL, 10);
			are_ids &= v == strtoul(ids[k], NULL, 10);
			local &= v == k;
		}
		cuda_names(t, plan, are_ids ? 1 : local ? 0 : -1, ids_key, s ? s : "", names_how,
			   sizeof(names_how));
	}
	{
		unsigned char taken[256] = { 0 };
		for (size_t k = 0; k < nids; k++)
			if (gobj[k])
				closest_nic(topo, gobj[k], &plan->gpus[k], taken, taken, sizeof(taken));
	}

	/* GPUs for the tasks, in local rank order. */
	if (nids && ntasks < nids && !plan->mig) {
		/* Round-robin over localities, near ones (with allowed CPUs
		 * close to the GPU) first, then the picks in index order. */
		unsigned char picked[DDPENV_MAX_GPUS] = { 0 };
		size_t got = 0;
		while (got < ntasks) {
			hwloc_obj_t used[DDPENV_MAX_GPUS];
			size_t nused = 0;
			for (int pass = 0; pass < 2 && got < ntasks; pass++)
				for (size_t k = 0; k < nids && got < ntasks; k++) {
					int near = plan->gpus[k].near[0] != '\0';
					int seen = 0;
					if (picked[k] || near != (pass == 0))
						continue;
					for (size_t u = 0; u < nused; u++)
						seen |= used[u] == gdom[k];
					if (seen)
						continue;
					used[nused++] = gdom[k];
					picked[k] = 1;
					got++;
				}
		}
		for (size_t k = 0; k < nids; k++)
			if (picked[k])
				order[norder++] = k;
		for (size_t k = 0; k < nids; k++)
			if (!picked[k])
				order[norder++] = k;
	} else {
		for (size_t k = 0; k < nids; k++)
			order[norder++] = k;
	}
	if (nids) {
		size_t l = 0;
		for (size_t i = 0; i < norder && l < sizeof(plan->visible); i++)
			l += (size_t)snprintf(plan->visible + l, sizeof(plan->visible) - l, "%s%s", i ? "," : "",
					      plan->gpus[order[i]].cuda);
		if (!plan->gpu || plan->mig)
			plan->visible[0] = '\0';
		for (uint32_t i = 0; i < ntasks && plan->gpu; i++)
			plan->tasks[i].gpu = (int)order[i % nids];
	}
	if (plan->gpu) {
		if (!nids)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how), "the step has no GPU here");
		else if (plan->mig)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s, CUDA_VISIBLE_DEVICES=%.80s%s: MIG devices: each task sees only its own (CUDA opens one MIG device per process)%s; which GPU each is on only NVML knows: their locality is unknown",
				 ids_key, s ? s : "", plan->gpus[0].value, nids > 1 ? ",..." : "",
				 ntasks > nids ? ", and tasks share them" : "");
		else if (unlisted) {
			size_t usable = 0;
			for (size_t i = 0; i < t->nnv; i++)
				usable += !t->nv[i].excluded;
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s: %zu of these GPU numbers are past the %zu GPUs the NVIDIA driver lets CUDA open: their locality is unknown",
				 ids_key, s ? s : "", unlisted, usable);
		}
		else if (missing)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%zu of the step's GPUs are not PCI devices of the topology (it has %zu GPUs): their locality is unknown%s%.160s",
				 missing, ntg, names_how[0] ? "; " : "", names_how);
		else if (names_how[0])
			snprintf(plan->gpu_how, sizeof(plan->gpu_how), "%s", names_how);
		else if (t->nnv && t->gres_order == DDPENV_GRES_ORDER_MINOR)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s: Slurm's GPU k is the k-th /dev/nvidiaN (gres_order minor), at the bus id the NVIDIA driver gives it",
				 ids_key, s ? s : "");
		else if (t->nnv)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s: Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets CUDA open (gres_order bus)",
				 ids_key, s ? s : "");
		else if (t->gres_order == DDPENV_GRES_ORDER_MINOR)
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s: gres_order minor needs the NVIDIA driver's GPU list, which is not read here: GRES index k taken for the k-th GPU by PCI bus id",
				 ids_key, s ? s : "");
		else
			snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				 "%s=%.64s: GRES index k is the k-th GPU by PCI bus id", ids_key, s ? s : "");
	}

	/* CPUs: the tasks of each locality split it. */
	if (plan->cpu) {
		for (uint32_t i = 0; i < ntasks; i++) {
			int gi = plan->gpu ? plan->tasks[i].gpu : -1;
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
			if (plan->gpu && bt->gpu >= 0 && gobj[bt->gpu]) {
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
		snprintf(plan->cpu_how, sizeof(plan->cpu_how), "%s%s%s",
			 plan->gpu && nids && !missing && !plan->mig ? "the cores near each task's GPU, split evenly" :
							  "tasks spread evenly over packages, NUMA nodes and cores",
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
	}
	if (policy == DDPENV_BIND_STRICT && plan->gpu)
		snprintf(plan->gpu_how + strlen(plan->gpu_how), sizeof(plan->gpu_how) - strlen(plan->gpu_how),
			 "; --ddp-bind=strict: each task sees its GPU only");
	rv = 0;
out:
	if (sets)
		for (uint32_t i = 0; i < plan->ntasks; i++)
			hwloc_bitmap_free(sets[i]);
	free(sets);
	free(tdom);
	hwloc_bitmap_free(allowed);
	hwloc_bitmap_free(tmp);
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
	if (!set || hwloc_bitmap_list_sscanf(set, bt->cpus) < 0 || (max = hwloc_bitmap_last(set)) < 0) {
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
		int r = ns ? hwloc_bitmap_list_sscanf(ns, bt->mems) : -1;
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
