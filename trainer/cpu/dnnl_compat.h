/*
 * oneDNN 2.x (Debian 12) and 3.x (Debian 13 and later) behind one set of
 * names, so conv_dnnl.c keeps one body.  The rest of the tree never tests
 * DNNL_VERSION_MAJOR itself.
 *
 * What 3.0 changed in the C API, and the name used here for it:
 *   - a memory descriptor is an opaque handle the caller creates and
 *     destroys (2.x: a struct filled in place): cnn_md_t, created by
 *     cnn_md_create() and ended by cnn_md_destroy(); a descriptor read
 *     from a primitive descriptor is a cnn_cmd_t, owned by it.  2.x's
 *     structs live on the heap here, so ownership is the same on both;
 *   - its rank and dimensions are read through dnnl_memory_desc_query():
 *     cnn_md_dims();
 *   - operation descriptors (dnnl_convolution_desc_t and the *_desc_init
 *     functions) are gone: each primitive descriptor is created in one call
 *     with its attributes: cnn_conv_fwd_pd(), cnn_conv_bwd_weights_pd(),
 *     cnn_conv_bwd_data_pd();
 *   - an eltwise post-op has no scale: cnn_post_ops_append_relu().
 * Everything else conv_dnnl.c calls (memories, reorders, queries of a
 * primitive descriptor, execution, streams) kept its signature, taking a
 * cnn_cmd_t where a descriptor is read.
 */
#ifndef CNN_DNNL_COMPAT_H
#define CNN_DNNL_COMPAT_H

#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

#if DNNL_VERSION_MAJOR >= 3

typedef dnnl_memory_desc_t cnn_md_t;
typedef const_dnnl_memory_desc_t cnn_cmd_t;

static inline dnnl_status_t cnn_md_create(cnn_md_t *md, int nd, const dnnl_dims_t d,
					  dnnl_format_tag_t tag)
{
	*md = NULL;
	return dnnl_memory_desc_create_with_tag(md, nd, d, dnnl_f32, tag);
}

static inline void cnn_md_destroy(cnn_md_t md)
{
	if (md)
		dnnl_memory_desc_destroy(md);
}

static inline int cnn_md_dims(cnn_cmd_t md, int *nd, const dnnl_dim_t **dims)
{
	const dnnl_dims_t *d = NULL;
	if (dnnl_memory_desc_query(md, dnnl_query_ndims_s32, nd) != dnnl_success ||
	    dnnl_memory_desc_query(md, dnnl_query_dims, &d) != dnnl_success || !d)
		return -1;
	*dims = *d;
	return 0;
}

static inline dnnl_status_t cnn_post_ops_append_relu(dnnl_post_ops_t po)
{
	return dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.f, 0.f);
}

static inline dnnl_status_t cnn_conv_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    cnn_cmd_t src, cnn_cmd_t w, cnn_cmd_t b, cnn_cmd_t dst,
					    const dnnl_dims_t strides, const dnnl_dims_t pad,
					    const_dnnl_primitive_attr_t attr)
{
	static const dnnl_dims_t no_dilation = { 0, 0 };
	return dnnl_convolution_forward_primitive_desc_create(
		pd, eng, dnnl_forward_training, dnnl_convolution_direct, src, w, b, dst, strides,
		no_dilation, pad, pad, attr);
}

static inline dnnl_status_t cnn_conv_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						    cnn_cmd_t src, cnn_cmd_t dw, cnn_cmd_t db,
						    cnn_cmd_t ddst, const dnnl_dims_t strides,
						    const dnnl_dims_t pad,
						    const_dnnl_primitive_desc_t hint)
{
	static const dnnl_dims_t no_dilation = { 0, 0 };
	return dnnl_convolution_backward_weights_primitive_desc_create(
		pd, eng, dnnl_convolution_direct, src, dw, db, ddst, strides, no_dilation, pad, pad,
		hint, NULL);
}

static inline dnnl_status_t cnn_conv_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						 cnn_cmd_t dsrc, cnn_cmd_t w, cnn_cmd_t ddst,
						 const dnnl_dims_t strides, const dnnl_dims_t pad,
						 const_dnnl_primitive_desc_t hint)
{
	static const dnnl_dims_t no_dilation = { 0, 0 };
	return dnnl_convolution_backward_data_primitive_desc_create(
		pd, eng, dnnl_convolution_direct, dsrc, w, ddst, strides, no_dilation, pad, pad,
		hint, NULL);
}

#else /* oneDNN 2.x */

typedef dnnl_memory_desc_t *cnn_md_t;
typedef const dnnl_memory_desc_t *cnn_cmd_t;

static inline dnnl_status_t cnn_md_create(cnn_md_t *md, int nd, const dnnl_dims_t d,
					  dnnl_format_tag_t tag)
{
	dnnl_status_t s;
	if (!(*md = malloc(sizeof(**md))))
		return dnnl_out_of_memory;
	if ((s = dnnl_memory_desc_init_by_tag(*md, nd, d, dnnl_f32, tag)) != dnnl_success) {
		free(*md);
		*md = NULL;
	}
	return s;
}

static inline void cnn_md_destroy(cnn_md_t md)
{
	free(md);
}

static inline int cnn_md_dims(cnn_cmd_t md, int *nd, const dnnl_dim_t **dims)
{
	*nd = md->ndims;
	*dims = md->dims;
	return 0;
}

static inline dnnl_status_t cnn_post_ops_append_relu(dnnl_post_ops_t po)
{
	return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f);
}

static inline dnnl_status_t cnn_conv_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    cnn_cmd_t src, cnn_cmd_t w, cnn_cmd_t b, cnn_cmd_t dst,
					    const dnnl_dims_t strides, const dnnl_dims_t pad,
					    const_dnnl_primitive_attr_t attr)
{
	dnnl_convolution_desc_t cd;
	dnnl_status_t s = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
							     dnnl_convolution_direct, src, w, b,
							     dst, strides, pad, pad);
	return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &cd, attr, eng, NULL);
}

static inline dnnl_status_t cnn_conv_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						    cnn_cmd_t src, cnn_cmd_t dw, cnn_cmd_t db,
						    cnn_cmd_t ddst, const dnnl_dims_t strides,
						    const dnnl_dims_t pad,
						    const_dnnl_primitive_desc_t hint)
{
	dnnl_convolution_desc_t cd;
	dnnl_status_t s = dnnl_convolution_backward_weights_desc_init(
		&cd, dnnl_convolution_direct, src, dw, db, ddst, strides, pad, pad);
	return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &cd, NULL, eng, hint);
}

static inline dnnl_status_t cnn_conv_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						 cnn_cmd_t dsrc, cnn_cmd_t w, cnn_cmd_t ddst,
						 const dnnl_dims_t strides, const dnnl_dims_t pad,
						 const_dnnl_primitive_desc_t hint)
{
	dnnl_convolution_desc_t cd;
	dnnl_status_t s = dnnl_convolution_backward_data_desc_init(
		&cd, dnnl_convolution_direct, dsrc, w, ddst, strides, pad, pad);
	return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &cd, NULL, eng, hint);
}

#endif

#endif
