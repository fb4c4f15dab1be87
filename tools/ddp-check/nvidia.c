/* The NVIDIA driver's own list of a node's GPUs: one directory per GPU
 * under /proc/driver/nvidia/gpus, named by its PCI bus id, whose
 * "information" file gives "Bus Location:" and "Device Minor:" (the N of
 * /dev/nvidiaN), read by libddpenv (ddpenv_nvidia_gpus); here as the
 * text a rank's record carries to task 0: "0=0000:1b:00.0,1=0000:43:00.0/x"
 * (/x: "GPU Excluded: Yes").  Slurm's GPU k (SLURM_STEP_GPUS, and
 * CUDA_VISIBLE_DEVICES without ConstrainDevices) is the k-th of this list
 * in the site's gres_order, CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID the
 * k-th in bus order: this table is how ddp-check tells whether the two
 * agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int ck_nvidia_read(const char *dir, char *out, size_t len, char *err, size_t errlen)
{
	struct ddpenv_nvgpu g[DDPENV_MAX_GPUS];
	int n = ddpenv_nvidia_gpus(dir, g, DDPENV_MAX_GPUS, err, errlen);
	size_t off = 0;

	out[0] = 0;
	for (int i = 0; i < n; i++) {
		int w = snprintf(out + off, len - off, "%s%d=%s%s", i ? "," : "", g[i].minor, g[i].busid,
				 g[i].excluded ? "/x" : "");
		if (w < 0 || off + (size_t)w >= len) {
			out[0] = 0;
			snprintf(err, errlen, "%s: %d GPUs do not fit in %zu bytes", dir, n, len);
			return -1;
		}
		off += (size_t)w;
	}
	return n;
}

int ck_nvidia_parse(const char *s, struct ddpenv_nvgpu *g, size_t max)
{
	size_t n = 0;
	while (s && *s) {
		char item[64], *eq, *end;
		size_t l = strcspn(s, ",");
		if (l >= sizeof(item) || n == max)
			return -1;
		memcpy(item, s, l);
		item[l] = 0;
		s += l + (s[l] == ',');
		if (!(eq = strchr(item, '=')))
			return -1;
		*eq = 0;
		char *x = strchr(eq + 1, '/');
		memset(&g[n], 0, sizeof(g[n]));
		if (x) {   /* "/x": the driver excludes it */
			if (strcmp(x, "/x"))
				return -1;
			*x = 0;
			g[n].excluded = 1;
		}
		long m = strtol(item, &end, 10);
		if (end == item || *end || m < 0 || m > 255 ||
		    ddpenv_busid_norm(eq + 1, g[n].busid, sizeof(g[n].busid)) < 0)
			return -1;
		g[n++].minor = (int)m;
	}
	return (int)n;
}
