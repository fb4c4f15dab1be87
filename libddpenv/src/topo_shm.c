/*
 * The kept topology mapped, not parsed: hwloc's shared-memory topology
 * (hwloc/shmem.h).  Written once per boot beside the kept export
 * (topo_cache.c), root's and read-only to others; each step maps it
 * (hwloc_shmem_topology_adopt) instead of parsing the export, whose
 * parse grows with the machine (0.6 ms here, 2 ms for a DGX H100's).
 *
 * hwloc maps it at the address it was written at: one fixed address, far
 * from where Linux puts a process's mappings (the program, its heap, and
 * libraries and stacks below the top of the address space).  Where
 * something is already there, mmap (never MAP_FIXED) puts it elsewhere
 * and hwloc refuses with EBUSY: the caller reads the export instead.
 * The file is never changed in place but written under another name and
 * renamed, so no mapping sees it shrink (SIGBUS) or change; its first
 * page says what wrote it and holds its seal (seal.c), which slurmstepd
 * checks at each step (ddpenv_topo_shm_check, as root) and each task
 * before it maps it.
 *
 * A mapped topology is read-only and holds the allowed CPUs of the step
 * that wrote it: its allowed set is this process's cpuset cgroup's
 * (ddpenv_topo_allow_cgroup), as hwloc would read it at a load.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hwloc.h>
#include <hwloc/shmem.h>

#include "ddpenv.h"
#include "internal.h"
#include "topo.h"

/* 32 TiB: on x86-64 (and 48-bit arm64) between a program's heap (near
 * 0x55..., 85 TiB, for PIE) and its mmap area, which grows down from
 * under 128 TiB; above ASan's shadow (to 17.6 TiB).  A 39-bit arm64
 * kernel has no such address: the export is read there. */
#define SHM_ADDR ((void *)(uintptr_t)0x200000000000ull)
/* A node's copy is tens to hundreds of KB (a DGX H100's 250 KB). */
#define SHM_MAX ((off_t)64 << 20)

static int address_space_ok(char *err, size_t errlen)
{
	if (UINTPTR_MAX <= 0xffffffffu) {
		snprintf(err, errlen, "a mapped topology needs a 64-bit address space");
		return -1;
	}
	return 0;
}

/* The file's first page, before hwloc's copy: what wrote it and its seal
 * (seal.c), the modification time its writer gave it, checked with each
 * map (slurmstepd's, each task's) so that a copy written since (a
 * program's error: only root can write it) is never mapped. */
struct shm_head {
	char magic[16];
	uint32_t format;
	uint32_t hwloc_api;     /* hwloc_get_api_version() of the writer */
	uint64_t length;        /* hwloc's copy, from the second page */
	struct ddpenv_seal seal;
};
static const char shm_magic[16] = "slurm-ddp topo\n";
#define SHM_FORMAT 2

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? (size_t)p : 4096;
}

int ddpenv_topo_shm_write(const struct ddpenv_topo *t, const char *path, char *err, size_t errlen)
{
	char tmp[DDPENV_PATHLEN], why[DDPENV_ERRLEN];
	struct shm_head h;
	size_t len, page = page_size();
	int fd;

	if (address_space_ok(err, errlen) < 0)
		return -1;
	if (hwloc_shmem_topology_get_length(t->topo, &len, 0) < 0 || len > (size_t)SHM_MAX) {
		snprintf(err, errlen, "%.200s: hwloc cannot size the mapped copy (at most %lld bytes): %s", path,
			 (long long)SHM_MAX, strerror(errno));
		return -1;
	}
	/* a name the folder's pruning leaves alone (topo_cache.c) */
	const char *slash = strrchr(path, '/');
	int dirlen = slash ? (int)(slash - path) : 1;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%.*s/.topology.XXXXXX", dirlen, slash ? path : ".") >= sizeof(tmp)) {
		snprintf(err, errlen, "%.200s: too long a path", path);
		return -1;
	}
	if ((fd = mkstemp(tmp)) < 0) {
		snprintf(err, errlen, "%.200s: cannot write beside it: %s", path, strerror(errno));
		return -1;
	}
	if (hwloc_shmem_topology_write(t->topo, fd, page, SHM_ADDR, len, 0) < 0) {
		snprintf(err, errlen, "%.200s: hwloc cannot write the mapped copy at %p (%zu bytes): %s", path,
			 SHM_ADDR, len, errno == EBUSY ? "the address is taken in this process" : strerror(errno));
		goto fail;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, shm_magic, sizeof(h.magic));
	h.format = SHM_FORMAT;
	h.hwloc_api = hwloc_get_api_version();
	h.length = len;
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(err, errlen, "%.200s: cannot write the mapped copy's head: %s", path, strerror(errno));
		goto fail;
	}
	if (ddpenv_seal_file(fd, (off_t)offsetof(struct shm_head, seal), why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%.200s: the mapped copy: %s", path, why);
		goto fail;
	}
	/* whole before it is named */
	if (fsync(fd) < 0 || fchmod(fd, 0644) < 0 || rename(tmp, path) < 0) {
		snprintf(err, errlen, "%.200s: cannot put the mapped copy in place: %s", path, strerror(errno));
		goto fail;
	}
	close(fd);
	return 0;
fail:
	close(fd);
	unlink(tmp);
	return -1;
}

/* fd a file of root's only root can write, headed by this program's
 * header for this hwloc, its length whole pages: the length of hwloc's
 * copy (h filled), else -1 with err */
static ssize_t shm_file_ok(int fd, const char *path, struct shm_head *h, char *err, size_t errlen)
{
	struct stat st;
	size_t page = page_size();

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		snprintf(err, errlen, "%.200s: expected a file of root's that only root can write (owner uid %u, mode %04o)",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (st.st_size <= (off_t)page || st.st_size > SHM_MAX + (off_t)page || st.st_size % (off_t)page) {
		snprintf(err, errlen, "%.200s: %lld bytes, expected whole pages of %zu bytes, 2 to %lld of them", path,
			 (long long)st.st_size, page, (long long)(SHM_MAX / (off_t)page + 1));
		return -1;
	}
	if (pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) || memcmp(h->magic, shm_magic, sizeof(shm_magic)) ||
	    h->format != SHM_FORMAT || h->length != (uint64_t)st.st_size - page) {
		snprintf(err, errlen, "%.200s: not a mapped topology of this program's (format %d, its header, then hwloc's copy)",
			 path, SHM_FORMAT);
		return -1;
	}
	if (h->hwloc_api != hwloc_get_api_version()) {
		snprintf(err, errlen, "%.200s: written by hwloc API %#x, this is %#x", path, h->hwloc_api,
			 hwloc_get_api_version());
		return -1;
	}
	if (!ddpenv_seal_holds(&h->seal, &st)) {
		snprintf(err, errlen, "%.200s: written since it was kept (its modification time is not the one its head holds)",
			 path);
		return -1;
	}
	return (ssize_t)h->length;
}

int ddpenv_topo_shm_check(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rv;
	struct shm_head h;

	if (fd < 0) {
		snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
		return -1;
	}
	rv = shm_file_ok(fd, path, &h, err, errlen) < 0 ? -1 : 0;
	close(fd);
	return rv;
}

int ddpenv_topo_shm_adopt(const char *path, struct ddpenv_topo **out, char *err, size_t errlen)
{
	struct ddpenv_topo *t;
	struct shm_head h;
	ssize_t len;
	int fd;

	*out = NULL;
	if (address_space_ok(err, errlen) < 0)
		return -1;
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
		return -1;
	}
	if ((len = shm_file_ok(fd, path, &h, err, errlen)) < 0) {
		close(fd);
		return -1;
	}
	if (!(t = calloc(1, sizeof(*t)))) {
		snprintf(err, errlen, "out of memory");
		close(fd);
		return -1;
	}
	if (hwloc_shmem_topology_adopt(&t->topo, fd, page_size(), SHM_ADDR, (size_t)len, 0) < 0) {
		snprintf(err, errlen, "%.200s: hwloc cannot map it at %p: %s", path, SHM_ADDR,
			 errno == EBUSY ? "the address is taken in this process"
			 : errno == EINVAL ? "not a copy this hwloc wrote" : strerror(errno));
		close(fd);
		free(t);
		return -1;
	}
	close(fd); /* the mapping stays */
	t->inited = 1;
	t->thissystem = hwloc_topology_is_thissystem(t->topo);
	snprintf(t->source, sizeof(t->source), "this machine (hwloc, mapped from %.200s)", path);
	if (ddpenv_topo_allow_cgroup(t, "", err, errlen) < 0) {
		ddpenv_topo_free(t);
		return -1;
	}
	*out = t;
	return 0;
}
