/* cudaCheck / ncclCheck for cnn_train's GPU path: on failure, print host,
 * rank, file:line, the call and the library's message to stderr, then
 * return -1 from the calling function (callers unwind and the trainer's
 * die() aborts the communicator).  cnn_cuda_where names host and rank. */
#ifndef CNN_CUDA_ERRORS_H
#define CNN_CUDA_ERRORS_H

#include <stdio.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Set once by the trainer (host name and rank); "" and -1 until then. */
void cnn_cuda_where_set(const char *host, int rank);
const char *cnn_cuda_where_host(void);
int cnn_cuda_where_rank(void);
/* Print "cnn_train: HOST rank R: file:line: call: message" to stderr and
 * keep it for cnn_cuda_last_error (the driver's die() repeats it with the
 * step it happened in). */
void cnn_cuda_fail(const char *file, int line, const char *call, const char *msg);
const char *cnn_cuda_last_error(void);
/* on 1: cnn_cuda_fail keeps its message without printing it, for a caller
 * that reports or recovers from it itself; returns the previous setting */
int cnn_cuda_fail_quiet(int on);

#ifdef __cplusplus
}
#endif

#define cudaCheck(call)                                                              \
	do {                                                                         \
		cudaError_t e_ = (call);                                             \
		if (e_ != cudaSuccess) {                                             \
			char m_[256];                                                \
			snprintf(m_, sizeof(m_), "%s (%s)", cudaGetErrorString(e_),   \
				 cudaGetErrorName(e_));                              \
			cnn_cuda_fail(__FILE__, __LINE__, #call, m_);                \
			return -1;                                                   \
		}                                                                    \
	} while (0)

/* The same for cuDNN, cuBLAS and NCCL, where their headers are included. */
#ifdef CUDNN_MAJOR
#define cudnnCheck(call)                                                             \
	do {                                                                         \
		cudnnStatus_t e_ = (call);                                           \
		if (e_ != CUDNN_STATUS_SUCCESS) {                                    \
			cnn_cuda_fail(__FILE__, __LINE__, #call, cudnnGetErrorString(e_)); \
			return -1;                                                   \
		}                                                                    \
	} while (0)
#endif
#ifdef CUBLAS_VER_MAJOR
#define cublasCheck(call)                                                            \
	do {                                                                         \
		cublasStatus_t e_ = (call);                                          \
		if (e_ != CUBLAS_STATUS_SUCCESS) {                                   \
			cnn_cuda_fail(__FILE__, __LINE__, #call, cublasGetStatusString(e_)); \
			return -1;                                                   \
		}                                                                    \
	} while (0)
#endif
#ifdef NCCL_MAJOR
#define ncclCheck(call)                                                              \
	do {                                                                         \
		ncclResult_t e_ = (call);                                            \
		if (e_ != ncclSuccess && e_ != ncclInProgress) {                     \
			cnn_cuda_fail(__FILE__, __LINE__, #call, ncclGetErrorString(e_)); \
			return -1;                                                   \
		}                                                                    \
	} while (0)
#endif

#endif
