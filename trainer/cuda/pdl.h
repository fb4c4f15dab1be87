/* Programmatic dependent launch in the training step's CUDA graph
 * (cnn_train --pdl; sm_90 and later).
 *
 * Every kernel of this module first waits for the grids its launch depends
 * on (griddepcontrol.wait: until they have completed and their writes are
 * visible), then lets the grids that depend on it launch
 * (griddepcontrol.launch_dependents): kernels_common.cuh's pdl_enter, its
 * first statement (tests/tools/pdl_lint checks each).  Launched the
 * ordinary way both are no-ops.  So an edge of a CUDA graph into one of
 * these kernels from another kernel may be programmatic: the kernel is
 * launched while the one before it still runs and waits for it on the GPU,
 * which takes the launch's latency off the chain.
 *
 * Which nodes of a captured graph are these kernels: between
 * cnn_cuda_record(1) and cnn_cuda_record(0) (graph.c, around the step's
 * capture), each launch here on a capturing stream notes the node it made
 * (cnn_cuda_note, after the launch: kernels_common.cuh's LAUNCHED), as the
 * NCCL backend notes its all-reduce's last node (kind CNN_NODE_NCCL: its
 * edges stay as captured); cnn_cuda_recorded hands the list over (malloc'd
 * arrays, the caller frees them; 0 entries if none or out of memory).  One
 * list for the module, as cnn_cuda_last_error is one: its host code runs
 * on the trainer's thread.  cnn_pdl_graph makes the graph's copy. */
#ifndef CNN_CUDA_PDL_H
#define CNN_CUDA_PDL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CNN_NODE_OURS = 1, CNN_NODE_NCCL = 2 };

void cnn_cuda_record(int on);
void cnn_cuda_note(cudaStream_t s, int kind);
size_t cnn_cuda_recorded(cudaGraphNode_t **nodes, unsigned char **kinds);

/* A copy of graph (*out) whose ordinary edges from a kernel into one of
 * this module's kernels (nodes[i] of kind CNN_NODE_OURS, i < nrec, as
 * recorded at its capture) are programmatic: they leave their first node by its
 * programmatic port, so the second is launched as soon as every block of
 * the first has started, and waits on the GPU for it to finish.  An edge
 * from NCCL's last node (CNN_NODE_NCCL) stays as captured, as does one
 * out of a launch-completion port and one CUDA refuses to make
 * programmatic.  *edges: how many were made.  0, or -1 with why (the
 * call and CUDA's message) where a query or the copy failed (*out NULL). */
int cnn_pdl_graph(cudaGraph_t graph, const cudaGraphNode_t *nodes, const unsigned char *kinds,
		  size_t nrec, cudaGraph_t *out, int *edges, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
