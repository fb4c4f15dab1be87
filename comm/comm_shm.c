/*
 * The all-reduce of ranks that share a node, through shared memory: what
 * gloo (TCP over loopback between the ranks of a node) cannot give CPU
 * ranks whose exchange takes its CPU time from their compute.  NCCL's SHM
 * transport does this between a node's GPUs; DeepSpeed's and oneCCL's CPU
 * collectives do it between processes.
 *
 * Set up once, collectively (cnn_comm_use_shm): rank 0 makes a POSIX
 * shared-memory segment under a random name (mode 0600: the job's user
 * alone), says the name through the store, and every rank maps it or says
 * it cannot (another node: no such name in its /dev/shm).  Only when every
 * rank has mapped it does the communicator use it; rank 0 then removes the
 * name, so a crash leaves nothing in /dev/shm (where rank 0 dies first, a
 * peer that opened it removes it).  Otherwise gloo as before.
 *
 * An all-reduce, in chunks of at most `chunk` floats, each in one of two
 * halves of the segment by turns:
 *   1. each rank copies its chunk into its slot of the half;
 *   2. a barrier;
 *   3. each rank sums its share of the chunk over the slots, in rank
 *      order (every rank's result the same bits), into slot 0, scaled
 *      there when the caller asked for a mean;
 *   4. a barrier;
 *   5. each rank copies the sum from slot 0.
 * Chunk k+2 reuses chunk k's half only after every rank has passed chunk
 * k+1's first barrier, so after its copy of chunk k's sum.
 *
 * The segment also holds a buffer of each rank's own (cnn_comm_shm_buffer:
 * the trainer computes its gradients there), and an all-reduce of floats
 * inside it copies nothing: after a barrier each rank sums its share over
 * every rank's buffer, in rank order, and writes the result (scaled) into
 * every one; a second barrier, and each rank's buffer holds the whole sum.
 * The traffic of a gradient's all-reduce falls from about seven passes
 * over it per rank (copy in, sum, copy out, scale) to two, and a bucket
 * takes two barriers, not two per chunk.  Each rank allocates its own
 * buffer's pages (posix_fallocate: on its NUMA node, and a /dev/shm too
 * small fails the set-up, not a later page fault with SIGBUS).
 *
 * A barrier is a count and a generation word: the last rank to arrive
 * bumps the generation and wakes the others (futex).  A waiter spins a
 * few microseconds, then yields its core for CNN_COMM_SPIN_MS (comm.h),
 * then sleeps on the word with a bound.  A rank that waits long asks the
 * store every half second whether a peer died or failed, and stops then;
 * a rank that abandons sets a flag every waiter sees.  --timeout bounds
 * the wait, as gloo's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "ddpenv.h"

#define SHM_MAGIC 0x64647073686d3032ull /* "ddpshm02" */

struct shm_head {
	uint64_t magic;
	uint32_t world;
	uint32_t chunk;             /* floats a slot holds */
	uint64_t own_n;             /* floats of each rank's own buffer */
	_Alignas(64) atomic_uint arrived;
	_Alignas(64) atomic_uint gen;
	atomic_uint abandoned;      /* a rank gave up: every wait fails */
};

#define HEAD_BYTES ((sizeof(struct shm_head) + 63) & ~(size_t)63)

struct shm {
	struct shm_head *h;
	float *slots;               /* 2 halves x world slots x chunk floats */
	float *own;                 /* world buffers of stride floats, NULL if none */
	uint32_t world;
	size_t own_n, stride;       /* floats asked for; a buffer's place, whole pages */
	size_t bytes;
	uint32_t chunk;
	unsigned turn;              /* chunks reduced so far: the half to use */
	int timeout_ms;
};

/* Floats a slot holds: 8 MiB in all (two halves), at least 4096 a slot. */
static uint32_t chunk_for(int world)
{
	size_t c = ((size_t)1 << 20) / (size_t)world;
	return (uint32_t)(c < 4096 ? 4096 : c);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static void futex_wait(atomic_uint *w, unsigned val, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(atomic_uint *w)
{
	syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Every rank here: 0, else -1 with err (a peer gone, abandoned, or the
 * timeout).  The store's word on the peers is asked from the thread in
 * the collective: the trainer's other thread waits for it meanwhile
 * (cnn_reducer_wait), so the store is this thread's. */
static int barrier(struct cnn_comm *c, struct shm *s, char *err, size_t errlen)
{
	struct shm_head *h = s->h;
	unsigned g = atomic_load(&h->gen);
	double t0, asked;

	if (atomic_fetch_add(&h->arrived, 1) + 1 == (unsigned)c->world) {
		atomic_store(&h->arrived, 0);
		atomic_fetch_add(&h->gen, 1);
		futex_wake_all(&h->gen);
		return 0;
	}
	/* a peer a few microseconds behind: no sleep */
	for (int i = 0; i < 2000; i++) {
		if (atomic_load(&h->gen) != g)
			return 0;
		cpu_relax();
	}
	t0 = asked = now_ms();
	while (atomic_load(&h->gen) == g) {
		double t = now_ms();
		if (atomic_load(&h->abandoned)) {
			snprintf(err, errlen, "shared-memory all-reduce: a peer abandoned it");
			return -1;
		}
		if (t - t0 > s->timeout_ms) {
			snprintf(err, errlen, "shared-memory all-reduce: a peer did not arrive in %.1f s (--timeout)",
				 s->timeout_ms / 1000.0);
			return -1;
		}
		if (t - asked > 500) {
			asked = t;
			if (c->peer_lost && c->peer_lost(c) != CNN_PEERS_OK) {
				snprintf(err, errlen, "shared-memory all-reduce: a peer left the rendezvous");
				return -1;
			}
		}
		if (t - t0 < CNN_COMM_SPIN_MS)
			sched_yield();
		else
			futex_wait(&h->gen, g, 100);
	}
	return 0;
}

/* acc[i] += in[i]: in blocks of 8 the compiler keeps in vector
 * registers at -O2 (one add per element, so the bits of a scalar loop) */
static void add_into(float *restrict acc, const float *restrict in, size_t n)
{
	typedef float v8 __attribute__((vector_size(32), aligned(4), may_alias));
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		*(v8 *)(acc + i) += *(const v8 *)(in + i);
	for (; i < n; i++)
		acc[i] += in[i];
}

/* Floats [off, off+n) of every rank's own buffer: their sum over ranks,
 * in rank order, times scale (1: none), written into every buffer; in
 * blocks that stay in L1 between the reads and the writes. */
static void reduce_own(struct shm *s, int world, size_t off, size_t n, float scale)
{
	float tmp[1024] __attribute__((aligned(64)));

	for (size_t i = 0; i < n; i += 1024) {
		size_t m = n - i < 1024 ? n - i : 1024;
		float *b = s->own + off + i;
		memcpy(tmp, b, m * sizeof(float));
		for (int k = 1; k < world; k++)
			add_into(tmp, b + (size_t)k * s->stride, m);
		if (scale != 1.f)
			cnn_comm_scale(tmp, m, scale);
		for (int k = 0; k < world; k++)
			memcpy(b + (size_t)k * s->stride, tmp, m * sizeof(float));
	}
}

/* buf[0..n) inside this rank's own buffer, at the same place on every
 * rank: reduced where it lies. */
static int reduce_in_place(struct cnn_comm *c, struct shm *s, float *buf, size_t n, float scale, char *err,
			   size_t errlen)
{
	size_t w = (size_t)c->world, r = (size_t)c->rank;
	size_t off = (size_t)(buf - (s->own + r * s->stride));

	if (barrier(c, s, err, errlen) < 0)
		return -1;
	reduce_own(s, c->world, off + n * r / w, n * (r + 1) / w - n * r / w, scale);
	return barrier(c, s, err, errlen);
}

static int in_own(const struct shm *s, int rank, const float *buf, size_t n)
{
	const float *b = s->own ? s->own + (size_t)rank * s->stride : NULL;
	return b && buf >= b && buf <= b + s->own_n && n <= (size_t)(b + s->own_n - buf);
}

/* The sum over ranks times scale (1: the sum alone) */
static int shm_reduce(struct cnn_comm *c, float *buf, size_t n, float scale, char *err, size_t errlen)
{
	struct shm *s = c->local;
	size_t w = (size_t)c->world, r = (size_t)c->rank;

	if (n == 0)
		return 0;
	if (in_own(s, c->rank, buf, n))
		return reduce_in_place(c, s, buf, n, scale, err, errlen);
	for (size_t off = 0; off < n; off += s->chunk, s->turn++) {
		size_t m = n - off < s->chunk ? n - off : s->chunk;
		float *half = s->slots + (size_t)(s->turn & 1) * w * s->chunk;
		size_t lo = m * r / w, hi = m * (r + 1) / w;

		memcpy(half + r * s->chunk, buf + off, m * sizeof(float));
		if (barrier(c, s, err, errlen) < 0)
			return -1;
		for (size_t k = 1; k < w; k++)
			add_into(half + lo, half + k * s->chunk + lo, hi - lo);
		if (scale != 1.f)
			cnn_comm_scale(half + lo, hi - lo, scale);
		if (barrier(c, s, err, errlen) < 0)
			return -1;
		memcpy(buf + off, half, m * sizeof(float));
	}
	return 0;
}

static int shm_allreduce(struct cnn_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
	return shm_reduce(c, buf, n, 1.f, err, errlen);
}

static int shm_allreduce_scaled(struct cnn_comm *c, float *buf, size_t n, float scale, char *err, size_t errlen)
{
	return shm_reduce(c, buf, n, scale, err, errlen);
}

static void shm_unmap(struct shm *s)
{
	if (s->h)
		munmap(s->h, s->bytes);
	free(s);
}

static void shm_destroy(struct cnn_comm *c)
{
	shm_unmap(c->local);
	c->local = NULL;
	cnn_comm_gloo_ops.destroy(c);
}

static void shm_abandon(struct cnn_comm *c)
{
	struct shm *s = c->local;
	if (s) {
		atomic_store(&s->h->abandoned, 1);
		futex_wake_all(&s->h->gen);
	}
	cnn_comm_gloo_ops.abandon(c);
}

/* The gloo backend with this all-reduce (c->local set); its other
 * collectives are gloo's. */
static const struct cnn_comm_ops shm_ops = { "gloo", shm_allreduce, shm_destroy, shm_abandon,
					     shm_allreduce_scaled };

float *cnn_comm_shm_buffer(struct cnn_comm *c)
{
	struct shm *s = c->ops == &shm_ops ? c->local : NULL;
	return s && s->own ? s->own + (size_t)c->rank * s->stride : NULL;
}

/* Where the own buffers start, in bytes: on a page of their own */
static size_t own_offset(const struct shm *s)
{
	return (HEAD_BYTES + 2 * (size_t)s->world * s->chunk * sizeof(float) + 4095) & ~(size_t)4095;
}

/* The segment's sizes for world ranks with own floats each: 0, else -1
 * with why (too large to address: every rank finds the same). */
static int lay_out(struct shm *s, int world, size_t own, char *why, size_t whylen)
{
	const size_t page = 1024; /* floats */

	s->world = (uint32_t)world;
	s->chunk = chunk_for(world);
	s->own_n = own;
	s->stride = own ? (own + page - 1) / page * page : 0;
	if (own > SIZE_MAX / 8 / (size_t)world || s->stride > SIZE_MAX / 8 / (size_t)world) {
		snprintf(why, whylen, "%zu floats a rank for %d ranks: too large for a segment", own, world);
		return -1;
	}
	s->bytes = own_offset(s) + (size_t)world * s->stride * sizeof(float);
	return 0;
}

/* Bytes [off, off+len) of the segment allocated now: 0, else -1 with err
 * (a /dev/shm too small says so here, not with a SIGBUS at a later
 * write). */
static int reserve(int fd, size_t off, size_t len, const char *name, const char *what, char *err, size_t errlen)
{
	int e = posix_fallocate(fd, (off_t)off, (off_t)len);
	if (e != 0) {
		snprintf(err, errlen, "%s: %zu bytes for %s: %s", name, len, what, strerror(e));
		return -1;
	}
	return 0;
}

/* Rank 0: the segment made, its name in name; fd the open segment.
 * 0, else -1 with err. */
static int make_segment(struct shm *s, int world, char *name, size_t len, int *fd, char *err, size_t errlen)
{
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		snprintf(err, errlen, "getrandom: %s", strerror(errno));
		return -1;
	}
	int k = snprintf(name, len, "/ddp-allreduce-");
	for (size_t i = 0; i < sizeof(rnd); i++)
		k += snprintf(name + k, len - (size_t)k, "%02x", rnd[i]);
	if ((*fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
		snprintf(err, errlen, "shm_open %s: %s", name, strerror(errno));
		return -1;
	}
	if (ftruncate(*fd, (off_t)s->bytes) < 0) {
		snprintf(err, errlen, "%s: %zu bytes: %s", name, s->bytes, strerror(errno));
		return -1;
	}
	(void)world;
	return reserve(*fd, 0, own_offset(s), name, "the chunks' halves", err, errlen);
}

/* Map the segment of fd; rank 0 writes its head.  0, else -1 with err. */
static int map_segment(struct shm *s, int fd, int rank, int world, const char *name, char *err, size_t errlen)
{
	struct stat st;
	void *m;

	if (fstat(fd, &st) < 0 || (size_t)st.st_size != s->bytes) {
		snprintf(err, errlen, "%s: expected %zu bytes", name, s->bytes);
		return -1;
	}
	m = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "mmap %s: %s", name, strerror(errno));
		return -1;
	}
	s->h = m;
	s->slots = (float *)((char *)m + HEAD_BYTES);
	if (rank == 0) {
		s->h->world = (uint32_t)world;
		s->h->chunk = s->chunk;
		s->h->own_n = s->own_n;
		atomic_store(&s->h->arrived, 0);
		atomic_store(&s->h->gen, 0);
		atomic_store(&s->h->abandoned, 0);
		s->h->magic = SHM_MAGIC;
	} else if (s->h->magic != SHM_MAGIC || s->h->world != (uint32_t)world || s->h->chunk != s->chunk ||
		   s->h->own_n != s->own_n) {
		snprintf(err, errlen, "%s: not rank 0's segment for %d ranks of %zu floats", name, world, s->own_n);
		return -1;
	}
	if (!s->stride)
		return 0;
	s->own = (float *)((char *)m + own_offset(s));
	return reserve(fd, own_offset(s) + (size_t)rank * s->stride * sizeof(float), s->stride * sizeof(float),
		       name, "this rank's buffer", err, errlen);
}

/* Store keys of the set-up, one per rank and step of it */
#define KEY_NAME "comm/shm/name"
#define KEY_MAPPED "comm/shm/mapped/%d"
#define KEY_USE "comm/shm/use"

/* KEY's value, waited for in slices between which the store says whether
 * a peer died or left (its answer would never come), or said it failed:
 * 0, else -1 with err (then cnn_comm_explain_failure names the rank). */
static int wait_key(struct cnn_comm *c, const char *key, int timeout_ms, void **v, size_t *l, char *err,
		    size_t errlen)
{
	double deadline = now_ms() + timeout_ms;
	int dead[1];

	for (;;) {
		double left = deadline - now_ms();
		int aborted = 0, slice = left > 200 ? 200 : left > 0 ? (int)left : 0;
		if (ddpenv_store_get_unless(c->store, key, CNN_COMM_FAILED_KEY, slice, v, l, &aborted, err, errlen) == 0) {
			if (!aborted)
				return 0;
			snprintf(err, errlen, "shared-memory set-up: a peer failed first (%.*s)",
				 (int)(*l < 300 ? *l : 300), (const char *)*v);
			free(*v);
			*v = NULL;
			return -1;
		}
		if (ddpenv_store_dead_ranks(c->store, dead, 1, err, errlen) != 0 ||
		    ddpenv_store_left_ranks(c->store, dead, 1, err, errlen) != 0) {
			snprintf(err, errlen, "shared-memory set-up: a peer left the rendezvous");
			return -1;
		}
		if (left <= slice) {
			snprintf(err, errlen, "shared-memory set-up: waiting for '%s' in the rendezvous: timed out "
				 "after %.1f s", key, timeout_ms / 1000.0);
			return -1;
		}
	}
}

/* Rank 0: every rank's answer, then the verdict said: 1 all mapped
 * (and ok0: rank 0 too), 0 not (why says who first could not), -1 the
 * store failed (err). */
static int verdict(struct cnn_comm *c, int ok0, const char *name, int timeout_ms, char *why, size_t whylen, char *err,
		   size_t errlen)
{
	int all = ok0;
	char key[48];

	for (int r = 1; r < c->world; r++) {
		void *v = NULL;
		size_t l = 0;
		snprintf(key, sizeof(key), KEY_MAPPED, r);
		if (wait_key(c, key, timeout_ms, &v, &l, err, errlen) < 0)
			return -1;
		if (all && (l < 1 || ((char *)v)[0] != '1')) {
			all = 0;
			snprintf(why, whylen, "rank %d: %.*s", r, (int)(l > 1 && l < 300 ? l - 2 : 0), (char *)v + 1);
		}
		free(v);
	}
	/* every rank that could has mapped it: no name left in /dev/shm
	 * before any rank goes on */
	if (ok0)
		shm_unlink(name);
	if (ddpenv_store_set(c->store, KEY_USE, all ? "1" : "0", 1, err, errlen) < 0)
		return -1;
	return all;
}

int cnn_comm_use_shm(struct cnn_comm *c, int timeout_ms, size_t own, char *why, size_t whylen, char *err,
		     size_t errlen)
{
	struct shm *s;
	char name[64] = "", e[DDPENV_ERRLEN] = "";
	int fd = -1, ok, use = 0;

	why[0] = '\0';
	if (c->world == 1 || c->ops != &cnn_comm_gloo_ops) {
		snprintf(why, whylen, "%s", c->world == 1 ? "one rank" : "not the gloo backend");
		return 0;
	}
	if (!(s = calloc(1, sizeof(*s)))) {
		snprintf(err, errlen, "comm: out of memory");
		return -1;
	}
	s->timeout_ms = timeout_ms;
	if (lay_out(s, c->world, own, why, whylen) < 0) {
		free(s);
		return 0;
	}
	if (c->rank == 0) {
		ok = make_segment(s, c->world, name, sizeof(name), &fd, e, sizeof(e)) == 0 &&
		     map_segment(s, fd, 0, c->world, name, e, sizeof(e)) == 0;
		if (!ok && fd >= 0)
			shm_unlink(name);
		/* "" when rank 0 has none: the others map nothing */
		if (ddpenv_store_set(c->store, KEY_NAME, ok ? name : "", ok ? strlen(name) : 0, err, errlen) < 0)
			goto fail;
		if (!ok)
			snprintf(why, whylen, "rank 0: %s", e);
		use = verdict(c, ok, name, timeout_ms, ok ? why : e, ok ? whylen : sizeof(e), err, errlen);
		if (use < 0 && ok)
			shm_unlink(name);
		if (use < 0)
			goto fail;
	} else {
		void *v = NULL;
		size_t l = 0;
		char key[48], ans[320];
		if (wait_key(c, KEY_NAME, timeout_ms, &v, &l, err, errlen) < 0)
			goto fail;
		snprintf(name, sizeof(name), "%.*s", (int)(l < sizeof(name) ? l : sizeof(name) - 1), (char *)v);
		free(v);
		if (!name[0]) {
			snprintf(e, sizeof(e), "rank 0 has no segment");
			ok = 0;
		} else if ((fd = shm_open(name, O_RDWR | O_CLOEXEC, 0)) < 0) {
			snprintf(e, sizeof(e), "%s: %s (another node's)", name, strerror(errno));
			ok = 0;
		} else {
			ok = map_segment(s, fd, c->rank, c->world, name, e, sizeof(e)) == 0;
		}
		snprintf(key, sizeof(key), KEY_MAPPED, c->rank);
		snprintf(ans, sizeof(ans), "%c%.300s", ok ? '1' : '0', ok ? "" : e);
		if (ddpenv_store_set(c->store, key, ans, strlen(ans) + 1, err, errlen) < 0)
			goto fail;
		if (wait_key(c, KEY_USE, timeout_ms, &v, &l, err, errlen) < 0)
			goto fail;
		use = l == 1 && ((char *)v)[0] == '1';
		free(v);
		if (!use)
			snprintf(why, whylen, "%s", ok ? "a peer could not map rank 0's segment" : e);
	}
	if (fd >= 0)
		close(fd);
	if (!use) {
		shm_unmap(s);
		return 0;
	}
	c->local = s;
	c->ops = &shm_ops;
	return 1;
fail:
	/* a peer that opened the segment and cannot finish (rank 0 died
	 * before removing its name): no name left in /dev/shm */
	if (fd >= 0) {
		close(fd);
		if (c->rank != 0)
			shm_unlink(name);
	}
	shm_unmap(s);
	return -1;
}
