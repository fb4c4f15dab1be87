/* The binding planner's two halves: bind.c (tasks, CPUs, memory, applying
 * the plan) and bind_gpus.c (the step's GPUs).  Private to libddpenv. */
#ifndef DDPENV_BIND_H
#define DDPENV_BIND_H

#include <hwloc.h>

#include "ddpenv.h"

/* What the GPU half hands the CPU half, indexed like plan->gpus. */
struct bind_gpus {
	hwloc_obj_t obj[DDPENV_MAX_GPUS];   /* the GPU's PCI device, NULL unknown */
	hwloc_obj_t dom[DDPENV_MAX_GPUS];   /* its locality (ddpenv_topo_locality) */
	size_t missing;                     /* step GPUs the topology lacks */
};

/* Plan the step's GPUs on this node for the plan->ntasks tasks (their gpu
 * set to -1 by the caller): plan->ngpus, gpus[], mig, visible, each
 * task's gpu and gpu_how, from SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES.
 * plan->gpu turns 0 where the GPUs are left to Slurm or the user (said in
 * gpu_how).  allowed: the step's CPUs here.  user_cpus: each task's CPUs
 * under the user's --cpu-bind ([plan->ntasks]), or NULL where unknown: a
 * task's GPU is then picked near them. */
int ddpenv_bind_plan_gpus(const struct ddpenv_topo *t, const struct ddpenv_env *env,
			  hwloc_const_bitmap_t allowed, hwloc_bitmap_t const *user_cpus,
			  struct ddpenv_bind_plan *plan, struct bind_gpus *bg, char *err, size_t errlen);

#endif
