/* The topology behind struct ddpenv_topo; internal to libddpenv. */
#ifndef DDPENV_TOPO_H
#define DDPENV_TOPO_H

#include <hwloc.h>

#include "ddpenv.h"

struct ddpenv_topo {
	hwloc_topology_t topo;
	int inited;
	int thissystem;              /* binding acts on this machine */
	hwloc_bitmap_t allowed;      /* the CPUs this process's cgroup allows (hwloc's allowed set) */
	char allowed_how[DDPENV_ERRLEN]; /* how allowed was found, "" : hwloc's load */
	char source[DDPENV_PATHLEN];
	size_t nnv;                  /* the NVIDIA driver's GPUs, by minor (0: none given) */
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	int gres_order;              /* enum ddpenv_gres_order: how Slurm numbers the GPUs */
};

/* A GPU function: NVIDIA or AMD, display or 3D/compute class. */
int ddpenv_topo_is_gpu(hwloc_obj_t o);
/* The GPUs in PCI bus id order. */
size_t ddpenv_topo_gpus(const struct ddpenv_topo *t, hwloc_obj_t *out, size_t max);
/* "0000:1b:00.0" */
void ddpenv_topo_busid(hwloc_obj_t o, char *out, size_t len);

/* Where a task using gpu (NULL: none) belongs: its first non-I/O ancestor
 * that has CPUs in allowed (the root when none has). */
hwloc_obj_t ddpenv_topo_locality(hwloc_topology_t topo, hwloc_obj_t gpu,
				 hwloc_const_bitmap_t allowed);

/* topo_shm.c: a loaded topology written to path as hwloc's shared-memory
 * copy (through a temporary file renamed into place); path's checks
 * (root's, whole pages); and the copy mapped, its allowed CPUs this
 * process's cgroup's.  0, else -1 with err. */
int ddpenv_topo_shm_write(const struct ddpenv_topo *t, const char *path, char *err, size_t errlen);
int ddpenv_topo_shm_check(const char *path, char *err, size_t errlen);
int ddpenv_topo_shm_adopt(const char *path, struct ddpenv_topo **out, char *err, size_t errlen);

#endif
