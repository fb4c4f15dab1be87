/* The convolution stack on oneDNN primitives; see conv_dnnl.h. */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl.h"
#include "dnnl_compat.h"
#include "model.h"
#include "pool_avx2.h"

/* Memories and primitives of one batch size.  "User" memories wrap our
 * buffers (NCHW input, OIHW parameters and gradients, the shared activation
 * buffers); the others are oneDNN-layout copies, NULL when oneDNN takes the
 * user layout as it is. */
enum {
	M_X, M_XI,                  /* input, and its oneDNN copy */
	M_A1, M_Y2, M_DA1, M_DA2,   /* activations and their gradients */
	M_W1, M_W1F, M_B1,          /* conv1 weights: OIHW, forward layout; bias */
	M_W2, M_W2F, M_W2D, M_B2,   /* conv2 weights: OIHW, forward, backward-data */
	M_DW1, M_DW1I, M_DB1,       /* conv1 weight gradient: OIHW, oneDNN's; bias */
	M_X1W, M_DA1W,              /* conv1 weight gradient's own input layouts, if any */
	M_DW2, M_DW2I,
	M_COUNT
};
enum {
	K_C1F, K_C2F, K_C1W, K_C2W, K_C2D,     /* convolutions */
	K_RX, K_RW1F, K_RW2F, K_RW2D, K_RDW1, K_RDW2,   /* reorders */
	K_RX1W, K_RDA1W,
	K_COUNT
};

struct batch {
	int n;
	unsigned long used;
	dnnl_memory_t mem[M_COUNT];
	dnnl_primitive_t prim[K_COUNT];
	size_t a1_bytes, y2_bytes;
};

#define NBATCH 6

struct cnn_convnet {
	dnnl_engine_t eng;
	dnnl_stream_t st;
	int block;                  /* channels per block of a1/y2: 16, 8 or 1 */
	unsigned long clock;
	struct batch b[NBATCH];
	float *a1, *y2, *da1, *da2; /* shared by all batch sizes */
	size_t a1_cap, y2_cap, da1_cap, da2_cap;   /* bytes */
	float *tile;                /* the pool's tiles, tile_n floats per thread */
	size_t tile_n;
	int tile_threads;
	char desc[160];
};

static int fail(char *err, size_t errlen, const char *what, dnnl_status_t s, ...)
{
	static const char *names[] = {
		"success", "out of memory", "invalid arguments", "unimplemented",
		"iterator ends", "runtime error", "not required",
	};
	char buf[160];
	va_list ap;
	va_start(ap, s);
	vsnprintf(buf, sizeof(buf), what, ap);
	va_end(ap);
	snprintf(err, errlen, "oneDNN: %s: %s", buf,
		 (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown status");
	return -1;
}

static void batch_free(struct batch *b)
{
	for (int i = 0; i < K_COUNT; i++)
		if (b->prim[i])
			dnnl_primitive_destroy(b->prim[i]);
	for (int i = 0; i < M_COUNT; i++)
		if (b->mem[i])
			dnnl_memory_destroy(b->mem[i]);
	memset(b, 0, sizeof(*b));
}

/* Convolutions here: stride 1, no padding ("valid") */
static const dnnl_dims_t stride1 = { 1, 1 }, pad0 = { 0, 0 };

static int is_tag(cnn_cmd_t md, dnnl_format_tag_t tag)
{
	const dnnl_dim_t *dims;
	cnn_md_t t = NULL;
	int nd, eq;
	if (cnn_md_dims(md, &nd, &dims) < 0 || cnn_md_create(&t, nd, dims, tag) != dnnl_success)
		return 0;
	eq = dnnl_memory_desc_equal(t, md);
	cnn_md_destroy(t);
	return eq;
}

/* A memory without a buffer (set before each use) or with its own. */
static dnnl_status_t mem(struct cnn_convnet *c, dnnl_memory_t *out, cnn_cmd_t md, int own)
{
	return dnnl_memory_create(out, md, c->eng, own ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE);
}

/* When from and to differ: *internal gets a buffer of layout to (or from,
 * for a reorder out of oneDNN's layout) and *rp a reorder from -> to. */
static dnnl_status_t maybe_reorder(struct cnn_convnet *c, cnn_cmd_t from, cnn_cmd_t to,
				   int internal_is_to, dnnl_memory_t *internal, dnnl_primitive_t *rp)
{
	if (dnnl_memory_desc_equal(from, to))
		return dnnl_success;
	dnnl_primitive_desc_t pd;
	dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, c->eng, to, c->eng, NULL);
	if (s != dnnl_success)
		return s;
	s = dnnl_primitive_create(rp, pd);
	dnnl_primitive_desc_destroy(pd);
	if (s != dnnl_success)
		return s;
	return mem(c, internal, internal_is_to ? to : from, 1);
}

static const char *impl_of(dnnl_primitive_desc_t pd)
{
	const char *s = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
		return "?";
	return s;
}

/* Forward convolution 3x3 valid with ReLU fused; dst in `dst_tag` or
 * oneDNN's choice (dnnl_format_tag_any). */
static dnnl_status_t conv_fwd_pd(struct cnn_convnet *c, dnnl_primitive_desc_t *pd, cnn_cmd_t src,
				 const dnnl_dims_t wd, const dnnl_dims_t dd, dnnl_format_tag_t dst_tag)
{
	cnn_md_t w = NULL, b = NULL, d = NULL;
	dnnl_dims_t bd = { wd[0] };
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_status_t s;

	if ((s = cnn_md_create(&w, 4, wd, dnnl_format_tag_any)) == dnnl_success &&
	    (s = cnn_md_create(&b, 1, bd, dnnl_x)) == dnnl_success)
		s = cnn_md_create(&d, 4, dd, dst_tag);
	if (s == dnnl_success)
		s = dnnl_post_ops_create(&po);
	if (s == dnnl_success)
		s = cnn_post_ops_append_relu(po);
	if (s == dnnl_success)
		s = dnnl_primitive_attr_create(&attr);
	if (s == dnnl_success)
		s = dnnl_primitive_attr_set_post_ops(attr, po);
	if (s == dnnl_success)
		s = cnn_conv_fwd_pd(pd, c->eng, src, w, b, d, stride1, pad0, attr);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	cnn_md_destroy(w);
	cnn_md_destroy(b);
	cnn_md_destroy(d);
	return s;
}

/* Weight gradient of a forward convolution (hint), and its bias's when
 * with_bias, with the activations' layouts given and oneDNN's choice for
 * the weights. */
static dnnl_status_t conv_bwd_w_pd(struct cnn_convnet *c, dnnl_primitive_desc_t *pd,
				   cnn_cmd_t src, const dnnl_dims_t wd, cnn_cmd_t diff_dst,
				   dnnl_primitive_desc_t hint, int with_bias)
{
	cnn_md_t w = NULL, b = NULL;
	dnnl_dims_t bd = { wd[0] };
	dnnl_status_t s;

	if ((s = cnn_md_create(&w, 4, wd, dnnl_format_tag_any)) == dnnl_success &&
	    (!with_bias || (s = cnn_md_create(&b, 1, bd, dnnl_x)) == dnnl_success))
		s = cnn_conv_bwd_weights_pd(pd, c->eng, src, w, b, diff_dst, stride1, pad0, hint);
	cnn_md_destroy(w);
	cnn_md_destroy(b);
	return s;
}

static int is_ref(dnnl_primitive_desc_t pd)
{
	return strncmp(impl_of(pd), "ref", 3) == 0;
}

/* conv1's weight gradient when oneDNN offers only its reference code for
 * the layouts the forward chose (oneDNN 2.6 on AVX2: one input channel,
 * blocked diff_dst; ref:any took 800 ms of a 900 ms batch of 64): the
 * first of oneDNN's own layouts, then plain NCHW, that an optimized
 * implementation takes (gemm:jit for plain), its inputs reordered to it.
 * *pd is kept when none does. */
static dnnl_status_t conv1_bwd_w_fast(struct cnn_convnet *c, dnnl_primitive_desc_t *pd,
				      const dnnl_dims_t xd, const dnnl_dims_t wd,
				      const dnnl_dims_t ad, dnnl_primitive_desc_t hint)
{
	static const dnnl_format_tag_t tags[] = { dnnl_format_tag_any, dnnl_nchw };
	dnnl_status_t s = dnnl_success;
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]) && is_ref(*pd) && s == dnnl_success; i++) {
		cnn_md_t x = NULL, a = NULL;
		dnnl_primitive_desc_t alt = NULL;
		if ((s = cnn_md_create(&x, 4, xd, tags[i])) == dnnl_success &&
		    (s = cnn_md_create(&a, 4, ad, tags[i])) == dnnl_success &&
		    conv_bwd_w_pd(c, &alt, x, wd, a, hint, 1) == dnnl_success) {
			if (is_ref(alt)) {
				dnnl_primitive_desc_destroy(alt);
			} else {
				dnnl_primitive_desc_destroy(*pd);
				*pd = alt;
			}
		}
		cnn_md_destroy(x);
		cnn_md_destroy(a);
	}
	return s;
}

/* Channels per block of an activation layout we can pool: 16, 8, 1 (nchw),
 * 0 for another. */
static int block_of(cnn_cmd_t md)
{
	if (is_tag(md, dnnl_aBcd16b))
		return 16;
	if (is_tag(md, dnnl_aBcd8b))
		return 8;
	if (is_tag(md, dnnl_abcd))
		return 1;
	return 0;
}

static int grow(float **buf, size_t *cap, size_t bytes)
{
	if (bytes <= *cap)
		return 0;
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes) != 0)
		return -1;
	free(*buf);
	*buf = p;
	*cap = bytes;
	return 0;
}

/* What batch_build describes before it makes the primitives: our
 * memory descriptors (destroyed at the end), and those the primitive
 * descriptors chose (theirs: read until those are destroyed, at the end
 * too). */
struct build {
	dnnl_dims_t xd, w1d, a1d, w2d, y2d, b1d, b2d;
	cnn_md_t x_any, x_user, w1_user, w2_user, b1, b2, w_any;
	cnn_cmd_t a1, y2, x_int;
	dnnl_primitive_desc_t f1, f2, w1p, w2p, d2p;
	const char *what;                /* the stage, for an error */
};

static dnnl_status_t build_mds(struct build *d, const struct cnn_model *m, int n)
{
	const struct cnn_shape *in = &m->in;
	dnnl_status_t s;
	dnnl_dim_t xd[4] = { n, in->c, in->h, in->w }, w1d[4] = { m->c1, in->c, 3, 3 },
		   a1d[4] = { n, m->c1, m->h1, m->w1 }, w2d[4] = { m->c2, m->c1, 3, 3 },
		   y2d[4] = { n, m->c2, m->h2, m->w2 };
	memcpy(d->xd, xd, sizeof(xd));
	memcpy(d->w1d, w1d, sizeof(w1d));
	memcpy(d->a1d, a1d, sizeof(a1d));
	memcpy(d->w2d, w2d, sizeof(w2d));
	memcpy(d->y2d, y2d, sizeof(y2d));
	d->b1d[0] = m->c1;
	d->b2d[0] = m->c2;
	d->what = "describing the convolutions";
	if ((s = cnn_md_create(&d->x_any, 4, d->xd, dnnl_format_tag_any)) ||
	    (s = cnn_md_create(&d->x_user, 4, d->xd, dnnl_nchw)) ||
	    (s = cnn_md_create(&d->w1_user, 4, d->w1d, dnnl_oihw)) ||
	    (s = cnn_md_create(&d->w2_user, 4, d->w2d, dnnl_oihw)) ||
	    (s = cnn_md_create(&d->b1, 1, d->b1d, dnnl_x)) || (s = cnn_md_create(&d->b2, 1, d->b2d, dnnl_x)) ||
	    (s = cnn_md_create(&d->w_any, 4, d->w2d, dnnl_format_tag_any)))
		return s;
	return dnnl_success;
}

/* The convolutions' primitive descriptors, each layout as oneDNN picks it
 * where the pool can read it. */
static dnnl_status_t build_pds(struct cnn_convnet *c, struct build *d)
{
	dnnl_status_t s;
	/* conv1: oneDNN picks every layout; if the activation layout is one
	 * the pool cannot read, ask for plain nchw. */
	d->what = "conv1 forward";
	s = conv_fwd_pd(c, &d->f1, d->x_any, d->w1d, d->a1d, dnnl_format_tag_any);
	if (s == dnnl_success && !block_of(dnnl_primitive_desc_query_md(d->f1, dnnl_query_dst_md, 0))) {
		dnnl_primitive_desc_destroy(d->f1);
		d->f1 = NULL;
		s = conv_fwd_pd(c, &d->f1, d->x_any, d->w1d, d->a1d, dnnl_nchw);
	}
	if (s != dnnl_success)
		return s;
	d->a1 = dnnl_primitive_desc_query_md(d->f1, dnnl_query_dst_md, 0);
	d->x_int = dnnl_primitive_desc_query_md(d->f1, dnnl_query_src_md, 0);

	/* conv2 reads a1 as conv1 wrote it and writes the same kind of layout */
	d->what = "conv2 forward";
	int blk = block_of(d->a1);
	s = conv_fwd_pd(c, &d->f2, d->a1, d->w2d, d->y2d,
			blk == 16 ? dnnl_aBcd16b : blk == 8 ? dnnl_aBcd8b : dnnl_nchw);
	if (s != dnnl_success)
		return s;
	d->y2 = dnnl_primitive_desc_query_md(d->f2, dnnl_query_dst_md, 0);

	d->what = "conv1 backward weights";
	if ((s = conv_bwd_w_pd(c, &d->w1p, d->x_int, d->w1d, d->a1, d->f1, 1)) != dnnl_success ||
	    (s = conv1_bwd_w_fast(c, &d->w1p, d->xd, d->w1d, d->a1d, d->f1)) != dnnl_success)
		return s;
	/* conv2's bias gradient is the pool's (pool_bias_grad): oneDNN's sum
	 * of diff_dst would read all of it again */
	d->what = "conv2 backward weights";
	if ((s = conv_bwd_w_pd(c, &d->w2p, d->a1, d->w2d, d->y2, d->f2, 0)) != dnnl_success)
		return s;
	d->what = "conv2 backward data";
	return cnn_conv_bwd_data_pd(&d->d2p, c->eng, d->a1, d->w_any, d->y2, stride1, pad0, d->f2);
}

/* The primitives, their memories and the reorders between our layouts
 * and theirs. */
static dnnl_status_t build_prims(struct cnn_convnet *c, struct batch *b, struct build *d)
{
	dnnl_status_t s;
	d->what = "creating primitives";
	if ((s = dnnl_primitive_create(&b->prim[K_C1F], d->f1)) ||
	    (s = dnnl_primitive_create(&b->prim[K_C2F], d->f2)) ||
	    (s = dnnl_primitive_create(&b->prim[K_C1W], d->w1p)) ||
	    (s = dnnl_primitive_create(&b->prim[K_C2W], d->w2p)) ||
	    (s = dnnl_primitive_create(&b->prim[K_C2D], d->d2p)))
		return s;

	d->what = "creating memories";
	dnnl_memory_t *M = b->mem;
	if ((s = mem(c, &M[M_X], d->x_user, 0)) ||
	    (s = maybe_reorder(c, d->x_user, d->x_int, 1, &M[M_XI], &b->prim[K_RX])) ||
	    (s = mem(c, &M[M_A1], d->a1, 0)) || (s = mem(c, &M[M_DA1], d->a1, 0)) ||
	    (s = mem(c, &M[M_Y2], d->y2, 0)) || (s = mem(c, &M[M_DA2], d->y2, 0)) ||
	    (s = mem(c, &M[M_W1], d->w1_user, 0)) || (s = mem(c, &M[M_B1], d->b1, 0)) ||
	    (s = mem(c, &M[M_W2], d->w2_user, 0)) || (s = mem(c, &M[M_B2], d->b2, 0)) ||
	    (s = mem(c, &M[M_DW1], d->w1_user, 0)) || (s = mem(c, &M[M_DB1], d->b1, 0)) ||
	    (s = mem(c, &M[M_DW2], d->w2_user, 0)) ||
	    (s = maybe_reorder(c, d->w1_user, dnnl_primitive_desc_query_md(d->f1, dnnl_query_weights_md, 0),
			       1, &M[M_W1F], &b->prim[K_RW1F])) ||
	    (s = maybe_reorder(c, d->w2_user, dnnl_primitive_desc_query_md(d->f2, dnnl_query_weights_md, 0),
			       1, &M[M_W2F], &b->prim[K_RW2F])) ||
	    (s = maybe_reorder(c, d->w2_user, dnnl_primitive_desc_query_md(d->d2p, dnnl_query_weights_md, 0),
			       1, &M[M_W2D], &b->prim[K_RW2D])) ||
	    (s = maybe_reorder(c, dnnl_primitive_desc_query_md(d->w1p, dnnl_query_diff_weights_md, 0),
			       d->w1_user, 0, &M[M_DW1I], &b->prim[K_RDW1])) ||
	    (s = maybe_reorder(c, d->x_int, dnnl_primitive_desc_query_md(d->w1p, dnnl_query_src_md, 0),
			       1, &M[M_X1W], &b->prim[K_RX1W])) ||
	    (s = maybe_reorder(c, d->a1, dnnl_primitive_desc_query_md(d->w1p, dnnl_query_diff_dst_md, 0),
			       1, &M[M_DA1W], &b->prim[K_RDA1W])) ||
	    (s = maybe_reorder(c, dnnl_primitive_desc_query_md(d->w2p, dnnl_query_diff_weights_md, 0),
			       d->w2_user, 0, &M[M_DW2I], &b->prim[K_RDW2])))
		return s;
	b->a1_bytes = dnnl_memory_desc_get_size(d->a1);
	b->y2_bytes = dnnl_memory_desc_get_size(d->y2);
	if (grow(&c->a1, &c->a1_cap, b->a1_bytes) || grow(&c->da1, &c->da1_cap, b->a1_bytes) ||
	    grow(&c->y2, &c->y2_cap, b->y2_bytes) || grow(&c->da2, &c->da2_cap, b->y2_bytes))
		return dnnl_out_of_memory;
	c->block = block_of(d->y2);
	snprintf(c->desc, sizeof(c->desc), "%s, %s; conv1 weight gradient %s", impl_of(d->f2),
		 c->block == 16 ? "nChw16c" : c->block == 8 ? "nChw8c" : "nchw", impl_of(d->w1p));
	return dnnl_success;
}

static void build_free(struct build *d)
{
	dnnl_primitive_desc_t pds[] = { d->f1, d->f2, d->w1p, d->w2p, d->d2p };
	for (size_t i = 0; i < sizeof(pds) / sizeof(pds[0]); i++)
		if (pds[i])
			dnnl_primitive_desc_destroy(pds[i]);
	cnn_md_destroy(d->x_any);
	cnn_md_destroy(d->x_user);
	cnn_md_destroy(d->w1_user);
	cnn_md_destroy(d->w2_user);
	cnn_md_destroy(d->b1);
	cnn_md_destroy(d->b2);
	cnn_md_destroy(d->w_any);
}

static int batch_build(struct cnn_convnet *c, struct batch *b, const struct cnn_model *m, int n,
		       char *err, size_t errlen)
{
	struct build d;
	dnnl_status_t s;

	memset(&d, 0, sizeof(d));
	memset(b, 0, sizeof(*b));
	b->n = n;
	if ((s = build_mds(&d, m, n)) == dnnl_success && (s = build_pds(c, &d)) == dnnl_success)
		s = build_prims(c, b, &d);
	build_free(&d);
	if (s != dnnl_success) {
		batch_free(b);
		return fail(err, errlen, "%s for a batch of %d", s, d.what, n);
	}
	return 0;
}

/* The entry for n images, built on first use; the least recently used
 * size makes room. */
static struct batch *batch_get(struct cnn_convnet *c, const struct cnn_model *m, int n,
			       char *err, size_t errlen)
{
	struct batch *victim = &c->b[0];
	for (int i = 0; i < NBATCH; i++) {
		struct batch *b = &c->b[i];
		if (b->n == n) {
			b->used = ++c->clock;
			return b;
		}
		if (b->used < victim->used)
			victim = b;
	}
	batch_free(victim);
	if (batch_build(c, victim, m, n, err, errlen) < 0)
		return NULL;
	victim->used = ++c->clock;
	return victim;
}

int cnn_convnet_create(struct cnn_convnet **out, const struct cnn_model *m, int max_batch,
		       char *err, size_t errlen)
{
	struct cnn_convnet *c = calloc(1, sizeof(*c));
	dnnl_status_t s;
	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s = dnnl_engine_create(&c->eng, dnnl_cpu, 0);
	if (s == dnnl_success)
		s = dnnl_stream_create(&c->st, c->eng, dnnl_stream_default_flags);
	if (s != dnnl_success) {
		cnn_convnet_free(c);
		return fail(err, errlen, "CPU engine", s);
	}
	/* the training size now: a shape oneDNN cannot do fails at start-up */
	if (!batch_get(c, m, max_batch, err, errlen)) {
		cnn_convnet_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

void cnn_convnet_free(struct cnn_convnet *c)
{
	if (!c)
		return;
	for (int i = 0; i < NBATCH; i++)
		batch_free(&c->b[i]);
	if (c->st)
		dnnl_stream_destroy(c->st);
	if (c->eng)
		dnnl_engine_destroy(c->eng);
	free(c->a1);
	free(c->y2);
	free(c->da1);
	free(c->da2);
	free(c->tile);
	free(c);
}

const char *cnn_convnet_describe(const struct cnn_convnet *c)
{
	return c->desc;
}

/* Point the user memories at this call's buffers. */
static void set_handles(struct cnn_convnet *c, struct batch *b, const struct cnn_model *m,
			const float *x, float *grads)
{
	const float *P = m->params;
	dnnl_memory_t *M = b->mem;
	dnnl_memory_set_data_handle(M[M_X], (void *)x);
	dnnl_memory_set_data_handle(M[M_A1], c->a1);
	dnnl_memory_set_data_handle(M[M_Y2], c->y2);
	dnnl_memory_set_data_handle(M[M_DA1], c->da1);
	dnnl_memory_set_data_handle(M[M_DA2], c->da2);
	dnnl_memory_set_data_handle(M[M_W1], (void *)(P + m->t[P_W1].off));
	dnnl_memory_set_data_handle(M[M_B1], (void *)(P + m->t[P_B1].off));
	dnnl_memory_set_data_handle(M[M_W2], (void *)(P + m->t[P_W2].off));
	dnnl_memory_set_data_handle(M[M_B2], (void *)(P + m->t[P_B2].off));
	if (grads) {
		dnnl_memory_set_data_handle(M[M_DW1], grads + m->t[P_W1].off);
		dnnl_memory_set_data_handle(M[M_DB1], grads + m->t[P_B1].off);
		dnnl_memory_set_data_handle(M[M_DW2], grads + m->t[P_W2].off);
	}
}

static dnnl_status_t run(struct cnn_convnet *c, dnnl_primitive_t p, int nargs, ...)
{
	dnnl_exec_arg_t args[6];
	va_list ap;
	va_start(ap, nargs);
	for (int i = 0; i < nargs; i++) {
		args[i].arg = va_arg(ap, int);
		args[i].memory = va_arg(ap, dnnl_memory_t);
	}
	va_end(ap);
	return dnnl_primitive_execute(p, c->st, nargs, args);
}

/* from -> to through reorder r, when r exists. */
static dnnl_status_t reorder(struct cnn_convnet *c, dnnl_primitive_t r, dnnl_memory_t from,
			     dnnl_memory_t to)
{
	return r ? run(c, r, 2, DNNL_ARG_FROM, from, DNNL_ARG_TO, to) : dnnl_success;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

/* 2x2 max-pool of one image of y (C x H x W in blocks of B channels) into
 * p and arg in NCHW order.  Strict > keeps the first maximum, as PyTorch.
 * A block's results go to a tile [pixel][B] with whole-vector stores, then
 * the tile is transposed into the B output planes. */
static inline void pool_fwd_block(const float *y, int C, int H, int W, int B, int n_i,
				  float *p, uint8_t *arg, float *tp, float *ta)
{
	int ph = H / 2, pw = W / 2, nb = C / B;
	size_t plane = (size_t)ph * pw;
	for (int cb = 0; cb < nb; cb++) {
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++) {
				const float *r0 = y + ((((size_t)n_i * nb + cb) * H + 2 * py) * W + 2 * px) * B;
				const float *r1 = r0 + (size_t)W * B;
				float *t = tp + ((size_t)py * pw + px) * B;
				float *u = ta + ((size_t)py * pw + px) * B;
				/* all float, so the selects vectorize */
				for (int j = 0; j < B; j++) {
					float m = r0[j], a = 0.f;
					a = r0[B + j] > m ? 1.f : a;
					m = r0[B + j] > m ? r0[B + j] : m;
					a = r1[j] > m ? 2.f : a;
					m = r1[j] > m ? r1[j] : m;
					a = r1[B + j] > m ? 3.f : a;
					m = r1[B + j] > m ? r1[B + j] : m;
					t[j] = m;
					u[j] = a;
				}
			}
		size_t o = ((size_t)n_i * C + (size_t)cb * B) * plane;
		for (int j = 0; j < B; j++)
			for (size_t q = 0; q < plane; q++) {
				p[o + j * plane + q] = tp[q * B + j];
				arg[o + j * plane + q] = (uint8_t)ta[q * B + j];
			}
	}
}

/* The backward of one image: each window's gradient (where the pooled value
 * is positive: the ReLU before the pool) goes to its winner, the other
 * three get 0.  Gathered into a tile [pixel][B] first, then written as
 * whole vectors; only an odd last row or column needs zeroing apart. */
static inline void pool_bwd_block(const float *dp, const float *p, const uint8_t *arg, int C,
				  int H, int W, int B, int n_i, float *dy, float *tg, float *ta)
{
	int ph = H / 2, pw = W / 2, nb = C / B;
	size_t plane = (size_t)ph * pw;
	if ((H | W) & 1)
		memset(dy + (size_t)n_i * C * H * W, 0, (size_t)C * H * W * sizeof(float));
	for (int cb = 0; cb < nb; cb++) {
		size_t o = ((size_t)n_i * C + (size_t)cb * B) * plane;
		for (int j = 0; j < B; j++)
			for (size_t q = 0; q < plane; q++) {
				size_t i = o + j * plane + q;
				tg[q * B + j] = p[i] > 0.f ? dp[i] : 0.f;
				ta[q * B + j] = (float)arg[i];
			}
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++) {
				float *r0 = dy + ((((size_t)n_i * nb + cb) * H + 2 * py) * W + 2 * px) * B;
				float *r1 = r0 + (size_t)W * B;
				const float *g = tg + ((size_t)py * pw + px) * B;
				const float *a = ta + ((size_t)py * pw + px) * B;
				for (int j = 0; j < B; j++) {
					r0[j] = a[j] == 0.f ? g[j] : 0.f;
					r0[B + j] = a[j] == 1.f ? g[j] : 0.f;
					r1[j] = a[j] == 2.f ? g[j] : 0.f;
					r1[B + j] = a[j] == 3.f ? g[j] : 0.f;
				}
			}
	}
}

/* One image; the block size as a constant in the hot cases, so the inner
 * loops are whole vectors.  Each thread has its own tile in c->tile. */
HOT static void pool_fwd_image(const float *y, int C, int H, int W, int B, int i, float *p,
			       uint8_t *arg, float *tp, float *ta)
{
	if (B == 16)
		pool_fwd_block(y, C, H, W, 16, i, p, arg, tp, ta);
	else if (B == 8 && cnn_pool8_avx2_fwd(y, C, H, W, i, p, arg) == 0)
		return;
	else if (B == 8)
		pool_fwd_block(y, C, H, W, 8, i, p, arg, tp, ta);
	else
		pool_fwd_block(y, C, H, W, B, i, p, arg, tp, ta);
}

HOT static void pool_bwd_image(const float *dp, const float *p, const uint8_t *arg, int C,
			       int H, int W, int B, int i, float *dy, float *tg, float *ta)
{
	if (B == 16)
		pool_bwd_block(dp, p, arg, C, H, W, 16, i, dy, tg, ta);
	else if (B == 8 && cnn_pool8_avx2_bwd(dp, p, arg, C, H, W, i, dy) == 0)
		return;
	else if (B == 8)
		pool_bwd_block(dp, p, arg, C, H, W, 8, i, dy, tg, ta);
	else
		pool_bwd_block(dp, p, arg, C, H, W, B, i, dy, tg, ta);
}

/* Room for one tile per OpenMP thread: a block's pooled map, then its
 * winners (as floats). */
static int tiles(struct cnn_convnet *c, const struct cnn_model *m, char *err, size_t errlen)
{
	int T = omp_get_max_threads();
	size_t need = 2 * (size_t)(m->h2 / 2) * (m->w2 / 2) * (c->block > 0 ? c->block : 1);
	if (c->tile && T <= c->tile_threads && need <= c->tile_n)
		return 0;
	free(c->tile);
	c->tile = NULL;
	if (posix_memalign((void **)&c->tile, 64, (size_t)T * need * sizeof(float)) != 0) {
		c->tile = NULL;
		c->tile_threads = 0;
		snprintf(err, errlen, "out of memory for the pool's tiles (%d threads)", T);
		return -1;
	}
	c->tile_n = need;
	c->tile_threads = T;
	return 0;
}

/* This OpenMP thread's tile: its values, then its winners. */
static void thread_tile(const struct cnn_convnet *c, float **vals, float **args)
{
	*vals = c->tile + (size_t)omp_get_thread_num() * c->tile_n;
	*args = *vals + c->tile_n / 2;
}

static void pool_fwd(struct cnn_convnet *c, const float *y, int C, int H, int W, int B, int n,
		     float *p, uint8_t *arg)
{
	#pragma omp parallel
	{
		float *tp, *ta;
		thread_tile(c, &tp, &ta);
		#pragma omp for schedule(static)
		for (int i = 0; i < n; i++)
			pool_fwd_image(y, C, H, W, B, i, p, arg, tp, ta);
	}
}

static void pool_bwd(struct cnn_convnet *c, const float *dp, const float *p, const uint8_t *arg,
		     int C, int H, int W, int B, int n, float *dy)
{
	#pragma omp parallel
	{
		float *tg, *ta;
		thread_tile(c, &tg, &ta);
		#pragma omp for schedule(static)
		for (int i = 0; i < n; i++)
			pool_bwd_image(dp, p, arg, C, H, W, B, i, dy, tg, ta);
	}
}

/* Channel ch's part of pool_bias_grad: its gradient over image i's plane,
 * in double. */
HOT static double pool_plane_sum(const float *dp, const float *p, size_t plane)
{
	double acc[4] = { 0 }, s = 0;   /* 4 running sums: a vector's lanes */
	size_t q = 0;
	for (; q + 4 <= plane; q += 4)
		for (int k = 0; k < 4; k++)
			acc[k] += p[q + k] > 0.f ? dp[q + k] : 0.f;
	for (; q < plane; q++)
		s += p[q] > 0.f ? dp[q] : 0.f;
	return s + acc[0] + acc[1] + acc[2] + acc[3];
}

/* conv2's bias gradient: each pooled gradient that passes the ReLU (p > 0)
 * lands on one element of conv2's output gradient and the rest are 0, so
 * the sum over that output is the sum of what passes, per channel, over
 * the images (dp and p in NCHW, C x plane an image).  Summed in double:
 * ranks that split a batch sum parts of it, and a float sum's rounding
 * would differ from one rank's of the whole by more. */
static void pool_bias_grad(const float *dp, const float *p, int C, size_t plane, int n, float *db)
{
	#pragma omp parallel for schedule(static)
	for (int ch = 0; ch < C; ch++) {
		double s = 0;
		for (int i = 0; i < n; i++) {
			size_t o = ((size_t)i * C + ch) * plane;
			s += pool_plane_sum(dp + o, p + o, plane);
		}
		db[ch] = (float)s;
	}
}

/* dx = (y > 0) ? dx : 0, same layout. */
HOT static void relu_bwd_part(float *dx, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.f ? dx[i] : 0.f;
}

static void relu_bwd(float *dx, const float *y, size_t n)
{
	#pragma omp parallel
	{
		int t = omp_get_thread_num(), T = omp_get_num_threads();
		size_t lo = n * t / T, hi = n * (t + 1) / T;
		relu_bwd_part(dx + lo, y + lo, hi - lo);
	}
}

int cnn_convnet_fwd(struct cnn_convnet *c, const struct cnn_model *m, const float *x, int n,
		    float *p, uint8_t *arg, char *err, size_t errlen)
{
	struct batch *b = batch_get(c, m, n, err, errlen);
	if (!b)
		return -1;
	dnnl_memory_t *M = b->mem;
	dnnl_primitive_t *R = b->prim;
	dnnl_memory_t xs = M[M_XI] ? M[M_XI] : M[M_X];
	dnnl_memory_t w1 = M[M_W1F] ? M[M_W1F] : M[M_W1], w2 = M[M_W2F] ? M[M_W2F] : M[M_W2];
	dnnl_status_t s;
	set_handles(c, b, m, x, NULL);
	if ((s = reorder(c, R[K_RX], M[M_X], xs)) ||
	    (s = reorder(c, R[K_RW1F], M[M_W1], w1)) || (s = reorder(c, R[K_RW2F], M[M_W2], w2)) ||
	    (s = run(c, R[K_C1F], 4, DNNL_ARG_SRC, xs, DNNL_ARG_WEIGHTS, w1, DNNL_ARG_BIAS, M[M_B1],
		     DNNL_ARG_DST, M[M_A1])) ||
	    (s = run(c, R[K_C2F], 4, DNNL_ARG_SRC, M[M_A1], DNNL_ARG_WEIGHTS, w2, DNNL_ARG_BIAS,
		     M[M_B2], DNNL_ARG_DST, M[M_Y2])) ||
	    (s = dnnl_stream_wait(c->st)))
		return fail(err, errlen, "forward of %d images", s, n);
	if (tiles(c, m, err, errlen) < 0)
		return -1;
	pool_fwd(c, c->y2, m->c2, m->h2, m->w2, c->block, n, p, arg);
	return 0;
}

int cnn_convnet_bwd(struct cnn_convnet *c, const struct cnn_model *m, const float *x, int n,
		    const float *p, const uint8_t *arg, const float *dp, float *grads,
		    char *err, size_t errlen)
{
	struct batch *b = batch_get(c, m, n, err, errlen);
	if (!b)
		return -1;
	dnnl_memory_t *M = b->mem;
	dnnl_primitive_t *R = b->prim;
	dnnl_memory_t xs = M[M_XI] ? M[M_XI] : M[M_X];
	dnnl_memory_t w2 = M[M_W2D] ? M[M_W2D] : M[M_W2];
	dnnl_memory_t dw1 = M[M_DW1I] ? M[M_DW1I] : M[M_DW1];
	dnnl_memory_t dw2 = M[M_DW2I] ? M[M_DW2I] : M[M_DW2];
	dnnl_status_t s;

	set_handles(c, b, m, x, grads);
	if (tiles(c, m, err, errlen) < 0)
		return -1;
	pool_bwd(c, dp, p, arg, m->c2, m->h2, m->w2, c->block, n, c->da2);
	pool_bias_grad(dp, p, m->c2, (size_t)(m->h2 / 2) * (m->w2 / 2), n, grads + m->t[P_B2].off);
	/* the forward's input copy (if any) is still in xs: same n, same x */
	if ((s = reorder(c, R[K_RW2D], M[M_W2], w2)) ||
	    (s = run(c, R[K_C2W], 3, DNNL_ARG_SRC, M[M_A1], DNNL_ARG_DIFF_DST, M[M_DA2],
		     DNNL_ARG_DIFF_WEIGHTS, dw2)) ||
	    (s = run(c, R[K_C2D], 3, DNNL_ARG_DIFF_DST, M[M_DA2], DNNL_ARG_WEIGHTS, w2,
		     DNNL_ARG_DIFF_SRC, M[M_DA1])) ||
	    (s = dnnl_stream_wait(c->st)))
		return fail(err, errlen, "conv2 backward of %d images", s, n);
	relu_bwd(c->da1, c->a1, b->a1_bytes / sizeof(float));
	dnnl_memory_t x1w = M[M_X1W] ? M[M_X1W] : xs, da1w = M[M_DA1W] ? M[M_DA1W] : M[M_DA1];
	if ((s = reorder(c, R[K_RX1W], xs, x1w)) || (s = reorder(c, R[K_RDA1W], M[M_DA1], da1w)) ||
	    (s = run(c, R[K_C1W], 4, DNNL_ARG_SRC, x1w, DNNL_ARG_DIFF_DST, da1w,
		     DNNL_ARG_DIFF_WEIGHTS, dw1, DNNL_ARG_DIFF_BIAS, M[M_DB1])) ||
	    (s = reorder(c, R[K_RDW1], dw1, M[M_DW1])) || (s = reorder(c, R[K_RDW2], dw2, M[M_DW2])) ||
	    (s = dnnl_stream_wait(c->st)))
		return fail(err, errlen, "conv1 backward of %d images", s, n);
	return 0;
}
