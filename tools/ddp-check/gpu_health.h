/* The task's GPU's health (gpu_health.c): NVML's counters and state, and the
 * kernel's Xid lines for it. */
#ifndef CK_GPU_HEALTH_H
#define CK_GPU_HEALTH_H

#include "check.h"

/* Everything into gh for the GPU at busid, with its peer reads to the
 * GPUs of peers ("busid,busid"; NULL none); the log from kmsg
 * (/dev/kmsg, or a file of its lines: tests).  Never fails: gh->err,
 * gh->xid_err say what could not be read. */
void ck_gpu_health_read(const char *busid, const char *peers, const char *kmsg, struct ck_gpu_health *gh);
/* NVML's GPUs into g (their bus ids; minor -1, no UUID), at most max,
 * asked in a child bounded as the health is: where the driver's list
 * under /proc is not to be read (a container) NVML still answers.  The
 * count, else -1 with err (NVML not loaded, failing or hung). */
int ck_gpu_nvml_list(struct ddpenv_nvgpu *g, int max, char *err, size_t errlen);
/* The kernel log's Xid lines for busid alone (gh->xids, nxid, xid_err). */
void ck_gpu_xids(const char *path, const char *busid, struct ck_gpu_health *gh);

#endif
