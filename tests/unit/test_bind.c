/*
 * The binding planner on hwloc XML topologies of real machine shapes
 * (tests/topologies/).  Every plan is checked two ways: invariants checked
 * independently with hwloc (every GPU used once, each task's CPUs near its
 * GPU, disjoint, inside the allowed set, none empty, no allowed core near a
 * used GPU left idle), and exact expectations for the machines whose
 * layout is known (nvidia-smi topo -m of a DGX H100 and a DGX A100).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hwloc.h>

#include "ddpenv.h"
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>

#include "fakesys.h"
#include "test.h"

static char err[DDPENV_ERRLEN];

static const char *topo_path(const char *name)
{
	static char p[1024];
	snprintf(p, sizeof(p), "%s/%s", TOPODIR, name);
	return p;
}

/* A step's environment on node 0: n tasks, the GRES indices, Slurm's
 * CUDA_VISIBLE_DEVICES (NULL: the same as the indices), extra K=V. */
static void step_env(struct ddpenv_env *e, unsigned n, const char *gpus, const char *cvd, ...)
{
	char tpn[16];
	va_list ap;

	ddpenv_env_init(e);
	snprintf(tpn, sizeof(tpn), "%u", n);
	ddpenv_env_set(e, "SLURM_NODEID", "0");
	ddpenv_env_set(e, "SLURM_STEP_TASKS_PER_NODE", tpn);
	if (gpus) {
		ddpenv_env_set(e, "SLURM_STEP_GPUS", gpus);
		ddpenv_env_set(e, "CUDA_VISIBLE_DEVICES", cvd ? cvd : gpus);
	}
	va_start(ap, cvd);
	env_add_v(e, ap);
	va_end(ap);
}

static int plan_on(const char *xml, struct ddpenv_env *env, enum ddpenv_bind policy,
		   const char *allowed, struct ddpenv_bind_plan *p)
{
	struct ddpenv_topo *t = NULL;
	int rv;

	err[0] = '\0';
	rv = ddpenv_topo_load(topo_path(xml), 0, &t, err, sizeof(err));
	if (rv == 0)
		rv = ddpenv_bind_plan(t, env, policy, allowed, p, err, sizeof(err));
	if (rv < 0)
		printf("# %s: %s\n", xml, err);
	ddpenv_topo_free(t);
	return rv;
}

/* ---- invariants, checked with hwloc directly ------------------------------ */

static void invariants(const char *xml, const struct ddpenv_bind_plan *p, const char *what)
{
	/* the tasks' GPUs: ours, or Slurm's per-task pick */
	int known = p->gpu || (p->slurm_per_task && p->ntasks && p->tasks[0].gpu >= 0);
	hwloc_topology_t topo;
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc(), *set = calloc(p->ntasks, sizeof(*set));
	hwloc_bitmap_t all = hwloc_bitmap_alloc(), near_used = hwloc_bitmap_alloc();
	int nonempty = 1, inside = 1, disjoint = 1, near = 1, once = 1, visible = 1;
	unsigned used[DDPENV_MAX_GPUS] = { 0 };
	char desc[256];

	hwloc_topology_init(&topo);
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
	hwloc_topology_set_xml(topo, topo_path(xml));
	hwloc_topology_load(topo);
	hwloc_bitmap_list_sscanf(allowed, p->allowed);
	unsigned pus = (unsigned)hwloc_bitmap_weight(allowed);

	for (uint32_t i = 0; i < p->ntasks; i++) {
		const struct ddpenv_bind_task *t = &p->tasks[i];
		set[i] = hwloc_bitmap_alloc();
		hwloc_bitmap_list_sscanf(set[i], t->cpus);
		nonempty &= !hwloc_bitmap_iszero(set[i]);
		inside &= hwloc_bitmap_isincluded(set[i], allowed);
		hwloc_bitmap_or(all, all, set[i]);
		for (uint32_t j = 0; j < i; j++)
			disjoint &= !hwloc_bitmap_intersects(set[i], set[j]);
		if (t->gpu >= 0 && known) {
			const struct ddpenv_bind_gpu *g = &p->gpus[t->gpu];
			hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, g->busid);
			used[t->gpu]++;
			if (pci) {
				hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
				if (hwloc_bitmap_intersects(anc->cpuset, allowed)) {
					near &= hwloc_bitmap_isincluded(set[i], anc->cpuset);
					hwloc_bitmap_or(near_used, near_used, anc->cpuset);
				}
			}
			/* entry LOCAL_RANK of CUDA_VISIBLE_DEVICES is its GPU */
			char vis[DDPENV_VALLEN], *tok, *save = NULL;
			uint32_t k = 0;
			snprintf(vis, sizeof(vis), "%s", p->visible);
			for (tok = strtok_r(vis, ",", &save); tok && k < i; tok = strtok_r(NULL, ",", &save))
				k++;
			/* MIG: no common list; each task's own (bind_vars) */
			if (i < p->ngpus && p->gpu)
				visible &= p->mig ? !p->visible[0] : tok && strcmp(tok, g->cuda) == 0;
		}
	}
	if (p->gpu && p->ntasks >= p->ngpus)
		for (size_t k = 0; k < p->ngpus; k++)
			once &= used[k] == (p->ntasks + p->ngpus - 1 - k) / p->ngpus;
	if (known && p->ntasks <= p->ngpus)
		for (size_t k = 0; k < p->ngpus; k++)
			once &= used[k] <= 1;

	snprintf(desc, sizeof(desc), "%s: every task has CPUs", what);
	test_cond(desc, nonempty);
	snprintf(desc, sizeof(desc), "%s: inside the allowed set", what);
	test_cond(desc, inside);
	if (pus >= p->ntasks) {
		snprintf(desc, sizeof(desc), "%s: disjoint", what);
		test_cond(desc, disjoint);
	}
	if (known && p->ngpus) {
		snprintf(desc, sizeof(desc), "%s: each GPU used once (or evenly shared)", what);
		test_cond(desc, once);
		snprintf(desc, sizeof(desc), "%s: each task's CPUs near its GPU", what);
		test_cond(desc, near);
		snprintf(desc, sizeof(desc), "%s: CUDA_VISIBLE_DEVICES entry LOCAL_RANK is the task's GPU", what);
		test_cond(desc, visible);
		/* no allowed CPU near a used GPU is left idle */
		hwloc_bitmap_and(near_used, near_used, allowed);
		snprintf(desc, sizeof(desc), "%s: no allowed core near a used GPU left idle", what);
		test_cond(desc, hwloc_bitmap_iszero(near_used) || hwloc_bitmap_isincluded(near_used, all));
	} else {
		snprintf(desc, sizeof(desc), "%s: CPU-only: every allowed CPU used", what);
		test_cond(desc, hwloc_bitmap_isequal(all, allowed));
	}
	for (uint32_t i = 0; i < p->ntasks; i++)
		hwloc_bitmap_free(set[i]);
	free(set);
	hwloc_bitmap_free(all);
	hwloc_bitmap_free(near_used);
	hwloc_bitmap_free(allowed);
	hwloc_topology_destroy(topo);
}

/* Core counts of the tasks differ by at most one. */
static int even(const struct ddpenv_bind_plan *p)
{
	unsigned lo = ~0u, hi = 0;
	for (uint32_t i = 0; i < p->ntasks; i++) {
		lo = p->tasks[i].cores < lo ? p->tasks[i].cores : lo;
		hi = p->tasks[i].cores > hi ? p->tasks[i].cores : hi;
	}
	return hi - lo <= 1;
}

/* ---- the machines ----------------------------------------------------------- */

static void test_dgx_h100(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 8, "0,1,2,3,4,5,6,7", NULL, NULL);
	test_cond("DGX H100, 8 tasks, 8 GPUs: planned", plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-h100.xml", &p, "DGX H100 8x8");
	test_cond("... cpu, gpu and memory bound", p.cpu && p.gpu && p.mem);
	test_streq("... the 8 H100s by bus id (not the NVSwitches, not the BMC's VGA)", p.gpus[7].busid, "0000:df:00.0");
	test_streq("... local rank 0: GPU 0000:1b:00.0", p.gpus[p.tasks[0].gpu].busid, "0000:1b:00.0");
	test_streq("... 14 cores and their hyperthreads of socket 0", p.tasks[0].cpus, "0-13,112-125");
	test_streq("... local rank 7: the last 14 of socket 1", p.tasks[7].cpus, "98-111,210-223");
	test_cond("... 14 cores each", p.tasks[3].cores == 14 && even(&p));
	test_cond("... memory on the GPU's NUMA node", strcmp(p.tasks[0].mems, "0") == 0 &&
		  strcmp(p.tasks[5].mems, "1") == 0 && p.gpus[5].numa == 1);
	test_streq("... NIC of GPU 3: the ConnectX-7 behind the same switch", p.gpus[3].nic, "mlx5_3");
	test_streq("... its interface", p.gpus[3].nic_netdev, "ibp94s0");
	test_streq("... said so", p.gpus[3].nic_how, "same PCIe switch");
	test_cond("... OpenFabrics device (for NCCL_IB_HCA)", p.gpus[3].nic_hca);
	test_streq("... CUDA_VISIBLE_DEVICES in GRES order", p.visible, "0,1,2,3,4,5,6,7");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1,2,3,4,5,6,7", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100.xml", &p, "DGX H100 2 tasks, 8 GPUs");
	test_streq("2 tasks on 8 GPUs: one per socket, all GPUs still visible", p.visible, "0,4,1,2,3,5,6,7");
	test_streq("... local rank 1: GPU 0000:9d:00.0 on socket 1", p.gpus[p.tasks[1].gpu].busid, "0000:9d:00.0");
	test_streq("... with socket 1's cores", p.tasks[1].cpus, "56-111,168-223");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* Slurm's cgroup device constraint: relative CUDA indices. */
	step_env(&env, 2, "2,3,4,5", "0,1,2,3", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100.xml", &p, "DGX H100 GPUs 2-5, relative CUDA indices");
	test_streq("GRES 2,3,4,5 as CUDA 0-3: permuted in CUDA's numbers", p.visible, "0,2,1,3");
	test_streq("... local rank 1 has GRES 4, CUDA 2", p.gpus[p.tasks[1].gpu].value, "2");
	test_cond("... GRES index 4", p.gpus[p.tasks[1].gpu].index == 4);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* In a task after the plugin: the permuted list and Slurm's. */
	step_env(&env, 2, "2,3,4,5", "0,2,1,3", "DDP_SLURM_CUDA_VISIBLE_DEVICES=0,1,2,3", "DDP_STEP=7.0",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_streq("ddp-env in a task plans what the plugin did", p.visible, "0,2,1,3");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 16, "0,1,2,3,4,5,6,7", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100.xml", &p, "DGX H100 16 tasks on 8 GPUs (gloo)");
	test_cond("16 tasks: two per GPU, 7 cores each", p.tasks[0].gpu == 0 && p.tasks[8].gpu == 0 &&
		  p.tasks[0].cores == 7 && even(&p));
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void test_dgx_a100_nps4(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 8, "0,1,2,3,4,5,6,7", NULL, NULL);
	test_cond("DGX A100 (EPYC, 4 NUMA nodes per socket): planned",
		  plan_on("dgx-a100-epyc-nps4.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-a100-epyc-nps4.xml", &p, "DGX A100 8x8");
	test_cond("... GPUs 0,1 on NUMA 3, 2,3 on 1, 4,5 on 7, 6,7 on 5 (nvidia-smi topo -m)",
		  p.gpus[0].numa == 3 && p.gpus[1].numa == 3 && p.gpus[2].numa == 1 && p.gpus[4].numa == 7 &&
		  p.gpus[7].numa == 5);
	test_streq("... local rank 0: half of NUMA node 3", p.tasks[0].cpus, "48-55,176-183");
	test_streq("... local rank 2: half of NUMA node 1", p.tasks[2].cpus, "16-23,144-151");
	test_cond("... 8 cores each, memory on its NUMA node", p.tasks[6].cores == 8 &&
		  strcmp(p.tasks[6].mems, "5") == 0);
	test_streq("... NIC of GPU 6", p.gpus[6].nic, "mlx5_6");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 16, NULL, NULL, NULL);
	plan_on("dgx-a100-epyc-nps4.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-a100-epyc-nps4.xml", &p, "DGX A100 CPU-only 16 tasks");
	int one_node = 1;
	for (uint32_t i = 0; i < 16; i++)
		one_node &= strchr(p.tasks[i].mems, '-') == NULL && strchr(p.tasks[i].mems, ',') == NULL;
	test_cond("CPU-only 16 tasks: 8 cores each, each within one NUMA node", even(&p) && one_node &&
		  p.tasks[0].cores == 8);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, NULL, NULL, NULL);
	plan_on("dgx-a100-epyc-nps4.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("CPU-only 2 tasks: a socket each", strcmp(p.tasks[0].mems, "0-3") == 0 &&
		  strcmp(p.tasks[1].mems, "4-7") == 0 && p.tasks[1].cores == 64);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void test_single_socket(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 4, "0,1,2,3", NULL, NULL);
	test_cond("4-GPU one-socket node: planned",
		  plan_on("single-socket-4gpu.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("single-socket-4gpu.xml", &p, "one socket 4x4");
	test_cond("... 8 cores each", p.tasks[0].cores == 8 && even(&p));
	test_cond("... one NUMA node: memory left alone, said so", !p.mem && strstr(p.mem_how, "one NUMA node"));
	test_streq("... every GPU's closest NIC is the one ConnectX-6", p.gpus[2].nic, "mlx5_0");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void test_cpu_only(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 2, NULL, NULL, NULL);
	test_cond("CPU-only 2-socket node: planned", plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("cpu-2socket.xml", &p, "CPU-only 2 tasks");
	test_streq("... task 0: socket 0", p.tasks[0].cpus, "0-19,40-59");
	test_streq("... task 1: socket 1", p.tasks[1].cpus, "20-39,60-79");
	test_cond("... no GPU: said so", strstr(p.gpu_how, "no GPU") != NULL);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 3, NULL, NULL, NULL);
	plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("cpu-2socket.xml", &p, "CPU-only 3 tasks");
	test_cond("3 tasks: two share socket 0, one has socket 1; none spans sockets",
		  p.tasks[0].cores == 10 && p.tasks[1].cores == 10 && p.tasks[2].cores == 20 &&
		  strcmp(p.tasks[2].mems, "1") == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 80, NULL, NULL, NULL);
	plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("cpu-2socket.xml", &p, "CPU-only 80 tasks (one per hardware thread)");
	test_cond("80 tasks: one hardware thread each", p.tasks[79].pus == 1 && !p.tasks[79].shared);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 81, NULL, NULL, NULL);
	plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("cpu-2socket.xml", &p, "CPU-only 81 tasks");
	test_cond("81 tasks on 80 threads: two share one, said so", p.tasks[0].shared &&
		  strstr(p.cpu_how, "some share") != NULL);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, NULL, NULL, NULL);
	plan_on("ci-vm.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("ci-vm.xml", &p, "the build machine (a real export)");
	test_cond("the 2-core build machine: a core each", strcmp(p.tasks[0].cpus, "0") == 0 &&
		  strcmp(p.tasks[1].cpus, "1") == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void test_cgroup(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 4, "0,1,2,3", NULL, NULL);
	test_cond("cgroup of half a socket: planned",
		  plan_on("dgx-h100-cgroup-half-socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-h100-cgroup-half-socket.xml", &p, "half-socket cgroup, GPUs 0-3");
	test_streq("... the cgroup's CPUs are the allowed set", p.allowed, "0-27,112-139");
	test_streq("... local rank 3: the last 7 allowed cores", p.tasks[3].cpus, "21-27,133-139");
	test_cond("... 7 cores each, near their GPUs", even(&p) && p.tasks[0].cores == 7 && p.tasks[2].near);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 4, "4,5,6,7", NULL, NULL);
	plan_on("dgx-h100-cgroup-half-socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100-cgroup-half-socket.xml", &p, "half-socket cgroup, GPUs on the other socket");
	test_cond("GPUs with no allowed CPU near: the allowed CPUs, split, and said so",
		  !p.tasks[0].near && strstr(p.cpu_how, "no allowed CPU near") != NULL &&
		  strcmp(p.tasks[3].cpus, "21-27,133-139") == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* A caller's allowed list (what the plugin passes from Slurm). */
	step_env(&env, 2, "0,1", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, "0-3,112-115", &p);
	invariants("dgx-h100.xml", &p, "an allowed list of 4 cores");
	test_cond("an allowed list of 4 cores: 2 each", p.tasks[0].cores == 2 && p.tasks[1].cores == 2);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* write text to dir/rel, making its folders */
static void put_at(const char *dir, const char *rel, const char *text)
{
	char p[900];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	for (char *c = p + strlen(dir) + 1; (c = strchr(c, '/')); *c++ = '/') {
		*c = '\0';
		mkdir(p, 0755);
	}
	if ((f = fopen(p, "w"))) {
		fputs(text, f);
		fclose(f);
	}
}

/* Under cgroup v2 slurmstepd stays in step_N/slurm, the job's CPUs; its
 * tasks' groups (step_N/user/task_K) hold the step's cpuset.  A topology
 * slurmstepd loaded, planned in a task's child, takes the child's cgroup
 * (a fake tree here) as its allowed set. */
static void test_cgroup_v2_task(void)
{
	char dir[] = "/tmp/ddp-cgXXXXXX", list[64], cmd[700];
	const char *task = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0";
	struct ddpenv_topo *t = NULL;
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	if (!mkdtemp(dir) || ddpenv_topo_load(topo_path("cpu-2socket.xml"), 0, &t, err, sizeof(err)) < 0) {
		test_cond("cgroup v2 task: a fake tree and a topology", 0);
		return;
	}
	put_at(dir, "sys/fs/cgroup/cpuset.cpus.effective", "0-79\n");
	put_at(dir, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/slurm/cpuset.cpus.effective", "0-79\n");
	snprintf(cmd, sizeof(cmd), "%s/cpuset.cpus.effective", task);
	put_at(dir, cmd, "2-5,42-45\n");
	put_at(dir, "proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n");
	ddpenv_topo_allowed(t, list, sizeof(list), err, sizeof(err));
	test_streq("a topology loaded in the job's CPUs allows them all", list, "0-79");
	test_cond("the task's cgroup taken", ddpenv_topo_allow_cgroup(t, dir, err, sizeof(err)) == 0);
	ddpenv_topo_allowed(t, list, sizeof(list), err, sizeof(err));
	test_streq("... its CPUs are the allowed set", list, "2-5,42-45");
	step_env(&env, 2, NULL, NULL, NULL);
	test_cond("... planned", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	test_streq("... the plan's allowed set is the task's cgroup's", p.allowed, "2-5,42-45");
	test_err("... naming its file", p.allowed_how, "/step_0/user/task_0/cpuset.cpus.effective");
	test_cond("... 2 tasks of 2 cores each, inside it", p.ntasks == 2 && p.tasks[0].cores == 2 &&
		  p.tasks[1].cores == 2 && strcmp(p.tasks[0].cpus, "2-3,42-43") == 0 &&
		  strcmp(p.tasks[1].cpus, "4-5,44-45") == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	put_at(dir, cmd, "2-x\n");
	test_cond("a cpuset that is no CPU list refused", ddpenv_topo_allow_cgroup(t, dir, err, sizeof(err)) < 0);
	test_err("... naming the file and what was expected", err,
		 "/user/task_0/cpuset.cpus.effective: '2-x': expected a CPU list");
	ddpenv_topo_allowed(t, list, sizeof(list), err, sizeof(err));
	test_streq("... the allowed set unchanged", list, "2-5,42-45");

	snprintf(cmd, sizeof(cmd), "rm -rf '%s/sys' && mkdir -p '%s/sys'", dir, dir);
	if (system(cmd) != 0)
		printf("# %s failed\n", cmd);
	test_cond("no cpuset cgroup taken", ddpenv_topo_allow_cgroup(t, dir, err, sizeof(err)) == 0);
	ddpenv_topo_allowed(t, list, sizeof(list), err, sizeof(err));
	test_streq("... every CPU of the topology", list, "0-79");
	ddpenv_topo_free(t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
}

/* ---- the user's choices ------------------------------------------------------- */

static void test_policy(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;
	enum ddpenv_bind b;

	test_cond("policies parse", ddpenv_bind_parse("strict", &b, err, sizeof(err)) == 0 &&
		  b == DDPENV_BIND_STRICT && ddpenv_bind_parse(NULL, &b, err, sizeof(err)) == 0 &&
		  b == DDPENV_BIND_AUTO);
	test_cond("an unknown policy is refused", ddpenv_bind_parse("closest", &b, err, sizeof(err)) < 0);
	test_err("... naming it", err, "--ddp-bind=closest: unknown policy (expected auto, none or strict)");

	step_env(&env, 2, "0,1", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_NONE, NULL, &p);
	test_cond("--ddp-bind=none: nothing bound, said so", !p.cpu && !p.gpu && !p.mem &&
		  strstr(p.cpu_how, "--ddp-bind=none") != NULL);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,cores", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--cpu-bind given: CPUs and memory left alone, GPUs still ordered", !p.cpu && !p.mem && p.gpu);
	test_err("... said so", p.cpu_how, "explicit --cpu-bind (SLURM_CPU_BIND=quiet,cores): left to Slurm");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURMD_TRES_BIND=gpu:closest", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--gpu-bind given: GPUs left alone, CPUs still bound", !p.gpu && p.cpu && !p.visible[0]);
	test_err("... said so", p.gpu_how, "Slurm binds GPUs per task (--gpu-bind, or --ntasks-per-gpu) (SLURMD_TRES_BIND=gpu:closest): left to Slurm");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_MEM_BIND=quiet,local", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--mem-bind given: memory left alone", !p.mem && p.cpu && p.gpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 4, "0,1,2,3", "2", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("CUDA_VISIBLE_DEVICES narrowed by Slurm per task: left alone", !p.gpu);
	test_err("... said so", p.gpu_how, "does not list the step's 4 GPUs");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "SLURM_NODEID", "0");
	ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", "2");
	ddpenv_env_set(&env, "CUDA_VISIBLE_DEVICES", "1,0");
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("the user's own CUDA_VISIBLE_DEVICES (no Slurm GPUs): left alone", !p.gpu && p.cpu);
	test_err("... said so", p.gpu_how, "set without GPUs from Slurm");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* ---- the task's variables ------------------------------------------------------ */

/* --gpus-per-task=N: Slurm binds task i to the i-th N of the step's GPUs
 * on the node (srun(1), per_task) and shows it only those. */
static void test_slurm_per_task(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	/* The node's view (slurmstepd before the tasks): no SLURMD_TRES_BIND
	 * yet; a task's view: its own GPU, and the node's from the plugin. */
	step_env(&env, 4, "2", "2", "SLURMD_TRES_BIND=gpu:per_task:1", "DDP_SLURM_STEP_GPUS=0,1,2,3",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	test_cond("--gpus-per-task=1, 4 tasks: planned", plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-h100.xml", &p, "DGX H100, Slurm's per_task:1 on GPUs 0-3");
	test_cond("... GPUs left to Slurm, per_task 1, no list of ours", !p.gpu && p.cpu && p.slurm_per_task == 1 &&
		  !p.visible[0]);
	test_cond("... task i has the i-th of the node's GPUs", p.ngpus == 4 && p.tasks[0].gpu == 0 &&
		  p.tasks[1].gpu == 1 && p.tasks[2].gpu == 2 && p.tasks[3].gpu == 3 && p.gpus[2].index == 2);
	test_cond("... each task's CPUs near its GPU, split evenly", p.tasks[0].near && p.tasks[3].near && even(&p));
	test_err("... CPUs: said so", p.cpu_how, "the cores near each task's GPU, split evenly (Slurm's pick of its GPU)");
	test_err("... GPUs: said what it costs", p.gpu_how,
		 "Slurm binds each task to its own 1 GPU (gpu:per_task:1; --gpus-per-task or --gpu-bind): each sees only it, from cuda:0, not cuda:LOCAL_RANK, and NCCL can lose P2P/NVLink between them; left to Slurm");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* per_task:2 over both sockets' GPUs: task 1 takes GRES 4,5. */
	step_env(&env, 2, "0,1", "0,1", "SLURMD_TRES_BIND=gpu:verbose,per_task:2", "DDP_SLURM_STEP_GPUS=0,1,4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100.xml", &p, "DGX H100, Slurm's per_task:2");
	test_cond("per_task:2 (after verbose,): task 1 has GRES 4 first", p.slurm_per_task == 2 &&
		  p.tasks[0].gpu == 0 && p.gpus[p.tasks[1].gpu].index == 4);
	test_cond("... on the other socket: the tasks' CPUs do not meet", p.tasks[0].near && p.tasks[1].near &&
		  p.gpus[0].numa != p.gpus[p.tasks[1].gpu].numa);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* More tasks than GPUs: slurmstepd binds the extra ones to the first. */
	step_env(&env, 3, "0", "0", "SLURMD_TRES_BIND=gpu:per_task:1", "DDP_SLURM_STEP_GPUS=4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("3 tasks on 2 GPUs, per_task:1: task 2 falls back to the first", p.tasks[2].gpu == 0 &&
		  p.tasks[1].gpu == 1 && p.gpus[0].index == 4);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* ddp-env in a task without the plugin, or another step's list:
	 * the other tasks' GPUs are unknown, so no GPU locality. */
	step_env(&env, 2, "1", "1", "SLURMD_TRES_BIND=gpu:per_task:1", "DDP_SLURM_STEP_GPUS=0,1",
		 "DDP_STEP=6.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("per_task without this step's node list: no task has a GPU", !p.gpu && p.tasks[0].gpu < 0 &&
		  p.tasks[1].gpu < 0);
	test_err("... said so", p.gpu_how, "the other tasks' GPUs are unknown here (no DDP_SLURM_STEP_GPUS)");
	test_err("... CPUs spread as for a CPU-only step", p.cpu_how, "tasks spread evenly");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURMD_TRES_BIND=gpu:none", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--gpu-bind=none is not per_task: left alone", !p.gpu && p.slurm_per_task == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
	step_env(&env, 2, "0,1", NULL, "SLURMD_TRES_BIND=gpu:per_task:x", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("per_task:x (not a count): left alone, not per_task", !p.gpu && p.slurm_per_task == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* --gpu-bind=map_gpu:LIST / mask_gpu:LIST: Slurm gives local task i the
 * GPUs of the list's entry i (ID*N counting N, the list starting over),
 * by its GPU numbers on the node, and the step's first GPU where the entry
 * names none of the step's (as seen on the test cluster's Slurm 22.05). */
static void test_slurm_map(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;

	step_env(&env, 3, "5", "5", "SLURMD_TRES_BIND=gpu:verbose,map_gpu:5,1", "DDP_SLURM_STEP_GPUS=0,1,4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	test_cond("map_gpu:5,1 (after verbose,), 3 tasks: planned",
		  plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-h100.xml", &p, "DGX H100, Slurm's map_gpu:5,1 on GPUs 0,1,4,5");
	test_streq("... the list as Slurm has it", p.slurm_map, "map_gpu:5,1");
	test_cond("... GPUs left to Slurm, no list of ours, not per_task", !p.gpu && p.cpu && p.slurm_binds &&
		  !p.slurm_per_task && !p.visible[0]);
	test_cond("... task 0 has GPU 5, task 1 GPU 1, task 2 GPU 5 again", p.ngpus == 4 &&
		  p.gpus[p.tasks[0].gpu].index == 5 && p.gpus[p.tasks[1].gpu].index == 1 &&
		  p.gpus[p.tasks[2].gpu].index == 5);
	test_cond("... each task's CPUs near its GPU", p.tasks[0].near && p.tasks[1].near && p.tasks[2].near &&
		  p.gpus[p.tasks[0].gpu].numa != p.gpus[p.tasks[1].gpu].numa);
	test_err("... CPUs: said so", p.cpu_how, "the cores near each task's GPU, split evenly (Slurm's pick of its GPU)");
	test_err("... GPUs: said what it costs", p.gpu_how,
		 "Slurm binds each task to its --gpu-bind=map_gpu:5,1 entry: each sees only its GPU, as cuda:0 (not cuda:LOCAL_RANK); NCCL can lose P2P/NVLink; left to Slurm");
	test_err("... and that two tasks share a GPU", p.gpu_how,
		 "; tasks 0 and 2 share GPU 5: NCCL refuses two ranks on one GPU");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* "7*2,0": tasks 0 and 1 name GPU 7, not the step's: Slurm binds
	 * them to its first ("Binding to the first device in the allocation
	 * instead"); task 2 names 0. */
	step_env(&env, 3, "0", "0", "SLURMD_TRES_BIND=gpu:map_gpu:7*2,4", "DDP_SLURM_STEP_GPUS=0,1,4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("map_gpu:7*2,4: tasks 0 and 1 fall back to the step's first GPU, task 2 has 4",
		  p.tasks[0].gpu == 0 && p.tasks[1].gpu == 0 && p.gpus[p.tasks[2].gpu].index == 4);
	test_err("... said so", p.gpu_how,
		 "; task 0's entry names none of the step's GPUs (0,1,4,5): Slurm gives it 0");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* masks, hex with or without 0x: a task's first GPU is its pick */
	step_env(&env, 4, "4,5", "4,5", "SLURMD_TRES_BIND=gpu:mask_gpu:0x30,3*2", "DDP_SLURM_STEP_GPUS=0,1,4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	invariants("dgx-h100.xml", &p, "DGX H100, Slurm's mask_gpu:0x30,3*2");
	test_cond("mask_gpu:0x30,3*2, 4 tasks: GPUs 4, 0, 0, 4", p.gpus[p.tasks[0].gpu].index == 4 &&
		  p.gpus[p.tasks[1].gpu].index == 0 && p.gpus[p.tasks[2].gpu].index == 0 &&
		  p.gpus[p.tasks[3].gpu].index == 4);
	test_err("... each sees its GPUs", p.gpu_how, "--gpu-bind=mask_gpu:0x30,3*2 entry: each sees only its GPUs");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	const char *bad[] = { "map_gpu:a,1", "map_gpu:1,,2", "map_gpu:64", "map_gpu:1*0", "map_gpu:1*",
			      "mask_gpu:0xg", "map_gpu:", "map_gpu:-1", "map_gpu:1x", NULL };
	for (const char *const *b = bad; *b; b++) {
		char tb[64], name[96];
		snprintf(tb, sizeof(tb), "SLURMD_TRES_BIND=gpu:%s", *b);
		step_env(&env, 2, "0", "0", tb, "DDP_SLURM_STEP_GPUS=0,1,4,5", "DDP_STEP=7.0", "SLURM_JOB_ID=7",
			 "SLURM_STEP_ID=0", NULL);
		snprintf(name, sizeof(name), "%s: not Slurm's syntax, the tasks' GPUs unknown, CPUs spread", *b);
		test_cond(name, plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0 && !p.gpu &&
			  p.tasks[0].gpu < 0 && p.tasks[1].gpu < 0 && strstr(p.cpu_how, "tasks spread evenly") &&
			  strstr(p.gpu_how, "which is not map_gpu:ID[*N]") != NULL);
		ddpenv_bind_plan_free(&p);
		ddpenv_env_free(&env);
	}

	step_env(&env, 2, "1", "1", "SLURMD_TRES_BIND=gpu:map_gpu:1,0", "DDP_SLURM_STEP_GPUS=0,1",
		 "DDP_STEP=6.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("map_gpu without this step's node list: no task has a GPU", !p.gpu && p.tasks[0].gpu < 0 &&
		  p.tasks[1].gpu < 0);
	test_err("... said so", p.gpu_how, "the other tasks' GPUs are unknown here (no DDP_SLURM_STEP_GPUS)");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void node_of(struct ddpenv_node *n, enum ddpenv_backend b, unsigned tasks, unsigned gpus)
{
	memset(n, 0, sizeof(*n));
	n->step.job_id = 7;
	n->step.num_tasks = tasks;
	n->step.num_nodes = 1;
	n->step.gpus = gpus;
	n->step.gpus_key = "SLURM_STEP_GPUS";
	n->backend = b;
	ddpenv_settings_defaults(&n->cfg);
	strcpy(n->master_addr, "10.0.0.1");
	strcpy(n->master_port, "29500");
}

static void task_env(struct ddpenv_env *e, unsigned tasks, unsigned rank, ...)
{
	char buf[16];
	va_list ap;

	ddpenv_env_init(e);
	snprintf(buf, sizeof(buf), "%u", rank);
	ddpenv_env_set(e, "SLURM_PROCID", buf);
	ddpenv_env_set(e, "SLURM_LOCALID", buf);
	ddpenv_env_set(e, "SLURM_NODEID", "0");
	snprintf(buf, sizeof(buf), "%u", tasks);
	ddpenv_env_set(e, "SLURM_STEP_TASKS_PER_NODE", buf);
	va_start(ap, rank);
	env_add_v(e, ap);
	va_end(ap);
}

/* The task's variables under Slurm's per-task binding: its GPU named,
 * Slurm's CUDA_VISIBLE_DEVICES kept, the node's list handed on. */
static void test_vars_per_task(void)
{
	struct ddpenv_env env, te;
	struct ddpenv_bind_plan p;
	struct ddpenv_node node;
	struct ddpenv_vars v;

	step_env(&env, 2, "5", "5", "SLURMD_TRES_BIND=gpu:per_task:1", "DDP_SLURM_STEP_GPUS=4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	node_of(&node, DDPENV_BACKEND_NCCL, 2, 2);
	node.plan = &p;
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=5", NULL);
	test_cond("per_task: task variables", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_cond("... CUDA_VISIBLE_DEVICES is Slurm's (not set by us)", var(&v, "CUDA_VISIBLE_DEVICES") == NULL &&
		  var(&v, "DDP_SLURM_CUDA_VISIBLE_DEVICES") == NULL);
	test_streq("... DDP_GPU_BUSID: GRES 5, Slurm's pick for local rank 1", var(&v, "DDP_GPU_BUSID"),
		   p.gpus[1].busid);
	test_cond("... a bus id from the topology", p.gpus[1].busid[0] != '\0');
	test_streq("... the node's list for ddp-env --explain", var(&v, "DDP_SLURM_STEP_GPUS"), "4,5");
	test_cond("... its NIC", var(&v, "DDP_NIC") != NULL);
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* --gpu-bind=map_gpu:5,4: local rank 1's is GRES 4 */
	step_env(&env, 2, "5", "5", "SLURMD_TRES_BIND=gpu:map_gpu:5,4", "DDP_SLURM_STEP_GPUS=4,5",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	node_of(&node, DDPENV_BACKEND_NCCL, 2, 2);
	node.plan = &p;
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=4", NULL);
	test_cond("map_gpu: task variables", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_cond("... CUDA_VISIBLE_DEVICES is Slurm's", var(&v, "CUDA_VISIBLE_DEVICES") == NULL);
	test_streq("... DDP_GPU_BUSID: GRES 4, the list's entry for local rank 1", var(&v, "DDP_GPU_BUSID"),
		   p.gpus[0].busid);
	test_cond("... not GRES 5's", strcmp(p.gpus[0].busid, p.gpus[1].busid) != 0);
	test_streq("... the node's list for ddp-env --explain", var(&v, "DDP_SLURM_STEP_GPUS"), "4,5");
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* task/affinity sets SLURM_CPU_BIND in every task, asked or not; in a task
 * of a --ddp step (marked DDP_STEP) the user's --cpu-bind is
 * DDP_SLURM_CPU_BIND, and task/affinity's masks are the CPUs Slurm gave
 * the node's tasks. */
static void test_task_affinity(void)
{
	struct ddpenv_env env, te;
	struct ddpenv_bind_plan p;
	struct ddpenv_node node;
	struct ddpenv_vars v;

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc", "DDP_STEP=7.0",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	test_cond("task/affinity's own masks in a --ddp task: planned",
		  plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	invariants("dgx-h100.xml", &p, "task/affinity masks 0x3,0xc");
	test_cond("... CPUs bound by us, not left to Slurm", p.cpu && p.mem && p.gpu && !p.user_cpu_bind[0]);
	test_streq("... allowed: the union of the masks", p.allowed, "0-3");
	test_err("... said so", p.allowed_how,
		 "within the CPUs task/affinity gave this node's tasks (SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc)");
	test_cond("... 2 cores each", p.tasks[0].cores == 2 && p.tasks[1].cores == 2);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* a mask past 64 CPUs: CPU 0 and its hyperthread 112 */
	step_env(&env, 1, "0", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x10000000000000000000000000001",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_streq("a 113-bit mask: CPUs 0 and 112", p.allowed, "0,112");
	test_streq("... the task gets both", p.tasks[0].cpus, "0,112");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3", "DDP_STEP=7.0",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, "56-59", &p);
	test_streq("masks outside the allowed CPUs: not used", p.allowed, "56-59");
	test_err("... said so", p.allowed_how, "task/affinity's CPUs 0-1 (SLURM_CPU_BIND) are none of them: not used");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0xZZ,", "DDP_STEP=7.0",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	test_cond("an unreadable mask: still planned", plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0 && p.cpu);
	test_err("... not used, said so", p.allowed_how, "SLURM_CPU_BIND=quiet,mask_cpu:0xZZ,: expected mask_cpu:0x..,0x.. (task/affinity's), not used");
	test_cond("... the topology's allowed CPUs", strstr(p.allowed, "0-") == p.allowed);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,none", "DDP_STEP=7.0", "SLURM_JOB_ID=7",
		 "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("task/affinity binding nothing (TaskPluginParam=none): bound, nothing narrowed",
		  p.cpu && !strstr(p.allowed_how, "task/affinity"));
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* the user's --cpu-bind, which task/affinity turned into masks */
	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,map_cpu:1,0", "DDP_SLURM_CPU_BIND=quiet,map_cpu:1,0",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("the user's --cpu-bind in a --ddp task: CPUs and memory left alone", !p.cpu && !p.mem && p.gpu);
	test_err("... said so", p.cpu_how, "explicit --cpu-bind (DDP_SLURM_CPU_BIND=quiet,map_cpu:1,0): left to Slurm");
	node_of(&node, DDPENV_BACKEND_NCCL, 2, 2);
	node.plan = &p;
	task_env(&te, 2, 1, NULL);
	test_cond("... task variables", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_streq("... DDP_SLURM_CPU_BIND passed on for ddp-env --explain", var(&v, "DDP_SLURM_CPU_BIND"),
		   "quiet,map_cpu:1,0");
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* a GPU near the CPUs the user bound each task to: without it, task 0
	 * would take GPU 0 (socket 0) while --cpu-bind puts it on socket 1 */
	step_env(&env, 2, "0,1,2,3,4,5,6,7", NULL, "SLURM_CPU_BIND=quiet,map_cpu:60,1", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--cpu-bind=map_cpu:60,1: task 0 takes GPU 4 (socket 1), task 1 GPU 0",
		  p.gpu && p.tasks[0].gpu == 4 && p.tasks[1].gpu == 0);
	test_streq("... every GPU visible, each task's at LOCAL_RANK", p.visible, "4,0,1,2,3,5,6,7");
	test_err("... said so", p.gpu_how, "; each task's GPU near the CPUs of its --cpu-bind");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* in a task: task/affinity's masks of --cpu-bind=sockets, CPU 56 and CPU 0 */
	step_env(&env, 4, "0,1,4,5", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x100000000000000,0x1",
		 "DDP_SLURM_CPU_BIND=quiet,sockets", "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("masks reused round-robin: tasks 0 and 2 on socket 1 take GPUs 4 and 5 (2, 3), 1 and 3 GPUs 0 and 1",
		  p.tasks[0].gpu == 2 && p.tasks[1].gpu == 0 && p.tasks[2].gpu == 3 && p.tasks[3].gpu == 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1,2,3,4,5,6,7", NULL, "SLURM_CPU_BIND=quiet,cores", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--cpu-bind=cores (no CPUs named): GPUs round-robin over sockets as without it",
		  p.tasks[0].gpu == 0 && p.tasks[1].gpu == 4 && !strstr(p.gpu_how, "--cpu-bind"));
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,map_cpu:0x3c,x", NULL);
	test_cond("an unreadable map_cpu: planned as without it", plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0 &&
		  p.tasks[0].gpu == 0 && p.tasks[1].gpu == 1 && !p.cpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,4", NULL, "SLURM_CPU_BIND=quiet,map_cpu:0x3c,0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("map_cpu:0x3c,0 is CPUs 60 (hex) and 0: GPU 4 (socket 1), then GPU 0",
		  p.tasks[0].gpu == 1 && p.tasks[1].gpu == 0 && strcmp(p.visible, "4,0") == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* --gpu-bind=closest (or single, --ntasks-per-gpu) under task/affinity:
	 * Slurm picked each task's GPUs near the CPUs it bound the task to */
	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc", "SLURMD_TRES_BIND=gpu:closest",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("gpu:closest after task/affinity: CPUs and memory stay Slurm's", !p.cpu && !p.mem && !p.gpu);
	test_err("... said so", p.cpu_how, "Slurm picked each task's GPUs near the CPUs task/affinity gave it (--gpu-bind=closest or single, --ntasks-per-gpu): those CPUs stay (SLURMD_TRES_BIND=gpu:closest): left to Slurm");
	test_err("... memory too, naming why", p.mem_how, "CPUs left alone, so memory too (SLURMD_TRES_BIND=gpu:closest)");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc", "SLURMD_TRES_BIND=gres/gpu:verbose,single:2",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("gpu:single:2 (--ntasks-per-gpu=2): the same", !p.cpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURMD_TRES_BIND=gpu:closest", "DDP_STEP=7.0", "SLURM_JOB_ID=7",
		 "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("gpu:closest without task/affinity (no SLURM_CPU_BIND): CPUs bound", p.cpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3,0xc", "SLURMD_TRES_BIND=gpu:map_gpu:1,0",
		 "DDP_STEP=7.0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("gpu:map_gpu (not picked from the CPUs): CPUs bound", p.cpu && !p.gpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=verbose", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--cpu-bind=verbose only asks for a report: CPUs bound", p.cpu && !p.user_cpu_bind[0]);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=verbose,coresv,cores", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("--cpu-bind=v,cores (srun passes verbose,coresv,cores): left alone", !p.cpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* where the plugin sees it: the step's environment, before task/affinity */
	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,cores", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_streq("the step's SLURM_CPU_BIND is the user's", p.user_cpu_bind, "quiet,cores");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* another step's marker: SLURM_CPU_BIND counts as the user's */
	step_env(&env, 2, "0,1", NULL, "SLURM_CPU_BIND=quiet,mask_cpu:0x3", "DDP_STEP=6.0", "SLURM_JOB_ID=7",
		 "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("not this step's marker: SLURM_CPU_BIND is taken as the user's", !p.cpu);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "A", "1");
	ddpenv_env_set(&env, "B", "2");
	ddpenv_env_set(&env, "C", "3");
	ddpenv_env_unset(&env, "A");
	ddpenv_env_unset(&env, "Z");
	test_cond("ddpenv_env_unset removes one key, keeps the others",
		  !ddpenv_env_get(&env, "A") && strcmp(ddpenv_env_get(&env, "B"), "2") == 0 &&
		  strcmp(ddpenv_env_get(&env, "C"), "3") == 0 && env.n == 2);
	ddpenv_env_free(&env);
}

static void test_vars(void)
{
	struct ddpenv_env env, te;
	struct ddpenv_bind_plan p;
	struct ddpenv_node node;
	struct ddpenv_vars v;

	step_env(&env, 2, "0,1,2,3,4,5,6,7", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	node_of(&node, DDPENV_BACKEND_NCCL, 2, 8);
	node.plan = &p;
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "GPU_DEVICE_ORDINAL=0,1,2,3,4,5,6,7", NULL);
	test_cond("task variables with a plan", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_streq("... CUDA_VISIBLE_DEVICES: all GPUs, its own at LOCAL_RANK", var(&v, "CUDA_VISIBLE_DEVICES"),
		   "0,4,1,2,3,5,6,7");
	test_streq("... GPU_DEVICE_ORDINAL the same", var(&v, "GPU_DEVICE_ORDINAL"), "0,4,1,2,3,5,6,7");
	test_streq("... CUDA_DEVICE_ORDER", var(&v, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
	test_streq("... DDP_GPU_BUSID", var(&v, "DDP_GPU_BUSID"), "0000:9d:00.0");
	test_streq("... DDP_NIC", var(&v, "DDP_NIC"), "mlx5_4");
	test_streq("... Slurm's list kept", var(&v, "DDP_SLURM_CUDA_VISIBLE_DEVICES"), "0,1,2,3,4,5,6,7");
	test_streq("... OMP_NUM_THREADS: the cores given", var(&v, "OMP_NUM_THREADS"), "56");
	test_cond("... NCCL_IB_HCA not set (bind_nic: report)", var(&v, "NCCL_IB_HCA") == NULL);

	node.cfg.bind_nic_hca = 1;
	test_cond("bind_nic: nccl_ib_hca", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_streq("... NCCL_IB_HCA is this rank's NIC only", var(&v, "NCCL_IB_HCA"), "=mlx5_4");
	ddpenv_env_free(&te);
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "NCCL_IB_HCA=mlx5_0", NULL);
	ddpenv_task_vars(&node, &te, &v, err, sizeof(err));
	test_streq("... the user's NCCL_IB_HCA is left alone", var(&v, "NCCL_IB_HCA"), "mlx5_0");
	ddpenv_env_free(&te);
	node.backend = DDPENV_BACKEND_GLOO;
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", NULL);
	ddpenv_task_vars(&node, &te, &v, err, sizeof(err));
	test_cond("... and gloo gets none", var(&v, "NCCL_IB_HCA") == NULL);
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);

	p.policy = DDPENV_BIND_STRICT;
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_STRICT, NULL, &p);
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", NULL);
	ddpenv_task_vars(&node, &te, &v, err, sizeof(err));
	test_streq("--ddp-bind=strict: only the task's GPU", var(&v, "CUDA_VISIBLE_DEVICES"), "4");
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_NONE, NULL, &p);
	task_env(&te, 2, 0, "CUDA_VISIBLE_DEVICES=0,1", "SLURM_CPUS_ON_NODE=8", NULL);
	ddpenv_task_vars(&node, &te, &v, err, sizeof(err));
	test_cond("--ddp-bind=none: CUDA_VISIBLE_DEVICES not set, OMP from Slurm",
		  var(&v, "CUDA_VISIBLE_DEVICES") == NULL && var(&v, "CUDA_DEVICE_ORDER") == NULL &&
		  strcmp(var(&v, "OMP_NUM_THREADS"), "4") == 0);
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

static void test_errors(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;
	struct ddpenv_topo *t = NULL;

	test_cond("a missing topology file is refused",
		  ddpenv_topo_load("/nonexistent/node.xml", 0, &t, err, sizeof(err)) < 0 && !t);
	test_err("... naming it", err, "topology /nonexistent/node.xml: cannot be read as an hwloc XML file");

	step_env(&env, 2, "0,1", NULL, NULL);
	test_cond("an allowed list outside the machine is refused",
		  plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, "100-101", &p) < 0);
	test_err("... saying so", err, "allowed CPUs '100-101': not all in the topology");
	ddpenv_bind_plan_free(&p);
	test_cond("a malformed allowed list is refused", plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, "x", &p) < 0);
	test_err("... saying what is expected", err, "expected a CPU list such as 0-27,112-139");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", "2");
	test_cond("no SLURM_NODEID is refused", plan_on("cpu-2socket.xml", &env, DDPENV_BIND_AUTO, NULL, &p) < 0);
	test_err("... saying so", err, "SLURM_NODEID is not set");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,1,2,3,4,5,6,7", NULL, NULL);
	plan_on("single-socket-4gpu.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_err("GRES indices beyond the topology's GPUs: said so", p.gpu_how,
		 "4 of the step's GPUs are not PCI devices of the topology (it has 4 GPUs)");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	step_env(&env, 2, "0,x", NULL, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("GPUs not named by index: left alone", !p.gpu && strstr(p.gpu_how, "does not name GPUs by index"));
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* The binding applies to this process (the build machine has CPU 0). */
static void test_apply(void)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan p;
	cpu_set_t before, after;

	sched_getaffinity(0, sizeof(before), &before);
	step_env(&env, 1, NULL, NULL, NULL);
	plan_on("ci-vm.xml", &env, DDPENV_BIND_AUTO, "0", &p);
	test_cond("binding this process to CPU 0", ddpenv_bind_apply(NULL, &p, 0, err, sizeof(err)) == 0);
	sched_getaffinity(0, sizeof(after), &after);
	test_cond("... Cpus_allowed is CPU 0", CPU_COUNT(&after) == 1 && CPU_ISSET(0, &after));
	test_cond("a local rank beyond the plan is refused", ddpenv_bind_apply(NULL, &p, 5, err, sizeof(err)) < 0);
	sched_setaffinity(0, sizeof(before), &before);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* A fake NVIDIA driver list (/proc/driver/nvidia/gpus): minor k at bus[k]. */
/* A fake /proc/driver/nvidia/gpus: GPU k at bus[k] is /dev/nvidia<k>.
 * uuid: "GPU UUID" lines (GPU-<k>...; NV_UNREAD: question marks, as the
 * driver writes before it has read them); excluded: a mask of minors. */
enum { NV_NONE, NV_UUID, NV_UNREAD };
static void nv_list_as(const char *dir, const char *const *bus, int n, int uuid, unsigned excluded)
{
	char path[512];
	mkdir(dir, 0755);
	for (int k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, bus[k]);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/%s/information", dir, bus[k]);
		FILE *f = fopen(path, "w");
		fprintf(f, "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n");
		if (uuid == NV_UUID)   /* GPUs 0 and 1 share their first 15 digits */
			fprintf(f, "GPU UUID: \t GPU-%08x-%04x-4106-c12f-20bd9faed9f6\n",
				k < 2 ? 0x8932f937u : 0x5e0a0000u + (unsigned)k, 0xd72cu + (unsigned)k);
		else if (uuid == NV_UNREAD)
			fprintf(f, "GPU UUID: \t GPU-%s\n", "????????" "-" "????" "-" "????" "-" "????" "-" "????????????");
		fprintf(f, "Bus Type: \t PCIe\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t %s\n",
			bus[k], k, excluded >> k & 1 ? "Yes" : "No");
		fclose(f);
	}
}

static void nv_list(const char *dir, const char *const *bus, int n)
{
	nv_list_as(dir, bus, n, NV_NONE, 0);
}

/* The DGX H100's GPUs as a driver numbered them: /dev/nvidia0 is socket
 * 1's 0000:9d:00.0, the others in bus order. */
static const char *const bus[] = { "0000:9d:00.0", "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
				   "0000:61:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0" };

/* gres_order minor (a hand-written gres.conf, File=/dev/nvidia[0-7]):
 * Slurm's GPU N is /dev/nvidiaN, and with the driver's list the plan finds
 * it by that device's bus id, even where the driver numbered GPUs out of
 * bus order (here /dev/nvidia0 is socket 1's 0000:9d:00.0). */
static void test_nvidia_minors(void)
{
	char dir[] = "/tmp/ddp-nvXXXXXX", sub[600], cmd[700];
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	struct ddpenv_topo *t = NULL;
	struct ddpenv_bind_plan p;
	struct ddpenv_env env;

	test_cond("a temporary directory", mkdtemp(dir) != NULL);
	snprintf(sub, sizeof(sub), "%s/gpus", dir);
	test_cond("no driver list: 0 GPUs, no error", ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err)) == 0);
	nv_list(sub, bus, 8);
	int n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("the driver's 8 GPUs, by minor", n == 8 && nv[0].minor == 0 && !strcmp(nv[0].busid, "0000:9d:00.0") &&
		  nv[7].minor == 7 && !strcmp(nv[7].busid, "0000:df:00.0"));
	struct ddpenv_nvgpu few[4];
	test_cond("a list too long for the caller is an error", ddpenv_nvidia_gpus(sub, few, 4, err, sizeof(err)) < 0);
	test_err("... naming the directory", err, "/gpus: more than 4 GPUs");
	test_cond("dgx-h100.xml loads", ddpenv_topo_load(topo_path("dgx-h100.xml"), 0, &t, err, sizeof(err)) == 0);
	struct ddpenv_nvgpu twice[2] = { { .minor = 3, .busid = "0000:1b:00.0" },
					{ .minor = 3, .busid = "0000:43:00.0" } };
	test_cond("a minor listed twice is refused", ddpenv_topo_set_nvidia(t, twice, 2, err, sizeof(err)) < 0);
	test_err("... naming it", err, "the NVIDIA driver lists /dev/nvidia3 twice (0000:1b:00.0 and 0000:43:00.0)");
	test_cond("the list is given to the topology", ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err)) == 0);
	ddpenv_topo_set_gres_order(t, DDPENV_GRES_ORDER_MINOR);

	/* ConstrainDevices: the step has /dev/nvidia0 and 1, CUDA numbers them 0 and 1 */
	step_env(&env, 2, "0,1", "0,1", NULL);
	test_cond("planned with the driver's list", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	invariants("dgx-h100.xml", &p, "DGX H100, /dev/nvidia0 on socket 1");
	test_err("the plan says CUDA may count them otherwise (no UUIDs in this list)", p.gpu_how,
		 "SLURM_STEP_GPUS=0,1: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN out of bus order");
	test_cond("GPU 0 is /dev/nvidia0 at 0000:9d:00.0, GPU 1 at 0000:1b:00.0",
		  p.ngpus == 2 && p.gpus[0].index == 0 && !strcmp(p.gpus[0].busid, "0000:9d:00.0") &&
		  p.gpus[1].index == 1 && !strcmp(p.gpus[1].busid, "0000:1b:00.0"));
	int g0 = p.tasks[0].gpu, g1 = p.tasks[1].gpu;
	test_cond("each task near its own GPU: socket 1's cores for 0000:9d:00.0, socket 0's for 0000:1b:00.0",
		  g0 >= 0 && g1 >= 0 &&
		  !strcmp(p.tasks[!strcmp(p.gpus[g0].busid, "0000:9d:00.0") ? 0 : 1].cpus, "56-111,168-223") &&
		  !strcmp(p.tasks[!strcmp(p.gpus[g0].busid, "0000:9d:00.0") ? 1 : 0].cpus, "0-55,112-167"));
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* a number the driver does not list: its locality is unknown, and said */
	step_env(&env, 2, "1,9", "0,1", NULL);
	test_cond("planned with a GPU the driver does not list", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	test_err("... and the plan says so", p.gpu_how, "SLURM_STEP_GPUS=1,9: 1 of these GPU numbers are past the 8 GPUs the NVIDIA driver lets CUDA open");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* without the list: GPU N is the N-th by bus id, as before */
	test_cond("the list is taken back", ddpenv_topo_set_nvidia(t, NULL, 0, err, sizeof(err)) == 0);
	step_env(&env, 2, "0,1", "0,1", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_cond("without it GPU 0 is the first by bus id", p.ngpus == 2 && !strcmp(p.gpus[0].busid, "0000:1b:00.0"));
	test_err("... and the plan says that minor order needs the list", p.gpu_how,
		 "gres_order minor needs the NVIDIA driver's GPU list, which is not read here: GRES index k taken "
		 "for the k-th GPU by PCI bus id");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
	ddpenv_topo_free(t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	test_cond("the temporary directory is removed", system(cmd) == 0);
}

/* CUDA's side, as its documentation gives it: under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID it numbers the GPUs it can open (the
 * driver's, less the excluded ones; under ConstrainDevices only the
 * step's) in bus order, and an entry of CUDA_VISIBLE_DEVICES is a number
 * among them or the start of one GPU's UUID.  The bus id of what a task
 * opens as device local_rank; "" for nothing. */
static enum ddpenv_gres_order slurm_order = DDPENV_GRES_ORDER_MINOR; /* Slurm's, modelled */

static const char *cuda_opens(const struct ddpenv_nvgpu *nv, int n, const char *step, const char *cvd,
			      unsigned local_rank)
{
	const struct ddpenv_nvgpu *open[DDPENV_MAX_GPUS], *numbered[DDPENV_MAX_GPUS];
	char list[DDPENV_VALLEN], *tok, *save = NULL;
	int m = 0;
	/* Slurm's GPU k is the k-th of slurmd's list: under ConstrainDevices
	 * the step's device files are those of its GPUs' numbers. */
	size_t nn = ddpenv_nvidia_slurm_order(nv, (size_t)n, slurm_order, numbered, DDPENV_MAX_GPUS);

	for (int i = 0; i < n; i++) {
		int in = !step;
		snprintf(list, sizeof(list), "%s", step ? step : "");
		for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			in |= (size_t)atoi(tok) < nn && numbered[atoi(tok)] == &nv[i];
		if (in && !nv[i].excluded)
			open[m++] = &nv[i];
	}
	for (int i = 0; i < m; i++)
		for (int j = i + 1; j < m; j++)
			if (strcmp(open[j]->busid, open[i]->busid) < 0) {
				const struct ddpenv_nvgpu *x = open[i];
				open[i] = open[j];
				open[j] = x;
			}
	snprintf(list, sizeof(list), "%s", cvd);
	tok = strtok_r(list, ",", &save);
	for (unsigned k = 0; tok && k < local_rank; k++)
		tok = strtok_r(NULL, ",", &save);
	if (!tok)
		return "";
	if (!strncmp(tok, "GPU-", 4)) {
		const char *hit = "";
		for (int i = 0; i < m; i++)
			if (!strncmp(open[i]->uuid, tok, strlen(tok)))
				hit = *hit ? "(ambiguous)" : open[i]->busid;
		return hit;
	}
	return atoi(tok) < m ? open[atoi(tok)]->busid : "";
}

/* Every task of the plan opens, as device LOCAL_RANK, the GPU it was
 * planned for: under ConstrainDevices (CUDA opens the step's GPUs only)
 * and without (it sees them all). */
static void opens_planned(const char *what, const struct ddpenv_nvgpu *nv, int n, const char *step,
			  const struct ddpenv_bind_plan *p, int constrained, int unconstrained)
{
	int ok[2] = { 1, 1 };
	char desc[300];
	for (uint32_t i = 0; i < p->ntasks; i++) {
		const char *want = p->tasks[i].gpu >= 0 ? p->gpus[p->tasks[i].gpu].busid : "?";
		const char *cvd = p->policy == DDPENV_BIND_STRICT ? p->gpus[p->tasks[i].gpu].cuda : p->visible;
		unsigned dev = p->policy == DDPENV_BIND_STRICT ? 0 : i;
		const char *got[2] = { cuda_opens(nv, n, step, cvd, dev), cuda_opens(nv, n, NULL, cvd, dev) };
		for (int c = 0; c < 2; c++)
			if (strcmp(got[c], want)) {
				if (ok[c] && (c ? unconstrained : constrained))
					printf("# %s: task %u planned for %s opens '%s' (CUDA_VISIBLE_DEVICES=%s, %s)\n",
					       what, i, want, got[c], cvd, c ? "unconstrained" : "ConstrainDevices");
				ok[c] = 0;
			}
	}
	if (constrained) {
		snprintf(desc, sizeof(desc), "%s: under ConstrainDevices each task opens its planned GPU", what);
		test_cond(desc, ok[0]);
	}
	if (unconstrained) {
		snprintf(desc, sizeof(desc), "%s: without ConstrainDevices each task opens its planned GPU", what);
		test_cond(desc, ok[1]);
	}
}

/* One step on the driver's list nv: the plan's word on the GPUs' names
 * (how), numbers rather than UUIDs, and every task opening its GPU under
 * ConstrainDevices (c) and without (u). */
static void naming(struct ddpenv_topo *t, const struct ddpenv_nvgpu *nv, const char *what, unsigned ntasks,
		   const char *gpus, const char *cvd, const char *how, int c, int u)
{
	struct ddpenv_bind_plan p;
	struct ddpenv_env env;
	char desc[300];

	step_env(&env, ntasks, gpus, cvd, NULL);
	snprintf(desc, sizeof(desc), "%s: planned", what);
	test_cond(desc, ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	snprintf(desc, sizeof(desc), "%s: the plan says how CUDA names the GPUs", what);
	test_err(desc, p.gpu_how, how);
	snprintf(desc, sizeof(desc), "%s: by number (%s)", what, p.visible);
	test_cond(desc, !strchr(p.visible, '-'));
	opens_planned(what, nv, 8, c ? gpus : NULL, &p, c, u);
	invariants("dgx-h100.xml", &p, what);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
}

/* The driver numbered GPUs out of bus order (/dev/nvidia0 is socket 1's
 * 0000:9d:00.0): CUDA_VISIBLE_DEVICES must name each task's GPU the way
 * CUDA counts, which is not Slurm's. */
static void test_cuda_names(void)
{
	static const char *const inorder[] = { "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
					       "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0" };
	char dir[] = "/tmp/ddp-nvXXXXXX", sub[600], cmd[700];
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	struct ddpenv_topo *t = NULL;
	struct ddpenv_bind_plan p;
	struct ddpenv_env env, te;
	struct ddpenv_node node;
	struct ddpenv_vars v;
	int n;

	test_cond("a temporary directory", mkdtemp(dir) != NULL);
	test_cond("dgx-h100.xml loads", ddpenv_topo_load(topo_path("dgx-h100.xml"), 0, &t, err, sizeof(err)) == 0);
	snprintf(sub, sizeof(sub), "%s/uuid", dir);
	nv_list_as(sub, bus, 8, NV_UUID, 0);
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("the driver's list with UUIDs", n == 8 && !nv[0].excluded &&
		  !strcmp(nv[0].uuid, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6") &&
		  !strcmp(nv[7].uuid, "GPU-5e0a0007-d733-4106-c12f-20bd9faed9f6"));
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	ddpenv_topo_set_gres_order(t, DDPENV_GRES_ORDER_MINOR);
	slurm_order = DDPENV_GRES_ORDER_MINOR;

	/* /dev/nvidia0 and 1: ConstrainDevices or not, Slurm writes "0,1" */
	step_env(&env, 2, "0,1", "0,1", NULL);
	test_cond("/dev/nvidia0,1: planned", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	test_err("... Slurm's 0,1 can mean either count: named by UUID", p.gpu_how,
		 "SLURM_STEP_GPUS=0,1: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN out of bus "
		 "order; Slurm's numbers can mean either count: CUDA_VISIBLE_DEVICES names them by UUID");
	test_cond("... abbreviated to what tells them apart",
		  !strcmp(p.gpus[0].cuda, "GPU-8932f937-d72c") && !strcmp(p.gpus[1].cuda, "GPU-8932f937-d72d"));
	opens_planned("/dev/nvidia0,1 by UUID", nv, 8, "0,1", &p, 1, 1);
	node_of(&node, DDPENV_BACKEND_NCCL, 2, 2);
	node.plan = &p;
	task_env(&te, 2, 0, "CUDA_VISIBLE_DEVICES=0,1", NULL);
	test_cond("... task variables", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_streq("... CUDA_VISIBLE_DEVICES: the UUIDs", var(&v, "CUDA_VISIBLE_DEVICES"), p.visible);
	test_streq("... Slurm's numbers kept", var(&v, "DDP_SLURM_CUDA_VISIBLE_DEVICES"), "0,1");
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	test_cond("... --ddp-bind=strict: planned", ddpenv_bind_plan(t, &env, DDPENV_BIND_STRICT, NULL, &p, err, sizeof(err)) == 0);
	opens_planned("/dev/nvidia0,1 strict", nv, 8, "0,1", &p, 1, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* ConstrainDevices: Slurm counts the step's GPUs 0..n-1 (values other
	 * than the device numbers); without, it writes the device numbers and
	 * CUDA sees all 8; for the whole node both counts agree */
	naming(t, nv, "/dev/nvidia0,2 under ConstrainDevices", 2, "0,2", "0,1",
	       "SLURM_STEP_GPUS=0,2: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN out of bus "
	       "order; CUDA (ConstrainDevices) numbers /dev/nvidia0 1, /dev/nvidia2 0", 1, 0);
	naming(t, nv, "/dev/nvidia0,2 without ConstrainDevices", 2, "0,2", "0,2",
	       "CUDA numbers /dev/nvidia0 4, /dev/nvidia2 1", 0, 1);
	naming(t, nv, "all 8", 8, "0,1,2,3,4,5,6,7", "0,1,2,3,4,5,6,7", "CUDA numbers /dev/nvidia0 4, /dev/nvidia1 0",
	       1, 1);
	naming(t, nv, "/dev/nvidia1,2 (in bus order)", 2, "1,2", "0,1",
	       "SLURM_STEP_GPUS=1,2: Slurm's GPU k is the k-th /dev/nvidiaN (gres_order minor), at the bus id "
	       "the NVIDIA driver gives it", 1, 0);

	/* UUIDs not read yet (persistence mode off): said, Slurm's values kept */
	snprintf(sub, sizeof(sub), "%s/unread", dir);
	nv_list_as(sub, bus, 8, NV_UNREAD, 0);
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("question marks for a UUID: unknown, not an error", n == 8 && !nv[3].uuid[0]);
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	step_env(&env, 2, "0,1", "0,1", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_err("... /dev/nvidia0,1 without UUIDs: the plan says CUDA may differ", p.gpu_how,
		 "the driver gives no UUIDs (GPUs not initialised: persistence mode off?): CUDA may take "
		 "Slurm's numbers for other GPUs than planned");
	test_streq("... Slurm's values", p.visible, "0,1");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* an excluded GPU is not in CUDA's count */
	snprintf(sub, sizeof(sub), "%s/excluded", dir);
	nv_list_as(sub, bus, 8, NV_UUID, 1u << 3);
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("GPU Excluded: Yes is read", n == 8 && nv[3].excluded && !nv[4].excluded);
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	/* Slurm lists the 7 others (File=/dev/nvidia[0-2,4-7]): its GPUs 2,3
	 * are /dev/nvidia2 and 4 */
	step_env(&env, 2, "2,3", "2,3", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_err("... Slurm's GPUs 2,3 without ConstrainDevices: /dev/nvidia2 and 4, CUDA skips /dev/nvidia3",
		 p.gpu_how, "CUDA numbers /dev/nvidia2 1, /dev/nvidia4 2");
	opens_planned("beside an excluded GPU", nv, 8, NULL, &p, 0, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
	step_env(&env, 1, "7", "7", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_err("... Slurm's GPU 7 of 7 is past the list, and said", p.gpu_how,
		 "SLURM_STEP_GPUS=7: 1 of these GPU numbers are past the 7 GPUs the NVIDIA driver lets CUDA open");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* a GPU outside the step whose UUID the driver has not read: a prefix
	 * might be its too, so the step's GPUs are named in full */
	snprintf(sub, sizeof(sub), "%s/one-unread", dir);
	nv_list_as(sub, bus, 8, NV_UUID, 0);
	snprintf(cmd, sizeof(cmd), "sed -i 's/^GPU UUID:.*/GPU UUID: \\t GPU-%s/' '%s/%s/information'",
		 "????????" "-" "????" "-" "????" "-" "????" "-" "????????????", sub, bus[5]);
	test_cond("... one GPU's UUID unread", system(cmd) == 0);
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("... read as unknown", n == 8 && !nv[5].uuid[0] && nv[4].uuid[0]);
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	step_env(&env, 2, "0,1", "0,1", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_cond("... the step's GPUs by their whole UUIDs",
		  !strcmp(p.gpus[0].cuda, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6") &&
		  !strcmp(p.gpus[1].cuda, "GPU-8932f937-d72d-4106-c12f-20bd9faed9f6"));
	opens_planned("whole UUIDs", nv, 8, "0,1", &p, 1, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* 24 GPUs numbered against bus order, 20 in the step: their UUIDs do
	 * not fit in CUDA_VISIBLE_DEVICES, and the plan says so */
	{
		char many[24][DDPENV_BUSIDLEN], gpus[128] = "";
		const char *mb[24];
		for (int k = 0; k < 24; k++) {
			snprintf(many[k], sizeof(many[k]), "0000:%02x:00.0", 0xa0 - 4 * k);
			mb[k] = many[k];
		}
		for (int k = 0; k < 20; k++)
			snprintf(gpus + strlen(gpus), sizeof(gpus) - strlen(gpus), "%s%d", k ? "," : "", k);
		snprintf(sub, sizeof(sub), "%s/many", dir);
		nv_list_as(sub, mb, 24, NV_UUID, 0);
		n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
		test_cond("24 GPUs listed", n == 24 && ddpenv_topo_set_nvidia(t, nv, 24, err, sizeof(err)) == 0);
		step_env(&env, 20, gpus, gpus, NULL);
		test_cond("... 20 of them planned", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
		test_streq("... Slurm's numbers kept", p.visible, gpus);
		test_err("... and why", p.gpu_how, "not PCI devices of the topology (it has 8 GPUs): their locality "
			 "is unknown; SLURM_STEP_GPUS=0,1,2");
		int kept = 1;
		for (size_t k = 0; k < p.ngpus; k++)
			kept &= !strcmp(p.gpus[k].cuda, p.gpus[k].value);
		test_cond("... for every GPU", p.ngpus == 20 && kept);
		ddpenv_bind_plan_free(&p);
		ddpenv_env_free(&env);
	}

	/* numbered in bus order: nothing to translate */
	snprintf(sub, sizeof(sub), "%s/inorder", dir);
	nv_list_as(sub, inorder, 8, NV_UUID, 0);
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	step_env(&env, 2, "0,1", "0,1", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_err("numbered in bus order: Slurm's numbers stand", p.gpu_how,
		 "Slurm's GPU k is the k-th /dev/nvidiaN (gres_order minor), at the bus id the NVIDIA driver gives it");
	test_streq("... as numbers", p.visible, "0,1");
	opens_planned("numbered in bus order", nv, 8, "0,1", &p, 1, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	ddpenv_topo_free(t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	test_cond("the temporary directory is removed", system(cmd) == 0);
}

/* gres_order bus, the default (AutoDetect=nvml numbers GPUs as NVML does,
 * in bus order): on the same DGX H100 whose driver numbered /dev/nvidia0
 * out of bus order, Slurm's GPU k is the k-th by bus id, which is also
 * CUDA's number for it, so Slurm's values stand, and the device minors
 * do not matter. */
static void test_gres_bus_order(void)
{
	char dir[] = "/tmp/ddp-nvXXXXXX", sub[600], cmd[700];
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	struct ddpenv_topo *t = NULL;
	struct ddpenv_bind_plan p;
	struct ddpenv_env env;
	enum ddpenv_gres_order o;

	test_cond("gres orders parse", ddpenv_gres_order_parse("bus", &o, err, sizeof(err)) == 0 &&
		  o == DDPENV_GRES_ORDER_BUS && ddpenv_gres_order_parse("minor", &o, err, sizeof(err)) == 0 &&
		  o == DDPENV_GRES_ORDER_MINOR && !strcmp(ddpenv_gres_order_name(o), "minor"));
	test_cond("another order is refused", ddpenv_gres_order_parse("pci", &o, err, sizeof(err)) < 0);
	test_err("... naming what is expected", err, "'pci': expected bus (AutoDetect=nvml");
	test_cond("a temporary directory", mkdtemp(dir) != NULL);
	test_cond("dgx-h100.xml loads", ddpenv_topo_load(topo_path("dgx-h100.xml"), 0, &t, err, sizeof(err)) == 0);
	snprintf(sub, sizeof(sub), "%s/uuid", dir);
	nv_list_as(sub, bus, 8, NV_UUID, 0);
	int n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	test_cond("the driver's list, /dev/nvidia0 at 0000:9d:00.0", n == 8 && !strcmp(nv[0].busid, "0000:9d:00.0"));
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	slurm_order = DDPENV_GRES_ORDER_BUS;

	step_env(&env, 2, "0,1", "0,1", NULL);
	test_cond("Slurm's GPUs 0,1: planned", ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err)) == 0);
	test_cond("... GPU 0 is the first by bus id (0000:1b:00.0), GPU 1 the second, not /dev/nvidia0",
		  p.ngpus == 2 && !strcmp(p.gpus[0].busid, "0000:1b:00.0") && !strcmp(p.gpus[1].busid, "0000:43:00.0"));
	test_err("... and the plan says why", p.gpu_how,
		 "SLURM_STEP_GPUS=0,1: Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets "
		 "CUDA open (gres_order bus)");
	test_streq("... Slurm's values stand", p.visible, "0,1");
	opens_planned("bus order, GPUs 0,1", nv, 8, "0,1", &p, 1, 1);
	invariants("dgx-h100.xml", &p, "bus order, GPUs 0,1");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* GPU 4 is the fifth by bus id, 0000:9d:00.0 on socket 1 (/dev/nvidia0) */
	step_env(&env, 2, "0,4", "0,4", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	int g0 = p.tasks[0].gpu, g1 = p.tasks[1].gpu;
	test_cond("Slurm's GPUs 0,4: 0000:1b:00.0 and 0000:9d:00.0, each task near its own",
		  p.ngpus == 2 && !strcmp(p.gpus[1].busid, "0000:9d:00.0") && g0 >= 0 && g1 >= 0 &&
		  !strcmp(p.tasks[!strcmp(p.gpus[g0].busid, "0000:9d:00.0") ? 0 : 1].cpus, "56-111,168-223"));
	opens_planned("bus order, GPUs 0,4 without ConstrainDevices", nv, 8, NULL, &p, 0, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);
	step_env(&env, 2, "0,4", "0,1", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_streq("... under ConstrainDevices Slurm's 0,1 stand", p.visible, "0,1");
	opens_planned("bus order, GPUs 0,4 under ConstrainDevices", nv, 8, "0,4", &p, 1, 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* NVML does not list an excluded GPU: nor does Slurm's count */
	snprintf(sub, sizeof(sub), "%s/excluded", dir);
	nv_list_as(sub, bus, 8, NV_UUID, 1u << 3);   /* /dev/nvidia3, 0000:52:00.0 */
	n = ddpenv_nvidia_gpus(sub, nv, DDPENV_MAX_GPUS, err, sizeof(err));
	ddpenv_topo_set_nvidia(t, nv, 8, err, sizeof(err));
	step_env(&env, 2, "2,3", "2,3", NULL);
	ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &p, err, sizeof(err));
	test_cond("an excluded GPU: Slurm's GPUs 2,3 are the third and fourth by bus id of the others",
		  p.ngpus == 2 && !strcmp(p.gpus[0].busid, "0000:61:00.0") && !strcmp(p.gpus[1].busid, "0000:9d:00.0"));
	opens_planned("bus order beside an excluded GPU", nv, 8, "2,3", &p, 0, 1);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	ddpenv_topo_free(t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	test_cond("the temporary directory is removed", system(cmd) == 0);
}

/* MIG GRES: Slurm names them by UUID in CUDA_VISIBLE_DEVICES (and its
 * GRES indices in SLURM_STEP_GPUS count MIG devices, not GPUs).  CUDA
 * opens only the first MIG device it is shown, so each task must see its
 * own alone; which GPU each is on only NVML knows. */
#define MIG_A "MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d"
#define MIG_B "MIG-5b2c3d4e-6f70-5b8c-9dae-1f2a3b4c5d6e"
#define MIG_C "MIG-6c3d4e5f-7081-5c9d-aebf-2a3b4c5d6e7f"
static void test_mig(void)
{
	struct ddpenv_env env, te;
	struct ddpenv_bind_plan p;
	struct ddpenv_node node;
	struct ddpenv_vars v;
	struct ddpenv_step st;

	test_cond("a MIG device's entry", ddpenv_is_mig(MIG_A) && !ddpenv_is_mig("GPU-4a1b2c3d") &&
		  !ddpenv_is_mig("3") && !ddpenv_is_mig(NULL));

	/* Slurm's GRES indices of MIG devices on GPUs 0 and 1, out of
	 * numeric order with their UUIDs: paired by position. */
	step_env(&env, 2, "3,9", MIG_B "," MIG_A, NULL);
	test_cond("MIG: planned", plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p) == 0);
	test_cond("... as MIG devices", p.mig && p.gpu && p.cpu && p.ngpus == 2);
	test_cond("... task k gets Slurm's k-th", p.tasks[0].gpu == 0 && p.tasks[1].gpu == 1 &&
		  p.gpus[0].index == 3 && strcmp(p.gpus[0].value, MIG_B) == 0 && p.gpus[1].index == 9 &&
		  strcmp(p.gpus[1].cuda, MIG_A) == 0);
	test_cond("... no bus id, no common list", !p.gpus[0].busid[0] && !p.visible[0]);
	test_err("... said why", p.gpu_how, "MIG devices: each task sees only its own");
	test_err("... and that the locality is unknown", p.gpu_how, "only NVML knows");
	test_err("... so CPUs are spread", p.cpu_how, "tasks spread evenly over packages");
	test_cond("... over both sockets", strcmp(p.tasks[0].cpus, p.tasks[1].cpus) != 0 && even(&p));
	invariants("dgx-h100.xml", &p, "MIG 2 tasks");

	node_of(&node, DDPENV_BACKEND_GLOO, 2, 2);
	node.plan = &p;
	task_env(&te, 2, 1, "CUDA_VISIBLE_DEVICES=" MIG_B "," MIG_A, NULL);
	test_cond("MIG: task variables", ddpenv_task_vars(&node, &te, &v, err, sizeof(err)) == 0);
	test_streq("... CUDA_VISIBLE_DEVICES: the task's own MIG device alone", var(&v, "CUDA_VISIBLE_DEVICES"),
		   MIG_A);
	test_streq("... Slurm's list kept", var(&v, "DDP_SLURM_CUDA_VISIBLE_DEVICES"), MIG_B "," MIG_A);
	test_cond("... no DDP_GPU_BUSID (unknown)", var(&v, "DDP_GPU_BUSID") == NULL);
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* In the task: its CUDA_VISIBLE_DEVICES is its own; the plan again
	 * from Slurm's list (ddp-env --explain, ddp-check). */
	step_env(&env, 2, "3,9", MIG_A, "DDP_SLURM_CUDA_VISIBLE_DEVICES=" MIG_B "," MIG_A, "DDP_STEP=7.0",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("MIG, in the task: the same plan", p.mig && p.gpu && strcmp(p.gpus[1].value, MIG_A) == 0);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* More tasks than MIG devices: they share (gloo can). */
	step_env(&env, 3, "0,1", MIG_A "," MIG_B, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_STRICT, NULL, &p);
	test_cond("MIG, 3 tasks on 2: shared round-robin", p.mig && p.tasks[2].gpu == 0);
	test_err("... said so", p.gpu_how, "tasks share them");
	node_of(&node, DDPENV_BACKEND_GLOO, 3, 2);
	node.plan = &p;
	task_env(&te, 3, 2, "CUDA_VISIBLE_DEVICES=" MIG_A "," MIG_B, NULL);
	ddpenv_task_vars(&node, &te, &v, err, sizeof(err));
	test_streq("... task 2 sees Slurm's first", var(&v, "CUDA_VISIBLE_DEVICES"), MIG_A);
	ddpenv_env_free(&te);
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* A MIG list that does not pair with SLURM_STEP_GPUS: Slurm's. */
	step_env(&env, 2, "0,1", MIG_A, NULL);
	plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
	test_cond("MIG devices, not one per GRES index: left alone", !p.gpu && p.cpu);
	test_err("... said so", p.gpu_how, "names MIG devices, but not one for each of the step's 2 GPUs");
	ddpenv_bind_plan_free(&p);
	ddpenv_env_free(&env);

	/* Slurm's list longer than a variable of the plugin holds (7
	 * devices of 40 characters): left to Slurm, never cut short. */
	{
		char cvd[512] = "", ids[64] = "";
		for (int i = 0; i < 7; i++) {
			snprintf(cvd + strlen(cvd), sizeof(cvd) - strlen(cvd), "%sMIG-%08d-5e6f-5a7b-8c9d-0e1f2a3b4c5d",
				 i ? "," : "", i);
			snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%d", i ? "," : "", i);
		}
		step_env(&env, 7, ids, cvd, NULL);
		plan_on("dgx-h100.xml", &env, DDPENV_BIND_AUTO, NULL, &p);
		test_cond("7 MIG devices: too long to carry: left alone", !p.gpu && p.cpu);
		test_err("... said so", p.gpu_how, "more than the 255 a variable of the plugin holds");
		ddpenv_bind_plan_free(&p);
		ddpenv_env_free(&env);
	}

	/* --ddp=auto: NCCL does not run ranks on MIG devices. */
	step_env(&env, 2, "0,1", MIG_A "," MIG_B, "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=n1",
		 "SLURM_JOB_ID=7", "SLURM_STEP_ID=0", NULL);
	test_cond("the step: MIG", ddpenv_step_parse(&env, &st, err, sizeof(err)) == 0 && st.mig &&
		  st.has_gpus && st.gpus == 2);
	ddpenv_env_free(&env);
	step_env(&env, 2, "0,1", NULL, "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=n1", "SLURM_JOB_ID=7",
		 "SLURM_STEP_ID=0", NULL);
	test_cond("the step: not MIG", ddpenv_step_parse(&env, &st, err, sizeof(err)) == 0 && !st.mig);
	ddpenv_env_free(&env);
}

/* CPU lists from outside (a ddp-check record, ddp-env --allowed): decimal,
 * bounded, ascending; what hwloc's own parser gets wrong is refused or read
 * as a person means it. */
static void test_cpulist(void)
{
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	char s[64];

	test_cond("0-3,8,10-11", ddpenv_cpulist_parse(b, "0-3,8,10-11", 100, err, sizeof(err)) == 0 &&
		  hwloc_bitmap_list_snprintf(s, sizeof(s), b) > 0 && !strcmp(s, "0-3,8,10-11"));
	test_cond("010 is ten, not octal eight", ddpenv_cpulist_parse(b, "010", 100, err, sizeof(err)) == 0 &&
		  hwloc_bitmap_first(b) == 10 && hwloc_bitmap_weight(b) == 1);
	test_cond("the empty list is the empty set", ddpenv_cpulist_parse(b, "", 100, err, sizeof(err)) == 0 &&
		  hwloc_bitmap_iszero(b));
	test_cond("08-3 (which hangs hwloc's printer) refused", ddpenv_cpulist_parse(b, "08-3", 100, err,
											 sizeof(err)) < 0);
	test_err("... a backwards range", err, "CPU list '08-3': range 8-3 runs backwards");
	test_cond("beyond max refused", ddpenv_cpulist_parse(b, "0-4294967293", DDPENV_MAX_CPU, err,
							     sizeof(err)) < 0);
	test_err("... naming the bound", err, "a number too large at offset 2: expected a list like 0-3,8 of "
		 "decimal numbers up to 65535");
	test_cond("hex refused", ddpenv_cpulist_parse(b, "0x3", 100, err, sizeof(err)) < 0);
	test_err("... at the x", err, "'x' at offset 1");
	test_cond("a trailing comma refused", ddpenv_cpulist_parse(b, "1,", 100, err, sizeof(err)) < 0);
	test_cond("an open range refused", ddpenv_cpulist_parse(b, "3-", 100, err, sizeof(err)) < 0);
	test_cond("a space refused", ddpenv_cpulist_parse(b, "1, 2", 100, err, sizeof(err)) < 0);
	test_cond("NULL refused", ddpenv_cpulist_parse(b, NULL, 100, err, sizeof(err)) < 0);
	hwloc_bitmap_free(b);
}

int main(void)
{
	test_cpulist();
	test_dgx_h100();
	test_dgx_a100_nps4();
	test_single_socket();
	test_cpu_only();
	test_cgroup();
	test_cgroup_v2_task();
	test_policy();
	test_slurm_per_task();
	test_slurm_map();
	test_task_affinity();
	test_vars();
	test_vars_per_task();
	test_errors();
	test_nvidia_minors();
	test_cuda_names();
	test_gres_bus_order();
	test_mig();
	test_apply();
	return test_report();
}
