/*
 * The CPUs this process's cpuset cgroup allows, found as hwloc finds them
 * for HWLOC_TOPOLOGY_FLAG_THISSYSTEM_ALLOWED_RESOURCES.  A topology mapped
 * from the kept copy (topo_shm.c) is read-only and carries the allowed
 * CPUs of the step that wrote it; a step's plan needs its own.
 *
 *   where: /sys/fs/cgroup holding cpuset.cpus.effective (cgroup v2),
 *          /sys/fs/cgroup/cpuset (v1), /dev/cpuset (the cpuset file
 *          system), else the first of /proc/mounts: a cgroup2 mount whose
 *          cgroup.controllers names cpuset, a cpuset mount, or a cgroup
 *          mount with the cpuset option (noprefix: named as cpuset's);
 *   which: /proc/self/cpuset, else /proc/self/cgroup's cpuset (v1) or
 *          unified (v2) line;
 *   what:  cpuset.cpus.effective (v2), cpuset.cpus (v1), cpus (cpuset).
 *
 * No cpuset cgroup, or its file unreadable: every CPU, as hwloc says.
 * ddpenv_topo_allow_cgroup makes them a topology's allowed set: one mapped
 * from the kept copy, or one a parent in another cgroup loaded (under
 * cgroup v2 slurmstepd stays in the job's CPUs; a task's child is in its
 * step's).
 * sysroot prefixes every path (tests give a fake tree; "" is this
 * machine).  Every read is bounded: kernel files of a few KB.
 */
#include <fcntl.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "ddpenv.h"
#include "internal.h"
#include "topo.h"

enum kind { CGROUP2, CGROUP1, CPUSETFS };

static const char *const file_of[] = { "/cpuset.cpus.effective", "/cpuset.cpus", "/cpus" };

static int readable(const char *sysroot, const char *path)
{
	char p[DDPENV_PATHLEN];

	snprintf(p, sizeof(p), "%s%s", sysroot, path);
	return access(p, R_OK) == 0;
}

/* a cgroup2 mount whose controllers include cpuset */
static int v2_has_cpuset(const char *sysroot, const char *dir)
{
	char p[DDPENV_PATHLEN], ctrls[1024];

	snprintf(p, sizeof(p), "%s%s/cgroup.controllers", sysroot, dir);
	if (ddpenv_read_line(p, ctrls, sizeof(ctrls)) <= 0)
		return 0;
	for (char *save = NULL, *c = strtok_r(ctrls, " ", &save); c; c = strtok_r(NULL, " ", &save))
		if (strcmp(c, "cpuset") == 0)
			return 1;
	return 0;
}

/* the kind of a cgroup mount carrying cpuset, or -1 */
static int mount_kind(const char *sysroot, struct mntent *m)
{
	if (strcmp(m->mnt_type, "cgroup2") == 0)
		return v2_has_cpuset(sysroot, m->mnt_dir) ? CGROUP2 : -1;
	if (strcmp(m->mnt_type, "cpuset") == 0)
		return CPUSETFS;
	if (strcmp(m->mnt_type, "cgroup") != 0 || !hasmntopt(m, "cpuset"))
		return -1;
	return hasmntopt(m, "noprefix") ? CPUSETFS : CGROUP1;
}

/* The cpuset hierarchy's mount point: its kind, or -1 when none. */
static int find_mount(const char *sysroot, char *dir, size_t len)
{
	static const struct { const char *probe, *dir; enum kind kind; } std[] = {
		{ "/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup", CGROUP2 },
		{ "/sys/fs/cgroup/cpuset/cpuset.cpus", "/sys/fs/cgroup/cpuset", CGROUP1 },
		{ "/dev/cpuset/cpus", "/dev/cpuset", CPUSETFS },
	};
	char p[DDPENV_PATHLEN], buf[4 * 4096];
	struct mntent m;
	FILE *f;
	int kind = -1;

	for (size_t i = 0; i < sizeof(std) / sizeof(std[0]); i++)
		if (readable(sysroot, std[i].probe)) {
			snprintf(dir, len, "%s", std[i].dir);
			return (int)std[i].kind;
		}
	snprintf(p, sizeof(p), "%s/proc/mounts", sysroot);
	if (!(f = setmntent(p, "re")))
		return -1;
	while (kind < 0 && getmntent_r(f, &m, buf, sizeof(buf)))
		if ((kind = mount_kind(sysroot, &m)) >= 0)
			snprintf(dir, len, "%s", m.mnt_dir);
	endmntent(f);
	return kind;
}

/* This process's cpuset cgroup, "/slurm/uid_1000/job_7/step_0": 0, or -1.
 * /proc/self/cgroup read at once (no stdio: a task's child pays for
 * every page it touches), its first 8 KiB. */
static int find_name(const char *sysroot, char *name, size_t len)
{
	char p[DDPENV_PATHLEN], text[8192];
	char *save = NULL;
	int lines = 0;

	snprintf(p, sizeof(p), "%s/proc/self/cpuset", sysroot);
	if (ddpenv_read_line(p, name, len) > 0)
		return 0;
	snprintf(p, sizeof(p), "%s/proc/self/cgroup", sysroot);
	if (ddpenv_read_text(p, text, sizeof(text)) < 0)
		return -1;
	for (char *line = strtok_r(text, "\n", &save); line && lines < 64; line = strtok_r(NULL, "\n", &save), lines++) {
		char *colon = strchr(line, ':');
		if (colon && strncmp(colon, ":cpuset:", 8) == 0) {
			snprintf(name, len, "%s", colon + 8);
			return 0;
		}
		if (colon && strncmp(colon, "::", 2) == 0) {
			snprintf(name, len, "%s", colon + 2);
			return 0;
		}
	}
	return -1;
}

int ddpenv_cgroup_cpus(const char *sysroot, char *list, size_t len, char *how, size_t howlen)
{
	char dir[DDPENV_PATHLEN], name[DDPENV_PATHLEN], p[3 * DDPENV_PATHLEN];
	int kind = find_mount(sysroot, dir, sizeof(dir));
	ssize_t n;

	list[0] = '\0';
	snprintf(how, howlen, "no cpuset cgroup: every CPU");
	if (kind < 0 || find_name(sysroot, name, sizeof(name)) < 0)
		return 0;
	snprintf(p, sizeof(p), "%s%s%s%s", sysroot, dir, strcmp(name, "/") ? name : "", file_of[kind]);
	if ((n = ddpenv_read_line(p, list, len)) < 0) {
		list[0] = '\0';
		snprintf(how, howlen, "%.200s unreadable: every CPU", p + strlen(sysroot));
		return 0;
	}
	if ((size_t)n >= len - 1) {
		snprintf(how, howlen, "%.200s: expected a CPU list of under %zu bytes", p + strlen(sysroot), len - 1);
		return -1;
	}
	snprintf(how, howlen, "this process's cgroup cpuset, %.200s", p + strlen(sysroot));
	return 1;
}

int ddpenv_topo_allow_cgroup(struct ddpenv_topo *t, const char *sysroot, char *err, size_t errlen)
{
	char how[DDPENV_ERRLEN], list[16384];
	hwloc_bitmap_t set;
	int r = ddpenv_cgroup_cpus(sysroot, list, sizeof(list), how, sizeof(how));

	if (r < 0) {
		snprintf(err, errlen, "the allowed CPUs: %.300s", how);
		return -1;
	}
	if (!(set = hwloc_bitmap_alloc())) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (r == 0)
		hwloc_bitmap_fill(set);
	else if (hwloc_bitmap_list_sscanf(set, list) < 0) {
		snprintf(err, errlen, "the allowed CPUs: %.300s: '%.64s': expected a CPU list such as 0-27,112-139",
			 how, list);
		hwloc_bitmap_free(set);
		return -1;
	}
	hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(t->topo));
	hwloc_bitmap_free(t->allowed);
	t->allowed = set;
	snprintf(t->allowed_how, sizeof(t->allowed_how), "%s", how);
	return 0;
}
