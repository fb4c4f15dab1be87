/*
 * The GPU half of the binding plan (bind.c has the rest): Slurm's GPU
 * numbers become PCI devices of the topology and CUDA's names for them,
 * each with its locality, the CPUs near it and its closest NIC; the local
 * ranks take them, round-robin across localities when there are fewer
 * tasks than GPUs; and the plan says why, in gpu_how.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hwloc.h>

#include "bind.h"
#include "ddpenv.h"
#include "internal.h"
#include "topo.h"

struct gpu_planning {
	const struct ddpenv_topo *t;
	hwloc_const_bitmap_t allowed;
	hwloc_bitmap_t const *user_cpus;           /* the user's --cpu-bind per task, or NULL */
	struct ddpenv_bind_plan *plan;
	struct bind_gpus *bg;
	char ids[DDPENV_MAX_GPUS][16];             /* SLURM_STEP_GPUS entries */
	char vals[DDPENV_MAX_GPUS][DDPENV_GPUVAL]; /* CUDA_VISIBLE_DEVICES's */
	size_t nids;
	const char *ids_key, *s;                   /* SLURM_STEP_GPUS, its value (NULL none) */
	hwloc_obj_t tgpu[DDPENV_MAX_GPUS];         /* the topology's GPUs in bus order */
	size_t ntg, unlisted;                      /* past the driver's list */
	char names_how[DDPENV_HOWLEN];             /* why CUDA's names differ from Slurm's */
	int per_task_unknown;                      /* Slurm's per_task binding, in a task
						    * without the node's list */
	int map_none;                              /* map/mask_gpu: first task whose entry
						    * names none of the step's GPUs, -1 */
	int map_bad;                               /* the list is not Slurm's syntax */
};

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

/* ---- Slurm's numbers, PCI devices and CUDA's names -------------------------- */

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

/* The step's GPUs (Slurm's numbers, sorted unless MIG) and the values
 * Slurm gave CUDA for them; plan->gpu turns 0 where they are the user's
 * or Slurm's to keep (said in gpu_how). */
static int step_gpus(struct gpu_planning *gp, const struct ddpenv_env *env, char *err, size_t errlen)
{
	struct ddpenv_bind_plan *plan = gp->plan;
	char (*ids)[16] = gp->ids, (*vals)[DDPENV_GPUVAL] = gp->vals;
	size_t nids = 0, nvals = 0;
	const char *s, *ids_key = gp->ids_key;

	s = ddpenv_env_get(env, "SLURM_STEP_GPUS");
	if (plan->slurm_binds && s && *s) {
		/* A task's SLURM_STEP_GPUS is its own GPUs: the node's list
		 * came from the plugin, if it ran this step. */
		const char *node = ddpenv_env_get(env, DDPENV_SLURM_STEP_GPUS);
		if (node && *node && ddpenv_step_marked(env)) {
			s = node;
			gp->ids_key = ids_key = DDPENV_SLURM_STEP_GPUS;
		} else {
			gp->per_task_unknown = 1;
		}
	}
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
		return -1;
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
		if (!cvd || !ddpenv_step_marked(env))
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
	gp->nids = nids;
	gp->s = s;
	return 0;
}

/* Each GPU's PCI device, bus id, NUMA node, the allowed CPUs near it and
 * its locality; what CUDA calls it; the NIC closest to it. */
static int locate(struct gpu_planning *gp, char *err, size_t errlen)
{
	const struct ddpenv_topo *t = gp->t;
	hwloc_topology_t topo = t->topo;
	hwloc_const_bitmap_t allowed = gp->allowed;
	struct ddpenv_bind_plan *plan = gp->plan;
	hwloc_obj_t *gobj = gp->bg->obj, *gdom = gp->bg->dom;
	char (*ids)[16] = gp->ids, (*vals)[DDPENV_GPUVAL] = gp->vals;
	size_t nids = gp->nids;
	const char *s = gp->s;
	hwloc_bitmap_t tmp = hwloc_bitmap_alloc();

	if (!tmp) {
		snprintf(err, errlen, "out of memory planning the binding");
		return -1;
	}
	plan->ngpus = nids;
	memset(plan->gpus, 0, nids * sizeof(plan->gpus[0])); /* (plan_clear left them) */
	gp->ntg = ddpenv_topo_gpus(t, gp->tgpu, DDPENV_MAX_GPUS);
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
		gobj[k] = gpu_of(t, gp->tgpu, gp->ntg, g->index, g->busid, sizeof(g->busid), &gp->unlisted);
		gp->bg->missing += gobj[k] == NULL;
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
	if (plan->gpu && nids && plan->mig) {
		cuda_names(t, plan, -1, gp->ids_key, s ? s : "", gp->names_how, sizeof(gp->names_how));
	} else if (plan->gpu && nids) {
		int are_ids = 1, local = 1;
		for (size_t k = 0; k < nids; k++) {
			unsigned long v = strtoul(vals[k], NULL, 10);
			are_ids &= v == strtoul(ids[k], NULL, 10);
			local &= v == k;
		}
		cuda_names(t, plan, are_ids ? 1 : local ? 0 : -1, gp->ids_key, s ? s : "", gp->names_how,
			   sizeof(gp->names_how));
	}
	{
		unsigned char taken[256] = { 0 };
		for (size_t k = 0; k < nids; k++)
			if (gobj[k])
				closest_nic(topo, gobj[k], &plan->gpus[k], taken, taken, sizeof(taken));
	}

	hwloc_bitmap_free(tmp);
	return 0;
}

/* Slurm's --gpu-bind=map_gpu:LIST or mask_gpu:LIST (plan->slurm_map),
 * for local task i: the GPUs (bits of Slurm's GPU numbers, below 64) of
 * the list's entry i, counting "ID*N" N times and starting over past its
 * end, as slurmstepd reads it.  map_gpu IDs are decimal, masks hex ("0x"
 * optional).  -1: not that syntax. */
static int map_entry(const char *map, uint32_t i, uint64_t *mask)
{
	int is_mask = !strncmp(map, "mask_gpu:", strlen("mask_gpu:"));
	const char *list = strchr(map, ':') + 1;
	uint64_t total = 0, want = 0;

	for (int pass = 0; pass < 2; pass++) {
		uint64_t at = 0;
		for (const char *p = list;; p++) {
			char *e;
			unsigned long long v, n = 1;
			if (!isxdigit((unsigned char)*p))
				return -1;
			errno = 0;
			v = strtoull(p, &e, is_mask ? 16 : 10);
			if (e == p || errno || (!is_mask && v >= 64))
				return -1;
			if (*e == '*') {
				p = e + 1;
				if (!isdigit((unsigned char)*p))
					return -1;
				n = strtoull(p, &e, 10);
				if (n < 1 || n > 1000000 || errno)
					return -1;
			}
			if (*e != ',' && *e != '\0')
				return -1;
			if (pass == 1 && want < at + n) {
				*mask = is_mask ? (uint64_t)v : (uint64_t)1 << v;
				return 0;
			}
			at += n;
			p = e;
			if (!*p)
				break;
		}
		total = at;
		want = i % total;
	}
	return -1;
}

/* GPUs for the tasks, in local rank order, and the CUDA_VISIBLE_DEVICES
 * they share (entry LOCAL_RANK first in each task's, later). */
static void assign(struct gpu_planning *gp)
{
	struct ddpenv_bind_plan *plan = gp->plan;
	const hwloc_obj_t *gdom = gp->bg->dom;
	size_t nids = gp->nids, order[DDPENV_MAX_GPUS], norder = 0;
	uint32_t ntasks = plan->ntasks;

	if (nids && ntasks <= nids && !plan->mig && gp->user_cpus) {
		/* The user bound each task's CPUs: its GPU is the one (lowest
		 * index first) whose locality holds most of them. */
		unsigned char picked[DDPENV_MAX_GPUS] = { 0 };
		hwloc_bitmap_t both = hwloc_bitmap_alloc();
		for (uint32_t i = 0; i < ntasks; i++) {
			int best = -1, bestw = -1;
			for (size_t k = 0; k < nids; k++) {
				int w = 0;
				if (picked[k])
					continue;
				if (both && gdom[k] && gdom[k]->cpuset) {
					hwloc_bitmap_and(both, gp->user_cpus[i], gdom[k]->cpuset);
					w = hwloc_bitmap_weight(both);
				}
				if (w > bestw) {
					best = (int)k;
					bestw = w;
				}
			}
			picked[best] = 1;
			order[norder++] = (size_t)best;
		}
		hwloc_bitmap_free(both);
		for (size_t k = 0; k < nids; k++)
			if (!picked[k])
				order[norder++] = k;
	} else if (nids && ntasks < nids && !plan->mig) {
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
	if (nids && !plan->gpu && plan->slurm_per_task && !gp->per_task_unknown && !plan->mig)
		/* Slurm's own: the i-th N of the step's GPUs, in GRES index
		 * order; a task past them gets the first (slurmstepd says
		 * "Binding to the first device in the allocation instead"). */
		for (uint32_t i = 0; i < ntasks; i++) {
			size_t k = (size_t)i * plan->slurm_per_task;
			plan->tasks[i].gpu = k < nids ? (int)k : 0;
		}
	gp->map_none = -1;
	if (nids && !plan->gpu && plan->slurm_map[0] && !gp->per_task_unknown && !plan->mig)
		for (uint32_t i = 0; i < ntasks; i++) {
			uint64_t m;
			int k = -1;
			if (map_entry(plan->slurm_map, i, &m) < 0) {
				gp->map_bad = 1;
				for (uint32_t j = 0; j < ntasks; j++)
					plan->tasks[j].gpu = -1;
				break;
			}
			for (size_t g = 0; g < nids && k < 0; g++)
				if (plan->gpus[g].index < 64 && (m >> plan->gpus[g].index & 1))
					k = (int)g;
			if (k < 0 && gp->map_none < 0)
				gp->map_none = (int)i;
			plan->tasks[i].gpu = k < 0 ? 0 : k;
		}
}

/* Slurm's per-task binding, said once: what the tasks see and lose. */
static void explain_per_task(struct gpu_planning *gp)
{
	struct ddpenv_bind_plan *plan = gp->plan;
	char what[DDPENV_VALLEN + 64];
	size_t l;

	if (plan->slurm_per_task)
		snprintf(what, sizeof(what), "its own %u GPU%s (gpu:per_task:%u; --gpus-per-task or --gpu-bind)",
			 plan->slurm_per_task, plan->slurm_per_task == 1 ? "" : "s", plan->slurm_per_task);
	else
		snprintf(what, sizeof(what), "the GPUs of its entry in --gpu-bind=%.128s", plan->slurm_map);
	if (gp->per_task_unknown) {
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "Slurm binds each task to %s: left to Slurm; the other tasks' GPUs are unknown here (no %s)",
			 what, DDPENV_SLURM_STEP_GPUS);
		return;
	}
	if (gp->map_bad) {
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "Slurm binds each task to %s, which is not map_gpu:ID[*N],... (decimal IDs below 64) or mask_gpu:HEX[*N],...: left to Slurm, the tasks' GPUs unknown here",
			 what);
		return;
	}
	if (plan->slurm_per_task)
		l = (size_t)snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				     "Slurm binds each task to %s: each sees only %s, from cuda:0, not cuda:LOCAL_RANK, and NCCL can lose P2P/NVLink between them; left to Slurm",
				     what, plan->slurm_per_task > 1 ? "them" : "it");
	else
		l = (size_t)snprintf(plan->gpu_how, sizeof(plan->gpu_how),
				     "Slurm binds each task to its --gpu-bind=%.100s entry: each sees only %s, as cuda:0 (not cuda:LOCAL_RANK); NCCL can lose P2P/NVLink; left to Slurm",
				     plan->slurm_map, plan->slurm_map[2] == 's' ? "its GPUs" : "its GPU");
	if (gp->map_none >= 0 && l < sizeof(plan->gpu_how))
		l += (size_t)snprintf(plan->gpu_how + l, sizeof(plan->gpu_how) - l,
				      "; task %d's entry names none of the step's GPUs (%s): Slurm gives it %u",
				      gp->map_none, gp->s ? gp->s : "", plan->gpus[0].index);
	for (uint32_t i = 0; plan->slurm_map[0] && i < plan->ntasks && l < sizeof(plan->gpu_how); i++)
		for (uint32_t j = i + 1; j < plan->ntasks; j++)
			if (plan->tasks[i].gpu >= 0 && plan->tasks[i].gpu == plan->tasks[j].gpu) {
				snprintf(plan->gpu_how + l, sizeof(plan->gpu_how) - l,
					 "; tasks %u and %u share GPU %u: NCCL refuses two ranks on one GPU", i, j,
					 plan->gpus[plan->tasks[i].gpu].index);
				return;
			}
}

/* Why the GPUs are bound as they are, for ddp-env --explain. */
static void explain(struct gpu_planning *gp)
{
	const struct ddpenv_topo *t = gp->t;
	struct ddpenv_bind_plan *plan = gp->plan;
	size_t nids = gp->nids;
	uint32_t ntasks = plan->ntasks;
	const char *s = gp->s;

	if (!nids)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how), "the step has no GPU here");
	else if (plan->mig)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s, CUDA_VISIBLE_DEVICES=%.80s%s: MIG devices: each task sees only its own (CUDA opens one MIG device per process)%s; which GPU each is on only NVML knows: their locality is unknown",
			 gp->ids_key, s ? s : "", plan->gpus[0].value, nids > 1 ? ",..." : "",
			 ntasks > nids ? ", and tasks share them" : "");
	else if (gp->unlisted) {
		size_t usable = 0;
		for (size_t i = 0; i < t->nnv; i++)
			usable += !t->nv[i].excluded;
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s: %zu of these GPU numbers are past the %zu GPUs the NVIDIA driver lets CUDA open: their locality is unknown",
			 gp->ids_key, s ? s : "", gp->unlisted, usable);
	}
	else if (gp->bg->missing)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%zu of the step's GPUs are not PCI devices of the topology (it has %zu GPUs): their locality is unknown%s%.160s",
			 gp->bg->missing, gp->ntg, gp->names_how[0] ? "; " : "", gp->names_how);
	else if (gp->names_how[0])
		snprintf(plan->gpu_how, sizeof(plan->gpu_how), "%s", gp->names_how);
	else if (t->nnv && t->gres_order == DDPENV_GRES_ORDER_MINOR)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s: Slurm's GPU k is the k-th /dev/nvidiaN (gres_order minor), at the bus id the NVIDIA driver gives it",
			 gp->ids_key, s ? s : "");
	else if (t->nnv)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s: Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets CUDA open (gres_order bus)",
			 gp->ids_key, s ? s : "");
	else if (t->gres_order == DDPENV_GRES_ORDER_MINOR)
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s: gres_order minor needs the NVIDIA driver's GPU list, which is not read here: GRES index k taken for the k-th GPU by PCI bus id",
			 gp->ids_key, s ? s : "");
	else
		snprintf(plan->gpu_how, sizeof(plan->gpu_how),
			 "%s=%.64s: GRES index k is the k-th GPU by PCI bus id", gp->ids_key, s ? s : "");
}

int ddpenv_bind_plan_gpus(const struct ddpenv_topo *t, const struct ddpenv_env *env,
			  hwloc_const_bitmap_t allowed, hwloc_bitmap_t const *user_cpus,
			  struct ddpenv_bind_plan *plan, struct bind_gpus *bg, char *err, size_t errlen)
{
	struct gpu_planning *gp = calloc(1, sizeof(*gp));
	int rv = -1;

	memset(bg, 0, sizeof(*bg));
	if (!gp) {
		snprintf(err, errlen, "out of memory planning the binding");
		return -1;
	}
	gp->t = t;
	gp->allowed = allowed;
	gp->user_cpus = user_cpus;
	gp->plan = plan;
	gp->bg = bg;
	gp->ids_key = "SLURM_STEP_GPUS";
	if (step_gpus(gp, env, err, errlen) < 0 || locate(gp, err, errlen) < 0)
		goto out;
	assign(gp);
	if (plan->gpu)
		explain(gp);
	if (plan->gpu && user_cpus && gp->nids && !plan->mig && plan->ntasks <= gp->nids) {
		size_t l = strlen(plan->gpu_how);
		snprintf(plan->gpu_how + l, sizeof(plan->gpu_how) - l,
			 "; each task's GPU near the CPUs of its --cpu-bind");
	}
	else if (plan->slurm_binds && gp->nids && !plan->mig)
		explain_per_task(gp);
	rv = 0;
out:
	free(gp);
	return rv;
}
