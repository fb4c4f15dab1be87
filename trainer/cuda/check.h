/* cudaCheck / ncclCheck for cnn_train's GPU path: on failure, print host,
 * rank, file:line, the call and the library's message to stderr, then
 * return -1 from the calling function (callers unwind and the trainer's
 * die() aborts the communicator).  cnn_cuda_where names host and rank. */
#ifndef CNN_CUDA_CHECK_H
#define CNN_CUDA_CHECK_H

#include <stdio.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Set once by the trainer (host name and rank); "" and -1 until then. */
void cnn_cuda_where_set(const char *host, int rank);
const char *cnn_cuda_where_host(void);
int cnn_cuda_where_rank(void);

#ifdef __cplusplus
}
#endif

#define cudaCheck(call)                                                              \
	do {                                                                         \
		cudaError_t e_ = (call);                                             \
		if (e_ != cudaSuccess) {                                             \
			fprintf(stderr, "cnn_train: %s rank %d: %s:%d: %s: %s (%s)\n",  \
				cnn_cuda_where_host(), cnn_cuda_where_rank(), __FILE__,  \
				__LINE__, #call, cudaGetErrorString(e_),                 \
				cudaGetErrorName(e_));                                   \
			return -1;                                                   \
		}                                                                    \
	} while (0)

#endif
