/* Programmatic dependent launch in the step's CUDA graph (pdl.h): the
 * capture's list of the module's nodes, and the graph's copy with their
 * edges made programmatic. */
#include <stdio.h>
#include <stdlib.h>

#include "pdl.h"

/* The nodes of the capture under way: a list that only grows, freed when
 * handed over; lost (none) if it cannot grow, which leaves every edge as
 * captured.  Not thread-local (pdl.h; LeakSanitizer's tracer also faulted
 * on a dlopen'ed module's dynamic TLS beside NCCL's threads). */
static struct {
	int on, lost;
	cudaGraphNode_t *node;
	unsigned char *kind;
	size_t n, cap;
} rec;

/* The list emptied; its arrays freed unless handed over. */
static void rec_reset(int handed)
{
	if (!handed) {
		free(rec.node);
		free(rec.kind);
	}
	rec.node = NULL;
	rec.kind = NULL;
	rec.n = rec.cap = 0;
	rec.lost = 0;
}

void cnn_cuda_record(int on)
{
	if (on)
		rec_reset(0);
	rec.on = on;
}

void cnn_cuda_note(cudaStream_t s, int kind)
{
	enum cudaStreamCaptureStatus st;
	const cudaGraphNode_t *deps = NULL;
	const cudaGraphEdgeData *data = NULL;
	size_t nd = 0;
	if (!rec.on || rec.lost)
		return;
	/* after a launch the stream's capture depends on that launch's node
	 * alone (a library call may end in several); a stream not capturing,
	 * or a query that fails, notes nothing */
	if (cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, &data, &nd) != cudaSuccess) {
		cudaGetLastError();
		return;
	}
	if (st != cudaStreamCaptureStatusActive || !deps)
		return;
	if (rec.n + nd > rec.cap) {
		size_t cap = rec.cap ? rec.cap * 2 : 64;
		while (cap < rec.n + nd)
			cap *= 2;
		cudaGraphNode_t *n = realloc(rec.node, cap * sizeof(*n));
		if (n)
			rec.node = n;
		unsigned char *k = n ? realloc(rec.kind, cap) : NULL;
		if (k)
			rec.kind = k;
		if (!n || !k) {
			rec.lost = 1;
			return;
		}
		rec.cap = cap;
	}
	for (size_t i = 0; i < nd; i++) {
		rec.node[rec.n] = deps[i];
		rec.kind[rec.n++] = (unsigned char)kind;
	}
}

size_t cnn_cuda_recorded(cudaGraphNode_t **nodes, unsigned char **kinds)
{
	size_t n = rec.lost ? 0 : rec.n;
	*nodes = n ? rec.node : NULL;
	*kinds = n ? rec.kind : NULL;
	rec_reset(n > 0);
	return n;
}

/* k's index in nodes with that kind, -1 if none */
static long recorded(const cudaGraphNode_t *nodes, const unsigned char *kinds, size_t n,
		     cudaGraphNode_t k, int kind)
{
	for (size_t i = 0; i < n; i++)
		if (nodes[i] == k && kinds[i] == kind)
			return (long)i;
	return -1;
}

int cnn_pdl_graph(cudaGraph_t graph, const cudaGraphNode_t *nodes, const unsigned char *kinds,
		  size_t nrec, cudaGraph_t *out, int *edges, char *why, size_t whylen)
{
	cudaGraph_t c = NULL;
	cudaGraphNode_t *mine = NULL, *from = NULL, *to = NULL, *pf = NULL, *pt = NULL;
	cudaGraphEdgeData *data = NULL, *pd = NULL;
	size_t ne = 0, np = 0;
	const char *call = "cudaGraphClone";
	cudaError_t e = cudaGraphClone(&c, graph);
	*out = NULL;
	*edges = 0;
	if (e != cudaSuccess)
		goto fail;
	/* the recorded nodes, as the copy's */
	mine = malloc((nrec ? nrec : 1) * sizeof(*mine));
	if (!mine)
		goto oom;
	call = "cudaGraphNodeFindInClone";
	for (size_t i = 0; i < nrec; i++)
		if ((e = cudaGraphNodeFindInClone(&mine[i], nodes[i], c)) != cudaSuccess)
			goto fail;
	call = "cudaGraphGetEdges";
	if ((e = cudaGraphGetEdges(c, NULL, NULL, NULL, &ne)) != cudaSuccess)
		goto fail;
	size_t room = ne ? ne : 1;
	from = malloc(room * sizeof(*from));
	to = malloc(room * sizeof(*to));
	data = malloc(room * sizeof(*data));
	pf = malloc(room * sizeof(*pf));
	pt = malloc(room * sizeof(*pt));
	pd = calloc(room, sizeof(*pd));
	if (!from || !to || !data || !pf || !pt || !pd)
		goto oom;
	if ((e = cudaGraphGetEdges(c, from, to, data, &ne)) != cudaSuccess)
		goto fail;
	for (size_t i = 0; i < ne; i++) {
		enum cudaGraphNodeType t;
		/* an ordinary edge (not one out of a launch-completion port,
		 * as NCCL's may be) into ours, not out of NCCL's */
		if (data[i].type != cudaGraphDependencyTypeDefault ||
		    data[i].from_port != cudaGraphKernelNodePortDefault || data[i].to_port != 0 ||
		    recorded(mine, kinds, nrec, to[i], CNN_NODE_OURS) < 0 ||
		    recorded(mine, kinds, nrec, from[i], CNN_NODE_NCCL) >= 0)
			continue;
		call = "cudaGraphNodeGetType";
		if ((e = cudaGraphNodeGetType(from[i], &t)) != cudaSuccess)
			goto fail;
		if (t != cudaGraphNodeTypeKernel)
			continue;
		pf[np] = from[i];
		pt[np] = to[i];
		pd[np].from_port = cudaGraphKernelNodePortProgrammatic;
		pd[np].type = cudaGraphDependencyTypeProgrammatic;
		np++;
	}
	/* one edge at a time: an edge CUDA refuses as programmatic (a kind
	 * of kernel it does not allow there) goes back as it was */
	int made = 0;
	for (size_t i = 0; i < np; i++) {
		call = "cudaGraphRemoveDependencies";
		if ((e = cudaGraphRemoveDependencies(c, &pf[i], &pt[i], NULL, 1)) != cudaSuccess)
			goto fail;
		if (cudaGraphAddDependencies(c, &pf[i], &pt[i], &pd[i], 1) == cudaSuccess) {
			made++;
			continue;
		}
		cudaGetLastError();
		call = "cudaGraphAddDependencies (the edge as captured, back)";
		if ((e = cudaGraphAddDependencies(c, &pf[i], &pt[i], NULL, 1)) != cudaSuccess)
			goto fail;
	}
	*out = c;
	*edges = made;
	c = NULL;
	goto done;
oom:
	snprintf(why, whylen, "no memory to copy the step's graph of %zu edges", ne);
	goto done;
fail:
	snprintf(why, whylen, "%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
	cudaGetLastError();
done:
	if (c)
		cudaGraphDestroy(c);
	free(mine);
	free(from);
	free(to);
	free(data);
	free(pf);
	free(pt);
	free(pd);
	return *out ? 0 : -1;
}
