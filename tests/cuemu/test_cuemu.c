/* cuemu's own test: the execution model test_cuda_kernels_emu relies on
 * (coordinates, shared memory and barriers that wait, atomics, argument
 * copies) and the mistakes it must report rather than hide (a barrier
 * some threads skip, a launch a GPU refuses, a host pointer given as a
 * device one). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "selftest.h"
#include "test.h"

void cuemu_clear_fault(void);
int cuemu_set_order(const char *name);

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_TEST_ASAN 1
#include <sanitizer/asan_interface.h>
#endif

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

/* wmma as the tensor-core kernels use it: each layout read and written as
 * named (integers: the sums are exact in any order), and cvt.rna's
 * rounding of TF32: 10 mantissa bits, ties away from zero. */
static void test_wmma(void)
{
	float a[16 * 8], b[8 * 16], c[16 * 16], d[16 * 16], want[16 * 16];
	float r[] = { 1.f + 0x1p-11f, 1.f + 0x1p-11f + 0x1p-12f, -(1.f + 0x1p-11f), 1.f + 0x1p-12f,
		      1.f + 3 * 0x1p-11f, 3.f };
	float rw[] = { 1.f + 0x1p-10f, 1.f + 0x1p-10f, -(1.f + 0x1p-10f), 1.f, 1.f + 0x1p-9f, 3.f };
	int nr = (int)(sizeof(r) / sizeof(r[0]));
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 8; k++)
			a[i * 8 + k] = (float)((i * 3 + k * 5) % 7 - 3);           /* a[i][k], row-major */
	for (int k = 0; k < 8; k++)
		for (int j = 0; j < 16; j++)
			b[j * 8 + k] = (float)((k * 2 + j * 7) % 5 - 2);           /* b[k][j], column-major */
	for (int i = 0; i < 16 * 16; i++)
		c[i] = (float)(i % 11);                                          /* c[i/16][i%16] */
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float s = c[i * 16 + j];
			for (int k = 0; k < 8; k++)
				s += a[i * 8 + k] * b[j * 8 + k];
			want[j * 16 + i] = s;                                    /* d column-major */
		}
	float *da, *db, *dc, *dd, *dr;
	cudaMalloc((void **)&da, sizeof(a));
	cudaMalloc((void **)&db, sizeof(b));
	cudaMalloc((void **)&dc, sizeof(c));
	cudaMalloc((void **)&dd, sizeof(d));
	cudaMalloc((void **)&dr, sizeof(r));
	cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice);
	cudaMemcpy(dc, c, sizeof(c), cudaMemcpyHostToDevice);
	cudaMemcpy(dr, r, sizeof(r), cudaMemcpyHostToDevice);
	test_cond("a warp's wmma launches", cuemu_selftest_wmma_tf32(da, db, dc, dd, dr, nr) == cudaSuccess);
	cudaMemcpy(d, dd, sizeof(d), cudaMemcpyDeviceToHost);
	cudaMemcpy(r, dr, sizeof(r), cudaMemcpyDeviceToHost);
	test_cond("wmma: row- and column-major fragments, accumulator in and out, d = a b + c",
		  memcmp(d, want, sizeof(d)) == 0);
	test_cond("__float_to_tf32: nearest, ties away from zero", memcmp(r, rw, sizeof(r)) == 0);
	cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd), cudaFree(dr);
}

/* load_matrix_sync is a warp's one read (cuemu.h: load_tile): each lane
 * writing the tile after it changes no lane's fragment, lanes run forward,
 * reversed, or both (the race check: the same result); four warps, each
 * its own tile. */
static void test_wmma_collective(void)
{
	static const char *const orders[] = { "forward", "reverse", "check" };
	float a[4 * 128], d[4 * 256];
	for (int i = 0; i < 4 * 128; i++)
		a[i] = (float)(i % 13 - 6);
	float *da, *dd;
	cudaMalloc((void **)&da, sizeof(a));
	cudaMalloc((void **)&dd, sizeof(d));
	for (int o = 0; o < 3; o++) {
		cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
		cuemu_set_order(orders[o]);
		char desc[160];
		snprintf(desc, sizeof(desc), "wmma, %s: two blocks of two warps load, then write, their tiles",
			 orders[o]);
		test_cond(desc, cuemu_selftest_wmma_collective(da, dd) == cudaSuccess);
		cudaMemcpy(d, dd, sizeof(d), cudaMemcpyDeviceToHost);
		int bad = 0;
		for (int t = 0; t < 4; t++)
			for (int i = 0; i < 16; i++) {
				float s = 0;
				for (int k = 0; k < 8; k++)
					s += a[t * 128 + i * 8 + k];
				for (int j = 0; j < 16; j++)
					bad += d[t * 256 + i * 16 + j] != s;
			}
		snprintf(desc, sizeof(desc), "wmma, %s: every lane's tile is the one its warp read before any lane wrote",
			 orders[o]);
		test_cond(desc, bad == 0);
		if (bad)
			printf("#   %d of the 1024 sums off\n", bad);
	}
	cuemu_set_order("forward");
	cudaFree(da), cudaFree(dd);
}

/* cp.async lands late: at the wait that covers it (a read before it sees
 * what was there), or at once in a check launch's reversed run, so that a
 * read before the wait shows as the race it is on a GPU. */
static void test_cp_async(void)
{
	float x[64], before[64], after[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i + 1);
	float *dx, *db, *da;
	cudaMalloc((void **)&dx, sizeof(x));
	cudaMalloc((void **)&db, sizeof(before));
	cudaMalloc((void **)&da, sizeof(after));
	cudaMemcpy(dx, x, sizeof(x), cudaMemcpyHostToDevice);
	cuemu_set_order("forward");
	int rc = cuemu_selftest_cp_async(dx, db, da, 1);
	cudaMemcpy(before, db, sizeof(before), cudaMemcpyDeviceToHost);
	cudaMemcpy(after, da, sizeof(after), cudaMemcpyDeviceToHost);
	int late = 1, landed = 1;
	for (int t = 0; t < 64; t++) {
		int u = (t + 1) % 64;
		late &= before[t] == -1.f;
		landed &= after[t] == (u % 2 ? 0.f : x[u]);
	}
	test_cond("cp.async: a copy not yet waited for has not landed (its slot as it was)",
		  rc == cudaSuccess && late);
	test_cond("... after the wait and a barrier every thread's has, zeros where it read nothing",
		  landed);
	test_cond("... a thread that ends with a copy no wait covered fails the launch",
		  cuemu_selftest_cp_async(dx, db, da, 0) == cudaErrorLaunchFailure);
	cuemu_set_order("check");
	test_cond("... CUEMU_ORDER=check: the read before the wait (its copy landing at once "
		  "reversed) is reported", cuemu_selftest_cp_async(dx, db, da, 1) == cudaErrorLaunchFailure);
	cuemu_set_order("forward");
	test_cond("... and the same launch, forward, runs", cuemu_selftest_cp_async(dx, db, da, 1) == cudaSuccess);
	cudaFree(dx), cudaFree(db), cudaFree(da);
}

static void test_errors(void)
{
	float *d, host[64], *pinned = NULL;
	cudaMalloc((void **)&d, 64 * sizeof(float));
	cudaMallocHost((void **)&pinned, 64 * sizeof(float));
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("memory cudaMalloc gave reads as NaN until written (never zeros)",
		  isnan(host[0]) && isnan(host[63]));
	test_cond("... and cudaMallocHost's", pinned && isnan(pinned[0]) && isnan(pinned[63]));
	cudaFreeHost(pinned);
	cudaMemset(d, 0, 64 * sizeof(float));
#if CUEMU_TEST_ASAN
	/* 10 bytes asked: the rest of cudaMalloc's 256 poisoned, so a kernel
	 * reading past its tensor fails under ASan as under memcheck */
	char *b = NULL;
	cudaMalloc((void **)&b, 10);
	test_cond("under ASan, the bytes past a cudaMalloc's size are poisoned (memcheck's bounds)",
		  b && !__asan_address_is_poisoned(b + 9) && __asan_address_is_poisoned(b + 10) &&
			  __asan_address_is_poisoned(b + 255));
	cudaFree(b);
#endif

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

	cudaMemset(d, 0, 64 * sizeof(float));
	test_cond("__launch_bounds__(32): a block of 8 x 8 threads is too many resources",
		  cuemu_selftest_touch_bounded(d, 8, 8) == cudaErrorLaunchOutOfResources);
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("... and runs no thread's body", host[0] == 0.f && host[63] == 0.f);
	test_cond("__launch_bounds__(32): 33 threads too",
		  cuemu_selftest_touch_bounded(d, 33, 1) == cudaErrorLaunchOutOfResources);
	test_cond("__launch_bounds__(32): a block of 8 x 4 runs",
		  cuemu_selftest_touch_bounded(d, 8, 4) == cudaSuccess);
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("... every thread of it", host[0] == 2.f && host[31] == 2.f && host[32] == 0.f);

	/* how a test sees a GPU refusing a kernel it cannot hold */
	cudaMemset(d, 0, 64 * sizeof(float));
	setenv("CUEMU_FAIL_KERNELS", "other,touch", 1);
	test_cond("CUEMU_FAIL_KERNELS=other,touch: touch's launch is refused, too many resources",
		  cuemu_selftest_touch(d, 64) == cudaErrorLaunchOutOfResources);
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("... and runs no thread", host[0] == 0.f);
	test_cond("... touch_bounded, of which touch is only a prefix, runs",
		  cuemu_selftest_touch_bounded(d, 8, 4) == cudaSuccess);
	setenv("CUEMU_FAIL_KERNELS", "touc", 1);
	test_cond("CUEMU_FAIL_KERNELS=touc: touch runs", cuemu_selftest_touch(d, 64) == cudaSuccess);
	unsetenv("CUEMU_FAIL_KERNELS");

	/* a kernel that faults: the launch is accepted (its error may show
	 * already, as it ran at once), the fault is sticky */
	setenv("CUEMU_FAULT_KERNELS", "touch", 1);
	cudaMemset(d, 0, 64 * sizeof(float));
	int launched = cuemu_selftest_touch(d, 64);
	unsetenv("CUEMU_FAULT_KERNELS");
	cudaError_t synced = cudaDeviceSynchronize();
	test_cond("CUEMU_FAULT_KERNELS=touch: the sync after the launch says illegal address",
		  (launched == cudaSuccess || launched == cudaErrorIllegalAddress) &&
			  synced == cudaErrorIllegalAddress);
	test_cond("... sticky: cudaGetLastError returns it and keeps it",
		  cudaGetLastError() == cudaErrorIllegalAddress &&
			  cudaGetLastError() == cudaErrorIllegalAddress);
	test_cond("... a later launch does not run", cuemu_selftest_touch_bounded(d, 8, 4) ==
							     cudaErrorIllegalAddress);
	cuemu_clear_fault();
	cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost);
	test_cond("... nothing ran; cleared, the next launch runs",
		  host[0] == 0.f && cuemu_selftest_touch(d, 64) == cudaSuccess &&
			  cudaDeviceSynchronize() == cudaSuccess);

	test_cond("cudaMemcpy to a host pointer named as device memory fails",
		  cudaMemcpy(host, d, sizeof(host), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
	test_cond("cudaMemcpy past the end of an allocation fails",
		  cudaMemcpy(host, d, 65 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
	test_cond("cudaFree of a pointer inside an allocation fails", cudaFree(d + 1) == cudaErrorInvalidValue);
	test_cond("cudaFree of the allocation", cudaFree(d) == cudaSuccess);
}

/* wmma's alignment rule: what a GPU faults on fails here too */
static void test_wmma_alignment(void)
{
	float *a, *d;
	cudaMalloc((void **)&a, 24 * 16 * sizeof(float));
	cudaMalloc((void **)&d, (256 + 8) * sizeof(float));
	test_cond("cudaMalloc is 256-byte aligned, as a GPU's",
		  (uintptr_t)a % 256 == 0 && (uintptr_t)d % 256 == 0);
	cudaMemset(a, 0, 24 * 16 * sizeof(float));
	test_cond("wmma: an aligned tile, ldm 8", cuemu_selftest_wmma_copy(a, 0, 8, d, 0) == cudaSuccess);
	test_cond("wmma: 8 floats in (32 bytes), ldm 12 (48 bytes)",
		  cuemu_selftest_wmma_copy(a, 8, 12, d, 0) == cudaSuccess);
	test_cond("wmma: a tile 4 bytes past a 32-byte boundary is a misaligned address",
		  cuemu_selftest_wmma_copy(a, 1, 8, d, 0) == cudaErrorMisalignedAddress);
	test_cond("wmma: 16 bytes past (4 floats) too",
		  cuemu_selftest_wmma_copy(a, 4, 8, d, 0) == cudaErrorMisalignedAddress);
	test_cond("wmma: ldm 10 floats (40 bytes, not a multiple of 16) is refused",
		  cuemu_selftest_wmma_copy(a, 0, 10, d, 0) == cudaErrorMisalignedAddress);
	test_cond("wmma: a store 16 bytes past a boundary is refused",
		  cuemu_selftest_wmma_copy(a, 0, 8, d, 4) == cudaErrorMisalignedAddress);
	test_cond("wmma: the next aligned launch passes", cuemu_selftest_wmma_copy(a, 0, 8, d, 8) == cudaSuccess);
	cudaFree(a), cudaFree(d);
}

/* A fragment is spread over the warp (cuemu.h): a lane reading what
 * another stored needs a barrier between, and mma_sync needs the warp's 32
 * lanes with the same shapes; each wrong use is the launch's error. */
static void test_wmma_warp(void)
{
	float a[128], out[32], *da, *dd, *dout;
	for (int i = 0; i < 128; i++)
		a[i] = (float)(i % 5);
	cudaMalloc((void **)&da, sizeof(a));
	cudaMalloc((void **)&dd, 256 * sizeof(float));
	cudaMalloc((void **)&dout, sizeof(out));
	cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
	cuemu_set_order("check");
	int rc = cuemu_selftest_wmma_wrong(da, dd, dout, 0);
	cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost);
	int bad = 0;
	for (int l = 0; l < 32; l++) {
		int e = (l * 8 + 100) % 256;
		float s = 0;
		for (int k = 0; k < 8; k++)
			s += a[e / 16 * 8 + k];
		bad += out[l] != s;
	}
	test_cond("wmma, check: a lane reads another's stored element after a barrier: its row sum",
		  rc == cudaSuccess && bad == 0);
	static const char *const wrong[] = {
		NULL,
		"a lane reads another's stored element with no barrier between (a race)",
		"mma_sync in a warp of 16 threads",
		"a lane returns before mma_sync, its warp's others wait there",
		"a lane's mma_sync takes b in another layout than its warp's",
	};
	for (int m = 1; m <= 4; m++) {
		char desc[200];
		snprintf(desc, sizeof(desc), "wmma, check: %s: a launch failure", wrong[m]);
		cudaMemset(dd, 0xff, 256 * sizeof(float));   /* (not the tile a lane stores) */
		test_cond(desc, cuemu_selftest_wmma_wrong(da, dd, dout, m) == cudaErrorLaunchFailure);
		cudaGetLastError();
	}
	cuemu_set_order("forward");
	test_cond("wmma: the right use passes after them", cuemu_selftest_wmma_wrong(da, dd, dout, 0) == cudaSuccess);
	cudaFree(da), cudaFree(dd), cudaFree(dout);
}

/* The threads' order, and CUEMU_ORDER=check's report of the races that
 * one order hides. */
static void test_order(void)
{
	static const char *race[] = {
		"a neighbour's shared value read with no barrier after its write",
		"a shared value overwritten with no barrier after a neighbour's read",
		"every thread writing its own value to one place",
		"shared memory read before the block wrote it",
	};
	float h[128], *d;
	char m[200];
	cudaMalloc((void **)&d, sizeof(h));

	test_cond("cuemu_set_order refuses an order it does not know", cuemu_set_order("random") == -1);
	cuemu_set_order("forward");
	cudaMemset(d, 0, sizeof(h));
	int rc = cuemu_selftest_racy(d, 2);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	test_cond("forward: the last thread of the last block writes last", rc == cudaSuccess && h[0] == 127.f);
	cuemu_set_order("reverse");
	rc = cuemu_selftest_racy(d, 2);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	test_cond("reverse: the first thread of the first block writes last", rc == cudaSuccess && h[0] == 0.f);

	for (int k = 0; k < 4; k++) {
		cuemu_set_order("forward");
		snprintf(m, sizeof(m), "forward order alone runs race %d (%s) without a word", k, race[k]);
		test_cond(m, cuemu_selftest_racy(d, k) == cudaSuccess);
		cuemu_set_order("check");
		snprintf(m, sizeof(m), "CUEMU_ORDER=check: race %d (%s) is a launch failure", k, race[k]);
		test_cond(m, cuemu_selftest_racy(d, k) == cudaErrorLaunchFailure);
		cudaGetLastError();
	}
	cudaMemset(d, 0, sizeof(h));
	rc = cuemu_selftest_racy(d, 4);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	int ok = rc == cudaSuccess;
	for (int i = 0; i < 128; i++)
		ok &= h[i] == (float)(i / 64 * 64 + (i + 1) % 64);
	test_cond("CUEMU_ORDER=check: with the barrier, no failure and the right values", ok);
	cudaMemset(d, 0, sizeof(h));
	rc = cuemu_selftest_atomic_order(d);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	test_cond("CUEMU_ORDER=check: atomicAdd's order-dependent rounding is no failure",
		  rc == cudaSuccess && (h[0] == 0.f || h[0] == 1.f));
	cuemu_set_order("forward");
	cudaMemset(d, 0, sizeof(h));
	cuemu_selftest_atomic_order(d);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	test_cond("atomicAdd forward: ((1e8 + 1) - 1e8) + 1 is 1 in float", h[0] == 1.f);
	cuemu_set_order("reverse");
	cudaMemset(d, 0, sizeof(h));
	cuemu_selftest_atomic_order(d);
	cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	test_cond("atomicAdd reversed: ((1 - 1e8) + 1) + 1e8 is 0 in float", h[0] == 0.f);
	cuemu_set_order("forward");
	cudaFree(d);
}

int cuemu_set_streams(const char *name);

/* Fill d (64 floats) with v through the legacy stream. */
static void fill(float *d, float v)
{
	float h[64];
	for (int i = 0; i < 64; i++)
		h[i] = v;
	cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
}

/* d[0] as the host sees it after the device is done. */
static float first(const float *d)
{
	float v = -1.f;
	cudaDeviceSynchronize();
	cudaMemcpy(&v, d, 4, cudaMemcpyDeviceToHost);
	return v;
}

/* Streams, events and graphs (streams.cc): eager runs work as it is
 * enqueued; lazy runs it as late as its waits allow, so a missing wait
 * or a graph edge a capture missed changes the result. */
static void test_streams(void)
{
	float *a, *b, *x;
	cudaStream_t s1, s2;
	cudaEvent_t ev, ev2, t0, t1;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	cudaMalloc((void **)&a, 256);
	cudaMalloc((void **)&b, 256);
	test_cond("cuemu_set_streams refuses a mode it does not know", cuemu_set_streams("random") == -1);
	test_cond("two non-blocking streams", cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess &&
		  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming);

	/* a = 5 on s1, b = 2a on s2 with no wait between them */
	for (int lazy = 0; lazy < 2; lazy++) {
		cuemu_set_streams(lazy ? "lazy-late" : "eager");
		fill(a, 0.f);
		cuemu_selftest_axpb(a, a, 64, 0.f, 5.f, s1);
		cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);
		cudaStreamSynchronize(s2);
		float v = first(b);
		test_cond(lazy ? "lazy: a read on another stream with no wait for the write reads the old value" :
				 "eager: the same missing wait goes unseen (the host's order)",
			  v == (lazy ? 0.f : 10.f));
	}
	/* the same with the wait: right in lazy */
	fill(a, 0.f);
	cuemu_selftest_axpb(a, a, 64, 0.f, 5.f, s1);
	cudaEventRecord(ev, s1);
	cudaStreamWaitEvent(s2, ev, 0);
	cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);
	cudaStreamSynchronize(s2);
	test_cond("lazy: cudaStreamWaitEvent orders the read after the write", first(b) == 10.f);
	/* a write on s1 after a read on s2, with no wait: the read sees it */
	fill(a, 1.f);
	cuemu_selftest_axpb(a, b, 64, 1.f, 0.f, s2);
	cuemu_selftest_axpb(a, a, 64, 0.f, 7.f, s1);
	cudaStreamSynchronize(s1);
	test_cond("lazy: a read that no wait protects from a later write on another stream sees it",
		  first(b) == 7.f);
	/* a fork too early: s2 forked off s1 before the write on s1 that s2's
	 * read needs, then joined back.  The host enqueues the write first, so
	 * eager runs it first, as does late (s1 runs through to the join);
	 * ahead runs s2's read as soon as the fork allows, before the write. */
	static const char *const modes[] = { "eager", "lazy-late", "lazy-ahead", "lazy" };
	int seen[2] = { 0, 0 };
	for (int m = 0; m < 4; m++) {
		cuemu_set_streams(modes[m]);
		for (int rep = 0; rep < (m == 3 ? 16 : 1); rep++) {
			fill(a, 1.f);
			cudaEventRecord(ev, s1);
			cudaStreamWaitEvent(s2, ev, 0);
			cuemu_selftest_axpb(a, a, 64, 0.f, 5.f, s1);   /* the write, after the fork */
			cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);   /* the read */
			cudaEventRecord(ev2, s2);
			cudaStreamWaitEvent(s1, ev2, 0);
			cudaStreamSynchronize(s1);
			float v = first(b);
			if (m == 3)
				seen[v == 2.f] += v == 2.f || v == 10.f;
			else if (m < 2)
				test_cond(m ? "lazy-late: a fork placed too early goes unseen (s1 runs through)" :
					      "eager: a fork placed too early goes unseen (the host's order)",
					  v == 10.f);
			else
				test_cond("lazy-ahead: the stream forked too early reads before the write", v == 2.f);
		}
	}
	test_cond("lazy: its waits take both orders (a fork too early shows in some)",
		  seen[0] > 0 && seen[1] > 0);
	cuemu_set_streams("lazy-late");
	/* cudaEventQuery: not ready once (the GPU still at it), then done */
	cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaEventRecord(ev, s1);
	cudaError_t q1 = cudaEventQuery(ev), q2 = cudaEventQuery(ev);
	test_cond("lazy: cudaEventQuery says cudaErrorNotReady, then cudaSuccess",
		  q1 == cudaErrorNotReady && q2 == cudaSuccess);
	/* cudaStreamQuery: the same, of all the stream's work */
	fill(a, 1.f);
	cuemu_selftest_axpb(a, a, 64, 3.f, 0.f, s1);
	q1 = cudaStreamQuery(s1);
	q2 = cudaStreamQuery(s1);
	test_cond("lazy: cudaStreamQuery says cudaErrorNotReady, then cudaSuccess, the work done",
		  q1 == cudaErrorNotReady && q2 == cudaSuccess && first(a) == 3.f);
	cuemu_set_streams("eager");
	cuemu_selftest_axpb(a, a, 64, 3.f, 0.f, s1);
	test_cond("eager: cudaStreamQuery says cudaSuccess at once", cudaStreamQuery(s1) == cudaSuccess);
	static int not_a_stream;
	test_cond("cudaStreamQuery of a stream that is not one fails",
		  cudaStreamQuery((cudaStream_t)(void *)&not_a_stream) == cudaErrorInvalidResourceHandle);
	cuemu_set_streams("lazy-late");
	cudaEventCreate(&t0);
	cudaEventCreate(&t1);
	float ms = -1.f;
	cudaEventRecord(t0, s1);
	cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaEventRecord(t1, s1);
	test_cond("lazy: cudaEventElapsedTime before the events ran is cudaErrorNotReady",
		  cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady);
	cudaEventSynchronize(t1);
	test_cond("cudaEventElapsedTime after cudaEventSynchronize",
		  cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess && ms >= 0.f);
	test_cond("cudaEventElapsedTime of events made without timing fails",
		  cudaEventElapsedTime(&ms, ev, ev2) == cudaErrorInvalidResourceHandle);

	/* graphs: a fork joined back replays right; an edge the capture
	 * missed shows in lazy's replay order, not in eager's */
	for (int missed = 0; missed < 2; missed++) {
		for (int lazy = 0; lazy < 2; lazy++) {
			cuemu_set_streams(lazy ? "lazy" : "eager");
			int ok = cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
			if (missed)
				cudaEventRecord(ev, s1);   /* the fork before the write */
			cuemu_selftest_axpb(a, a, 64, 0.f, 5.f, s1);
			if (!missed)
				cudaEventRecord(ev, s1);
			cudaStreamWaitEvent(s2, ev, 0);
			cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);
			cudaEventRecord(ev2, s2);
			cudaStreamWaitEvent(s1, ev2, 0);
			ok = ok && cudaStreamEndCapture(s1, &g) == cudaSuccess &&
			     cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
			fill(a, 0.f);
			fill(b, 0.f);
			test_cond(missed ? "a capture with a fork and a join (the fork too early) ends" :
					   "a capture with a fork and a join ends", ok);
			ok = ok && first(b) == 0.f && cudaGraphLaunch(ge, s1) == cudaSuccess;
			float v = first(b);
			char m[200];
			snprintf(m, sizeof(m), "%s: %s", lazy ? "lazy" : "eager",
				 !missed ? "the graph's replay follows its edges" :
				 lazy ? "the replay runs the read before the write its edge missed" :
					"the missed edge goes unseen (the order of capture)");
			test_cond(m, ok && v == (missed && lazy ? 0.f : 10.f));
			cudaGraphExecDestroy(ge);
			cudaGraphDestroy(g);
		}
	}

	/* the captured graph as cudaGraphGetNodes, cudaGraphNodeGetType,
	 * cudaGraphGetEdges and cudaGraphDebugDotPrint show it (cnn_train's
	 * census and --cuda-graph-dot): a memset, a kernel, a fork (a kernel
	 * on each stream), the join, a copy */
	cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
	cudaMemsetAsync(a, 0, 256, s1);
	cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaEventRecord(ev, s1);
	cudaStreamWaitEvent(s2, ev, 0);
	cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);
	cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaEventRecord(ev2, s2);
	cudaStreamWaitEvent(s1, ev2, 0);
	cudaMemcpyAsync(a, b, 256, cudaMemcpyDeviceToDevice, s1);
	test_cond("a capture of a memset, three kernels on two streams and a copy ends",
		  cudaStreamEndCapture(s1, &g) == cudaSuccess);
	size_t nn = 0, ne = 0, few = 2;
	cudaGraphNode_t nodes[8], from[8], to[8];
	int kinds[4] = { 0, 0, 0, 0 }, tail_null = 1;
	test_cond("cudaGraphGetNodes with no array: 5 nodes",
		  cudaGraphGetNodes(g, NULL, &nn) == cudaSuccess && nn == 5);
	test_cond("cudaGraphGetNodes into 2 entries fills 2",
		  cudaGraphGetNodes(g, nodes, &few) == cudaSuccess && few == 2 && nodes[0] && nodes[1]);
	nn = 8;
	test_cond("cudaGraphGetNodes into 8 entries: 5, the rest NULL",
		  cudaGraphGetNodes(g, nodes, &nn) == cudaSuccess && nn == 5);
	for (size_t i = 0; i < 8; i++) {
		enum cudaGraphNodeType t;
		if (i >= 5) {
			tail_null &= nodes[i] == NULL;
			continue;
		}
		if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess)
			kinds[t == cudaGraphNodeTypeKernel ? 0 : t == cudaGraphNodeTypeMemcpy ? 1 :
			      t == cudaGraphNodeTypeMemset ? 2 : 3]++;
	}
	test_cond("... the rest NULL", tail_null);
	test_cond("cudaGraphNodeGetType: 3 kernels, 1 copy, 1 memset",
		  kinds[0] == 3 && kinds[1] == 1 && kinds[2] == 1 && kinds[3] == 0);
	test_cond("cudaGraphGetEdges with no arrays: 5 edges (memset to kernel, the fork's 2, the join's 2)",
		  cudaGraphGetEdges(g, NULL, NULL, NULL, &ne) == cudaSuccess && ne == 5);
	test_cond("cudaGraphGetEdges with one array of two: cudaErrorInvalidValue",
		  cudaGraphGetEdges(g, from, NULL, NULL, &ne) == cudaErrorInvalidValue);
	ne = 8;
	int out[5] = { 0 }, in[5] = { 0 };
	int eok = cudaGraphGetEdges(g, from, to, NULL, &ne) == cudaSuccess && ne == 5;
	for (size_t e = 0; eok && e < ne; e++)
		for (int i = 0; i < 5; i++) {
			out[i] += from[e] == nodes[i];
			in[i] += to[e] == nodes[i];
		}
	/* in the order of capture: memset, kernel (forks), s2's kernel, s1's
	 * kernel, the copy (joins) */
	test_cond("cudaGraphGetEdges: memset -> kernel -> two kernels -> copy",
		  eok && out[0] == 1 && in[0] == 0 && out[1] == 2 && in[1] == 1 && out[2] == 1 &&
			  in[2] == 1 && out[3] == 1 && in[3] == 1 && out[4] == 0 && in[4] == 2);
	char dotpath[256];
	snprintf(dotpath, sizeof(dotpath), "%s/cuemu-graph-%d.dot",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	int labels = 0, arrows = 0;
	if (cudaGraphDebugDotPrint(g, dotpath, 0) == cudaSuccess) {
		FILE *f = fopen(dotpath, "r");
		char line[256];
		while (f && fgets(line, sizeof(line), f)) {
			labels += strstr(line, "[label=") != NULL;
			arrows += strstr(line, " -> ") != NULL;
		}
		if (f)
			fclose(f);
		unlink(dotpath);
	}
	test_cond("cudaGraphDebugDotPrint: a node line for each of 5, an edge line for each of 5",
		  labels == 5 && arrows == 5);
	test_cond("cudaGraphDebugDotPrint to a directory that is not there: cudaErrorOperatingSystem",
		  cudaGraphDebugDotPrint(g, "/nonexistent-dir/g.dot", 0) == cudaErrorOperatingSystem);
	/* the clock: the same work on one stream takes each operation's time
	 * one after another, the graph's replay its longest path (the fork's
	 * two kernels overlap: one kernel's time less; what --backward-streams
	 * auto compares) */
	float one = 0.f, serial = 0.f, replay = 0.f;
	cudaEventRecord(t0, s1);
	cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaEventRecord(t1, s1);
	cudaEventSynchronize(t1);
	cudaEventElapsedTime(&one, t0, t1);
	cudaEventRecord(t0, s1);
	cudaMemsetAsync(a, 0, 256, s1);
	for (int i = 0; i < 3; i++)
		cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s1);
	cudaMemcpyAsync(a, b, 256, cudaMemcpyDeviceToDevice, s1);
	cudaEventRecord(t1, s1);
	cudaEventSynchronize(t1);
	cudaEventElapsedTime(&serial, t0, t1);
	int tok = cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
	cudaEventRecord(t0, s1);
	tok = tok && cudaGraphLaunch(ge, s1) == cudaSuccess;
	cudaEventRecord(t1, s1);
	cudaEventSynchronize(t1);
	tok = tok && cudaEventElapsedTime(&replay, t0, t1) == cudaSuccess;
	printf("# one kernel %.6f ms, the five operations on one stream %.6f ms, the graph's replay %.6f ms\n",
	       one, serial, replay);
	test_cond("a graph's replay takes its longest path: the fork's branches overlap",
		  tok && one > 0.f && replay < serial && fabsf(serial - one - replay) <= 1e-5f * serial);
	if (tok)
		cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);

	/* CUDA's capture rules */
	cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
	cudaEventRecord(ev, s1);
	cudaStreamWaitEvent(s2, ev, 0);
	cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s2);
	g = NULL;
	test_cond("a fork never joined back: cudaErrorStreamCaptureUnjoined",
		  cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureUnjoined && !g);
	cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
	cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, s1);
	test_cond("cudaMalloc during a capture: cudaErrorStreamCaptureUnsupported",
		  cudaMalloc((void **)&x, 64) == cudaErrorStreamCaptureUnsupported);
	test_cond("... and the capture is invalidated",
		  cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureInvalidated && !g);
	cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
	int rc = cuemu_selftest_axpb(a, b, 64, 2.f, 0.f, 0);
	test_cond("a launch on the legacy stream during a capture: cudaErrorStreamCaptureImplicit",
		  rc == cudaErrorStreamCaptureImplicit);
	test_cond("... and the capture is invalidated",
		  cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureInvalidated && !g);
	cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
	test_cond("cudaStreamSynchronize of a capturing stream: cudaErrorStreamCaptureUnsupported",
		  cudaStreamSynchronize(s1) == cudaErrorStreamCaptureUnsupported);
	cudaStreamEndCapture(s1, &g);
	test_cond("ending a capture on a stream that is not capturing fails",
		  cudaStreamEndCapture(s2, &g) != cudaSuccess);

	cuemu_set_streams("eager");
	cudaEventDestroy(ev), cudaEventDestroy(ev2), cudaEventDestroy(t0), cudaEventDestroy(t1);
	cudaStreamDestroy(s1), cudaStreamDestroy(s2);
	cudaFree(a), cudaFree(b);
	test_cond("no error left behind", cudaGetLastError() == cudaSuccess);
}

/* Programmatic edges (cnn_train's --pdl): cudaStreamGetCaptureInfo's
 * dependencies, a copy of a graph and its nodes, an edge's type changed by
 * removing and adding it under CUDA's rules, the replay's order and clock,
 * and the check that a kernel reached through such an edge waits first. */
static void test_programmatic(void)
{
	cudaStream_t s;
	float *a = NULL, *b = NULL, ha[64];
	cudaGraph_t g = NULL, c = NULL;
	cudaGraphExec_t ge = NULL, ce = NULL;
	cudaGraphNode_t k[3], from[8], to[8], cn[3];
	cudaGraphEdgeData data[8];
	const cudaGraphNode_t *deps = NULL;
	enum cudaStreamCaptureStatus st;
	size_t nd = 0, ne = 8;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	cudaMalloc((void **)&a, 256);
	cudaMalloc((void **)&b, 256);
	/* a memset, then A (a = a + 1), B (b = 2a, waits first), C (a = b + 1,
	 * does not wait): each kernel's node noted as the capture goes */
	test_cond("cudaStreamGetCaptureInfo of a stream not capturing: status none",
		  cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &nd) == cudaSuccess &&
		  st == cudaStreamCaptureStatusNone);
	cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
	cudaMemsetAsync(a, 0, 256, s);
	int ok = 1;
	for (int i = 0; i < 3; i++) {
		if (i == 0)
			cuemu_selftest_axpb(a, a, 64, 1.f, 1.f, s);
		else if (i == 1)
			cuemu_selftest_axpb_pdl(a, b, 64, 2.f, 0.f, s);
		else
			cuemu_selftest_axpb(b, a, 64, 1.f, 1.f, s);
		ok &= cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &nd) == cudaSuccess &&
		      st == cudaStreamCaptureStatusActive && nd == 1;
		k[i] = ok ? deps[0] : NULL;
	}
	test_cond("cudaStreamGetCaptureInfo after each launch: the launch's node alone", ok);
	test_cond("the capture ends", cudaStreamEndCapture(s, &g) == cudaSuccess);
	test_cond("cudaGraphClone copies it", cudaGraphClone(&c, g) == cudaSuccess);
	ok = 1;
	for (int i = 0; i < 3; i++)
		ok &= cudaGraphNodeFindInClone(&cn[i], k[i], c) == cudaSuccess && cn[i] != k[i];
	test_cond("cudaGraphNodeFindInClone finds each kernel's node in the copy", ok);
	test_cond("... and refuses a node of another graph",
		  cudaGraphNodeFindInClone(&cn[0], cn[1], g) == cudaErrorInvalidValue);
	cudaGraphEdgeData prog = { 0 };
	prog.from_port = cudaGraphKernelNodePortProgrammatic;
	prog.type = cudaGraphDependencyTypeProgrammatic;
	cudaGraphNode_t mem = NULL;
	cudaGraphNode_t all[4];
	size_t nn = 4;
	if (cudaGraphGetNodes(c, all, &nn) == cudaSuccess)
		for (size_t i = 0; i < nn; i++) {
			enum cudaGraphNodeType t;
			if (cudaGraphNodeGetType(all[i], &t) == cudaSuccess && t == cudaGraphNodeTypeMemset)
				mem = all[i];
		}
	test_cond("a programmatic edge from a memset: cudaErrorInvalidValue",
		  mem && cudaGraphAddDependencies(c, &mem, &cn[0], &prog, 1) == cudaErrorInvalidValue);
	cudaGraphEdgeData bad = prog;
	bad.from_port = cudaGraphKernelNodePortDefault;
	test_cond("a programmatic edge from the default port: cudaErrorInvalidValue",
		  cudaGraphRemoveDependencies(c, &cn[0], &cn[1], NULL, 1) == cudaSuccess &&
		  cudaGraphAddDependencies(c, &cn[0], &cn[1], &bad, 1) == cudaErrorInvalidValue);
	test_cond("A -> B made programmatic (removed, added back with its data)",
		  cudaGraphAddDependencies(c, &cn[0], &cn[1], &prog, 1) == cudaSuccess);
	test_cond("the same edge again: cudaErrorInvalidValue",
		  cudaGraphAddDependencies(c, &cn[0], &cn[1], NULL, 1) == cudaErrorInvalidValue);
	test_cond("an edge that closes a cycle (B -> A): cudaErrorInvalidValue",
		  cudaGraphAddDependencies(c, &cn[1], &cn[0], NULL, 1) == cudaErrorInvalidValue);
	test_cond("removing a default edge that is programmatic: cudaErrorInvalidValue",
		  cudaGraphRemoveDependencies(c, &cn[0], &cn[1], NULL, 1) == cudaErrorInvalidValue);
	ne = 8;
	test_cond("cudaGraphGetEdges without the edges' data: cudaErrorLossyQuery",
		  cudaGraphGetEdges(c, from, to, NULL, &ne) == cudaErrorLossyQuery);
	ne = 8;
	int progs = 0, right = 0;
	if (cudaGraphGetEdges(c, from, to, data, &ne) == cudaSuccess)
		for (size_t i = 0; i < ne; i++)
			if (data[i].type == cudaGraphDependencyTypeProgrammatic) {
				progs++;
				right = from[i] == cn[0] && to[i] == cn[1] &&
					data[i].from_port == cudaGraphKernelNodePortProgrammatic;
			}
	test_cond("cudaGraphGetEdges with data: 3 edges, A -> B programmatic",
		  ne == 3 && progs == 1 && right);
	/* replays: the same result; the copy a launch's latency sooner */
	cudaEvent_t t0, t1;
	float ms[2] = { 0.f, 0.f };
	cudaEventCreate(&t0);
	cudaEventCreate(&t1);
	int rok = cudaGraphInstantiate(&ge, g, 0) == cudaSuccess &&
		  cudaGraphInstantiate(&ce, c, 0) == cudaSuccess;
	for (int i = 0; rok && i < 2; i++) {
		cudaEventRecord(t0, s);
		rok = cudaGraphLaunch(i ? ce : ge, s) == cudaSuccess;
		cudaEventRecord(t1, s);
		rok = rok && cudaEventSynchronize(t1) == cudaSuccess &&
		      cudaEventElapsedTime(&ms[i], t0, t1) == cudaSuccess &&
		      cudaMemcpy(ha, a, 256, cudaMemcpyDeviceToHost) == cudaSuccess && ha[0] == 3.f &&
		      ha[63] == 3.f;
	}
	printf("# replay as captured %.6f ms, with A -> B programmatic %.6f ms\n", ms[0], ms[1]);
	test_cond("both replay to the same result (a = 2 (0 + 1) + 1)", rok);
	test_cond("the programmatic edge takes B's launch (2 us) off the replay",
		  rok && fabsf(ms[0] - ms[1] - 2e-3f) < 1e-6f);
	/* B -> C programmatic: C never waits, which the replay reports */
	test_cond("B -> C made programmatic",
		  cudaGraphRemoveDependencies(c, &cn[1], &cn[2], NULL, 1) == cudaSuccess &&
		  cudaGraphAddDependencies(c, &cn[1], &cn[2], &prog, 1) == cudaSuccess);
	cudaGraphExecDestroy(ce);
	ce = NULL;
	cudaError_t le = cudaErrorUnknown;
	if (cudaGraphInstantiate(&ce, c, 0) == cudaSuccess) {
		cudaGraphLaunch(ce, s);
		cudaStreamSynchronize(s);
		le = cudaGetLastError();
	}
	test_cond("a kernel reached through a programmatic edge that does not wait first: "
		  "the launch fails (cudaErrorLaunchFailure)", le == cudaErrorLaunchFailure);
	if (ge)
		cudaGraphExecDestroy(ge);
	if (ce)
		cudaGraphExecDestroy(ce);
	cudaGraphDestroy(g);
	cudaGraphDestroy(c);
	cudaEventDestroy(t0), cudaEventDestroy(t1);
	cudaStreamDestroy(s);
	cudaFree(a), cudaFree(b);
	test_cond("no error left behind", cudaGetLastError() == cudaSuccess);
}

/* The one device's PCI bus id: 0000:00:00.0, or CUEMU_PCI_BUS's bus (so
 * that ranks on one machine stand on GPUs of their own); CUDA's spellings of
 * it name the device, another bus none. */
static void test_pci(void)
{
	char b[32] = "";
	int dev = -1;
	test_cond("the device's bus id is 0000:00:00.0",
		  cudaDeviceGetPCIBusId(b, sizeof(b), 0) == cudaSuccess && !strcmp(b, "0000:00:00.0"));
	setenv("CUEMU_PCI_BUS", "1b", 1);
	test_cond("CUEMU_PCI_BUS=1b: 0000:1b:00.0",
		  cudaDeviceGetPCIBusId(b, sizeof(b), 0) == cudaSuccess && !strcmp(b, "0000:1b:00.0"));
	test_cond("CUEMU_PCI_BUS=1b: 00000000:1B:00.0 is device 0",
		  cudaDeviceGetByPCIBusId(&dev, "00000000:1B:00.0") == cudaSuccess && dev == 0);
	test_cond("CUEMU_PCI_BUS=1b: 0000:00:00.0 is no device",
		  cudaDeviceGetByPCIBusId(&dev, "0000:00:00.0") == cudaErrorInvalidDevice);
	test_cond("a buffer too short for the bus id is refused",
		  cudaDeviceGetPCIBusId(b, 12, 0) == cudaErrorInvalidValue);
	unsetenv("CUEMU_PCI_BUS");
}

int main(void)
{
	/* the execution model's checks read each launch's error right after
	 * it: work run as it is enqueued (test_streams sets lazy itself) */
	cuemu_set_streams("eager");
	test_coords(1, 1, 1, 1, 1, 1);
	test_coords(3, 2, 2, 4, 3, 2);
	test_coords(1000, 1, 1, 256, 1, 1); /* later blocks run without fibers */
	test_coords(2, 1, 1, 1024, 1, 1);
	test_block_sums();
	test_wmma();
	test_wmma_warp();
	test_wmma_collective();
	test_cp_async();
	test_errors();
	test_wmma_alignment();
	test_order();
	test_streams();
	test_programmatic();
	test_pci();
	return test_report();
}
