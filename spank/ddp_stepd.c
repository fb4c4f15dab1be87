/*
 * slurmstepd side.  post_opt, as root, reads the configuration and the
 * secret, keeps the topology and starts the head's name lookup.  user_init
 * runs once per node and step: it resolves the head (that lookup's answer:
 * the only DNS query, none when the name resolves from /etc/hosts or
 * Slurm's NodeAddr), the port and the interface.  task_init runs in
 * each task's child before exec: the binding plan (from the node's hwloc
 * export, read there), the binding, the variables.
 *
 * Nothing here may crash or hang slurmstepd: no exit, bounded system calls
 * (one getaddrinfo, one netlink query with a 2 s timeout).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

static struct {
	int active;                  /* this step gets the contract */
	int failed;                  /* could not resolve: fail the tasks */
	char err[DDPENV_ERRLEN];
	struct ddpenv_config cfg;
	unsigned char secret[DDPENV_SECRET_MAX + 1];
	int secret_len;              /* > 0: read in post_opt, as root */
	struct ddpenv_node node;
	struct ddpenv_topo *topo;    /* kept for the tasks' memory binding */
	char topo_cache[DDPENV_PATHLEN]; /* this machine's export (topology_cache), "" : discover */
	char topo_xml[DDPENV_PATHLEN]; /* the export each task's child loads (the admin's topology
					* or the kept one); "" : discovered in user_init */
	int topo_xml_kept;           /* topo_xml is the kept one: a refusal falls back to discovery */
	int topo_in_task;            /* st.topo loaded in this task's child */
	int gres_order;              /* the settings the tasks' plans need after user_init */
	char nvidia_gpus[DDPENV_PATHLEN];
	struct ddpenv_bind_plan plan;
	int have_plan;
	char bind_warn[DDPENV_ERRLEN]; /* auto could not plan, or planned without the driver's
					* GPU list: said once per node */
	char mig_warn[320];          /* --ddp=nccl with ranks on MIG devices: said once per node */
	char node_gpus[DDPENV_VALLEN]; /* SLURM_STEP_GPUS before Slurm binds each task */
	char user_cpu_bind[DDPENV_VALLEN]; /* the user's --cpu-bind, before task/affinity
					    * sets SLURM_CPU_BIND in every task */
	enum ddpenv_bind bind;       /* the policy, for DDP_BIND_POLICY */
	char bind_how[DDPENV_HOWLEN];
} st;
static int st_used; /* a --ddp step's post_opt wrote st in this process */

/* The job's environment as Slurm holds it (S_JOB_ENV), read in one pass:
 * the variables libddpenv reads and the admin's of CFG (env: nccl and
 * gloo, to know whether the user set them) into the snapshot, unless it
 * holds them already.  One pass, not a spank_getenv a name (a scan of the
 * whole environment each: 57 names over a task's 120 variables, 0.05 ms).
 * Some values are long: task/affinity's SLURM_CPU_BIND holds a mask per
 * task (128 tasks of a 256-CPU node: 8 KiB), a --cpu-bind=map_cpu list
 * whatever the user wrote; one over 1 MiB is refused.  -1 with st.err. */
#define VALUE_MAX (1u << 20)
static int snapshot_pick(spank_t sp, struct ddpenv_env *env, const char *const *keys,
			 const struct ddpenv_settings *cfg)
{
	const char *admin[2 * DDPENV_CFG_ENV + 1], *bad = NULL;
	char **envp = NULL;
	size_t n = 0;

	for (int w = 0; cfg && w < 2; w++)
		for (size_t i = 0; i < cfg->nenv[w] && n < 2 * DDPENV_CFG_ENV; i++)
			admin[n++] = cfg->env[w][i].key;
	admin[n] = NULL;
	if (spank_get_item(sp, S_JOB_ENV, &envp) != ESPANK_SUCCESS || !envp) {
		snprintf(st.err, sizeof(st.err), "Slurm gave no job environment (spank_get_item S_JOB_ENV)");
		return -1;
	}
	if (ddpenv_env_pick(env, envp, keys, admin, VALUE_MAX, &bad) == 0)
		return 0;
	if (errno == E2BIG)
		snprintf(st.err, sizeof(st.err), "%.*s in the job's environment: a value over %u bytes: "
			 "expected at most 1 MiB", (int)strcspn(bad, "="), bad, VALUE_MAX);
	else
		snprintf(st.err, sizeof(st.err), "out of memory reading the job's environment");
	return -1;
}

/* The admin's extra variables (to know whether the user set them). */
static int snapshot_admin_vars(spank_t sp, struct ddpenv_env *env, const struct ddpenv_settings *cfg)
{
	static const char *const none[] = { NULL };

	return snapshot_pick(sp, env, none, cfg);
}

/* The snapshot: the variables libddpenv reads, and CFG's extra ones. */
static int snapshot(spank_t sp, struct ddpenv_env *env, const struct ddpenv_settings *cfg)
{
	return snapshot_pick(sp, env, ddpenv_env_keys, cfg);
}

static int parallel_ddp_step(spank_t sp)
{
	uint32_t step_id = 0;

	return ddp_req.given &&
	       spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS &&
	       ddpenv_step_is_parallel(step_id);
}

static int read_secret(const struct ddpenv_settings *eff)
{
	int n;

	if (!eff->rdzv_secret[0])
		return 0;
	n = ddpenv_secret_read(eff->rdzv_secret, st.secret, sizeof(st.secret), st.err,
			       sizeof(st.err));
	if (n < 0) {
		char e[DDPENV_ERRLEN];
		snprintf(e, sizeof(e), "%s (%.80s)", st.err, eff->where[DDPENV_SET_RDZV_SECRET]);
		snprintf(st.err, sizeof(st.err), "%s", e);
		return -1;
	}
	st.secret_len = n;
	return 0;
}

/* As root: this machine's topology kept for the steps' binding plans
 * (topology_cache), and its copy they map without a parse, unless the
 * admin gave the node's export (topology).
 * Where it cannot be kept (a read-only /run, a folder not root's) each step
 * discovers the topology, as without a cache: said in slurmd's log. */
static void keep_topology(const struct ddpenv_settings *eff)
{
	char err[DDPENV_ERRLEN];

	if (eff->topology[0] || !eff->topology_cache[0])
		return;
	if (ddpenv_topo_cache_ensure(eff->topology_cache, "", st.topo_cache, sizeof(st.topo_cache), err,
				     sizeof(err)) < 0) {
		st.topo_cache[0] = '\0';
		slurm_info(DDP_PFX "%s (%.80s); the step discovers the node's topology", err,
			   eff->where[DDPENV_SET_TOPOLOGY_CACHE]);
	} else if (ddpenv_topo_cache_map(st.topo_cache, err, sizeof(err)) < 0) {
		slurm_info(DDP_PFX "%s (%.80s); the step reads the kept export instead", err,
			   eff->where[DDPENV_SET_TOPOLOGY_CACHE]);
	}
}

/* The head's name lookup started here, for user_init to take
 * (ddpenv_sys_lookup_ahead): Slurm's own set-up of the step (I/O, PAM,
 * privileges) runs between the two hooks while glibc's thread resolves, so
 * the lookup leaves the step's path (0.15 ms of a one-node launch on the
 * test cluster, a DNS round trip where names come from DNS).  A guess:
 * user_init resolves with the settings and environment it has then, and
 * looks up afresh whatever name it needs that this did not start. */
static void lookup_head_ahead(spank_t sp)
{
	struct ddpenv_env env;
	struct ddpenv_settings *eff = malloc(sizeof(*eff));
	struct ddpenv_sys sys = ddpenv_sys_default;
	char name[DDPENV_HOSTLEN], err[DDPENV_ERRLEN], keep[DDPENV_ERRLEN];

	ddpenv_env_init(&env);
	sys.nodeaddr = ddpenv_slurm_has_nodeaddr() ? ddpenv_slurm_nodeaddr : NULL;
	memcpy(keep, st.err, sizeof(keep)); /* snapshot() writes its errors there */
	if (eff && snapshot(sp, &env, NULL) == 0 &&
	    ddpenv_config_effective(&st.cfg, ddpenv_env_get(&env, "SLURM_JOB_PARTITION"), &env, eff, err,
				    sizeof(err)) == 0 &&
	    ddpenv_node_lookup_name(&env, eff, &sys, name, sizeof(name)) > 0)
		(void)ddpenv_sys_lookup_ahead(name, err, sizeof(err));
	memcpy(st.err, keep, sizeof(keep));
	free(eff);
	ddpenv_env_free(&env);
}

/* As root, before privileges are dropped: the configuration, the
 * rendezvous secret (root-only) and the kept topology.  Never fails: errors
 * fail the step's tasks later, never slurmstepd or the node. */
int ddp_stepd_post_opt(spank_t sp, int ac, char **av)
{
	/* st is zero as slurmstepd loads the plugin, for its one step:
	 * cleared again only if a step ran here before (its 120 KB written
	 * would be 30 page faults of the step's path) */
	if (st_used) {
		memset(&st, 0, sizeof(st));
		st_used = 0;
	}
	/* A step without --ddp, most of a cluster's, writes none of it (the
	 * configuration's defaults alone are 38 KB: 10 page faults). */
	if (!ddp_req.given)
		return 0;
	st_used = 1;
	ddpenv_config_init(&st.cfg);
	if (!parallel_ddp_step(sp))
		return 0; /* the batch shell and the extern step get nothing */
	st.active = 1;
	if (!ddp_req.valid) {
		st.failed = 1;
		snprintf(st.err, sizeof(st.err), "%s", ddp_req.err);
		return 0;
	}
	if (ddp_config_load(&st.cfg, ac, av, st.err, sizeof(st.err)) < 0) {
		st.failed = 1;
		return 0;
	}
	/* The partition's settings (the secret is top-level only: srun sent
	 * SLURM_JOB_PARTITION, which the user controls). */
	char part[256] = "";
	struct ddpenv_settings *eff = malloc(sizeof(*eff));
	if (spank_getenv(sp, "SLURM_JOB_PARTITION", part, sizeof(part)) != ESPANK_SUCCESS)
		part[0] = '\0';
	if (!eff) {
		snprintf(st.err, sizeof(st.err), "out of memory");
		st.failed = 1;
	} else if (ddpenv_config_effective(&st.cfg, part, NULL, eff, st.err, sizeof(st.err)) < 0 ||
		   read_secret(eff) < 0) {
		st.failed = 1;
	} else {
		keep_topology(eff);
		lookup_head_ahead(sp);
	}
	free(eff);
	return 0;
}

/* The plan failed (no topology, or none fits): --ddp-bind=strict fails
 * the step; auto runs the tasks unbound and the first one says why.
 * 0, else -1 with st.err. */
static int plan_failed(const char *why)
{
	if (st.bind == DDPENV_BIND_STRICT) {
		snprintf(st.err, sizeof(st.err), "--ddp-bind=strict (%.60s): %s", st.bind_how, why);
		return -1;
	}
	snprintf(st.bind_warn, sizeof(st.bind_warn), "--ddp-bind=auto (%.60s): tasks run unbound: %s",
		 st.bind_how, why);
	return 0;
}

/* A loaded topology made ready for the plan: how Slurm numbers the GPUs,
 * and which GPUs CUDA can open with each /dev/nvidiaN's bus id (plain
 * /proc reads; no driver library). */
static void topology_ready(const struct ddpenv_env *env)
{
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	char nverr[DDPENV_ERRLEN];
	int n;

	ddpenv_topo_set_gres_order(st.topo, (enum ddpenv_gres_order)st.gres_order);
	if ((!ddpenv_env_get(env, "SLURM_STEP_GPUS") && !st.node_gpus[0]) || !st.nvidia_gpus[0])
		return;
	n = ddpenv_nvidia_gpus(st.nvidia_gpus, nv, DDPENV_MAX_GPUS, nverr, sizeof(nverr));
	if (n < 0 || ddpenv_topo_set_nvidia(st.topo, nv, n > 0 ? (size_t)n : 0, nverr, sizeof(nverr)) < 0)
		snprintf(st.bind_warn, sizeof(st.bind_warn), "the NVIDIA driver's GPU list: %.200s; "
			 "GPU N taken for the N-th by PCI bus id", nverr);
}

/* The node's export (st.topo_xml) into st.topo: in a task's child
 * without hwloc's plugins, else as hwloc is.  A kept export hwloc refuses:
 * discovery, said in slurmd's log.  0, or -1 with err. */
static int load_export(int in_task, char *err, size_t errlen)
{
	int r = in_task ? ddpenv_topo_load_noplugins(st.topo_xml, st.topo_xml_kept, &st.topo, err, errlen)
		: st.topo_xml_kept ? ddpenv_topo_load_cached(st.topo_xml, &st.topo, err, errlen)
		: ddpenv_topo_load(st.topo_xml, 1, &st.topo, err, errlen);

	if (r < 0 && st.topo_xml_kept) {
		slurm_info(DDP_PFX "topology_cache: %s; the step discovers the node's topology (remove the file to have it written anew)",
			   err);
		r = ddpenv_topo_load(NULL, 1, &st.topo, err, errlen);
	}
	return r;
}

/* The binding plan for this node's tasks (hwloc; no GPU library), from
 * an export (the admin's topology, or the one kept in post_opt) or the
 * node discovered.  Where hwloc would open plugins at the process's first
 * topology (Debian 13's libhwloc-plugins: 5 ms), which reading an export
 * does not need, each task's child reads the export without them
 * (task_topology); slurmstepd, a process of many threads, cannot change
 * its environment to leave them out.  0, else -1 with st.err. */
static int plan_binding(spank_t sp, struct ddpenv_env *env, const struct ddpenv_settings *eff)
{
	uint32_t nodeid;
	char id[16];
	enum ddpenv_bind policy = ddp_req.bind_given ? ddp_req.bind : (enum ddpenv_bind)eff->bind;
	char err[DDPENV_ERRLEN];
	const char *src = ddp_req.bind_given ? "--ddp-bind" : eff->where[DDPENV_SET_BIND];

	if (ddp_req.bind_given && !ddp_req.bind_valid) {
		snprintf(st.err, sizeof(st.err), "%s", ddp_req.bind_err);
		return -1;
	}
	st.bind = policy;
	snprintf(st.bind_how, sizeof(st.bind_how), "%s", src);
	if (policy == DDPENV_BIND_NONE)
		return 0;
	st.gres_order = eff->gres_order;
	snprintf(st.nvidia_gpus, sizeof(st.nvidia_gpus), "%s", eff->nvidia_gpus);
	if (eff->topology[0] || st.topo_cache[0]) {
		snprintf(st.topo_xml, sizeof(st.topo_xml), "%s", eff->topology[0] ? eff->topology : st.topo_cache);
		st.topo_xml_kept = !eff->topology[0];
		if (ddpenv_topo_plugin_count() > 0)
			return 0;
	}
	/* SLURM_NODEID is a task variable; the plan needs it now. */
	if (spank_get_item(sp, S_JOB_NODEID, &nodeid) == ESPANK_SUCCESS) {
		snprintf(id, sizeof(id), "%u", nodeid);
		if (ddpenv_env_set(env, "SLURM_NODEID", id) < 0) {
			snprintf(st.err, sizeof(st.err), "out of memory");
			return -1;
		}
	}
	if ((st.topo_xml[0] ? load_export(0, err, sizeof(err)) : ddpenv_topo_load(NULL, 1, &st.topo, err, sizeof(err))) < 0) {
		st.topo_xml[0] = '\0';
		return plan_failed(err);
	}
	st.topo_xml[0] = '\0'; /* loaded: the tasks' children use this one */
	topology_ready(env);
	if (ddpenv_bind_plan(st.topo, env, policy, NULL, &st.plan, err, sizeof(err)) < 0)
		return plan_failed(err);
	st.have_plan = 1;
	st.node.plan = &st.plan;
	return 0;
}

/* The step's ids and user as Slurm authenticated them: the environment
 * must agree, and the token names them (and the user).  -1 with st.err. */
static int trust_step(spank_t sp)
{
	struct ddpenv_step_auth auth;
	uid_t uid;
	uint32_t job;

	if (spank_get_item(sp, S_JOB_ID, &auth.job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &auth.step_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		snprintf(st.err, sizeof(st.err), "Slurm gave no job id, step id or uid (spank_get_item): refused");
		return -1;
	}
	auth.uid = (uint32_t)uid;
	if (ddpenv_step_trust(&st.node.step, &auth, &job, st.err, sizeof(st.err)) < 0)
		return -1;
	if (st.secret_len > 0 &&
	    ddpenv_token_derive(st.secret, (size_t)st.secret_len, job, auth.step_id, auth.uid, st.node.token,
				st.err, sizeof(st.err)) < 0)
		return -1;
	return 0;
}

int ddp_stepd_user_init(spank_t sp, int ac, char **av)
{
	struct ddpenv_env env;
	struct ddpenv_settings *eff = NULL;
	struct ddpenv_sys sys = ddpenv_sys_default;
	uint32_t nodeid = 1;

	(void)ac;
	(void)av;
	if (!st.active || st.failed)
		return 0;
	ddpenv_env_init(&env);
	/* Slurm's configuration, already loaded in slurmstepd */
	sys.nodeaddr = ddpenv_slurm_has_nodeaddr() ? ddpenv_slurm_nodeaddr : NULL;
	eff = malloc(sizeof(*eff));
	if (!eff) {
		snprintf(st.err, sizeof(st.err), "out of memory");
		goto fail;
	}
	if (snapshot(sp, &env, NULL) < 0 ||
	    ddpenv_config_effective(&st.cfg, ddpenv_env_get(&env, "SLURM_JOB_PARTITION"), &env,
				    eff, st.err, sizeof(st.err)) < 0 ||
	    snapshot_admin_vars(sp, &env, eff) < 0 ||
	    ddpenv_node_resolve(&env, ddp_req.backend, eff, &sys, &st.node,
				st.err, sizeof(st.err)) < 0)
		goto fail;
	snprintf(st.node.config_path, sizeof(st.node.config_path), "%s",
		 st.cfg.from_file ? st.cfg.path : "");
	if (trust_step(sp) < 0)
		goto fail;
	{
		const char *g = ddpenv_env_get(&env, "SLURM_STEP_GPUS");
		const char *cb = ddpenv_env_get(&env, "SLURM_CPU_BIND");
		snprintf(st.node_gpus, sizeof(st.node_gpus), "%s", g && strlen(g) < sizeof(st.node_gpus) ? g : "");
		/* Only here is SLURM_CPU_BIND the user's alone (a long one is
		 * cut: what counts is that there is one). */
		snprintf(st.user_cpu_bind, sizeof(st.user_cpu_bind), "%s", cb ? cb : "");
	}
	if (plan_binding(sp, &env, eff) < 0)
		goto fail;
	/* The user's --ddp=nccl on MIG devices: NCCL's own error for two
	 * ranks on one GPU ("Duplicate GPU detected") would not say why. */
	if (st.node.backend == DDPENV_BACKEND_NCCL && st.node.step.mig &&
	    spank_get_item(sp, S_JOB_NODEID, &nodeid) == ESPANK_SUCCESS) {
		uint32_t here = 0;
		char terr[DDPENV_ERRLEN];
		if (ddpenv_tasks_on_node(ddpenv_env_get(&env, "SLURM_STEP_TASKS_PER_NODE"), nodeid, &here, terr,
					 sizeof(terr)) == 0 && here > 1)
			snprintf(st.mig_warn, sizeof(st.mig_warn),
				 "%s on MIG devices: NCCL does not support MIG (NVIDIA/nccl#1716), and %u ranks on "
				 "MIG devices of one GPU fail with \"Duplicate GPU detected\"; use --ddp=gloo, or one "
				 "task per node", st.node.backend_how, here);
	}
	/* The head, the node that runs task 0 (under any distribution), checks
	 * once per step that the port it was given is free. */
	uint32_t local0 = 0;
	if (!st.node.master_port_user && st.node.step.het_size <= 1 &&
	    spank_get_item(sp, S_JOB_GLOBAL_TO_LOCAL_ID, (uint32_t)0, &local0) == ESPANK_SUCCESS) {
		struct ddpenv_addr a;
		char perr[DDPENV_ERRLEN];
		int fam = ddpenv_addr_parse(st.node.master_addr, &a) == 0 ? a.family : AF_INET;

		if (ddpenv_port_check(fam, (uint16_t)atoi(st.node.master_port), perr, sizeof(perr)) < 0) {
			snprintf(st.err, sizeof(st.err),
				 "MASTER_PORT %s is not free on the head node (%.80s): %.200s; another program holds it. Run this step with DDP_PORT=<a free port> (or MASTER_PORT), or ask the admin to move port_range (%.80s)",
				 st.node.master_port, st.node.step.head, perr,
				 eff->where[DDPENV_SET_PORT_RANGE]);
			goto fail;
		}
	}
	goto out;
fail:
	/* Reported in task_init, where the message reaches the user's stderr
	 * and only this step fails. */
	st.failed = 1;
out:
	explicit_bzero(st.secret, sizeof(st.secret));
	st.secret_len = 0;
	free(eff);
	ddpenv_env_free(&env);
	return 0;
}

/* The task's own plan: what ddp-env --explain computes in the task, whose
 * environment the plugin marks as this step's.  It differs from the
 * node's where Slurm set something per task: SLURMD_TRES_BIND for
 * --gpu-bind, and task/affinity's SLURM_CPU_BIND.  Under Slurm's per-task
 * GPU binding a task sees only its own GPUs: its plan needs the node's, as
 * the plugin passes them; and the user's --cpu-bind is the one the step
 * started with.  A topology slurmstepd loaded holds slurmstepd's CPUs,
 * the job's under cgroup v2 (its step's cpuset is on the tasks' groups):
 * the task's own cgroup's are the allowed set.  ENV: the task's snapshot,
 * an outer step's variables of the plugin removed.  0 (a plan, or unbound
 * with a warning), else -1 said. */
static int task_plan(const struct ddpenv_env *env)
{
	const char *mine = ddpenv_env_get(env, "SLURM_STEP_GPUS");
	struct ddpenv_env penv; /* the marker would make the user's variables ours */
	char mark[32], err[DDPENV_ERRLEN];
	int r;

	ddpenv_env_init(&penv);
	snprintf(mark, sizeof(mark), "%u.%u", st.node.step.job_id, st.node.step.step_id);
	if (ddpenv_env_copy(&penv, env) < 0 || ddpenv_env_set(&penv, DDPENV_MARKER, mark) < 0 ||
	    (st.node_gpus[0] && mine && strcmp(mine, st.node_gpus) != 0 &&
	     ddpenv_env_set(&penv, DDPENV_SLURM_STEP_GPUS, st.node_gpus) < 0) ||
	    (st.user_cpu_bind[0] && ddpenv_env_set(&penv, DDPENV_SLURM_CPU_BIND, st.user_cpu_bind) < 0)) {
		slurm_error(DDP_PFX "out of memory");
		ddpenv_env_free(&penv);
		return -1;
	}
	ddpenv_bind_plan_free(&st.plan);
	r = st.topo_in_task ? 0 : ddpenv_topo_allow_cgroup(st.topo, "", err, sizeof(err));
	if (r == 0)
		r = ddpenv_bind_plan(st.topo, &penv, st.bind, NULL, &st.plan, err, sizeof(err));
	ddpenv_env_free(&penv);
	if (r == 0)
		return 0;
	st.have_plan = 0;
	st.node.plan = NULL;
	if (st.topo_in_task) {
		/* the node's plan, first made here: said as user_init would */
		if (plan_failed(err) == 0)
			return 0;
		slurm_error(DDP_PFX "%s", st.err);
		return -1;
	}
	if (st.bind == DDPENV_BIND_STRICT) {
		slurm_error(DDP_PFX "--ddp-bind=strict: %s", err);
		return -1;
	}
	slurm_error(DDP_PFX "warning: --ddp-bind=auto: this task runs unbound: %s", err);
	return 0;
}

/* In a task's child (one thread, before exec): the node's topology from
 * the kept export's mapped copy (0.15 ms), else from its export (0.5 ms
 * here, 2 ms a DGX H100's), hwloc's plugins left out
 * (ddpenv_topo_load_noplugins; not the 5 ms of opening Debian 13's
 * plugins in slurmstepd), for task_plan.  0 (a topology, or unbound with the node's warning), else -1
 * said. */
static int task_topology(const struct ddpenv_env *env)
{
	char err[DDPENV_ERRLEN];

	if (load_export(1, err, sizeof(err)) < 0) {
		if (plan_failed(err) == 0)
			return 0;
		slurm_error(DDP_PFX "%s", st.err);
		return -1;
	}
	st.topo_in_task = 1;
	topology_ready(env);
	st.have_plan = 1;
	st.node.plan = &st.plan;
	return 0;
}

/* Bind the task as planned: a task that cannot be bound as strict asks
 * never starts.  0, else -1 said. */
static int task_bind(const struct ddpenv_env *env)
{
	char err[DDPENV_ERRLEN];
	const char *lr = ddpenv_env_get(env, "SLURM_LOCALID");
	uint32_t local = lr ? (uint32_t)strtoul(lr, NULL, 10) : 0;
	if (ddpenv_bind_apply(st.topo, &st.plan, local, err, sizeof(err)) == 0)
		return 0;
	if (st.plan.policy == DDPENV_BIND_STRICT) {
		slurm_error(DDP_PFX "--ddp-bind=strict: %s", err);
		return -1;
	}
	slurm_error(DDP_PFX "warning: --ddp-bind=auto: %s; this task runs with Slurm's binding", err);
	return 0;
}

/* The node's warnings, once per node: from local rank 0. */
static void node_warnings(const struct ddpenv_env *env)
{
	const char *lr = ddpenv_env_get(env, "SLURM_LOCALID");
	if (!lr || strcmp(lr, "0") != 0)
		return;
	if (st.have_plan && st.plan.slurm_binds && st.plan.ntasks > 1 &&
	    st.node.backend == DDPENV_BACKEND_NCCL) {
		const char *tb = ddpenv_env_get(env, "SLURMD_TRES_BIND");
		unsigned n = st.plan.slurm_per_task ? (unsigned)(st.plan.ntasks * st.plan.slurm_per_task)
						    : (unsigned)st.plan.ngpus;
		slurm_error(DDP_PFX "warning: Slurm binds each of this node's %u tasks to its own GPU "
			    "(SLURMD_TRES_BIND=%s, %s): each sees its own only, "
			    "so NCCL can lose P2P/NVLink between them and cuda:LOCAL_RANK is not the "
			    "task's GPU; --gpus-per-node=%u (or --gres=gpu:%u) with --ntasks-per-node=%u "
			    "and no --gpu-bind keeps every GPU visible to every task",
			    st.plan.ntasks, tb ? tb : "gpu:per_task",
			    st.plan.slurm_per_task ? "which --gpus-per-task implies" : "from --gpu-bind",
			    n ? n : st.plan.ntasks, n ? n : st.plan.ntasks, st.plan.ntasks);
	}
	if (st.bind_warn[0])
		slurm_error(DDP_PFX "warning: %s", st.bind_warn);
	if (st.mig_warn[0])
		slurm_error(DDP_PFX "warning: %s", st.mig_warn);
}

/* The contract into the task's environment, all or nothing (a task never
 * starts with half of it), an outer step's values removed, and the
 * plugin's choices for ddp-env --explain.  0, else -1 said. */
static int task_setenv(spank_t sp, const struct ddpenv_vars *vars)
{
	for (size_t i = 0; i < vars->n; i++) {
		if (vars->v[i].user)
			continue;
		if (spank_setenv(sp, vars->v[i].key, vars->v[i].value, 1) != ESPANK_SUCCESS) {
			slurm_error(DDP_PFX "cannot set %s=%s in the task's environment", vars->v[i].key,
				    strcmp(vars->v[i].key, "DDP_RDZV_TOKEN") ? vars->v[i].value : "(hidden)");
			return -1;
		}
	}
	for (const char *const *k = ddpenv_plugin_keys; *k; k++) {
		size_t i = 0;
		while (i < vars->n && strcmp(vars->v[i].key, *k) != 0)
			i++;
		if (i == vars->n && spank_unsetenv(sp, *k) != ESPANK_SUCCESS) {
			slurm_error(DDP_PFX "cannot remove %s (another step's) from the task's environment", *k);
			return -1;
		}
	}
	/* ddp-env --explain in the task shows the policy the plugin used,
	 * and the topology its plan read (an export, its mapped copy, or
	 * the node discovered). */
	if (st.have_plan ? spank_setenv(sp, "DDP_BIND_TOPOLOGY", st.plan.topology, 1) != ESPANK_SUCCESS
	    : spank_unsetenv(sp, "DDP_BIND_TOPOLOGY") != ESPANK_SUCCESS) {
		slurm_error(DDP_PFX "cannot set DDP_BIND_TOPOLOGY in the task's environment");
		return -1;
	}
	if (spank_setenv(sp, "DDP_BIND_POLICY", ddpenv_bind_name(st.bind), 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "DDP_BIND_FROM", st.bind_how, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "DDP_BACKEND_FROM", st.node.backend_how, 1) != ESPANK_SUCCESS) {
		slurm_error(DDP_PFX "cannot set DDP_BIND_POLICY, DDP_BIND_FROM or DDP_BACKEND_FROM in the task's environment");
		return -1;
	}
	return 0;
}

/* Slurm's setenvf, under each spank_setenv, allocates and clears a 256 KiB
 * buffer (ENV_BUFSIZE and xmalloc's two-word header: the same in 22.05 to
 * 26.05).  In a task's child the chunk that Slurm's own setenvf calls freed
 * holds pages the child has written already; the plugin's allocations
 * before its calls (the snapshot, the topology, the plan) can split it, and
 * then its first calls clear heap pages the child never wrote: 90 page
 * faults, 0.22 ms of CPU a task on 26.05 in Debian unstable (none on 22.05
 * and 24.11, where the chunk stays whole anyway).  Held
 * from the hook's start and freed just before the calls, the chunk is
 * whole for them.  Never written here; where the malloc fails, the calls
 * run as before. */
#define SLURM_SETENV_CHUNK (256 * 1024 + 2 * sizeof(size_t))

int ddp_stepd_task_init(spank_t sp)
{
	struct ddpenv_env env;
	struct ddpenv_vars vars;
	char err[DDPENV_ERRLEN];
	void *setenv_chunk;
	int rv = -1;

	if (!st.active)
		return 0;
	if (st.failed) {
		slurm_error(DDP_PFX "%s", st.err);
		return -1;
	}
	setenv_chunk = malloc(SLURM_SETENV_CHUNK);
	ddpenv_env_init(&env);
	if (snapshot(sp, &env, &st.node.cfg) < 0) {
		slurm_error(DDP_PFX "%s", st.err);
		goto out;
	}
	/* An outer step's (a nested srun's inheritance) is not this step's. */
	for (const char *const *k = ddpenv_plugin_keys; *k; k++)
		ddpenv_env_unset(&env, *k);
	if (st.topo_xml[0] && task_topology(&env) < 0)
		goto out;
	if (st.have_plan && task_plan(&env) < 0)
		goto out;
	if (st.have_plan && task_bind(&env) < 0)
		goto out;
	if (st.topo_in_task) {
		/* bound: hwloc's state as before the load, for whatever
		 * runs in this child after us */
		ddpenv_topo_free(st.topo);
		st.topo = NULL;
	}
	node_warnings(&env);
	if (ddpenv_task_vars(&st.node, &env, &vars, err, sizeof(err)) < 0) {
		slurm_error(DDP_PFX "%s", err);
		goto out;
	}
	free(setenv_chunk);
	setenv_chunk = NULL;
	rv = task_setenv(sp, &vars);
out:
	free(setenv_chunk);
	ddpenv_env_free(&env);
	return rv;
}

void ddp_stepd_exit(void)
{
	if (!st_used)
		return; /* nothing read, nothing held */
	explicit_bzero(st.secret, sizeof(st.secret)); /* if user_init never ran */
	ddpenv_config_free(&st.cfg);
	ddpenv_bind_plan_free(&st.plan);
	ddpenv_topo_free(st.topo);
	st.topo = NULL;
	st.have_plan = 0;
}
