/* ddp-check's binding checks: CPU sets (non-empty, disjoint, near the
 * task's GPU), one GPU per task unless shared on purpose, every step GPU
 * visible, Slurm's GPU numbers against the driver's PCI bus ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "eval.h"

/* A CPU list from another task: refused when it is not a plain decimal list
 * or names a CPU beyond any machine's (a record could otherwise make task 0
 * allocate gigabytes, or hang hwloc's printer). */
static int bm(hwloc_bitmap_t b, const char *list)
{
	char err[DDPENV_ERRLEN];
	return list && *list && ddpenv_cpulist_parse(b, list, DDPENV_MAX_CPU, err, sizeof(err)) == 0;
}

/* Tasks i and j share CPUs because their GPUs have fewer CPUs near them
 * than tasks using them: the plan keeps locality over spreading. */
static int near_crowded(const struct ck_world *w, const struct nodes *nd, int i, int j)
{
	const struct ck_rank *a = &w->ranks[i], *b = &w->ranks[j];
	hwloc_bitmap_t near = hwloc_bitmap_alloc(), c = hwloc_bitmap_alloc();
	int ok = 0, users = 0;

	if (a->gpu_near[0] && !strcmp(a->gpu_near, b->gpu_near) && bm(near, a->gpu_near)) {
		for (int k = 0; k < w->n; k++)
			users += nd->of[k] == nd->of[i] && !strcmp(w->ranks[k].gpu_near, a->gpu_near);
		ok = users > hwloc_bitmap_weight(near) && bm(c, a->cpus) &&
		     hwloc_bitmap_isincluded(c, near) && bm(c, b->cpus) && hwloc_bitmap_isincluded(c, near);
	}
	hwloc_bitmap_free(near);
	hwloc_bitmap_free(c);
	return ok;
}

static void eval_cpus(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc(), x = hwloc_bitmap_alloc(),
		       all = hwloc_bitmap_alloc(), used = hwloc_bitmap_alloc(), idle = hwloc_bitmap_alloc();

	for (int n = 0; n < nd->n; n++) {
		int unbound = 0, pairs = 0, crowded = 0, pi = -1, pj = -1;
		char ov[64] = "";
		hwloc_bitmap_zero(all);
		hwloc_bitmap_zero(used);
		for (int i = 0; i < w->n; i++) {
			if (nd->of[i] != n)
				continue;
			if (bm(a, w->ranks[i].allowed))
				hwloc_bitmap_or(all, all, a);
			if (bm(a, w->ranks[i].cpus))
				hwloc_bitmap_or(used, used, a);
		}
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n)
				continue;
			if (!bm(a, r->cpus) || hwloc_bitmap_iszero(a)) {
				ck_say(&fail, "task %d (%s) has no CPU ('%s')", i, r->host, r->cpus);
				continue;
			}
			int whole = r->allowed[0] && !strcmp(r->cpus, r->allowed);
			unbound += whole;
			for (int j = i + 1; j < w->n; j++) {
				if (nd->of[j] != n || !bm(b, w->ranks[j].cpus))
					continue;
				hwloc_bitmap_and(x, a, b);
				/* Two unbound tasks are said once, below. */
				if (hwloc_bitmap_iszero(x) || (whole && !strcmp(w->ranks[j].cpus, r->allowed)))
					continue;
				crowded += near_crowded(w, nd, i, j);
				if (!pairs++) {
					pi = i;
					pj = j;
					hwloc_bitmap_list_snprintf(ov, sizeof(ov), x);
				}
			}
		}
		if (pairs) {
			/* More tasks than CPUs must share; but not while CPUs sit idle. */
			int must_share = hwloc_bitmap_weight(all) < nd->count[n];
			hwloc_bitmap_andnot(idle, all, used);
			char idle_s[64] = "";
			hwloc_bitmap_list_snprintf(idle_s, sizeof(idle_s), idle);
			char more[48] = "";
			if (pairs > 1)
				snprintf(more, sizeof(more), " (%d overlapping pairs)", pairs);
			if (crowded == pairs)
				ck_say(&warn, "%s: tasks %d and %d share CPUs %s%s near their GPUs: more tasks "
				    "than CPUs near those GPUs", nd->name[n], pi, pj, ov, more);
			else if (must_share && hwloc_bitmap_iszero(idle))
				ck_say(&warn, "%s: tasks %d and %d share CPUs %s%s: %d tasks on %d CPUs", nd->name[n],
				    pi, pj, ov, more, nd->count[n], hwloc_bitmap_weight(all));
			else
				ck_say(&fail, "%s: task %d (CPUs %s) and task %d (CPUs %s) overlap on %s%s%s%s",
				    nd->name[n], pi, w->ranks[pi].cpus, pj, w->ranks[pj].cpus, ov, more,
				    idle_s[0] ? ", while no task uses CPUs " : "", idle_s);
		}
		if (unbound > 1)
			ck_say(&warn, "%s: %d tasks are not bound, each may run on all of CPUs %s "
			    "(--ddp-bind=none or --cpu-bind=none?)", nd->name[n], unbound,
			    w->ranks[nd->first[n]].allowed);
	}
	hwloc_bitmap_free(a);
	hwloc_bitmap_free(b);
	hwloc_bitmap_free(x);
	hwloc_bitmap_free(all);
	hwloc_bitmap_free(used);
	hwloc_bitmap_free(idle);
	if (fail.items)
		ck_add(w, "bind.cpus", CK_FAIL, "%s%s%s", ck_said(&fail), warn.items ? "; " : "",
		       warn.items ? ck_said(&warn) : "");
	else if (warn.items)
		ck_add(w, "bind.cpus", CK_WARN, "%s", ck_said(&warn));
	else
		ck_add(w, "bind.cpus", CK_OK, "every task has CPUs of its own, disjoint from its node's "
		       "other tasks");
}

static void eval_locality(struct ck_world *w)
{
	struct msg warn = { 0 };
	int gpus = 0;
	hwloc_bitmap_t a = hwloc_bitmap_alloc(), near = hwloc_bitmap_alloc();

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0])
			continue;
		gpus++;
		if (!r->gpu_near[0] || !bm(near, r->gpu_near)) {
			ck_say(&warn, "task %d (%s): GPU %s: locality unknown (%s)", i, r->host, r->gpu,
			    r->topo_err[0] ? r->topo_err : "the topology does not place it");
			continue;
		}
		if (!bm(a, r->cpus))
			continue;
		if (hwloc_bitmap_isincluded(a, near))
			continue;
		if (hwloc_bitmap_intersects(a, near))
			ck_say(&warn, "task %d (%s): CPUs %s are not all near its GPU %s (near: %s)", i, r->host,
			    r->cpus, r->gpu, r->gpu_near);
		else
			ck_say(&warn, "task %d (%s): CPUs %s (NUMA %s) are far from its GPU %s (NUMA %d, near: %s)",
			    i, r->host, r->cpus, r->numa, r->gpu, r->gpu_numa, r->gpu_near);
	}
	hwloc_bitmap_free(a);
	hwloc_bitmap_free(near);
	int migs = 0, unplaced = 0;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		migs += r->joined && r->mig[0] && !r->gpu[0];
		unplaced += r->joined && !r->mig[0] && !r->gpu[0] && r->step_gpus > 0;
	}
	if (!gpus && migs)
		ck_add(w, "bind.locality", CK_SKIP, "the tasks' GPUs are MIG devices, and which GPU each is on "
		       "only NVML knows (ddp-check --ddp=nccl asks CUDA): their locality is not checked");
	else if (!gpus && unplaced)
		ck_add(w, "bind.locality", CK_SKIP, "the tasks' GPUs have no PCI bus id: the topology does not "
		       "place them (no DDP_GPU_BUSID), and CUDA was not asked or did not answer; their "
		       "locality is not checked");
	else if (!gpus)
		ck_add(w, "bind.locality", CK_OK, "no task has a GPU: nothing to place near one");
	else if (warn.items)
		ck_add(w, "bind.locality", CK_WARN, "%s", ck_said(&warn));
	else
		ck_add(w, "bind.locality", CK_OK, "each of %d tasks runs on CPUs near its GPU", gpus);
}

/* What names a task's GPU: its MIG device, else its bus id, else (no
 * topology places it, and no CUDA was asked) the entry of its
 * CUDA_VISIBLE_DEVICES that a CUDA program opens: the only one, or the
 * one at LOCAL_RANK (the plugin's order).  by_index says it is the last. */
static const char *gpu_key(const struct ck_rank *r, char *buf, size_t len, int *by_index)
{
	*by_index = 0;
	if (r->mig[0])
		return r->mig;
	if (r->gpu[0])
		return r->gpu;
	buf[0] = 0;
	if (!(r->have & 1u << CK_CVD) || r->visible < 1)
		return buf;
	long at = 0;
	if (r->visible > 1) {
		char *end;
		if (!(r->have & 1u << CK_LOCAL_RANK))
			return buf;
		at = strtol(r->env[CK_LOCAL_RANK], &end, 10);
		if (*end || at < 0 || at >= r->visible)
			return buf;
	}
	const char *p = r->env[CK_CVD];
	for (long k = 0; k < at && p; k++)
		p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
	if (!p || !*p || *p == ',')
		return buf;
	snprintf(buf, len, "%.*s", (int)strcspn(p, ","), p);
	*by_index = 1;
	return buf;
}

/* The GPU sharing GRES Slurm gave the task, NULL none. */
static const char *shared_by(const struct ck_rank *r)
{
	return r->have & 1u << CK_SHARDS ? "gres/shard" : r->have & 1u << CK_MPS ? "gres/mps" : NULL;
}

static void eval_gpus(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 }, shared = { 0 };
	int any = 0, migs = 0, byidx = 0, nccl = !strcmp(w->backend, "nccl");
	const char *share = NULL;

	for (int n = 0; n < nd->n; n++) {
		int used = 0, step = 0;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			char kr[DDPENV_GPUVAL], kq[DDPENV_GPUVAL];
			int ir, iq;
			if (nd->of[i] != n)
				continue;
			if (r->step_gpus > step)
				step = r->step_gpus;
			const char *key = gpu_key(r, kr, sizeof(kr), &ir);
			if (!key[0]) {
				if (r->step_gpus > 0)
					ck_say(nccl ? &fail : &warn, "task %d (%s) has no GPU of its own (%d task%s, %d "
					    "GPU%s there)", i, r->host, nd->count[n], nd->count[n] == 1 ? "" : "s",
					    r->step_gpus, r->step_gpus == 1 ? "" : "s");
				continue;
			}
			any++;
			migs += r->mig[0] != 0;
			byidx += ir;
			int dup = 0;
			for (int j = 0; j < i; j++) {
				const struct ck_rank *q = &w->ranks[j];
				if (nd->of[j] != n)
					continue;
				const char *qkey = gpu_key(q, kq, sizeof(kq), &iq);
				if (iq == ir && !strcasecmp(qkey, key)) {
					const char *sh = shared_by(r);
					char what[DDPENV_GPUVAL + 48];
					if (ir)
						snprintf(what, sizeof(what), "GPU %s of CUDA_VISIBLE_DEVICES", key);
					else
						snprintf(what, sizeof(what), "%s %s", r->mig[0] ? "MIG device" : "GPU", key);
					if (sh && !nccl) {
						/* what the user asked Slurm for: named
						 * once, at the GPU's first task */
						share = sh;
					} else {
						ck_say(nccl ? &fail : &warn, "%s: %s is used by tasks %d and %d%s%s%s", r->host,
						    what, j, i, sh ? " (shares of it from " : "", sh ? sh : "",
						    sh ? ": NCCL runs one rank per GPU; use --ddp=gloo)" :
						    r->mig[0] && r->visible > 1 ? " (CUDA opens the first MIG device of "
						    "CUDA_VISIBLE_DEVICES only: run with srun --ddp, which gives each task "
						    "its own)" : "");
					}
					dup = 1;
					break;
				}
				if (nccl && r->mig[0] && q->mig[0] && r->gpu[0] && !strcasecmp(q->gpu, r->gpu)) {
					ck_say(&fail, "%s: tasks %d and %d run on MIG devices of one GPU (%s): NCCL "
					    "does not run two ranks on one GPU; use --ddp=gloo", r->host, j, i, r->gpu);
					break;
				}
			}
			used += !dup;
			if (!dup && shared_by(r) && !nccl) {
				/* the tasks after it on the same shared GPU */
				char list[160];
				size_t off = 0;
				int sharers = 0;
				for (int j = i + 1; j < w->n; j++) {
					const struct ck_rank *q = &w->ranks[j];
					if (nd->of[j] != n || strcasecmp(gpu_key(q, kq, sizeof(kq), &iq), key) ||
					    iq != ir)
						continue;
					sharers++;
					if (off < sizeof(list))
						off += (size_t)snprintf(list + off, sizeof(list) - off, ", %d", j);
				}
				if (sharers)
					ck_say(&shared, "%s: %s%s%s by tasks %d%s", r->host, ir ? "GPU " : r->mig[0] ?
					    "MIG device " : "GPU ", key, ir ? " of CUDA_VISIBLE_DEVICES" : "", i, list);
			}
		}
		if (step > used && used > 0)
			ck_say(&warn, "%s: %d of the step's %d GPUs there are used by no task", nd->name[n],
			    step - used, step);
	}
	const char *idx_note = byidx ? " (GPUs named by CUDA_VISIBLE_DEVICES: no topology places "
				       "them, and CUDA was not asked or did not answer)" : "";
	if (fail.items)
		ck_add(w, "bind.gpus", CK_FAIL, "%s%s%s%s", ck_said(&fail), warn.items ? "; " : "",
		       warn.items ? ck_said(&warn) : "", idx_note);
	else if (warn.items)
		ck_add(w, "bind.gpus", CK_WARN, "%s%s", ck_said(&warn), idx_note);
	else if (!any)
		ck_add(w, "bind.gpus", CK_OK, "no GPUs in this step");
	else if (shared.items)
		ck_add(w, "bind.gpus", CK_OK, "GPUs shared as %s gave them: %s%s", share, ck_said(&shared),
		       idx_note);
	else if (migs == any)
		ck_add(w, "bind.gpus", CK_OK, "each of %d MIG devices is used by exactly one task", any);
	else
		ck_add(w, "bind.gpus", CK_OK, "each of %d GPUs is used by exactly one task%s", any, idx_note);
}

static void eval_visible(struct ck_world *w)
{
	struct msg warn = { 0 };
	int checked = 0, migs = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || r->step_gpus <= 0 || r->visible < 0)
			continue;
		checked++;
		if (r->mig[0]) {
			/* No peer access between MIG devices; CUDA opens one. */
			migs++;
			if (r->visible > 1)
				ck_say(&warn, "task %d (%s) is shown %d MIG devices (CUDA_VISIBLE_DEVICES=%s), but "
				    "CUDA opens only the first, %s", i, r->host, r->visible, r->env[CK_CVD], r->mig);
		} else if (r->visible < r->step_gpus)
			ck_say(&warn, "task %d (%s) sees %d of the step's %d GPUs there: no CUDA peer access "
			    "(NVLink, P2P) to the others' GPUs (CUDA_VISIBLE_DEVICES=%s, narrowed by "
			    "--gpus-per-task, --gpu-bind or --ddp-bind=strict?)", i, r->host, r->visible, r->step_gpus,
			    r->env[CK_CVD]);
	}
	if (warn.items)
		ck_add(w, "bind.visible", CK_WARN, "%s", ck_said(&warn));
	else if (!checked)
		ck_add(w, "bind.visible", CK_OK, "no GPUs in this step");
	else if (migs == checked)
		ck_add(w, "bind.visible", CK_OK, "every task sees its own MIG device only (CUDA opens one "
		       "MIG device per process, and MIG devices have no peer access)");
	else
		ck_add(w, "bind.visible", CK_OK, "every task sees all of its node's GPUs of the step "
		       "(peer access possible)%s", migs ? "; the tasks on MIG devices, their own" : "");
}

static int by_busid(const void *a, const void *b)
{
	return strcasecmp(((const struct ddpenv_nvgpu *)a)->busid, ((const struct ddpenv_nvgpu *)b)->busid);
}

/* One node's driver table against bus order: whether the device numbers
 * rise with the bus ids.  Only the order is checked, not that /dev/nvidiaN
 * is exactly the N-th GPU: a container (pyxis, enroot) lists only the
 * GPUs it was given, and a hole in the numbers alone is no error.  out:
 * "0000:1b:00.0 is /dev/nvidia1, 0000:43:00.0 is /dev/nvidia0, ..." in bus
 * order. */
static int misordered(const struct ddpenv_nvgpu *g, int ng, char *out, size_t len)
{
	struct ddpenv_nvgpu s[DDPENV_MAX_GPUS];
	size_t off = 0;
	int bad = 0;
	int ns = 0;
	for (int k = 0; k < ng; k++)   /* CUDA does not count excluded GPUs */
		if (!g[k].excluded)
			s[ns++] = g[k];
	ng = ns;
	qsort(s, (size_t)ng, sizeof(*s), by_busid);
	out[0] = 0;
	for (int k = 1; k < ng; k++)
		bad += s[k].minor < s[k - 1].minor;
	for (int k = 0; bad && k < ng && k < 8 && off < len; k++)
		off += (size_t)snprintf(out + off, len - off, "%s%s is /dev/nvidia%d", k ? ", " : "",
					s[k].busid, s[k].minor);
	if (bad && ng > 8 && off < len)
		snprintf(out + off, len - off, ", and %d more", ng - 8);
	return bad;
}

/* Slurm's GPU numbers against the NVIDIA driver's list.  Slurm's GPU k
 * (SLURM_STEP_GPUS; CUDA_VISIBLE_DEVICES too without ConstrainDevices) is
 * the k-th of slurmd's GPU list: in bus order with AutoDetect=nvml, in
 * File= order (by device minor) from a hand-written gres.conf, as the
 * site told the plugin (gres_order).  CUDA under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID counts in bus order.  Where the two
 * differ, a task can drive another GPU than Slurm gave it. */
/* What bind.gres gathers over the nodes before its verdict. */
struct gres {
	struct msg fail, warn;
	int nccl, tables, gpus, checked, planned, migs;
	char busorder[CK_HOST * 2];      /* a node whose driver numbers GPUs out of bus order */
	char partial[CK_HOST * 2];       /* a node whose driver lists only some GPUs */
};

/* Under nccl CUDA said which GPU each task opened: the one the plugin
 * planned (DDP_GPU_BUSID), near which it bound the task's CPUs? */
static void gres_planned(const struct ck_world *w, struct gres *s)
{
	for (int i = 0; s->nccl && i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0] || !ck_has(r, CK_GPU_BUSID) || strncmp(r->gpu_from, "CUDA", 4))
			continue;
		s->planned++;
		if (strcasecmp(r->gpu, r->env[CK_GPU_BUSID]))
			ck_say(&s->fail, "task %d (%s) opened GPU %s (%s), but slurm-ddp planned %s (DDP_GPU_BUSID) "
			    "and bound its CPUs near that one: CUDA_VISIBLE_DEVICES=%s names other GPUs "
			    "than the plan (set by hand, or Slurm numbers its GPUs otherwise than gres_order "
			    "%s says: minor for a gres.conf listing File=/dev/nvidia[0-N], bus for "
			    "AutoDetect=nvml)", i, r->host, r->gpu, r->gpu_from, r->env[CK_GPU_BUSID],
			    ck_has(r, CK_CVD) ? r->env[CK_CVD] : "(unset)",
			    ddpenv_gres_order_name((enum ddpenv_gres_order)r->gres_order));
	}
}

/* Task i's SLURM_STEP_GPUS against the node's GPUs in Slurm's order: is
 * the GPU it uses one of them? */
static void gres_task(const struct ck_world *w, int i, const struct ddpenv_nvgpu *const *slurm, size_t ns,
		      enum ddpenv_gres_order order, struct gres *s)
{
	const struct ck_rank *r = &w->ranks[i];
	char ids[DDPENV_VALLEN], busids[400] = "";
	size_t off = 0;
	int mine = 0;
	long past = -1;

	/* Slurm's GRES numbers count MIG devices, not GPUs. */
	if (!r->gpu[0] || !ck_has(r, CK_STEP_GPUS) || r->mig[0])
		return;
	snprintf(ids, sizeof(ids), "%s", r->env[CK_STEP_GPUS]);
	for (char *sv = NULL, *tok = strtok_r(ids, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
		char *end;
		long k = strtol(tok, &end, 10);
		if (end == tok || *end || k < 0) {
			past = -2;
			break;
		}
		if ((size_t)k >= ns) {
			past = k;
			break;
		}
		mine |= !strcasecmp(slurm[k]->busid, r->gpu);
		if (off < sizeof(busids))
			off += (size_t)snprintf(busids + off, sizeof(busids) - off, "%s%s (/dev/nvidia%d)",
						off ? ", " : "", slurm[k]->busid, slurm[k]->minor);
	}
	if (past >= 0) {
		ck_say(&s->warn, "task %d (%s): SLURM_STEP_GPUS=%s names GPU %ld, but the NVIDIA driver there "
		    "lists %zu GPUs CUDA can open", i, r->host, r->env[CK_STEP_GPUS], past, ns);
		return;
	}
	if (past == -2) {
		ck_say(&s->warn, "task %d (%s): SLURM_STEP_GPUS=%s is not a list of GPU numbers", i, r->host,
		    r->env[CK_STEP_GPUS]);
		return;
	}
	s->checked++;
	if (!mine)
		ck_say(s->nccl ? &s->fail : &s->warn, "task %d (%s) uses GPU %s%s%s%s, not one of the step's: "
		    "SLURM_STEP_GPUS=%s is %s in gres_order %s", i, r->host, r->gpu,
		    r->gpu_from[0] ? " (from " : "", r->gpu_from, r->gpu_from[0] ? ")" : "",
		    r->env[CK_STEP_GPUS], busids, ddpenv_gres_order_name(order));
}

/* Node n: its driver's GPU list (from the first task that read it), its
 * order against gres_order, and each task's GPU against it. */
static void gres_node(const struct ck_world *w, const struct nodes *nd, int n, struct gres *s)
{
	const struct ck_rank *t = NULL;
	struct ddpenv_nvgpu g[DDPENV_MAX_GPUS];
	const struct ddpenv_nvgpu *slurm[DDPENV_MAX_GPUS];
	int ng;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (nd->of[i] != n)
			continue;
		s->gpus |= r->gpu[0] || r->step_gpus > 0;
		s->migs += r->mig[0] != 0;
		if (!t && (r->nvgpus[0] || r->nvgpus_err[0]))
			t = r;
	}
	if (!t)
		return;
	if (!t->nvgpus[0] || (ng = ck_nvidia_parse(t->nvgpus, g, DDPENV_MAX_GPUS)) <= 0) {
		ck_say(&s->warn, "%s: the NVIDIA driver's GPU list could not be read: %s", nd->name[n],
		    t->nvgpus_err[0] ? t->nvgpus_err : t->nvgpus);
		return;
	}
	s->tables++;
	/* A container (pyxis, enroot) shows only its own GPUs: device numbers
	 * with holes, which Slurm's node-wide numbers do not index. */
	int dense = 1;
	for (int k = 0; k < ng; k++)
		dense &= g[k].minor == k;
	if (!dense) {
		if (!s->partial[0])
			snprintf(s->partial, sizeof(s->partial), "%s", nd->name[n]);
		return;
	}
	enum ddpenv_gres_order order = (enum ddpenv_gres_order)t->gres_order;
	size_t ns = ddpenv_nvidia_slurm_order(g, (size_t)ng, order, slurm, DDPENV_MAX_GPUS);
	char list[400];
	if (misordered(g, ng, list, sizeof(list))) {
		if (order == DDPENV_GRES_ORDER_MINOR)
			ck_say(&s->warn, "%s: gres_order minor, and the NVIDIA driver's device numbers do not follow "
			    "PCI bus order (%s): Slurm's GPU numbers (SLURM_STEP_GPUS, and "
			    "CUDA_VISIBLE_DEVICES without ConstrainDevices=yes) mean other GPUs to CUDA "
			    "(CUDA_DEVICE_ORDER=PCI_BUS_ID) than to Slurm; srun --ddp writes "
			    "CUDA_VISIBLE_DEVICES as CUDA counts, steps without it get Slurm's numbers "
			    "(list the files in bus order in gres.conf, or use AutoDetect=nvml and "
			    "gres_order: bus)", nd->name[n], list);
		else if (!s->busorder[0])
			snprintf(s->busorder, sizeof(s->busorder), "%s", nd->name[n]);
	}
	for (int i = 0; i < w->n; i++)
		if (nd->of[i] == n)
			gres_task(w, i, slurm, ns, order, s);
}

static void gres_verdict(struct ck_world *w, struct gres *s)
{
	const char *opened = s->planned ? "; each task opened the GPU planned for it" : "";
	if (s->fail.items)
		ck_add(w, "bind.gres", CK_FAIL, "%s%s%s", ck_said(&s->fail), s->warn.items ? "; " : "",
		       s->warn.items ? ck_said(&s->warn) : "");
	else if (s->warn.items)
		ck_add(w, "bind.gres", CK_WARN, "%s", ck_said(&s->warn));
	else if (s->migs && !s->checked)
		ck_add(w, "bind.gres", CK_OK, "the step's GPUs are MIG devices, which Slurm names by UUID: "
		       "its GRES numbers count MIG devices, not GPUs, and are not checked against PCI bus ids");
	else if (s->tables && s->partial[0] && !s->checked)
		ck_add(w, "bind.gres", CK_OK, "the NVIDIA driver lists only some GPUs, with holes in their "
		       "device numbers, on %s%s (a container's own GPUs?): Slurm's node-wide GPU numbers are not "
		       "checked against them%s", s->partial, s->tables > 1 ? " and others" : "", opened);
	else if (s->tables && s->busorder[0])
		ck_add(w, "bind.gres", CK_OK, "Slurm's GPU numbers taken in PCI bus order (gres_order bus, "
		       "as AutoDetect=nvml numbers them) on %d node%s, where the NVIDIA driver's device numbers "
		       "do not follow bus order (%s%s: a gres.conf listing File=/dev/nvidia[0-N] there needs "
		       "gres_order: minor)%s%s", s->tables, s->tables == 1 ? "" : "s", s->busorder,
		       s->tables > 1 ? ", ..." : "",
		       s->checked ? "; every task's GPU is one Slurm gave the step" : "", opened);
	else if (s->tables)
		ck_add(w, "bind.gres", CK_OK, "the NVIDIA driver's device numbers follow PCI bus order on %d "
		       "node%s%s%s%s%s%s", s->tables, s->tables == 1 ? "" : "s",
		       s->checked ? ", and every task's GPU is one Slurm gave the step" : "",
		       s->partial[0] ? " (not checked on " : "", s->partial,
		       s->partial[0] ? ": a container's partial list?)" : "", opened);
	else if (!s->gpus)
		ck_add(w, "bind.gres", CK_OK, "no GPUs in this step");
	else if (s->planned)
		ck_add(w, "bind.gres", CK_OK, "each task opened the GPU planned for it (DDP_GPU_BUSID); no "
		       "node has the NVIDIA driver's GPU list (%s) to check Slurm's numbers with",
		       DDPENV_NVIDIA_GPUS);
	else
		ck_add(w, "bind.gres", CK_SKIP, "no node has the NVIDIA driver's GPU list (%s): Slurm's "
		       "GPU numbers were not checked against PCI bus ids", DDPENV_NVIDIA_GPUS);
}

static void eval_gres(struct ck_world *w, const struct nodes *nd)
{
	static struct gres s;
	memset(&s, 0, sizeof(s));
	s.nccl = !strcmp(w->backend, "nccl");
	gres_planned(w, &s);
	for (int n = 0; n < nd->n; n++)
		gres_node(w, nd, n, &s);
	gres_verdict(w, &s);
}

/* OpenMP's threads against the task's CPUs: more threads than CPUs take
 * turns on them (every parallel region waits for its slowest thread), the
 * classic CPU-training slowdown, often an OMP_NUM_THREADS from a profile
 * (the plugin sets it to the task's cores unless the user set it). */
static void eval_threads(struct ck_world *w)
{
	struct msg warn = { 0 };
	hwloc_bitmap_t c = hwloc_bitmap_alloc();
	int set = 0, most = 0;

	for (int i = 0; c && i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		char *end;
		if (!ck_has(r, CK_OMP))
			continue;
		set++;
		/* "8" or a nested "8,2": the outer level's count */
		long t = strtol(r->env[CK_OMP], &end, 10);
		if (end == r->env[CK_OMP] || (*end && *end != ',') || t < 1) {
			ck_say(&warn, "task %d (%s): OMP_NUM_THREADS='%.32s': expected a positive number", i, r->host,
			    r->env[CK_OMP]);
			continue;
		}
		int n = bm(c, r->cpus) ? hwloc_bitmap_weight(c) : 0;
		if (n > 0 && t > n)
			ck_say(&warn, "task %d (%s): OMP_NUM_THREADS=%ld on %d CPU%s (%s): its threads take turns "
			    "on them", i, r->host, t, n, n == 1 ? "" : "s", r->cpus);
		else if (t > most)
			most = (int)t;
	}
	hwloc_bitmap_free(c);
	if (warn.items)
		ck_add(w, "bind.threads", CK_WARN, "%s (an OMP_NUM_THREADS from a profile or batch script? "
		       "unset, srun --ddp sets it to each task's cores)", ck_said(&warn));
	else if (set)
		ck_add(w, "bind.threads", CK_OK, "OMP_NUM_THREADS within each task's CPUs (at most %d)", most);
	else
		ck_add(w, "bind.threads", CK_OK, "OMP_NUM_THREADS unset: OpenMP takes each task's CPUs");
}

/* A count from another task's record, within what any machine has (the
 * sums below stay far from overflow whatever a record says). */
#define COUNT_MAX (1LL << 40)
static long long count(long long v)
{
	return v > COUNT_MAX ? COUNT_MAX : v;
}

/* A task's own compute threads: its OMP_NUM_THREADS (the outer count),
 * else its CPUs (what OpenMP, oneDNN and OpenBLAS start), at least 1. */
static long long compute_threads(const struct ck_rank *r)
{
	hwloc_bitmap_t c;
	long long t = 0;
	char *end;

	if (ck_has(r, CK_OMP)) {
		long v = strtol(r->env[CK_OMP], &end, 10);
		if (end != r->env[CK_OMP] && (!*end || *end == ',') && v > 0)
			return count(v);
	}
	if ((c = hwloc_bitmap_alloc())) {
		if (bm(c, r->cpus))
			t = hwloc_bitmap_weight(c);
		hwloc_bitmap_free(c);
	}
	return t > 0 ? t : 1;
}

/* Threads a task wants beside its compute threads: the libraries' (NCCL's
 * proxy and socket threads, gloo's, CUDA's), PyTorch's inter-op pool and
 * its data loader's worker processes. */
#define NPROC_ROOM 64

/* The process limit (RLIMIT_NPROC, ulimit -u) holds every thread of the
 * task's user on the node, every task's and any other job's: past it
 * pthread_create and fork fail (OpenBLAS's "pthread_create failed ...
 * Resource temporarily unavailable", Python's "can't start new thread").
 * Slurm hands tasks the limit of the shell srun ran in.  Root is not
 * held by it. */
static void eval_nproc(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	long long low = -1, least_room = -1, least_want = 0;
	int limited = 0, roots = 0, seen = 0, least_node = -1;

	for (int n = 0; n < nd->n; n++) {
		long long lim = -1, used = -1, want = 0;
		int first = -1, tasks = 0;
		long uid = -1;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n || r->proto < 4)
				continue;
			seen++;
			if (r->nproc < 0)
				continue;
			if (r->uid == 0) {
				roots++;
				continue;
			}
			if (first < 0)
				first = i;
			tasks++;
			uid = r->uid;
			want = count(want + compute_threads(r));
			if (lim < 0 || r->nproc < lim)
				lim = count(r->nproc);
			if (r->user_threads > used)
				used = count(r->user_threads);
		}
		if (first < 0)
			continue;
		limited += tasks;
		if (low < 0 || lim < low)
			low = lim;
		long long room = lim - (used > 0 ? used : 0), libs = want + (long long)tasks * NPROC_ROOM;
		char running[96] = "";
		if (used >= 0)
			snprintf(running, sizeof(running), ", %lld thread%s of uid %ld running there", used,
				 used == 1 ? "" : "s", uid);
		else
			snprintf(running, sizeof(running), " (the user's threads there not counted)");
		char who[48];
		if (tasks > 1)
			snprintf(who, sizeof(who), "its %d tasks want", tasks);
		else
			snprintf(who, sizeof(who), "its task wants");
		if (room < want)
			ck_say(&fail, "%s: %lld (task %d%s)%s: room for %lld, and %s %lld for OpenMP alone",
			    nd->name[n], lim, first, tasks > 1 ? " and others" : "", running, room > 0 ? room : 0,
			    who, want);
		else if (room < libs)
			ck_say(&warn, "%s: %lld (task %d%s)%s: room for %lld, where %s %lld (%lld for OpenMP, %d a "
			    "task for the libraries)", nd->name[n], lim, first, tasks > 1 ? " and others" : "",
			    running, room, who, libs, want, NPROC_ROOM);
		if (least_node < 0 || room - libs < least_room - least_want) {
			least_node = n;
			least_room = room;
			least_want = libs;
		}
	}
	if (fail.items || warn.items) {
		struct msg *m = fail.items ? &fail : &warn;
		ck_add(w, "bind.nproc", fail.items ? CK_FAIL : CK_WARN, "the process limit (ulimit -u) on %s; it "
		       "holds every thread of the user on the node (OpenMP's, OpenBLAS's, PyTorch's pools and "
		       "data loader workers, NCCL's, gloo's)%s; Slurm gives tasks the limit of the shell srun "
		       "ran in: raise it there (ulimit -u), or PropagateResourceLimitsExcept=NPROC in "
		       "slurm.conf", ck_said(m),
		       fail.items ? ", and past it pthread_create and fork fail (OpenBLAS: pthread_create "
				    "failed, Resource temporarily unavailable)" : "");
		return;
	}
	if (limited)
		ck_add(w, "bind.nproc", CK_OK, "process limit (ulimit -u) at least %lld on every task; the "
		       "least room on %s: %lld threads, %lld wanted", low, nd->name[least_node], least_room,
		       least_want);
	else if (roots)
		ck_add(w, "bind.nproc", CK_OK, "the tasks run as root, whom the process limit (ulimit -u) "
		       "does not hold");
	else if (seen)
		ck_add(w, "bind.nproc", CK_OK, "processes unlimited on every task (ulimit -u)");
	else
		ck_add(w, "bind.nproc", CK_SKIP, "no task's ddp-check reports its process limit (older "
		       "versions)");
}

void ck_eval_bind(struct ck_world *w, const struct nodes *nd)
{
	eval_cpus(w, nd);
	eval_threads(w);
	eval_nproc(w, nd);
	eval_locality(w);
	eval_gpus(w, nd);
	eval_visible(w);
	eval_gres(w, nd);
}
