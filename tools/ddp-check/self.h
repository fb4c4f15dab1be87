/* What a ddp-check task finds out about itself before it joins the store:
 * its contract variables, the interface its backend will use, its CPUs
 * and the topology around them, its GPU.  Each fills me->r, the record
 * task 0 gathers; none fails: what cannot be read is left empty or named
 * in the record's *_err fields, for a check to report. */
#ifndef CK_SELF_H
#define CK_SELF_H

#include "check.h"
#include "ddpenv.h"

struct self {
	struct ck_rank r;
	int id, n;
	int step_nodes;               /* SLURM_STEP_NUM_NODES; 0 outside Slurm */
	const char *backend;
	int local_rank;
	int prober;                   /* listens for its node */
	struct ddpenv_addr head;
	int head_ok;
};

void ck_self_env(struct self *me);
/* after ck_self_env: needs the step's GPU variables */
void ck_self_gpus(struct self *me);
/* needs me->backend */
void ck_self_iface(struct self *me);
/* after ck_self_gpus: needs r->gpu for the GPU's locality */
void ck_self_binding(struct self *me);
/* the node's RDMA devices (DDP_CHECK_INFINIBAND, else /sys/class/infiniband),
 * the task's locked-memory, open-files and process limits, and (under a
 * process limit) the threads its user runs on the node */
void ck_self_limits(struct self *me);
/* the shared-memory folder (/dev/shm): its room, a
 * segment made there as NCCL makes one, the NCCL segments in it; logind's
 * RemoveIPC over the system bus */
void ck_self_shm(struct self *me);
/* after ck_self_gpus: the node's RDMA ports and the PCIe links of the
 * task's GPU and NIC (DDP_NIC), from DDP_CHECK_SYSFS or /sys (hw.h) */
void ck_self_hw(struct self *me);
/* after ck_self_gpus: its GPU's health from NVML and the kernel's log
 * (DDP_CHECK_KMSG, else /dev/kmsg) */
void ck_self_gpu_health(struct self *me);
/* after ck_self_gpus: copies of bytes from pinned memory to its GPU
 * (libcudart loaded at run time), then its GPU's link read again
 * (DDP_CHECK_SYSFS, else /sys) */
void ck_self_h2d(struct self *me, size_t bytes);
/* the node's first task, with a GPU: copies of bytes between every two
 * GPUs it sees (r->p2p) */
void ck_self_p2p(struct self *me, size_t bytes);
/* its NCCL_* variables that should agree across ranks (r->nccl_env) */
void ck_self_nccl_env(struct self *me);

/* CLOCK_MONOTONIC seconds: the clock of every deadline. */
double ck_mono(void);
/* Seconds since this process started, from /proc/self/stat (what a user
 * waits through before the first collective). */
double ck_task_age(void);

#endif
