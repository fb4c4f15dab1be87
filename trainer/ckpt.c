/* Checkpoint files.  Layout (native endian, one architecture):
 *   "CNNCKPT\0", u32 version, struct hdr, float params[nparams],
 *   float optimizer state[state_len], u32 crc32 of everything before. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt.h"

#define MAGIC "CNNCKPT"
#define VERSION 1u

struct hdr {
	int32_t c, h, w, classes;
	uint64_t nparams;
	int32_t optim, pad;
	uint64_t state_len;
	int64_t updates;
	struct cnn_ckpt_pos pos;
};

static int write_all(int fd, const void *p, size_t n, uLong *crc)
{
	*crc = crc32(*crc, p, (uInt)n);
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int cnn_ckpt_save(const char *dir, const struct cnn_model *m, const struct cnn_optim *o,
		  const struct cnn_ckpt_pos *pos, char *err, size_t errlen)
{
	char path[4096], tmp[4200], name[64];
	struct hdr h = { m->in.c, m->in.h, m->in.w, m->in.classes, m->nparams, (int32_t)o->kind, 0,
			 cnn_optim_state_len(o), o->updates, *pos };
	uint32_t version = VERSION;
	uLong crc = crc32(0, NULL, 0);
	int fd = -1, dfd, rv = -1;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "checkpoint dir %s: %s", dir, strerror(errno));
		return -1;
	}
	/* the temporary file, its rename and the directory's fsync all in the
	 * one directory opened here, whatever the path names by then (a
	 * --checkpoint-dir that is a link moved mid-save) */
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "checkpoint dir %s: %s", dir, strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, CNN_CKPT_NAME);
	snprintf(name, sizeof(name), ".%s.tmp.%d", CNN_CKPT_NAME, (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s/%s", dir, name);
	if ((fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		snprintf(err, errlen, "checkpoint %s: %s", tmp, strerror(errno));
		close(dfd);
		return -1;
	}
	if (write_all(fd, MAGIC, 8, &crc) < 0 || write_all(fd, &version, 4, &crc) < 0 ||
	    write_all(fd, &h, sizeof(h), &crc) < 0 ||
	    write_all(fd, m->params, m->nparams * sizeof(float), &crc) < 0 ||
	    write_all(fd, o->s1, o->n * sizeof(float), &crc) < 0 ||
	    (o->s2 && write_all(fd, o->s2, o->n * sizeof(float), &crc) < 0)) {
		snprintf(err, errlen, "checkpoint %s: writing: %s", tmp, strerror(errno));
		goto out;
	}
	uint32_t c32 = (uint32_t)crc;
	uLong dummy = 0;
	if (write_all(fd, &c32, 4, &dummy) < 0 || fsync(fd) < 0) {
		snprintf(err, errlen, "checkpoint %s: writing: %s", tmp, strerror(errno));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		snprintf(err, errlen, "checkpoint %s: closing: %s", tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (renameat(dfd, name, dfd, CNN_CKPT_NAME) < 0) {
		snprintf(err, errlen, "checkpoint: renaming %s to %s: %s", tmp, path, strerror(errno));
		goto out;
	}
	fsync(dfd);
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rv < 0)
		unlinkat(dfd, name, 0);
	close(dfd);
	return rv;
}

int cnn_ckpt_load(const char *dir, struct cnn_model *m, struct cnn_optim *o,
		  struct cnn_ckpt_pos *pos, char *err, size_t errlen)
{
	char path[4096];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, CNN_CKPT_NAME);
	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "checkpoint %s: not a regular file", path);
		return -1;
	}
	size_t sz = (size_t)st.st_size, min = 8 + 4 + sizeof(struct hdr) + 4;
	if (sz < min) {
		snprintf(err, errlen, "checkpoint %s: %zu bytes, too short to be a checkpoint", path, sz);
		return -1;
	}
	uint8_t *buf = malloc(sz);
	FILE *f = fopen(path, "rb");
	int rv = -1;
	if (!buf || !f || fread(buf, 1, sz, f) != sz) {
		snprintf(err, errlen, "checkpoint %s: cannot read it: %s", path,
			 !buf ? "out of memory" : strerror(errno));
		goto out;
	}
	if (memcmp(buf, MAGIC, 8) != 0) {
		snprintf(err, errlen, "checkpoint %s: bad magic (not a cnn_train checkpoint)", path);
		goto out;
	}
	uint32_t version, c32;
	memcpy(&version, buf + 8, 4);
	if (version != VERSION) {
		snprintf(err, errlen, "checkpoint %s: version %u (this cnn_train reads version %u)",
			 path, version, VERSION);
		goto out;
	}
	memcpy(&c32, buf + sz - 4, 4);
	if ((uint32_t)crc32(crc32(0, NULL, 0), buf, (uInt)(sz - 4)) != c32) {
		snprintf(err, errlen, "checkpoint %s: CRC mismatch (truncated or corrupted)", path);
		goto out;
	}
	struct hdr h;
	memcpy(&h, buf + 12, sizeof(h));
	if (h.c != m->in.c || h.h != m->in.h || h.w != m->in.w || h.classes != m->in.classes ||
	    h.nparams != m->nparams) {
		snprintf(err, errlen, "checkpoint %s is for a %dx%dx%d->%d model (%llu params), "
			 "this run's model is %dx%dx%d->%d (%zu params): different data set or "
			 "checkpoint directory?", path, h.c, h.h, h.w, h.classes,
			 (unsigned long long)h.nparams, m->in.c, m->in.h, m->in.w, m->in.classes,
			 m->nparams);
		goto out;
	}
	if (h.optim != (int32_t)o->kind || h.state_len != cnn_optim_state_len(o)) {
		snprintf(err, errlen, "checkpoint %s was written with the %s optimizer, this run "
			 "uses %s", path, h.optim == CNN_ADADELTA ? "adadelta" : "sgd",
			 o->kind == CNN_ADADELTA ? "adadelta" : "sgd");
		goto out;
	}
	size_t want = 12 + sizeof(h) + (h.nparams + h.state_len) * sizeof(float) + 4;
	if (sz != want) {
		snprintf(err, errlen, "checkpoint %s: %zu bytes, expected %zu", path, sz, want);
		goto out;
	}
	const uint8_t *p = buf + 12 + sizeof(h);
	memcpy(m->params, p, m->nparams * sizeof(float));
	p += m->nparams * sizeof(float);
	memcpy(o->s1, p, o->n * sizeof(float));
	p += o->n * sizeof(float);
	if (o->s2)
		memcpy(o->s2, p, o->n * sizeof(float));
	o->updates = h.updates;
	*pos = h.pos;
	rv = 1;
out:
	if (f)
		fclose(f);
	free(buf);
	return rv;
}

void cnn_ckpt_resume_at(const struct cnn_ckpt_pos *pos, uint32_t n, int world, int batch,
			long long *step_in_epoch, long long *global)
{
	*step_in_epoch = pos->step_in_epoch;
	*global = pos->global_step;
	if (pos->world < 1 || pos->batch < 1 || world < 1 || batch < 1 || n == 0 ||
	    (pos->world == world && pos->batch == batch))
		return;
	/* positions of the epoch's order the checkpoint's steps covered */
	uint64_t per_old = (n + (uint64_t)pos->world - 1) / (uint64_t)pos->world;
	uint64_t seen = (uint64_t)(pos->step_in_epoch > 0 ? pos->step_in_epoch : 0) * (uint64_t)pos->batch;
	if (seen > per_old)
		seen = per_old;
	seen *= (uint64_t)pos->world;
	uint64_t per_new = (n + (uint64_t)world - 1) / (uint64_t)world;
	uint64_t steps_new = (per_new + (uint64_t)batch - 1) / (uint64_t)batch;
	uint64_t b = seen / ((uint64_t)batch * (uint64_t)world);
	if (b > steps_new)
		b = steps_new;
	*step_in_epoch = (long long)b;
	*global = (long long)pos->epoch * (long long)steps_new + (long long)b;
}
