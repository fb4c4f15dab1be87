/*
 * ddp.yaml's parse kept (config_cache): every step's slurmstepd, and srun,
 * parse the site's configuration, the first YAML parse of a new process
 * (0.15 to 0.3 ms of a step's launch).  slurmstepd, as root, writes what
 * it parsed to config_cache (default /run/slurm-ddp, beside the kept
 * topology); the next steps, and srun where that folder is, read it back
 * (0.03 ms) while the file is as it was.
 *
 * Trust: the folder and the file root's and writable by nobody else (what
 * the topology cache asks, root_dir.c); readable by others only when
 * ddp.yaml is.  Written to a temporary name, sealed (seal.c: its head
 * holds the modification time its writer gave it) and renamed; a file
 * written since is not read.
 *
 * Kept for one file as it was: its head holds ddp.yaml's path and what
 * stat says of it (device, inode, size, owner, mode, the times of its last
 * change of content and of inode, to the nanosecond), and the same of the
 * object this code is in (the plugin, or a program linked with
 * libddpenv), compared whole: an edited, replaced or moved file, or
 * another build of the plugin, reads ddp.yaml again.  A file changed in
 * the kernel's clock tick of its stat (no new time to see) could keep an
 * old parse, so a parse is kept only of a file last changed over a second
 * before.  Whatever is amiss (none kept, a short or changed file, another
 * key) is parsed as without a cache; nothing here is ever an error.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv.h"
#include "internal.h"

#define KEPT_FORMAT 2
static const char kept_magic[8] = "ddpcfg\n";

/* what stat says of a file, as compared */
struct ident {
	uint64_t dev, ino, size, uid, mode, mtime_s, mtime_ns, ctime_s, ctime_ns;
};

struct kept_head {
	char magic[8];
	uint32_t format;
	uint32_t pad;
	struct ddpenv_seal seal;     /* the file's modification time as its writer left it */
	uint64_t config_size, partition_size, nparts;
	struct ident yaml, code;
	char path[DDPENV_PATHLEN];
};

/* A file changed less than this before its stat is not kept (ns). */
#define SETTLED_NS 1000000000ll

static struct ident ident_of(const struct stat *sb)
{
	struct ident id;

	memset(&id, 0, sizeof(id)); /* compared whole, padding included */
	id.dev = (uint64_t)sb->st_dev;
	id.ino = (uint64_t)sb->st_ino;
	id.size = (uint64_t)sb->st_size;
	id.uid = (uint64_t)sb->st_uid;
	id.mode = (uint64_t)sb->st_mode;
	id.mtime_s = (uint64_t)sb->st_mtim.tv_sec;
	id.mtime_ns = (uint64_t)sb->st_mtim.tv_nsec;
	id.ctime_s = (uint64_t)sb->st_ctim.tv_sec;
	id.ctime_ns = (uint64_t)sb->st_ctim.tv_nsec;
	return id;
}

/* The object this code is in: its file's identity.  0, else -1 (no
 * cache). */
static int code_ident(struct ident *id)
{
	Dl_info info;
	struct stat sb;

	if (!dladdr((void *)ddpenv_config_load_kept, &info) || !info.dli_fname || !*info.dli_fname ||
	    stat(info.dli_fname, &sb) < 0)
		return -1;
	*id = ident_of(&sb);
	return 0;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 14695981039346656037ull;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* dir/config-HASH.bin, HASH of ddp.yaml's path.  0, else -1. */
static int kept_path(const char *dir, const char *path, char *out, size_t len)
{
	return (size_t)snprintf(out, len, "%s/config-%016llx.bin", dir, (unsigned long long)fnv1a(path)) < len
		       ? 0 : -1;
}

static int read_all(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	for (size_t put = 0; put < len;) {
		ssize_t r = write(fd, (const char *)buf + put, len - put);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		put += (size_t)r;
	}
	return 0;
}

/* The head a kept parse of path (yaml) by this code must have. */
static void head_for(struct kept_head *h, const char *path, const struct ident *yaml,
		     const struct ident *code)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, kept_magic, sizeof(h->magic));
	h->format = KEPT_FORMAT;
	h->config_size = sizeof(struct ddpenv_config);
	h->partition_size = sizeof(struct ddpenv_partition);
	h->yaml = *yaml;
	h->code = *code;
	snprintf(h->path, sizeof(h->path), "%s", path);
}

/* The kept parse at file, if its head is want's (seal and nparts 0), it
 * is as sealed and the rest whole: into c.  0, else -1 (c as it was). */
static int kept_read(struct ddpenv_config *c, const char *file, const struct kept_head *want)
{
	struct kept_head h, cmp;
	struct stat sb;
	struct ddpenv_config *got = malloc(sizeof(*got));
	struct ddpenv_partition *parts = NULL;
	int fd = open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rv = -1;

	if (fd < 0 || !got || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_uid != 0 ||
	    (sb.st_mode & 022) || read_all(fd, &h, sizeof(h)) < 0)
		goto out;
	cmp = h; /* the key, without what the file says of its own content */
	memset(&cmp.seal, 0, sizeof(cmp.seal));
	cmp.nparts = 0;
	if (memcmp(&cmp, want, sizeof(cmp)) != 0 || !ddpenv_seal_holds(&h.seal, &sb))
		goto out;
	if (h.nparts > DDPENV_CONFIG_MAX_BYTES ||
	    (uint64_t)sb.st_size != sizeof(h) + sizeof(*got) + h.nparts * sizeof(*parts) ||
	    read_all(fd, got, sizeof(*got)) < 0)
		goto out;
	if (h.nparts && (!(parts = malloc(h.nparts * sizeof(*parts))) ||
			 read_all(fd, parts, h.nparts * sizeof(*parts)) < 0))
		goto out;
	if (got->nparts != h.nparts || !got->from_file)
		goto out;
	ddpenv_config_free(c);
	got->parts = parts;
	*c = *got;
	parts = NULL;
	rv = 0;
out:
	free(parts);
	free(got);
	if (fd >= 0)
		close(fd);
	return rv;
}

/* c, just parsed, kept at file under h's key: through a temporary file
 * sealed and renamed into place; mode 0644, 0600 where ddp.yaml is not
 * readable by others.  0, else -1 (nothing left behind). */
static int kept_write(const struct ddpenv_config *c, const char *dir, const char *file, struct kept_head *h)
{
	char tmp[DDPENV_PATHLEN + 32];
	char why[DDPENV_ERRLEN]; /* not sealed: nothing kept */
	struct ddpenv_config flat = *c;
	int fd, ok;

	flat.parts = NULL;
	h->nparts = c->nparts;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/.config.XXXXXX", dir) >= sizeof(tmp) || (fd = mkstemp(tmp)) < 0)
		return -1;
	ok = write_all(fd, h, sizeof(*h)) == 0 && write_all(fd, &flat, sizeof(flat)) == 0 &&
	     (!c->nparts || write_all(fd, c->parts, c->nparts * sizeof(*c->parts)) == 0) &&
	     fchmod(fd, (h->yaml.mode & S_IROTH) ? 0644 : 0600) == 0 &&
	     ddpenv_seal_file(fd, (off_t)offsetof(struct kept_head, seal), why, sizeof(why)) == 0;
	ok = close(fd) == 0 && ok && rename(tmp, file) == 0;
	if (!ok)
		unlink(tmp);
	return ok ? 0 : -1;
}

/* Changed over SETTLED_NS before now (its content and its inode). */
static int settled(const struct stat *sb)
{
	struct timespec now;
	long long n, m, ct;

	if (clock_gettime(CLOCK_REALTIME, &now) < 0)
		return 0;
	n = (long long)now.tv_sec * 1000000000ll + now.tv_nsec;
	m = (long long)sb->st_mtim.tv_sec * 1000000000ll + sb->st_mtim.tv_nsec;
	ct = (long long)sb->st_ctim.tv_sec * 1000000000ll + sb->st_ctim.tv_nsec;
	return n - m > SETTLED_NS && n - ct > SETTLED_NS;
}

const char *ddpenv_config_cache_arg(int ac, char *const *av)
{
	const char *dir = DDPENV_CONFIG_CACHE_DIR;

	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "config_cache=", 13) == 0)
			dir = av[i] + 13;
	return dir;
}

int ddpenv_config_load_kept(struct ddpenv_config *c, const char *path, int must_exist, const char *dir,
			    int *kept, char *err, size_t errlen)
{
	char file[DDPENV_PATHLEN + 64], why[DDPENV_ERRLEN];
	struct kept_head want;
	struct ident code, yaml;
	struct stat sb;
	int usable;

	if (kept)
		*kept = DDPENV_CONFIG_PARSED;
	usable = dir && dir[0] == '/' && path && *path && strlen(path) < sizeof(want.path) &&
		 kept_path(dir, path, file, sizeof(file)) == 0 && code_ident(&code) == 0;
	if (usable && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
	    ddpenv_root_dir(dir, 0, "config_cache", why, sizeof(why)) == 0) {
		yaml = ident_of(&sb);
		head_for(&want, path, &yaml, &code);
		if (kept_read(c, file, &want) == 0) {
			if (kept)
				*kept = DDPENV_CONFIG_READ_KEPT;
			return 0;
		}
	}
	if (ddpenv_config_load_stat(c, path, must_exist, &sb, err, errlen) < 0)
		return -1;
	/* root keeps what it parsed of a file that has settled */
	if (!usable || !c->from_file || geteuid() != 0 || !settled(&sb) ||
	    ddpenv_root_dir(dir, 1, "config_cache", why, sizeof(why)) < 0)
		return 0;
	yaml = ident_of(&sb);
	head_for(&want, path, &yaml, &code);
	if (kept_write(c, dir, file, &want) == 0 && kept)
		*kept = DDPENV_CONFIG_KEPT;
	return 0;
}
