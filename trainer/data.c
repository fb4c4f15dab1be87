/* Data sets and the distributed sampler.  Every malformed file is named
 * with what is wrong with it; nothing here exits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data.h"
#include "rng.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

#define IDX_MAX_BYTES (1u << 31)

/* Read exactly n bytes or say why not. */
static int gz_read_all(gzFile f, void *buf, size_t n, const char *path, const char *what,
		       char *err, size_t errlen)
{
	size_t got = 0;
	while (got < n) {
		unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
		int r = gzread(f, (char *)buf + got, chunk);
		if (r < 0) {
			int e;
			const char *m = gzerror(f, &e);
			snprintf(err, errlen, "%s: %s", path, m);
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got < n) {
		snprintf(err, errlen, "%s: truncated: %zu of %zu bytes of %s", path, got, n, what);
		return -1;
	}
	return 0;
}

int cnn_idx_read(const char *path, uint8_t **data, int *ndim, uint32_t dims[4],
		 char *err, size_t errlen)
{
	struct stat st;
	uint8_t hdr[4], d[16] = { 0 };
	gzFile f;
	int rv = -1;

	*data = NULL;
	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -1;
	}
	if (!(f = gzopen(path, "rb"))) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno ? errno : ENOMEM));
		return -1;
	}
	if (gz_read_all(f, hdr, 4, path, "the IDX header", err, errlen) < 0)
		goto out;
	if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] < 1 || hdr[3] > 4) {
		snprintf(err, errlen, "%s: bad magic %02x%02x%02x%02x (expected 000008 and 1 to 4 "
			 "dimensions: an IDX file of unsigned bytes)", path, hdr[0], hdr[1], hdr[2], hdr[3]);
		goto out;
	}
	*ndim = hdr[3];
	if (gz_read_all(f, d, 4 * (size_t)*ndim, path, "the IDX dimensions", err, errlen) < 0)
		goto out;
	uint64_t total = 1;
	for (int i = 0; i < *ndim; i++) {
		dims[i] = (uint32_t)d[4 * i] << 24 | (uint32_t)d[4 * i + 1] << 16 |
			  (uint32_t)d[4 * i + 2] << 8 | d[4 * i + 3];
		total *= dims[i];
		if (total > IDX_MAX_BYTES) {
			snprintf(err, errlen, "%s: dimensions claim more than %u bytes", path,
				 IDX_MAX_BYTES);
			goto out;
		}
	}
	if (total == 0) {
		snprintf(err, errlen, "%s: empty (a dimension is 0)", path);
		goto out;
	}
	if (!(*data = malloc(total))) {
		snprintf(err, errlen, "%s: out of memory for %llu bytes", path, (unsigned long long)total);
		goto out;
	}
	if (gz_read_all(f, *data, total, path, "the data its header announces", err, errlen) < 0)
		goto out;
	rv = 0;
out:
	gzclose(f);
	if (rv < 0) {
		free(*data);
		*data = NULL;
	}
	return rv;
}

/* dir/name, or dir/name.gz when only that exists. */
static void find_file(const char *dir, const char *name, char *path, size_t len)
{
	struct stat st;
	snprintf(path, len, "%s/%s", dir, name);
	if (stat(path, &st) == 0)
		return;
	snprintf(path, len, "%s/%s.gz", dir, name);
	if (stat(path, &st) == 0)
		return;
	snprintf(path, len, "%s/%s", dir, name);  /* report the plain name */
}

static int load_idx_split(const char *dir, const char *prefix, struct cnn_dataset *d,
			  char *err, size_t errlen)
{
	char ip[4096], lp[4096], n1[64], n2[64];
	uint32_t di[4], dl[4];
	int ni, nl;
	snprintf(n1, sizeof(n1), "%s-images-idx3-ubyte", prefix);
	snprintf(n2, sizeof(n2), "%s-labels-idx1-ubyte", prefix);
	find_file(dir, n1, ip, sizeof(ip));
	find_file(dir, n2, lp, sizeof(lp));
	if (cnn_idx_read(ip, &d->x, &ni, di, err, errlen) < 0)
		return -1;
	if (ni != 3) {
		snprintf(err, errlen, "%s: %d dimensions (expected 3: count, rows, columns)", ip, ni);
		return -1;
	}
	if (cnn_idx_read(lp, &d->y, &nl, dl, err, errlen) < 0)
		return -1;
	if (nl != 1) {
		snprintf(err, errlen, "%s: %d dimensions (expected 1: count)", lp, nl);
		return -1;
	}
	if (dl[0] != di[0]) {
		snprintf(err, errlen, "%s has %u labels but %s has %u images (expected the same count)",
			 lp, dl[0], ip, di[0]);
		return -1;
	}
	if (di[0] > (1u << 30)) {
		snprintf(err, errlen, "%s: %u images is more than this trainer handles", ip, di[0]);
		return -1;
	}
	d->n = (int)di[0];
	d->c = 1;
	d->h = (int)di[1];
	d->w = (int)di[2];
	int maxl = 0;
	for (int i = 0; i < d->n; i++)
		if (d->y[i] > maxl)
			maxl = d->y[i];
	d->classes = maxl + 1 < 10 ? 10 : maxl + 1;
	return 0;
}

static int load_cifar_files(const char *dir, const char *const *names, int nfiles,
			    struct cnn_dataset *d, char *err, size_t errlen)
{
	const size_t rec = 1 + 3072;
	size_t cap = (size_t)nfiles * 10000, n = 0;
	d->x = malloc(cap * 3072);
	d->y = malloc(cap);
	if (!d->x || !d->y) {
		snprintf(err, errlen, "cifar10: out of memory");
		return -1;
	}
	uint8_t *buf = malloc(rec);
	if (!buf) {
		snprintf(err, errlen, "cifar10: out of memory");
		return -1;
	}
	for (int f = 0; f < nfiles; f++) {
		char path[4096];
		struct stat st;
		FILE *fp = NULL;
		const char *why = "not a regular file";
		snprintf(path, sizeof(path), "%s/%s", dir, names[f]);
		if (stat(path, &st) != 0)
			why = strerror(errno);
		else if (S_ISREG(st.st_mode) && !(fp = fopen(path, "rb")))
			why = strerror(errno);
		if (!fp) {
			snprintf(err, errlen, "%s: %s", path, why);
			free(buf);
			return -1;
		}
		if (st.st_size <= 0 || st.st_size % (off_t)rec) {
			snprintf(err, errlen, "%s: %lld bytes is not a whole number of %zu-byte records "
				 "(truncated or not a CIFAR-10 binary batch)", path,
				 (long long)st.st_size, rec);
			fclose(fp);
			free(buf);
			return -1;
		}
		while (fread(buf, 1, rec, fp) == rec) {
			if (n == cap) {
				snprintf(err, errlen, "%s: more than 10000 records", path);
				fclose(fp);
				free(buf);
				return -1;
			}
			if (buf[0] > 9) {
				snprintf(err, errlen, "%s: record %zu has label %u (expected 0..9)",
					 path, n, buf[0]);
				fclose(fp);
				free(buf);
				return -1;
			}
			d->y[n] = buf[0];
			memcpy(d->x + n * 3072, buf + 1, 3072);
			n++;
		}
		fclose(fp);
	}
	free(buf);
	d->n = (int)n;
	d->c = 3;
	d->h = d->w = 32;
	d->classes = 10;
	return 0;
}

/* A learnable synthetic set: each class is a fixed random template, each
 * image its template plus noise.  Same content on every rank. */
static int make_synthetic(struct cnn_dataset *d, int n, uint64_t seed, char *err, size_t errlen)
{
	const int c = 1, h = 28, w = 28, k = 10, px = c * h * w;
	uint8_t tmpl[10][28 * 28];
	uint64_t s = cnn_mix64(0x5717ull);   /* templates are the same for train and test */
	for (int j = 0; j < k; j++)
		for (int i = 0; i < px; i++)
			tmpl[j][i] = (uint8_t)(cnn_rng_below(&s, 4) * 60);
	d->x = malloc((size_t)n * px);
	d->y = malloc((size_t)n);
	if (!d->x || !d->y) {
		snprintf(err, errlen, "synthetic: out of memory for %d images", n);
		return -1;
	}
	s = cnn_mix64(seed);
	for (int i = 0; i < n; i++) {
		int lab = (int)cnn_rng_below(&s, (uint32_t)k);
		d->y[i] = (uint8_t)lab;
		for (int p = 0; p < px; p++) {
			int v = tmpl[lab][p] + (int)cnn_rng_below(&s, 80);
			d->x[(size_t)i * px + p] = (uint8_t)(v > 255 ? 255 : v);
		}
	}
	d->n = n;
	d->c = c;
	d->h = h;
	d->w = w;
	d->classes = k;
	return 0;
}

static void set_stats(struct cnn_dataset *d)
{
	size_t plane = (size_t)d->h * d->w;
	for (int ch = 0; ch < d->c; ch++) {
		double s = 0, s2 = 0;
		for (int i = 0; i < d->n; i++) {
			const uint8_t *p = d->x + ((size_t)i * d->c + ch) * plane;
			uint64_t a = 0, b = 0;
			for (size_t j = 0; j < plane; j++) {
				a += p[j];
				b += (uint32_t)p[j] * p[j];
			}
			s += (double)a;
			s2 += (double)b;
		}
		double cnt = (double)d->n * plane;
		double mean = s / cnt / 255.0, var = s2 / cnt / (255.0 * 255.0) - mean * mean;
		d->mean[ch] = (float)mean;
		d->std[ch] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
	}
}

int cnn_data_load(const char *kind, const char *dir, struct cnn_dataset *train,
		  struct cnn_dataset *test, char *err, size_t errlen)
{
	memset(train, 0, sizeof(*train));
	memset(test, 0, sizeof(*test));
	int rv;
	if (strcmp(kind, "idx") == 0 || strcmp(kind, "mnist") == 0 ||
	    strcmp(kind, "fashion-mnist") == 0) {
		rv = load_idx_split(dir, "train", train, err, errlen);
		if (rv == 0)
			rv = load_idx_split(dir, "t10k", test, err, errlen);
		if (rv == 0 && (test->h != train->h || test->w != train->w)) {
			snprintf(err, errlen, "%s: test images are %dx%d but training images %dx%d",
				 dir, test->h, test->w, train->h, train->w);
			rv = -1;
		}
	} else if (strcmp(kind, "cifar10") == 0) {
		static const char *const tr[] = { "data_batch_1.bin", "data_batch_2.bin",
			"data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin" };
		static const char *const te[] = { "test_batch.bin" };
		rv = load_cifar_files(dir, tr, 5, train, err, errlen);
		if (rv == 0)
			rv = load_cifar_files(dir, te, 1, test, err, errlen);
	} else if (strcmp(kind, "synthetic") == 0) {
		rv = make_synthetic(train, 60000, 1, err, errlen);
		if (rv == 0)
			rv = make_synthetic(test, 10000, 2, err, errlen);
	} else {
		snprintf(err, errlen, "--data=%s: unknown data set (expected fashion-mnist, mnist, "
			 "idx, cifar10 or synthetic)", kind);
		return -1;
	}
	if (rv < 0) {
		cnn_data_free(train);
		cnn_data_free(test);
		return -1;
	}
	if (test->classes > train->classes)
		train->classes = test->classes;
	test->classes = train->classes;
	set_stats(train);
	memcpy(test->mean, train->mean, sizeof(train->mean));
	memcpy(test->std, train->std, sizeof(train->std));
	return 0;
}

void cnn_data_free(struct cnn_dataset *d)
{
	free(d->x);
	free(d->y);
	d->x = d->y = NULL;
	d->n = 0;
}

HOT void cnn_data_gather(const struct cnn_dataset *d, const uint32_t *idx, int n, float *x, uint8_t *y)
{
	size_t plane = (size_t)d->h * d->w;
	for (int i = 0; i < n; i++) {
		const uint8_t *src = d->x + (size_t)idx[i] * d->c * plane;
		float *dst = x + (size_t)i * d->c * plane;
		for (int ch = 0; ch < d->c; ch++) {
			float sc = 1.f / (255.f * d->std[ch]), off = d->mean[ch] / d->std[ch];
			for (size_t j = 0; j < plane; j++)
				dst[ch * plane + j] = (float)src[ch * plane + j] * sc - off;
		}
		y[i] = d->y[idx[i]];
	}
}

int cnn_sampler_init(struct cnn_sampler *s, uint32_t n, uint32_t world, uint32_t rank,
		     uint64_t seed, int shuffle)
{
	memset(s, 0, sizeof(*s));
	if (n == 0 || world == 0 || rank >= world)
		return -1;
	s->n = n;
	s->world = world;
	s->rank = rank;
	s->seed = seed;
	s->shuffle = shuffle;
	s->per_rank = (n + world - 1) / world;
	s->perm = malloc((size_t)n * sizeof(uint32_t));
	s->mine = malloc((size_t)s->per_rank * sizeof(uint32_t));
	if (!s->perm || !s->mine) {
		cnn_sampler_free(s);
		return -1;
	}
	return 0;
}

void cnn_sampler_epoch(struct cnn_sampler *s, uint32_t epoch)
{
	if (!s->n) /* one cnn_sampler_init refused (or freed): nothing to order */
		return;
	for (uint32_t i = 0; i < s->n; i++)
		s->perm[i] = i;
	if (s->shuffle) {
		uint64_t st = cnn_mix64(s->seed * 0x9e3779b97f4a7c15ull + epoch);
		for (uint32_t i = s->n - 1; i > 0; i--) {
			uint32_t j = cnn_rng_below(&st, i + 1);
			uint32_t t = s->perm[i];
			s->perm[i] = s->perm[j];
			s->perm[j] = t;
		}
	}
	for (uint32_t j = 0; j < s->per_rank; j++) {
		uint64_t k = (uint64_t)s->rank + (uint64_t)j * s->world;
		s->mine[j] = s->perm[k % s->n];
	}
}

void cnn_sampler_free(struct cnn_sampler *s)
{
	free(s->perm);
	free(s->mine);
	s->perm = s->mine = NULL;
}
