// cuemu: the cuBLAS calls of cnn_train's GPU path (Sgemm, GemmEx on fp32
// or bf16 operands with fp32 output, Sgemv), on the CPU, on the handle's
// stream (streams.cc).  Column-major, as cuBLAS: C (m x n) = alpha op(A)
// op(B) + beta C, beta 0 never reading C.  The operands are read as the
// math mode says a GPU reads them: TF32 (CUBLAS_TF32_TENSOR_OP_MATH, or
// CUBLAS_COMPUTE_32F_FAST_TF32) rounds fp32 ones to 10 mantissa bits
// unless NVIDIA_TF32_OVERRIDE=0; the products are summed in fp32 in k
// order.  A dimension or leading dimension cuBLAS refuses is refused
// (CUBLAS_STATUS_INVALID_VALUE); a matrix reaching outside its cudaMalloc
// allocation, which a GPU reports as an illegal address, is refused too,
// with a message naming it.
#include "rt.h"

#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>

struct cublasContext {
	cudaStream_t s = nullptr;
	cublasMath_t math = CUBLAS_DEFAULT_MATH;
	cublasPointerMode_t pm = CUBLAS_POINTER_MODE_HOST;
	void *ws = nullptr;
	size_t ws_bytes = 0;
};

namespace {

size_t esize(cudaDataType t)
{
	return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0;
}

float load(const void *p, cudaDataType t, size_t i, bool tf32)
{
	if (t == CUDA_R_16BF)
		return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
	float v = static_cast<const float *>(p)[i];
	return tf32 ? cuemu::to_tf32(v) : v;
}

// A rows x cols column-major matrix at p (leading dimension ld) inside one
// allocation?  Says which one it is not.
bool fits(const char *call, const char *name, const void *p, int rows, int cols, int ld, size_t es)
{
	if (!rows || !cols)
		return true;
	size_t bytes = ((size_t)(cols - 1) * ld + rows) * es;
	if (cuemu::inside(p, bytes))
		return true;
	fprintf(stderr, "cuemu: %s: %s (%d x %d, leading dimension %d, %zu bytes from %p) is not "
		"inside one cudaMalloc allocation: a GPU reads out of bounds there\n",
		call, name, rows, cols, ld, bytes, p);
	return false;
}

cublasStatus_t gemm(cublasContext *h, const char *call, cublasOperation_t ta, cublasOperation_t tb,
		    int m, int n, int k, const float *alpha, const void *A, cudaDataType at, int lda,
		    const void *B, cudaDataType bt, int ldb, const float *beta, float *C, int ldc,
		    bool tf32)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
	if ((!an && ta != CUBLAS_OP_T) || (!bn && tb != CUBLAS_OP_T) || m < 0 || n < 0 || k < 0 ||
	    lda < (an ? m : k) || lda < 1 || ldb < (bn ? k : n) || ldb < 1 || ldc < m || ldc < 1 ||
	    !alpha || !beta || !esize(at) || !esize(bt)) {
		fprintf(stderr, "cuemu: %s: refused: m %d n %d k %d, lda %d ldb %d ldc %d\n", call, m, n,
			k, lda, ldb, ldc);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (!m || !n)
		return CUBLAS_STATUS_SUCCESS;
	if (!fits(call, "A", A, an ? m : k, an ? k : m, lda, esize(at)) ||
	    !fits(call, "B", B, bn ? k : n, bn ? n : k, ldb, esize(bt)) ||
	    !fits(call, "C", C, m, n, ldc, 4))
		return CUBLAS_STATUS_INVALID_VALUE;
	bool dev = h->pm == CUBLAS_POINTER_MODE_DEVICE;
	float al = dev ? 0.f : *alpha, be = dev ? 0.f : *beta;
	cuemu::enqueue(h->s, call, [=]() {
		float a_ = dev ? *alpha : al, b_ = dev ? *beta : be;
		// op(A) as m x k and op(B) as k x n, column-major, rounded
		std::vector<float> Af((size_t)m * k), Bf((size_t)k * n), acc(m);
		for (int p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				Af[i + (size_t)p * m] =
					load(A, at, an ? i + (size_t)p * lda : p + (size_t)i * lda, tf32);
		for (int j = 0; j < n; j++)
			for (int p = 0; p < k; p++)
				Bf[p + (size_t)j * k] =
					load(B, bt, bn ? p + (size_t)j * ldb : j + (size_t)p * ldb, tf32);
		for (int j = 0; j < n; j++) {
			std::fill(acc.begin(), acc.end(), 0.f);
			for (int p = 0; p < k; p++)
				cuemu::axpy(acc.data(), Bf[p + (size_t)j * k], &Af[(size_t)p * m], m);
			float *c = C + (size_t)j * ldc;
			for (int i = 0; i < m; i++)
				c[i] = b_ == 0.f ? a_ * acc[i] : a_ * acc[i] + b_ * c[i];
		}
	}, cuemu::macs_ms((double)m * n * k));
	return CUBLAS_STATUS_SUCCESS;
}

bool tf32_math(const cublasContext *h)
{
	return h->math == CUBLAS_TF32_TENSOR_OP_MATH && cuemu::tf32_allowed();
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
	if (!handle)
		return CUBLAS_STATUS_INVALID_VALUE;
	*handle = new cublasContext;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete handle;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version)
{
	if (!version)
		return CUBLAS_STATUS_INVALID_VALUE;
	*version = CUBLAS_VERSION;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
	switch (status) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (cuemu: see its message above)";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	default: return "CUBLAS_STATUS_EXECUTION_FAILED";
	}
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	handle->s = s;
	return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS takes the workspace as given; one outside device memory is a
// GPU's illegal address later: refused here at once.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (bytes && !cuemu::inside(workspace, bytes)) {
		fprintf(stderr, "cuemu: cublasSetWorkspace: %zu bytes at %p are not inside one "
			"cudaMalloc allocation\n", bytes, workspace);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	handle->ws = workspace;
	handle->ws_bytes = bytes;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	handle->pm = mode;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	handle->math = mode;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
			      cublasOperation_t transb, int m, int n, int k, const float *alpha,
			      const float *A, int lda, const float *B, int ldb, const float *beta,
			      float *C, int ldc)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	return gemm(handle, "cublasSgemm", transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B,
		    CUDA_R_32F, ldb, beta, C, ldc, tf32_math(handle));
}

// fp32 or bf16 A and B, fp32 C and compute (the GemmEx calls net.c makes).
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
			    cublasOperation_t transb, int m, int n, int k, const void *alpha,
			    const void *A, cudaDataType Atype, int lda, const void *B,
			    cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype,
			    int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	bool fast = computeType == CUBLAS_COMPUTE_32F_FAST_TF32;
	if (Ctype != CUDA_R_32F || Atype != Btype ||
	    (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC && !fast)) {
		fprintf(stderr, "cuemu: cublasGemmEx: emulated for fp32 or bf16 A and B, fp32 C and "
			"compute type 32F; got A %d B %d C %d compute %d\n", (int)Atype, (int)Btype,
			(int)Ctype, (int)computeType);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	bool tf32 = Atype == CUDA_R_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC &&
		    (fast || tf32_math(handle)) && cuemu::tf32_allowed();
	return gemm(handle, "cublasGemmEx", transa, transb, m, n, k,
		    static_cast<const float *>(alpha), A, Atype, lda, B, Btype, ldb,
		    static_cast<const float *>(beta), static_cast<float *>(C), ldc, tf32);
}

// y = alpha op(A) x + beta y, A m x n column-major: as a GEMM with one
// column when x and y are contiguous.
cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
			      const float *alpha, const float *A, int lda, const float *x, int incx,
			      const float *beta, float *y, int incy)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (incx != 1 || incy != 1) {
		fprintf(stderr, "cuemu: cublasSgemv: emulated for unit increments only (%d, %d)\n",
			incx, incy);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	bool t = trans == CUBLAS_OP_T;
	if (!t && trans != CUBLAS_OP_N)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m < 0 || n < 0 || lda < (m > 1 ? m : 1)) {
		fprintf(stderr, "cuemu: cublasSgemv: refused: m %d n %d lda %d\n", m, n, lda);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	int rows = t ? n : m, inner = t ? m : n;
	// y (rows) = op(A) (rows x inner) x (inner): a GEMM of rows x 1 x inner
	return gemm(handle, "cublasSgemv", trans, CUBLAS_OP_N, rows, 1, inner, alpha, A, CUDA_R_32F,
		    lda, x, CUDA_R_32F, inner > 0 ? inner : 1, beta, y, rows > 0 ? rows : 1,
		    false);   // a GEMV is no tensor-core work: fp32 in every math mode
}

} // extern "C"
