/* The NVIDIA driver's list of a node's GPUs (see ddpenv.h): one directory
 * per GPU under /proc/driver/nvidia/gpus, named by its PCI bus id, whose
 * "information" file has lines such as "Bus Location: \t 0000:1b:00.0",
 * "Device Minor: \t 0", "GPU UUID: \t GPU-8932f937-..." and
 * "GPU Excluded: \t No". */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ddpenv.h"
#include "topo.h"

int ddpenv_busid_norm(const char *s, char *out, size_t len)
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
	return ((const struct ddpenv_nvgpu *)a)->minor - ((const struct ddpenv_nvgpu *)b)->minor;
}

/* One GPU's information file: its minor and bus id (else the directory's name). */
static int read_info(const char *dir, const char *name, struct ddpenv_nvgpu *g, char *err,
		     size_t errlen)
{
	char path[4096], line[256];
	int have_minor = 0;
	snprintf(path, sizeof(path), "%s/%s/information", dir, name);
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	memset(g, 0, sizeof(*g));
	if (ddpenv_busid_norm(name, g->busid, sizeof(g->busid)) < 0)
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
		} else if (!strcmp(line, "GPU UUID")) {
			/* "GPU-" and the 36 characters of a UUID, as nvidia-smi -L
			 * prints it; anything else (question marks where the driver
			 * has not read it: a GPU not initialised since boot, no
			 * persistence mode) leaves it unknown */
			if (!strncmp(v, "GPU-", 4) && strlen(v) == 40 &&
			    strspn(v + 4, "0123456789abcdefABCDEF-") == 36)
				snprintf(g->uuid, sizeof(g->uuid), "%s", v);
		} else if (!strcmp(line, "GPU Excluded")) {
			g->excluded = !strcmp(v, "Yes");
		} else if (!strcmp(line, "Bus Location") &&
			   ddpenv_busid_norm(v, g->busid, sizeof(g->busid)) < 0) {
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

int ddpenv_nvidia_gpus(const char *dir, struct ddpenv_nvgpu *out, size_t max, char *err,
		       size_t errlen)
{
	size_t n = 0;
	struct dirent *e;

	if (!dir)
		dir = DDPENV_NVIDIA_GPUS;
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
		if (n == max) {
			closedir(d);
			snprintf(err, errlen, "%s: more than %zu GPUs", dir, max);
			return -1;
		}
		if (read_info(dir, e->d_name, &out[n], err, errlen) < 0) {
			closedir(d);
			return -1;
		}
		n++;
	}
	closedir(d);
	qsort(out, n, sizeof(out[0]), by_minor);
	return (int)n;
}

int ddpenv_topo_set_nvidia(struct ddpenv_topo *t, const struct ddpenv_nvgpu *g, size_t n,
			   char *err, size_t errlen)
{
	if (n > DDPENV_MAX_GPUS) {
		snprintf(err, errlen, "%zu GPUs from the NVIDIA driver: expected at most %d", n,
			 DDPENV_MAX_GPUS);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (g[i].minor == g[j].minor) {
				snprintf(err, errlen, "the NVIDIA driver lists /dev/nvidia%d twice (%s and %s)",
					 g[i].minor, g[j].busid, g[i].busid);
				return -1;
			}
	if (n)
		memcpy(t->nv, g, n * sizeof(*g));
	t->nnv = n;
	return 0;
}

int ddpenv_gres_order_parse(const char *s, enum ddpenv_gres_order *out, char *err, size_t errlen)
{
	if (strcmp(s, "bus") == 0)
		*out = DDPENV_GRES_ORDER_BUS;
	else if (strcmp(s, "minor") == 0)
		*out = DDPENV_GRES_ORDER_MINOR;
	else {
		snprintf(err, errlen, "'%.64s': expected bus (AutoDetect=nvml, or a gres.conf listing the "
			 "GPUs in PCI bus order) or minor (a gres.conf listing File=/dev/nvidia[0-N])", s);
		return -1;
	}
	return 0;
}

const char *ddpenv_gres_order_name(enum ddpenv_gres_order o)
{
	return o == DDPENV_GRES_ORDER_MINOR ? "minor" : "bus";
}

void ddpenv_topo_set_gres_order(struct ddpenv_topo *t, enum ddpenv_gres_order o)
{
	t->gres_order = o;
}

static int by_bus_ptr(const void *a, const void *b)
{
	return strcasecmp((*(const struct ddpenv_nvgpu *const *)a)->busid,
			  (*(const struct ddpenv_nvgpu *const *)b)->busid);
}

static int by_minor_ptr(const void *a, const void *b)
{
	int x = (*(const struct ddpenv_nvgpu *const *)a)->minor;
	int y = (*(const struct ddpenv_nvgpu *const *)b)->minor;
	return (x > y) - (x < y);
}

size_t ddpenv_nvidia_slurm_order(const struct ddpenv_nvgpu *g, size_t n, enum ddpenv_gres_order o,
				 const struct ddpenv_nvgpu **out, size_t max)
{
	size_t k = 0;
	/* NVML, and so AutoDetect, does not list the GPUs the driver excludes. */
	for (size_t i = 0; i < n && k < max; i++)
		if (!g[i].excluded)
			out[k++] = &g[i];
	/* Bus ids are normalised ("0000:1b:00.0"): fixed width, so text order
	 * is bus order. */
	qsort(out, k, sizeof(*out), o == DDPENV_GRES_ORDER_MINOR ? by_minor_ptr : by_bus_ptr);
	return k;
}
