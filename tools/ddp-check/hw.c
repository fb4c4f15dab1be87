/* PCIe links and RDMA ports from sysfs (hw.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hw.h"

/* The first line of a small sysfs file, without its newline: 0, else -1. */
static int read_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int ok = fgets(out, (int)len, f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	out[strcspn(out, "\n")] = 0;
	return 0;
}

void ck_link_read(const char *sysfs, const char *name, const char *busid, struct ck_link *l)
{
	char dir[512], path[600], w[16];

	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->busid, sizeof(l->busid), "%s", busid);
	snprintf(dir, sizeof(dir), "%s/bus/pci/devices/%s", sysfs, busid);
	if (access(dir, F_OK) != 0) {
		snprintf(l->err, sizeof(l->err), "no PCI device %.16s under %.40s/bus/pci/devices", busid, sysfs);
		return;
	}
	snprintf(path, sizeof(path), "%s/current_link_speed", dir);
	if (read_line(path, l->cur_speed, sizeof(l->cur_speed)) < 0) {
		snprintf(l->err, sizeof(l->err), "%.16s has no PCIe link speed in sysfs (a virtual device?)", busid);
		return;
	}
	snprintf(path, sizeof(path), "%s/max_link_speed", dir);
	read_line(path, l->max_speed, sizeof(l->max_speed));
	snprintf(path, sizeof(path), "%s/current_link_width", dir);
	if (read_line(path, w, sizeof(w)) == 0)
		l->cur_width = atoi(w);
	snprintf(path, sizeof(path), "%s/max_link_width", dir);
	if (read_line(path, w, sizeof(w)) == 0)
		l->max_width = atoi(w);
}

/* The PCI bus id a sysfs device link points to ("../../../0000:1b:00.0"). */
static int device_busid(const char *link, char *out, size_t len)
{
	char t[512];
	ssize_t n = readlink(link, t, sizeof(t) - 1);
	if (n <= 0)
		return -1;
	t[n] = 0;
	const char *b = strrchr(t, '/');
	snprintf(out, len, "%s", b ? b + 1 : t);
	return 0;
}

void ck_nic_link_read(const char *sysfs, const char *nic, struct ck_link *l)
{
	char link[512], busid[64];
	snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", sysfs, nic);
	if (device_busid(link, busid, sizeof(busid)) < 0) {
		snprintf(link, sizeof(link), "%s/class/net/%s/device", sysfs, nic);
		if (device_busid(link, busid, sizeof(busid)) < 0) {
			memset(l, 0, sizeof(*l));
			snprintf(l->name, sizeof(l->name), "%s", nic);
			snprintf(l->err, sizeof(l->err), "%.32s is neither an RDMA device nor a network interface "
				 "with a PCI device here", nic);
			return;
		}
	}
	ck_link_read(sysfs, nic, busid, l);
}

int ck_link_encode(const struct ck_link *l, char *out, size_t len)
{
	return snprintf(out, len, "%s|%s|%s|%d|%s|%d|%s", l->name, l->busid, l->cur_speed, l->cur_width,
			l->max_speed, l->max_width, l->err);
}

/* The next '|'-separated field of *s into out. */
static void field(const char **s, char *out, size_t len)
{
	size_t n = strcspn(*s, "|");
	snprintf(out, len, "%.*s", (int)n, *s);
	*s += n + ((*s)[n] == '|');
}

void ck_link_decode(const char *s, struct ck_link *l)
{
	char w[16];
	memset(l, 0, sizeof(*l));
	field(&s, l->name, sizeof(l->name));
	field(&s, l->busid, sizeof(l->busid));
	field(&s, l->cur_speed, sizeof(l->cur_speed));
	field(&s, w, sizeof(w));
	l->cur_width = atoi(w);
	field(&s, l->max_speed, sizeof(l->max_speed));
	field(&s, w, sizeof(w));
	l->max_width = atoi(w);
	field(&s, l->err, sizeof(l->err));
}

double ck_link_gts(const char *speed)
{
	return strtod(speed, NULL);
}

double ck_pcie_gbps(double gts, int width)
{
	if (gts <= 0 || width <= 0)
		return 0;
	double enc = gts <= 5 ? 8.0 / 10 : gts <= 32 ? 128.0 / 130 : 242.0 / 256;
	return gts * enc * width / 8;
}

/* "4: ACTIVE" -> "ACTIVE" */
static const char *after_colon(const char *s)
{
	const char *c = strchr(s, ':');
	if (!c)
		return s;
	for (c++; *c == ' '; c++)
		;
	return c;
}

void ck_ib_ports(const char *sysfs, char *out, size_t len)
{
	char dir[512];
	size_t off = 0;
	snprintf(dir, sizeof(dir), "%s/class/infiniband", sysfs);
	out[0] = 0;
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char pdir[800];
		snprintf(pdir, sizeof(pdir), "%s/%s/ports", dir, e->d_name);
		DIR *pd = opendir(pdir);
		for (struct dirent *p; pd && (p = readdir(pd));) {
			if (p->d_name[0] == '.')
				continue;
			char path[1024], state[64] = "?", rate[64] = "?", layer[32] = "?";
			snprintf(path, sizeof(path), "%s/%s/state", pdir, p->d_name);
			read_line(path, state, sizeof(state));
			snprintf(path, sizeof(path), "%s/%s/rate", pdir, p->d_name);
			read_line(path, rate, sizeof(rate));
			snprintf(path, sizeof(path), "%s/%s/link_layer", pdir, p->d_name);
			read_line(path, layer, sizeof(layer));
			int n = snprintf(out + off, off < len ? len - off : 0, "%s%s/%s:%s:%s:%s", off ? ";" : "",
					 e->d_name, p->d_name, after_colon(state), rate, layer);
			if (n < 0 || off + (size_t)n >= len) {
				out[off] = 0;   /* as many whole ports as fit */
				closedir(pd);
				closedir(d);
				return;
			}
			off += (size_t)n;
		}
		if (pd)
			closedir(pd);
	}
	if (d)
		closedir(d);
}
