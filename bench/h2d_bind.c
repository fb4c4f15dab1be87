/*
 * h2d_bind: host-to-device copy bandwidth from pinned memory, for a process
 * bound as the plugin binds it (libddpenv's plan and ddpenv_bind_apply, the
 * same calls slurmstepd makes) or bound to the far socket (hwloc: the CPUs
 * and memory of a NUMA node away from the GPU), or not bound at all.
 *
 *   h2d_bind --mode=plugin|far|none [--gpu=GRES_INDEX] [--mib=256] [--iters=20]
 *
 * Prints one line: mode, CPUs, NUMA nodes, GPU bus id, GB/s (best of the
 * iterations, as nvbandwidth reports).  bench/h2d_bind.sh runs the modes
 * side by side and prints the ratio.  Exit 4: hwloc sees no such GPU here
 * (a VM or container that hides the PCI tree), so the plugin would leave
 * the task unbound; --mode=none still measures, by CUDA's index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <hwloc.h>

#include "ddpenv.h"

#define CK(x) do {                                                                 \
	cudaError_t e_ = (x);                                                      \
	if (e_ != cudaSuccess) {                                                   \
		fprintf(stderr, "h2d_bind: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,  \
			cudaGetErrorString(e_));                                   \
		exit(1);                                                           \
	}                                                                          \
} while (0)

static void usage(void)
{
	fprintf(stderr, "usage: h2d_bind --mode=plugin|far|none [--gpu=N] [--mib=N] [--iters=N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mode = NULL;
	unsigned gpu = 0, mib = 256, iters = 20;
	char err[DDPENV_ERRLEN], gpus[16], cpus[DDPENV_CPULIST] = "all", mems[64] = "all";
	struct ddpenv_topo *t = NULL;
	struct ddpenv_bind_plan plan;
	struct ddpenv_env env;

	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--mode=", 7) == 0)
			mode = argv[i] + 7;
		else if (strncmp(argv[i], "--gpu=", 6) == 0)
			gpu = (unsigned)atoi(argv[i] + 6);
		else if (strncmp(argv[i], "--mib=", 6) == 0)
			mib = (unsigned)atoi(argv[i] + 6);
		else if (strncmp(argv[i], "--iters=", 8) == 0)
			iters = (unsigned)atoi(argv[i] + 8);
		else
			usage();
	}
	if (!mode || (strcmp(mode, "plugin") && strcmp(mode, "far") && strcmp(mode, "none")) || !mib || !iters)
		usage();

	/* The plugin's plan for one task holding GRES GPU `gpu` on this node. */
	memset(&plan, 0, sizeof(plan));
	ddpenv_env_init(&env);
	snprintf(gpus, sizeof(gpus), "%u", gpu);
	ddpenv_env_set(&env, "SLURM_NODEID", "0");
	ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", "1");
	ddpenv_env_set(&env, "SLURM_STEP_GPUS", gpus);
	ddpenv_env_set(&env, "CUDA_VISIBLE_DEVICES", gpus);
	if (ddpenv_topo_load(NULL, 1, &t, err, sizeof(err)) < 0 ||
	    ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &plan, err, sizeof(err)) < 0) {
		fprintf(stderr, "h2d_bind: %s\n", err);
		return 1;
	}
	const char *busid = plan.gpus[0].busid;
	if (!busid[0] && strcmp(mode, "none") != 0) {
		fprintf(stderr, "h2d_bind: GRES GPU %u is not a PCI device of this machine's hwloc "
			"topology (a VM or container hiding its PCI tree?): nothing to bind near\n", gpu);
		return 4;
	}
	if (strcmp(mode, "plugin") == 0) {
		if (ddpenv_bind_apply(t, &plan, 0, err, sizeof(err)) < 0) {
			fprintf(stderr, "h2d_bind: %s\n", err);
			return 1;
		}
		snprintf(cpus, sizeof(cpus), "%s", plan.tasks[0].cpus);
		snprintf(mems, sizeof(mems), "%s", plan.mem ? plan.tasks[0].mems : "first-touch");
	} else if (strcmp(mode, "far") == 0) {
		/* The NUMA node farthest from the GPU's: another package if any. */
		hwloc_topology_t h;
		hwloc_obj_t pci, near, far = NULL;
		hwloc_topology_init(&h);
		hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
		hwloc_topology_load(h);
		pci = hwloc_get_pcidev_by_busidstring(h, busid);
		near = pci ? hwloc_get_non_io_ancestor_obj(h, pci) : NULL;
		for (hwloc_obj_t n = NULL; near && (n = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_NUMANODE, n));) {
			if (hwloc_bitmap_intersects(n->cpuset, near->cpuset))
				continue;
			hwloc_obj_t pk = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_PACKAGE, n);
			int other_pkg = pk && !hwloc_bitmap_intersects(pk->cpuset, near->cpuset);
			if (!far || other_pkg)
				far = n;
			if (other_pkg)
				break;
		}
		if (!far) {
			printf("far: this machine has one NUMA node near GPU %s: no far socket to measure\n", busid);
			return 3;
		}
		if (hwloc_set_cpubind(h, far->cpuset, HWLOC_CPUBIND_PROCESS) < 0 ||
		    hwloc_set_membind(h, far->nodeset, HWLOC_MEMBIND_BIND,
				      HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) < 0) {
			perror("h2d_bind: binding to the far NUMA node");
			return 1;
		}
		hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), far->cpuset);
		hwloc_bitmap_list_snprintf(mems, sizeof(mems), far->nodeset);
		hwloc_topology_destroy(h);
	}

	int dev;
	size_t bytes = (size_t)mib << 20;
	void *host, *devbuf;
	cudaEvent_t a, b;
	float best = 0;

	/* by bus id; by CUDA's index in bus order where hwloc saw no GPU */
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	if (busid[0])
		CK(cudaDeviceGetByPCIBusId(&dev, busid));
	else
		dev = (int)gpu;
	CK(cudaSetDevice(dev));
	CK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
	memset(host, 1, bytes); /* first touch, under the binding */
	CK(cudaMalloc(&devbuf, bytes));
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaMemcpy(devbuf, host, bytes, cudaMemcpyHostToDevice)); /* warm up */
	for (unsigned i = 0; i < iters; i++) {
		float ms;
		CK(cudaEventRecord(a, 0));
		CK(cudaMemcpyAsync(devbuf, host, bytes, cudaMemcpyHostToDevice, 0));
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		float gbs = (float)bytes / (ms * 1e6f);
		if (gbs > best)
			best = gbs;
	}
	printf("%-6s gpu=%s cpus=%s mems=%s mib=%u h2d_GBps=%.2f\n", mode, busid[0] ? busid : "?", cpus,
	       mems, mib, best);
	cudaFree(devbuf);
	cudaFreeHost(host);
	ddpenv_bind_plan_free(&plan);
	ddpenv_topo_free(t);
	ddpenv_env_free(&env);
	return 0;
}
