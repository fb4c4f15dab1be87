/* The torchrun contract: node facts once per step, then each task's vars. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddpenv.h"
#include "internal.h"

/* A variable present in env was set by the user unless our marker is there:
 * then it came from an outer --ddp step (or from us) and is recomputed. */
static const char *user_value(const struct ddpenv_env *env, const char *key)
{
	const char *v = ddpenv_env_get(env, key);

	if (!v || ddpenv_env_get(env, DDPENV_MARKER))
		return NULL;
	return v;
}

static int choose_backend(const struct ddpenv_step *step, enum ddpenv_backend requested,
			  const struct ddpenv_settings *cfg, struct ddpenv_node *node,
			  char *err, size_t errlen)
{
	node->backend = requested;
	if (requested != DDPENV_BACKEND_AUTO) {
		snprintf(node->backend_how, sizeof(node->backend_how), "--ddp=%s",
			 ddpenv_backend_name(requested));
	} else if (cfg->default_backend != DDPENV_BACKEND_AUTO) {
		node->backend = cfg->default_backend;
		snprintf(node->backend_how, sizeof(node->backend_how), "a bare --ddp: default_backend (%.80s)",
			 cfg->where[DDPENV_SET_DEFAULT_BACKEND]);
	} else if (step->mig) {
		/* NCCL wants a whole GPU per rank (NVIDIA/nccl#1716). */
		node->backend = DDPENV_BACKEND_GLOO;
		snprintf(node->backend_how, sizeof(node->backend_how),
			 "--ddp=auto: the step's GPUs are MIG devices, on which NCCL does not run ranks");
	} else if (step->shared && step->max_local != 1) {
		/* Shares of GPUs: tasks of a node may get the same GPU, and
		 * NCCL runs one rank per GPU, MPS or not (NVIDIA/nccl#418).
		 * Decided on the step-wide task counts, so every node agrees. */
		node->backend = DDPENV_BACKEND_GLOO;
		snprintf(node->backend_how, sizeof(node->backend_how),
			 "--ddp=auto: the step's GPUs are shared (%s) and a node runs several tasks; NCCL runs one rank per GPU",
			 step->shared);
	} else if (step->shared) {
		node->backend = DDPENV_BACKEND_NCCL;
		snprintf(node->backend_how, sizeof(node->backend_how),
			 "--ddp=auto: the step has GPUs (%s, one task per node)", step->shared);
	} else {
		node->backend = step->has_gpus ? DDPENV_BACKEND_NCCL : DDPENV_BACKEND_GLOO;
		snprintf(node->backend_how, sizeof(node->backend_how),
			 "--ddp=auto: the step %s GPUs", step->has_gpus ? "has" : "has no");
	}
	if (!(cfg->allowed_backends & 1u << node->backend)) {
		snprintf(err, errlen, "backend %s (%.100s) is not allowed here: allowed_backends is [%s%s%s] (%.80s)",
			 ddpenv_backend_name(node->backend), node->backend_how,
			 cfg->allowed_backends & 1u << DDPENV_BACKEND_NCCL ? "nccl" : "",
			 (cfg->allowed_backends & 6u) == 6u ? ", " : "",
			 cfg->allowed_backends & 1u << DDPENV_BACKEND_GLOO ? "gloo" : "",
			 cfg->where[DDPENV_SET_ALLOWED_BACKENDS]);
		return -1;
	}
	return 0;
}

static int master_addr(const struct ddpenv_env *env, const struct ddpenv_sys *sys,
		       struct ddpenv_node *node, struct ddpenv_addr *addr,
		       char *err, size_t errlen)
{
	const char *user = user_value(env, "MASTER_ADDR");
	char how[DDPENV_HOWLEN];

	if (user) {
		struct ddpenv_addr tmp[DDPENV_MAX_ADDRS];
		int n;

		if (strlen(user) >= sizeof(node->master_addr)) {
			snprintf(err, errlen, "MASTER_ADDR (set in the job's environment) is %zu characters: expected a host name or address",
				 strlen(user));
			return -1;
		}
		strcpy(node->master_addr, user);
		node->master_addr_user = 1;
		snprintf(node->master_addr_how, sizeof(node->master_addr_how),
			 "set in the job's environment: left alone");
		if (ddpenv_addr_parse(user, addr) == 0)
			return 0;
		n = sys->lookup(sys->ctx, user, tmp, DDPENV_MAX_ADDRS, err, errlen);
		if (n <= 0) {
			char lerr[DDPENV_ERRLEN];
			snprintf(lerr, sizeof(lerr), "%s", n < 0 ? err : "no address");
			snprintf(err, errlen, "MASTER_ADDR=%.100s (set in the job's environment): %s",
				 user, lerr);
			return -1;
		}
		*addr = tmp[0];
		return 0;
	}
	if (ddpenv_head_resolve_from(node->step.head, node->cfg.head_from, sys, addr, how,
				     sizeof(how), err, errlen) < 0)
		return -1;
	if (ddpenv_addr_format(addr, node->master_addr, sizeof(node->master_addr)) < 0) {
		snprintf(err, errlen, "head node %s: cannot format its address", node->step.head);
		return -1;
	}
	snprintf(node->master_addr_how, sizeof(node->master_addr_how),
		 "head %.60s (%.100s), %.80s", node->step.head, node->step.head_how, how);
	return 0;
}

int ddpenv_node_lookup_name(const struct ddpenv_env *env, const struct ddpenv_settings *cfg,
			    const struct ddpenv_sys *sys, char *name, size_t len)
{
	const char *user = user_value(env, "MASTER_ADDR");
	struct ddpenv_step step;
	struct ddpenv_addr lit;
	char err[DDPENV_ERRLEN], nodeaddr[DDPENV_HOSTLEN];
	const char *first;

	if (user) {
		first = user;
	} else if (ddpenv_step_parse(env, &step, err, sizeof(err)) < 0) {
		return 0; /* resolve says why */
	} else if (cfg->head_from != DDPENV_HEAD_NODEADDR) {
		first = step.head;
	} else if (sys->nodeaddr && sys->nodeaddr(sys->ctx, step.head, nodeaddr, sizeof(nodeaddr)) == 0) {
		first = nodeaddr;
	} else {
		return 0;
	}
	if (!*first || ddpenv_addr_parse(first, &lit) == 0 || strlen(first) >= len)
		return 0;
	strcpy(name, first);
	return 1;
}

static int master_port(const struct ddpenv_env *env, struct ddpenv_node *node,
		       char *err, size_t errlen)
{
	const char *user = user_value(env, "MASTER_PORT");
	uint16_t port;
	uint32_t v;

	if (user) {
		if (ddpenv_parse_u32("MASTER_PORT", user, &v, err, errlen) < 0 ||
		    v == 0 || v > 65535) {
			snprintf(err, errlen, "MASTER_PORT=%.32s (set in the job's environment): expected a port number 1-65535",
				 user);
			return -1;
		}
		snprintf(node->master_port, sizeof(node->master_port), "%u", v);
		node->master_port_user = 1;
		snprintf(node->master_port_how, sizeof(node->master_port_how),
			 "set in the job's environment: left alone");
		return 0;
	}
	const struct ddpenv_settings *cfg = &node->cfg;
	if (ddpenv_port_for_step(node->step.job_id, node->step.step_id,
				 cfg->port_lo, cfg->port_hi, &port, err, errlen) < 0)
		return -1;
	snprintf(node->master_port, sizeof(node->master_port), "%u", port);
	if (cfg->port_lo == cfg->port_hi)
		snprintf(node->master_port_how, sizeof(node->master_port_how), "port_range %u-%u (%.100s)",
			 cfg->port_lo, cfg->port_hi, cfg->where[DDPENV_SET_PORT_RANGE]);
	else
		snprintf(node->master_port_how, sizeof(node->master_port_how),
			 "%u + (job %u * %u + step %u) mod %u (port_range %.100s)", cfg->port_lo,
			 node->step.job_id, (unsigned)DDPENV_PORT_STRIDE, node->step.step_id,
			 (unsigned)(cfg->port_hi - cfg->port_lo + 1), cfg->where[DDPENV_SET_PORT_RANGE]);
	return 0;
}

static int interface(const struct ddpenv_env *env, const struct ddpenv_sys *sys,
		     const struct ddpenv_addr *head, struct ddpenv_node *node,
		     char *err, size_t errlen)
{
	struct ddpenv_ifaddr *ifs = NULL;
	size_t n = 0;
	char route_if[IF_NAMESIZE] = "", rerr[DDPENV_ERRLEN];
	int rv = -1;
	int both_user = user_value(env, "NCCL_SOCKET_IFNAME") &&
			user_value(env, "GLOO_SOCKET_IFNAME");

	if (sys->ifaddrs(sys->ctx, &ifs, &n, err, errlen) < 0)
		goto out;
	if (sys->route(sys->ctx, head, route_if, sizeof(route_if), rerr, sizeof(rerr)) < 0)
		route_if[0] = '\0';
	rv = ddpenv_iface_choose(ifs, n, head, route_if, &node->cfg, node->ifname,
				 sizeof(node->ifname), node->ifname_how,
				 sizeof(node->ifname_how), err, errlen);
out:
	free(ifs);
	if (rv < 0 && both_user) {
		/* The user named the interfaces: our failure does not matter. */
		snprintf(node->ifname_how, sizeof(node->ifname_how), "not chosen: %.200s", err);
		node->ifname[0] = '\0';
		return 0;
	}
	return rv;
}

int ddpenv_node_resolve(const struct ddpenv_env *env,
			enum ddpenv_backend requested,
			const struct ddpenv_settings *cfg,
			const struct ddpenv_sys *sys, struct ddpenv_node *node,
			char *err, size_t errlen)
{
	struct ddpenv_addr head;

	memset(node, 0, sizeof(*node));
	if (cfg) {
		node->cfg = *cfg;
	} else {
		struct ddpenv_config dflt;
		int rc;

		ddpenv_config_init(&dflt);
		rc = ddpenv_config_effective(&dflt, NULL, env, &node->cfg, err, errlen);
		ddpenv_config_free(&dflt);
		if (rc < 0)
			return -1;
	}
	if (ddpenv_step_parse(env, &node->step, err, errlen) < 0)
		return -1;
	if (!ddpenv_step_is_parallel(node->step.step_id)) {
		snprintf(err, errlen, "step %u.%s gets no distributed environment: not a parallel step (batch, extern or interactive)",
			 node->step.job_id, node->step.step_id == DDPENV_STEP_BATCH ? "batch" :
			 node->step.step_id == DDPENV_STEP_EXTERN ? "extern" : "interactive");
		return -1;
	}
	if (choose_backend(&node->step, requested, &node->cfg, node, err, errlen) < 0)
		return -1;
	if (master_addr(env, sys, node, &head, err, errlen) < 0 ||
	    master_port(env, node, err, errlen) < 0 ||
	    interface(env, sys, &head, node, err, errlen) < 0)
		return -1;
	return 0;
}

static struct ddpenv_var *add(struct ddpenv_vars *out, const char *key,
			      int user, const char *how, const char *fmt, ...)
{
	struct ddpenv_var *v;
	va_list ap;

	if (out->n >= DDPENV_MAX_VARS)
		return NULL; /* cannot happen: the list below is fixed */
	v = &out->v[out->n++];
	v->key = key;
	v->user = user;
	snprintf(v->how, sizeof(v->how), "%s", how);
	va_start(ap, fmt);
	vsnprintf(v->value, sizeof(v->value), fmt, ap);
	va_end(ap);
	return v;
}

static int task_u32(const struct ddpenv_env *env, const char *key,
		    uint32_t *out, char *err, size_t errlen)
{
	const char *s = ddpenv_env_get(env, key);

	if (!s) {
		snprintf(err, errlen, "%s is not set: expected inside a Slurm task", key);
		return -1;
	}
	return ddpenv_parse_u32(key, s, out, err, errlen);
}

static int has_var(const struct ddpenv_vars *out, const char *key)
{
	for (size_t i = 0; i < out->n; i++)
		if (strcmp(out->v[i].key, key) == 0)
			return 1;
	return 0;
}

/* The binding plan's variables for one task. */
static int bind_vars(const struct ddpenv_node *node, const struct ddpenv_env *task_env,
		     uint32_t local_rank, struct ddpenv_vars *out)
{
	const struct ddpenv_bind_plan *p = node->plan;
	const struct ddpenv_bind_gpu *g;
	char how[DDPENV_HOWLEN], slurm[DDPENV_VALLEN];
	size_t l = 0, ng = p->ngpus;
	int ok = 1, gi;

	if (p->user_cpu_bind[0] &&
	    !add(out, DDPENV_SLURM_CPU_BIND, 0,
		 "the user's --cpu-bind, before task/affinity set SLURM_CPU_BIND per task", "%s",
		 p->user_cpu_bind))
		return -1;
	if ((!p->gpu && !p->slurm_binds) || !ng || local_rank >= p->ntasks ||
	    (gi = p->tasks[local_rank].gpu) < 0)
		return 0;
	g = &p->gpus[gi];
	if (!p->gpu) {
		/* Slurm bound the task to its own GPUs: its CUDA_VISIBLE_DEVICES
		 * stays; ddp-env --explain in the task needs the node's list. */
		for (size_t k = 0; k < ng && l < sizeof(slurm); k++)
			l += (size_t)snprintf(slurm + l, sizeof(slurm) - l, "%s%u", k ? "," : "", p->gpus[k].index);
		ok &= add(out, DDPENV_SLURM_STEP_GPUS, 0,
			  "the step's GPUs on this node, before Slurm bound each task to its own", "%s",
			  slurm) != NULL;
		goto identity;
	}
	for (size_t k = 0; k < ng && l < sizeof(slurm); k++)
		l += (size_t)snprintf(slurm + l, sizeof(slurm) - l, "%s%s", k ? "," : "", p->gpus[k].value);
	if (p->mig && local_rank < ng)
		snprintf(how, sizeof(how), "this task's MIG device only: CUDA opens one MIG device per process");
	else if (p->mig)
		snprintf(how, sizeof(how), "%u tasks share %zu MIG devices: this task has entry %u of Slurm's list",
			 p->ntasks, ng, (unsigned)(local_rank % ng));
	else if (p->policy == DDPENV_BIND_STRICT)
		snprintf(how, sizeof(how), "--ddp-bind=strict: this task's GPU only (%s)",
			 g->busid[0] ? g->busid : "not in the topology");
	else if (local_rank < ng)
		snprintf(how, sizeof(how), "all the step's GPUs here, this task's (%s) at index LOCAL_RANK",
			 g->busid[0] ? g->busid : "not in the topology");
	else
		snprintf(how, sizeof(how), "all the step's GPUs here; %u tasks share %zu GPU%s: this task's is index %u (LOCAL_RANK mod %zu)",
			 p->ntasks, ng, ng == 1 ? "" : "s", (unsigned)(local_rank % ng), ng);
	const char *vis = p->policy == DDPENV_BIND_STRICT || p->mig ? g->cuda : p->visible;
	ok &= add(out, "CUDA_VISIBLE_DEVICES", 0, how, "%s", vis) != NULL;
	if (ddpenv_env_get(task_env, "GPU_DEVICE_ORDINAL"))
		ok &= add(out, "GPU_DEVICE_ORDINAL", 0, "= CUDA_VISIBLE_DEVICES (Slurm sets both)", "%s", vis) != NULL;
	ok &= add(out, DDPENV_SLURM_CVD, 0, "Slurm's CUDA_VISIBLE_DEVICES, before the permutation", "%s",
		  slurm) != NULL;
	const char *u = user_value(task_env, "CUDA_DEVICE_ORDER");
	if (u)
		ok &= add(out, "CUDA_DEVICE_ORDER", 1, "set in the job's environment: left alone", "%s", u) != NULL;
	else
		ok &= add(out, "CUDA_DEVICE_ORDER", 0, "CUDA numbers GPUs as nvidia-smi and Slurm do",
			  "PCI_BUS_ID") != NULL;
identity:
	if (g->busid[0])
		ok &= add(out, "DDP_GPU_BUSID", 0, p->gpu_how, "%s", g->busid) != NULL;
	if (g->nic[0]) {
		snprintf(how, sizeof(how), "the NIC closest to GPU %s: %s%s%s", g->busid, g->nic_how,
			 g->nic_netdev[0] && strcmp(g->nic_netdev, g->nic) ? "; interface " : "",
			 g->nic_netdev[0] && strcmp(g->nic_netdev, g->nic) ? g->nic_netdev : "");
		ok &= add(out, "DDP_NIC", 0, how, "%s", g->nic) != NULL;
		if (node->cfg.bind_nic_hca && g->nic_hca && node->backend == DDPENV_BACKEND_NCCL) {
			u = user_value(task_env, "NCCL_IB_HCA");
			if (u)
				ok &= add(out, "NCCL_IB_HCA", 1, "set in the job's environment: left alone", "%s", u) != NULL;
			else {
				snprintf(how, sizeof(how), "bind_nic: nccl_ib_hca (%.100s): this rank's NIC only",
					 node->cfg.where[DDPENV_SET_BIND_NIC]);
				ok &= add(out, "NCCL_IB_HCA", 0, how, "=%s", g->nic) != NULL;
			}
		}
	}
	return ok ? 0 : -1;
}

/* Where this task is in the step: its rank, local rank, node and the
 * tasks on its node, each checked against the step.  0, else -1 with err. */
struct task_ids {
	uint32_t rank, local_rank, node_id, local_size;
	const char *tpn;                 /* SLURM_STEP_TASKS_PER_NODE */
};

static int task_ids(const struct ddpenv_step *st, const struct ddpenv_env *task_env, struct task_ids *id,
		    char *err, size_t errlen)
{
	if (task_u32(task_env, "SLURM_PROCID", &id->rank, err, errlen) < 0 ||
	    task_u32(task_env, "SLURM_LOCALID", &id->local_rank, err, errlen) < 0 ||
	    task_u32(task_env, "SLURM_NODEID", &id->node_id, err, errlen) < 0)
		return -1;
	if (id->rank >= st->num_tasks) {
		snprintf(err, errlen, "SLURM_PROCID=%u: expected below the step's %u tasks",
			 id->rank, st->num_tasks);
		return -1;
	}
	id->tpn = ddpenv_env_get(task_env, "SLURM_STEP_TASKS_PER_NODE");
	if (ddpenv_tasks_on_node(id->tpn, id->node_id, &id->local_size, err, errlen) < 0)
		return -1;
	if (id->local_rank >= id->local_size) {
		snprintf(err, errlen, "SLURM_LOCALID=%u: expected below the %u tasks of node %u (SLURM_STEP_TASKS_PER_NODE=%.64s)",
			 id->local_rank, id->local_size, id->node_id, id->tpn);
		return -1;
	}
	return 0;
}

/* NCCL runs one rank per GPU: a node with more tasks than GPUs for the
 * step fails it, saying what to ask for.  0, else -1 with err. */
static int nccl_gpus_enough(const struct ddpenv_node *node, const struct task_ids *id, char *err,
			    size_t errlen)
{
	const struct ddpenv_step *st = &node->step;
	if (node->backend != DDPENV_BACKEND_NCCL || id->local_size <= st->gpus)
		return 0;
	if (st->gpus == 0)
		snprintf(err, errlen, "--ddp=nccl (%.80s): node %u runs %u task(s) of the step and the step has no GPU there (%s unset): NCCL needs one GPU per task; ask for one per task (--gres=gpu:N, or --gpus-per-node=N, with --ntasks-per-node=N) or use --ddp=gloo",
			 node->backend_how, id->node_id, id->local_size, st->gpus_key);
	else if (st->shared)
		snprintf(err, errlen, "--ddp=nccl (%.80s): node %u runs %u tasks of the step on %u shared GPU(s) (%s, %s): NCCL cannot share a GPU between ranks, even with MPS; use --ddp=gloo, or whole GPUs (--gres=gpu:N with --ntasks-per-node=N)",
			 node->backend_how, id->node_id, id->local_size, st->gpus, st->shared, st->gpus_key);
	else
		snprintf(err, errlen, "--ddp=nccl (%.80s): node %u runs %u tasks of the step but has %u GPU(s) for it (%s): NCCL cannot share a GPU between ranks; ask for as many GPUs as tasks per node (--gres=gpu:N or --gpus-per-node=N), fewer --ntasks-per-node, or use --ddp=gloo",
			 node->backend_how, id->node_id, id->local_size, st->gpus, st->gpus_key);
	return -1;
}

/* torchrun's variables, and the interfaces the backends bind. */
static void torchrun_vars(const struct ddpenv_node *node, const struct ddpenv_env *task_env,
			  const struct task_ids *id, struct ddpenv_vars *out)
{
	const struct ddpenv_step *st = &node->step;
	char how[DDPENV_HOWLEN];

	add(out, "MASTER_ADDR", node->master_addr_user, node->master_addr_how, "%s", node->master_addr);
	add(out, "MASTER_PORT", node->master_port_user, node->master_port_how, "%s", node->master_port);
	add(out, "RANK", 0, "SLURM_PROCID", "%u", id->rank);
	add(out, "LOCAL_RANK", 0, "SLURM_LOCALID", "%u", id->local_rank);
	add(out, "WORLD_SIZE", 0, "tasks in the step (SLURM_STEP_NUM_TASKS)", "%u", st->num_tasks);
	snprintf(how, sizeof(how), "tasks on node %u (SLURM_STEP_TASKS_PER_NODE=%.64s)", id->node_id, id->tpn);
	add(out, "LOCAL_WORLD_SIZE", 0, how, "%u", id->local_size);
	add(out, "NODE_RANK", 0, "SLURM_NODEID", "%u", id->node_id);
	add(out, "GROUP_RANK", 0, "SLURM_NODEID", "%u", id->node_id);
	add(out, "GROUP_WORLD_SIZE", 0, "nodes in the step (SLURM_STEP_NUM_NODES)", "%u", st->num_nodes);
	add(out, "ROLE_RANK", 0, "= RANK (one role)", "%u", id->rank);
	add(out, "ROLE_WORLD_SIZE", 0, "= WORLD_SIZE (one role)", "%u", st->num_tasks);
	add(out, "ROLE_NAME", 0, "torchrun's default role", "default");
	add(out, "TORCHELASTIC_RESTART_COUNT", 0, "SLURM_RESTART_COUNT (0 when unset)",
	    "%u", st->restart_count);
	add(out, "TORCHELASTIC_MAX_RESTARTS", 0, "Slurm requeues, not torchelastic", "0");
	add(out, "TORCHELASTIC_RUN_ID", 0, "<job id>.<step id>", "%u.%u", st->job_id, st->step_id);

	static const char *const ifkeys[] = { "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME" };
	for (size_t i = 0; i < 2; i++) {
		const char *u = user_value(task_env, ifkeys[i]);
		if (u)
			add(out, ifkeys[i], 1, "set in the job's environment: left alone", "%s", u);
		else if (node->ifname[0])
			add(out, ifkeys[i], 0, node->ifname_how, "%s", node->ifname);
	}
}

/* OMP_NUM_THREADS: the user's, the admin's fixed count, the cores the
 * task is bound to, else Slurm's CPU count per task.  0, else -1. */
static int omp_var(const struct ddpenv_node *node, const struct ddpenv_env *task_env,
		   const struct task_ids *id, struct ddpenv_vars *out, char *err, size_t errlen)
{
	const struct ddpenv_bind_plan *plan = node->plan;
	const char *u = user_value(task_env, "OMP_NUM_THREADS"), *how_omp;
	char how[DDPENV_HOWLEN];
	uint32_t cpus = 0;

	if (u) {
		add(out, "OMP_NUM_THREADS", 1, "set in the job's environment: left alone", "%s", u);
		return 0;
	}
	if (node->cfg.omp == DDPENV_OMP_FIXED) {
		snprintf(how, sizeof(how), "omp_num_threads (%.100s)", node->cfg.where[DDPENV_SET_OMP]);
		add(out, "OMP_NUM_THREADS", 0, how, "%u", node->cfg.omp_threads);
		return 0;
	}
	if (node->cfg.omp != DDPENV_OMP_AUTO)
		return 0;   /* DDPENV_OMP_NONE: not set */
	if (plan && plan->cpu && id->local_rank < plan->ntasks && plan->tasks[id->local_rank].cores) {
		add(out, "OMP_NUM_THREADS", 0, "the cores this task is bound to (--ddp-bind)", "%u",
		    plan->tasks[id->local_rank].cores);
		return 0;
	}
	const char *cpt = ddpenv_env_get(task_env, "SLURM_CPUS_PER_TASK");
	const char *con = ddpenv_env_get(task_env, "SLURM_CPUS_ON_NODE");
	if (cpt) {
		if (ddpenv_parse_u32("SLURM_CPUS_PER_TASK", cpt, &cpus, err, errlen) < 0)
			return -1;
		how_omp = "SLURM_CPUS_PER_TASK";
	} else if (con) {
		if (ddpenv_parse_u32("SLURM_CPUS_ON_NODE", con, &cpus, err, errlen) < 0)
			return -1;
		cpus /= id->local_size;
		how_omp = "SLURM_CPUS_ON_NODE / LOCAL_WORLD_SIZE";
	} else {
		how_omp = "no CPU count from Slurm";
	}
	add(out, "OMP_NUM_THREADS", 0, how_omp, "%u", cpus ? cpus : 1);
	return 0;
}

/* The admin's variables for this backend, unless the user set them.  0,
 * else -1 (the list is full). */
static int admin_vars(const struct ddpenv_node *node, const struct ddpenv_env *task_env,
		      struct ddpenv_vars *out)
{
	char how[DDPENV_HOWLEN];
	int w = node->backend == DDPENV_BACKEND_GLOO;
	int ek = w ? DDPENV_SET_ENV_GLOO : DDPENV_SET_ENV_NCCL;
	for (size_t i = 0; i < node->cfg.nenv[w]; i++) {
		const struct ddpenv_cfg_var *cv = &node->cfg.env[w][i];
		if (has_var(out, cv->key))
			continue; /* NCCL_IB_HCA per rank (bind_nic) wins */
		const char *u = user_value(task_env, cv->key);
		snprintf(how, sizeof(how), "%s (%.100s)", ddpenv_setting_name(ek), node->cfg.where[ek]);
		if (!add(out, cv->key, u != NULL, u ? "set in the job's environment: left alone" : how,
			 "%s", u ? u : cv->value))
			return -1;
	}
	return 0;
}

/* PyTorch's defaults that torchrun sets or that env:// needs, unless the
 * user or the admin set them.  0, else -1 (the list is full). */
static int pytorch_vars(const struct ddpenv_env *task_env, struct ddpenv_vars *out)
{
	/* torchrun's TORCH_NCCL_ASYNC_ERROR_HANDLING=1: a failed or timed-out
	 * NCCL collective aborts the communicators and ends the process, where
	 * a dead peer would leave the rest hanging.  PyTorch 2.2 and later read
	 * this name, before it NCCL_ASYNC_ERROR_HANDLING, which this name
	 * overrides: a user's or the admin's (env.nccl, env.gloo) value under
	 * either name is left as it is. */
	static const char *const aeh[2] = { "TORCH_NCCL_ASYNC_ERROR_HANDLING",
					    "NCCL_ASYNC_ERROR_HANDLING" };
	if (!has_var(out, aeh[0]) && !has_var(out, aeh[1])) {
		const char *now = user_value(task_env, aeh[0]);
		const char *old = now ? NULL : user_value(task_env, aeh[1]);
		struct ddpenv_var *a;
		if (now)
			a = add(out, aeh[0], 1, "set in the job's environment: left alone", "%s", now);
		else if (old)
			a = add(out, aeh[1], 1, "set in the job's environment: left alone "
				"(TORCH_NCCL_ASYNC_ERROR_HANDLING, which would override it, stays unset)", "%s", old);
		else
			a = add(out, aeh[0], 0, "torchrun's default: a failed or timed-out NCCL "
				"collective aborts the communicator and ends the process", "1");
		if (!a)
			return -1;
	}
	/* PyTorch 2.4 and later serve env://'s TCPStore on libuv unless
	 * USE_LIBUV=0, and fail where built without it ("use_libuv was requested
	 * but PyTorch was build without libuv support": Debian 13's 2.6).  0
	 * takes the TCPStore server PyTorch used by default until 2.3 (before
	 * 2.4 the name is not read).  A user's or the admin's value is kept. */
	if (!has_var(out, "USE_LIBUV")) {
		const char *u = user_value(task_env, "USE_LIBUV");
		if (!add(out, "USE_LIBUV", u != NULL,
			 u ? "set in the job's environment: left alone"
			   : "PyTorch's TCPStore without libuv, which every PyTorch has (2.4 and later "
			     "fail env:// without it where built without libuv)",
			 "%s", u ? u : "0"))
			return -1;
	}
	return 0;
}

int ddpenv_task_vars(const struct ddpenv_node *node,
		     const struct ddpenv_env *task_env,
		     struct ddpenv_vars *out, char *err, size_t errlen)
{
	const struct ddpenv_step *st = &node->step;
	struct task_ids id;

	out->n = 0;
	if (task_ids(st, task_env, &id, err, errlen) < 0 || nccl_gpus_enough(node, &id, err, errlen) < 0)
		return -1;
	torchrun_vars(node, task_env, &id, out);
	if (omp_var(node, task_env, &id, out, err, errlen) < 0)
		return -1;
	if ((node->plan && bind_vars(node, task_env, id.local_rank, out) < 0) ||
	    admin_vars(node, task_env, out) < 0 || pytorch_vars(task_env, out) < 0)
		goto full;
	if (node->token[0])
		add(out, "DDP_RDZV_TOKEN", 0, "HMAC of the step ids and uid under rdzv_secret: only this step's tasks can join the rendezvous",
		    "%s", node->token);
	if (node->config_path[0])
		add(out, "DDP_CONFIG", 0, "the configuration the plugin read (for ddp-env)", "%s",
		    node->config_path);
	add(out, "DDP_BACKEND", 0, node->backend_how, "%s", ddpenv_backend_name(node->backend));
	add(out, DDPENV_MARKER, 0, "marks these values as set by slurm-ddp for this step",
	    "%u.%u", st->job_id, st->step_id);
	return 0;
full:
	snprintf(err, errlen, "more than %d variables to set", DDPENV_MAX_VARS);
	return -1;
}
