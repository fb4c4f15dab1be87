/*
 * This machine's topology kept as an hwloc XML export (topology_cache), so
 * that each step's slurmstepd loads it (a fraction of a millisecond)
 * instead of discovering the machine again (25 to 50 ms on a 2-core VM,
 * more on a large node): what --ddp adds to a step's launch.
 *
 * The export is of the whole machine (every CPU, the cgroup's or not, and
 * its PCI devices); a load from it still takes the allowed CPUs from the
 * loading process's cgroup, as discovery does, so a step's cpuset is never
 * the one of the step that wrote the file.
 *
 * Trust: the folder and the file must be root's and writable by nobody
 * else; the file is written by root (slurmstepd before it drops
 * privileges) to a temporary name and renamed into place, so a reader sees
 * a whole file or none.  Its name carries a key: the boot, hwloc's version
 * and a hash of what the kernel says of the CPUs, NUMA nodes and PCI
 * devices, so a reboot, another hwloc or a changed machine (a CPU taken
 * offline, a device hot-plugged) makes a new file; the others are removed.
 * A file that is not whole (no end tag), not root's or writable by others
 * is written again; one written is loaded back before it is used.  Its
 * reader (the step's own load) falls back to discovery should hwloc still
 * refuse it.
 *
 * Beside it, its mapped copy (topology-KEY.shm, topo_shm.c): a step maps
 * it rather than parse the export; where it cannot (none, or hwloc
 * refuses it), the step reads the export.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hwloc.h>

#include "ddpenv.h"
#include "internal.h"
#include "topo.h"

/* A node's export is tens of KB (a DGX-class node about 300 KB). */
#define CACHE_MAX (16u << 20)

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ull;
	}
	return h;
}

int ddpenv_topo_cache_key(const char *sysroot, char *out, size_t len, char *err, size_t errlen)
{
	char path[DDPENV_PATHLEN], boot[64], buf[4096];
	uint64_t h = 14695981039346656037ull, devs = 0;
	size_t ndev = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/proc/sys/kernel/random/boot_id", sysroot);
	if (ddpenv_read_line(path, boot, sizeof(boot)) < 0 || strlen(boot) != 36 ||
	    strspn(boot, "0123456789abcdef-") != 36) {
		snprintf(err, errlen, "%s: cannot read this boot's id (expected 36 hex digits and dashes)", path);
		return -1;
	}
	static const char *const files[] = { "/sys/devices/system/cpu/online",
					     "/sys/devices/system/cpu/possible",
					     "/sys/devices/system/node/online" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", sysroot, files[i]);
		if (ddpenv_read_line(path, buf, sizeof(buf)) < 0)
			snprintf(buf, sizeof(buf), "-"); /* (no NUMA in this kernel) */
		h = fnv1a(h, buf, strlen(buf) + 1);
	}
	/* the PCI devices, in whatever order readdir gives them */
	snprintf(path, sizeof(path), "%s/sys/bus/pci/devices", sysroot);
	if ((d = opendir(path))) {
		for (struct dirent *e; (e = readdir(d));) {
			if (e->d_name[0] == '.')
				continue;
			devs += fnv1a(14695981039346656037ull, e->d_name, strlen(e->d_name));
			ndev++;
		}
		closedir(d);
	}
	h = fnv1a(h, (const char *)&devs, sizeof(devs));
	h = fnv1a(h, (const char *)&ndev, sizeof(ndev));
	if ((size_t)snprintf(out, len, "%s-hwloc%x-%016llx", boot, hwloc_get_api_version(),
			     (unsigned long long)h) >= len) {
		snprintf(err, errlen, "topology cache key: no room");
		return -1;
	}
	return 0;
}

/* path a whole export of root's: its owner, mode and size, and the end
 * tag hwloc writes last (each step: a stat and a read of its last bytes);
 * deep: hwloc loads it too (once, after writing it).  0, or -1 with why. */
static int cache_valid(const char *path, int deep, char *why, size_t n)
{
	static const char end[] = "</topology>\n";
	char tail[sizeof(end) - 1];
	struct stat st;
	struct ddpenv_topo *t;
	char lerr[DDPENV_ERRLEN];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rv = -1;

	if (fd < 0) {
		snprintf(why, n, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(why, n, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		snprintf(why, n, "%s: expected a file of root's that only root can write (owner uid %u, mode %04o)",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	if (st.st_size < (off_t)sizeof(tail) || (unsigned long long)st.st_size > CACHE_MAX) {
		snprintf(why, n, "%s: %lld bytes, expected %zu to %u", path, (long long)st.st_size, sizeof(tail),
			 CACHE_MAX);
		goto out;
	}
	if (pread(fd, tail, sizeof(tail), st.st_size - (off_t)sizeof(tail)) != (ssize_t)sizeof(tail) ||
	    memcmp(tail, end, sizeof(tail)) != 0) {
		snprintf(why, n, "%s: not a whole hwloc export (no </topology> at its end)", path);
		goto out;
	}
	if (deep && ddpenv_topo_load(path, 0, &t, lerr, sizeof(lerr)) < 0) {
		snprintf(why, n, "%.300s", lerr);
		goto out;
	}
	if (deep)
		ddpenv_topo_free(t);
	rv = 0;
out:
	close(fd);
	return rv;
}

/* Discover this machine and write its export to path, through a temporary
 * file beside it renamed into place. */
static int cache_write(const char *dir, const char *path, char *err, size_t errlen)
{
	char tmp[DDPENV_PATHLEN];
	struct ddpenv_topo *t;
	int fd, rv = -1;

	if (ddpenv_topo_load(NULL, 1, &t, err, errlen) < 0)
		return -1;
	snprintf(tmp, sizeof(tmp), "%s/.topology.XXXXXX", dir);
	if ((fd = mkstemp(tmp)) < 0) {
		snprintf(err, errlen, "topology_cache %.200s: cannot write in it: %s", dir, strerror(errno));
		goto out;
	}
	close(fd);
	if (hwloc_topology_export_xml(t->topo, tmp, 0) < 0) {
		snprintf(err, errlen, "topology_cache %.200s: hwloc could not export this machine: %s", dir,
			 strerror(errno));
		goto out_unlink;
	}
	/* whole on disk before it is named */
	if ((fd = open(tmp, O_RDONLY | O_CLOEXEC)) < 0 || fsync(fd) < 0 || chmod(tmp, 0644) < 0 ||
	    rename(tmp, path) < 0) {
		snprintf(err, errlen, "topology_cache %.200s: cannot put the export in place: %s", dir,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		goto out_unlink;
	}
	close(fd);
	rv = 0;
	goto out;
out_unlink:
	unlink(tmp);
out:
	ddpenv_topo_free(t);
	return rv;
}

/* Remove every other file of the folder's (another boot's, hwloc's or
 * machine's, and the mapped copy of the export just replaced). */
static void cache_prune(const char *dir, const char *keep)
{
	DIR *d = opendir(dir);
	int dfd = d ? dirfd(d) : -1;

	for (struct dirent *e; dfd >= 0 && (e = readdir(d));)
		if (strncmp(e->d_name, "topology-", 9) == 0 && strcmp(e->d_name, keep) != 0)
			unlinkat(dfd, e->d_name, 0);
	if (d)
		closedir(d);
}

int ddpenv_topo_cache_ensure(const char *dir, const char *sysroot, char *path, size_t len,
			     char *err, size_t errlen)
{
	char key[160], name[200], why[DDPENV_ERRLEN];

	if (!dir || !*dir) {
		snprintf(err, errlen, "no topology_cache");
		return -1;
	}
	if (ddpenv_root_dir(dir, 1, "topology_cache", err, errlen) < 0 || ddpenv_topo_cache_key(sysroot, key, sizeof(key), err, errlen) < 0)
		return -1;
	snprintf(name, sizeof(name), "topology-%s.xml", key);
	if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len) {
		snprintf(err, errlen, "topology_cache %.200s: too long a path", dir);
		return -1;
	}
	if (cache_valid(path, 0, why, sizeof(why)) == 0)
		return 0;
	if (cache_write(dir, path, err, errlen) < 0)
		return -1;
	if (cache_valid(path, 1, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "topology_cache: the export just written does not load back: %s", why);
		return -1;
	}
	cache_prune(dir, name);
	return 0;
}

/* The mapped copy's path beside the export's: "...topology-KEY.shm" */
static int shm_path(const char *xml, char *out, size_t len, char *err, size_t errlen)
{
	size_t n = strlen(xml);

	if (n < 4 || strcmp(xml + n - 4, ".xml") != 0 || n >= len) {
		snprintf(err, errlen, "%.200s: expected the path of a kept export (.xml)", xml);
		return -1;
	}
	snprintf(out, len, "%.*s.shm", (int)(n - 4), xml);
	return 0;
}

int ddpenv_topo_cache_map(const char *path, char *err, size_t errlen)
{
	char shm[DDPENV_PATHLEN], why[DDPENV_ERRLEN];
	struct ddpenv_topo *t;
	int rv;

	if (shm_path(path, shm, sizeof(shm), err, errlen) < 0)
		return -1;
	if (ddpenv_topo_shm_check(shm, why, sizeof(why)) == 0)
		return 0;
	if (ddpenv_topo_load(path, 1, &t, err, errlen) < 0)
		return -1;
	rv = ddpenv_topo_shm_write(t, shm, err, errlen);
	ddpenv_topo_free(t);
	if (rv < 0)
		return -1;
	/* mapped back once, as each step will */
	if (ddpenv_topo_shm_adopt(shm, &t, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "topology_cache: the mapped copy just written does not map back: %s", why);
		unlink(shm);
		return -1;
	}
	ddpenv_topo_free(t);
	return 0;
}

int ddpenv_topo_load_cached(const char *path, struct ddpenv_topo **out, char *err, size_t errlen)
{
	char shm[DDPENV_PATHLEN], why[DDPENV_ERRLEN];

	if (shm_path(path, shm, sizeof(shm), why, sizeof(why)) == 0 &&
	    ddpenv_topo_shm_adopt(shm, out, why, sizeof(why)) == 0)
		return 0;
	if (ddpenv_topo_load(path, 1, out, err, errlen) < 0)
		return -1;
	snprintf((*out)->source, sizeof((*out)->source), "this machine (hwloc, kept in %.200s; not mapped: %.300s)",
		 path, why);
	return 0;
}

/* Where hwloc looks for its plugins: /dev/null is no folder, and only root
 * could make it one. */
#define PLUGINS_VAR "HWLOC_PLUGINS_PATH"
#define NO_PLUGINS "/dev/null"

extern char **environ;

int ddpenv_topo_load_noplugins(const char *path, int kept, struct ddpenv_topo **out, char *err,
			       size_t errlen)
{
	static char no_plugins[] = PLUGINS_VAR "=" NO_PLUGINS;
	char **was = environ, **mine;
	size_t n = 0, k = 0;
	int rv;

	/* hwloc reads the environment a copy of the process's, its
	 * HWLOC_PLUGINS_PATH at no folder, for the load alone: no setenv,
	 * whose first call in a task's child allocates (faults in pages
	 * slurmstepd's heap held: 0.03 ms of the task's start). */
	*out = NULL;
	while (was && was[n])
		n++;
	if (!(mine = malloc((n + 2) * sizeof(*mine)))) {
		snprintf(err, errlen, "out of memory loading the topology");
		return -1;
	}
	mine[k++] = no_plugins;
	for (size_t i = 0; i < n; i++)
		if (strncmp(was[i], PLUGINS_VAR "=", sizeof(PLUGINS_VAR)) != 0)
			mine[k++] = was[i];
	mine[k] = NULL;
	environ = mine;
	rv = kept ? ddpenv_topo_load_cached(path, out, err, errlen) : ddpenv_topo_load(path, 1, out, err, errlen);
	environ = was;
	free(mine);
	return rv;
}

/* The .so files of one folder hwloc would open (blacklist as hwloc reads
 * it: a plugin is left out when its name is a substring of the list). */
static int plugins_in(const char *dir, size_t dirlen, const char *blacklist)
{
	char path[DDPENV_PATHLEN], name[256];
	DIR *d;
	int n = 0;

	if (dirlen == 0 || dirlen >= sizeof(path))
		return 0;
	memcpy(path, dir, dirlen);
	path[dirlen] = '\0';
	if (!(d = opendir(path)))
		return 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (len <= 3 || len >= sizeof(name) || strcmp(e->d_name + len - 3, ".so") != 0 ||
		    e->d_type == DT_DIR)
			continue;
		memcpy(name, e->d_name, len - 3);
		name[len - 3] = '\0';
		if (!blacklist || !strstr(blacklist, name))
			n++;
	}
	closedir(d);
	return n;
}

int ddpenv_topo_plugin_count(void)
{
	const char *paths = getenv("HWLOC_PLUGINS_PATH"), *black = getenv("HWLOC_PLUGINS_BLACKLIST");
	char mine[DDPENV_PATHLEN];
	Dl_info info;
	int n = 0;

	if (!paths) {
		const char *slash;
		if (!dladdr((void *)hwloc_topology_init, &info) || !info.dli_fname ||
		    !(slash = strrchr(info.dli_fname, '/')))
			return 0;
		if ((size_t)snprintf(mine, sizeof(mine), "%.*s/hwloc", (int)(slash - info.dli_fname),
				     info.dli_fname) >= sizeof(mine))
			return 0;
		paths = mine;
	}
	for (const char *p = paths;; p++) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		n += plugins_in(p, len, black);
		if (!colon)
			break;
		p = colon;
	}
	return n;
}
