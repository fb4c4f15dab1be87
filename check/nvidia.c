/* The NVIDIA driver's own list of a node's GPUs: one directory per GPU
 * under /proc/driver/nvidia/gpus, named by its PCI bus id, whose
 * "information" file gives "Bus Location:" and "Device Minor:" (the N of
 * /dev/nvidiaN).  Slurm names GPUs by that N (a gres.conf File= device's
 * number: SLURM_STEP_GPUS, and CUDA_VISIBLE_DEVICES without
 * ConstrainDevices), CUDA under CUDA_DEVICE_ORDER=PCI_BUS_ID and the
 * plugin by their place in bus order: this table is how ddp-check tells
 * whether the two agree.  Plain file reads, no NVML. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MAXGPU DDPENV_MAX_GPUS

int ck_busid_norm(const char *s, char *out, size_t len)
{
	unsigned d, b, dev, f;
	int used = -1;
	/* hex digits and the separators only: scanf's %x would take "0x" too */
	if (strspn(s, "0123456789abcdefABCDEF:.") != strlen(s) ||
	    sscanf(s, "%x:%x:%x.%x%n", &d, &b, &dev, &f, &used) != 4 || used != (int)strlen(s) ||
	    d > 0xfffffff || b > 0xff || dev > 0x1f || f > 7)   /* VMD domains are 0x10000 and up */
		return -1;
	snprintf(out, len, "%04x:%02x:%02x.%x", d, b, dev, f);
	return 0;
}

static int by_minor(const void *a, const void *b)
{
	return ((const struct ck_nvgpu *)a)->minor - ((const struct ck_nvgpu *)b)->minor;
}

/* One GPU's information file: its minor and bus id (else the directory's name). */
static int read_info(const char *dir, const char *name, struct ck_nvgpu *g, char *err, size_t errlen)
{
	char path[4096], line[256];
	int have_minor = 0;
	snprintf(path, sizeof(path), "%s/%s/information", dir, name);
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (ck_busid_norm(name, g->busid, sizeof(g->busid)) < 0)
		g->busid[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');
		if (!v)
			continue;
		*v++ = 0;
		v += strspn(v, " \t");
		v[strcspn(v, " \t\r\n")] = 0;
		if (!strcmp(line, "Device Minor")) {
			char *end;
			long m = strtol(v, &end, 10);
			if (end == v || *end || m < 0 || m > 255) {
				fclose(f);
				snprintf(err, errlen, "%s: Device Minor '%.32s': expected 0-255", path, v);
				return -1;
			}
			g->minor = (int)m;
			have_minor = 1;
		} else if (!strcmp(line, "Bus Location") && ck_busid_norm(v, g->busid, sizeof(g->busid)) < 0) {
			fclose(f);
			snprintf(err, errlen, "%s: Bus Location '%.32s': expected a PCI bus id such as "
				 "0000:1b:00.0", path, v);
			return -1;
		}
	}
	fclose(f);
	if (!have_minor || !g->busid[0]) {
		snprintf(err, errlen, "%s: no %s line", path, have_minor ? "Bus Location" : "Device Minor");
		return -1;
	}
	return 0;
}

int ck_nvidia_read(const char *dir, char *out, size_t len, char *err, size_t errlen)
{
	struct ck_nvgpu g[MAXGPU];
	size_t n = 0;
	struct dirent *e;

	out[0] = 0;
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;   /* no NVIDIA driver here */
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == MAXGPU) {
			closedir(d);
			snprintf(err, errlen, "%s: more than %d GPUs", dir, MAXGPU);
			return -1;
		}
		if (read_info(dir, e->d_name, &g[n], err, errlen) < 0) {
			closedir(d);
			return -1;
		}
		n++;
	}
	closedir(d);
	qsort(g, n, sizeof(g[0]), by_minor);
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		int w = snprintf(out + off, len - off, "%s%d=%s", i ? "," : "", g[i].minor, g[i].busid);
		if (w < 0 || off + (size_t)w >= len) {
			out[0] = 0;
			snprintf(err, errlen, "%s: %zu GPUs do not fit in %zu bytes", dir, n, len);
			return -1;
		}
		off += (size_t)w;
	}
	return (int)n;
}

int ck_nvidia_parse(const char *s, struct ck_nvgpu *g, size_t max)
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
		long m = strtol(item, &end, 10);
		if (end == item || *end || m < 0 || m > 255 ||
		    ck_busid_norm(eq + 1, g[n].busid, sizeof(g[n].busid)) < 0)
			return -1;
		g[n++].minor = (int)m;
	}
	return (int)n;
}
