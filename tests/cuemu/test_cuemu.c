/* cuemu's own test: the execution model test_cuda_kernels_emu relies on
 * (coordinates, shared memory and barriers that wait, atomics, argument
 * copies) and the mistakes it must report rather than hide (a barrier
 * some threads skip, a launch a GPU refuses, a host pointer given as a
 * device one). */
#include <math.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "selftest.h"
#include "test.h"

static void test_coords(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
	size_t n = (size_t)gx * gy * gz * bx * by * bz, bad = 0;
	int *h = calloc(n, sizeof(int)), *d;
	cudaMalloc((void **)&d, n * sizeof(int));
	cudaMemset(d, 0, n * sizeof(int));
	int rc = cuemu_selftest_coords(d, gx, gy, gz, bx, by, bz);
	cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < n; i++)
		if (h[i] != (int)i + 1 && bad++ < 3)
			printf("#   element %zu: %d, expected %zu\n", i, h[i], i + 1);
	char m[160];
	snprintf(m, sizeof(m), "grid (%u,%u,%u) of blocks (%u,%u,%u): every thread ran once, with "
		 "its own coordinates", gx, gy, gz, bx, by, bz);
	test_cond(m, rc == cudaSuccess && bad == 0);
	cudaFree(d);
	free(h);
}

static void test_block_sums(void)
{
	enum { B = 5, T = 256 };
	float x[B * T], sums[B + 1] = { 0 }, shifted[B * T], *dx, *ds, *dsh;
	for (int i = 0; i < B * T; i++)
		x[i] = (float)(i % 97) - 40.f; /* integers: float sums are exact */
	cudaMalloc((void **)&dx, sizeof(x));
	cudaMalloc((void **)&ds, sizeof(sums));
	cudaMalloc((void **)&dsh, sizeof(shifted));
	cudaMemcpy(dx, x, sizeof(x), cudaMemcpyHostToDevice);
	cudaMemset(ds, 0, sizeof(sums));
	int rc = cuemu_selftest_block_sums(dx, B, ds, dsh);
	cudaMemcpy(sums, ds, sizeof(sums), cudaMemcpyDeviceToHost);
	cudaMemcpy(shifted, dsh, sizeof(shifted), cudaMemcpyDeviceToHost);
	int ok_sum = 1, ok_shift = 1;
	float total = 0;
	for (int b = 0; b < B; b++) {
		float want = 0;
		for (int t = 0; t < T; t++) {
			want += x[b * T + t];
			ok_shift &= shifted[b * T + t] == x[b * T + (t + 1) % T];
		}
		ok_sum &= sums[b] == want;
		total += want;
	}
	test_cond("block_sums launches", rc == cudaSuccess);
	test_cond("__syncthreads waits: a thread reads what its neighbour wrote before the barrier",
		  ok_shift);
	test_cond("__shared__ is one array per block: tree sums equal the host's", ok_sum);
	test_cond("atomicAdd from every block adds up", sums[B] == total);
	cudaFree(dx), cudaFree(ds), cudaFree(dsh);
}

static void test_errors(void)
{
	float *d, host[64];
	cudaMalloc((void **)&d, 64 * sizeof(float));
	cudaMemset(d, 0, 64 * sizeof(float));

	test_cond("a barrier 10 of 64 threads reach is a launch failure",
		  cuemu_selftest_diverged(d) == cudaErrorLaunchFailure);
	test_cond("cudaGetLastError clears it", cudaGetLastError() == cudaSuccess);
	test_cond("a barrier only block 1 reaches is reported, never run silently",
		  cuemu_selftest_late_barrier(d) == cudaErrorLaunchFailure);

	cudaMemset(d, 0, 64 * sizeof(float));
	test_cond("2048 threads in a block: invalid configuration",
		  cuemu_selftest_touch(d, 2048) == cudaErrorInvalidConfiguration);
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("a refused launch runs no thread", host[0] == 0.f);
	test_cond("an empty block: invalid configuration",
		  cuemu_selftest_touch(d, 0) == cudaErrorInvalidConfiguration);
	test_cond("64 threads run", cuemu_selftest_touch(d, 64) == cudaSuccess);

	test_cond("cudaMemcpy to a host pointer named as device memory fails",
		  cudaMemcpy(host, d, sizeof(host), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
	test_cond("cudaMemcpy past the end of an allocation fails",
		  cudaMemcpy(host, d, 65 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
	test_cond("cudaFree of a pointer inside an allocation fails", cudaFree(d + 1) == cudaErrorInvalidValue);
	test_cond("cudaFree of the allocation", cudaFree(d) == cudaSuccess);
}

int main(void)
{
	test_coords(1, 1, 1, 1, 1, 1);
	test_coords(3, 2, 2, 4, 3, 2);
	test_coords(1000, 1, 1, 256, 1, 1); /* later blocks run without fibers */
	test_coords(2, 1, 1, 1024, 1, 1);
	test_block_sums();
	test_errors();
	return test_report();
}
