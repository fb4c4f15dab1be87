/* cnn_train's GPU path, whole: the step on cuDNN and cuBLAS against the
 * golden file PyTorch wrote (the same file the CPU path is checked
 * against), in fp32, TF32 and bf16; then training steps through the module's
 * API (data set on the GPU, dropout, SGD, CUDA graph, NCCL at world 1)
 * against the CPU path on the same images and dropout masks.
 *
 * Without a GPU (or a driver) everything is skipped, loudly, and the
 * program exits 0: make check compiles and links it everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm.h"
#include "data.h"
#include "golden.h"
#include "gpu.h"
#include "model.h"
#include "optim.h"
#include "test.h"
#include "tol.h"

#ifndef GOLDEN
#define GOLDEN "tests/golden/net_step.golden"
#endif

/* Tolerances, |got - ref| <= atol + rtol * |ref|, one table, and why (tol.h). */
static const struct tol tols[] = {
	{ "fp32 loss",   1e-5, 1e-5, "float32 sums of 10 logits; cuDNN and cuBLAS block the sums unlike PyTorch's CPU kernels" },
	{ "fp32 grad",   2e-6, 1e-3, "reductions over up to 9216 terms in another order (cuDNN's algorithms, cuBLAS split-K)" },
	{ "fp32 gradsum",1e-4, 1e-3, "sums of 1.2M gradients; fc2's cancel to ~0, so mostly atol" },
	{ "fp32 param",  1e-5, 1e-3, "three optimizer steps compound the gradient differences" },
	{ "tf32 loss",   2e-3, 2e-3, "TF32 rounds the convolutions' and GEMMs' inputs to 10 mantissa bits (2^-11 relative)" },
	{ "tf32 grad",   1e-4, 3e-2, "TF32 products summed over up to 9216 terms: errors grow with sqrt(terms)" },
	{ "tf32 gradsum",2e-3, 3e-2, "as tf32 grad, over sums of 1.2M gradients" },
	{ "tf32 param",  2e-4, 2e-2, "three steps of TF32 gradients; the update itself is fp32" },
	{ "bf16 loss",   2e-2, 1e-2, "bf16 operands (8 significant bits, 2^-9 relative rounding) in every conv and GEMM, fp32 sums" },
	{ "bf16 grad",   3e-4, 6e-2, "bf16 operands and bf16 conv activations/gradients: a few 2^-9 roundings per term, partly cancelling" },
	{ "bf16 gradsum",2e-3, 5e-2, "as bf16 grad over sums of up to 1.2M gradients; round-to-even errors are unbiased" },
	{ "bf16 param",  5e-4, 2e-2, "three updates from bf16 gradients; the master weights and the update are fp32" },
	{ "steps",       1e-4, 1e-2, "20 SGD steps with dropout, GPU (fp32) vs the CPU path: differences in summation order compound" },
	{ "bf16 steps",  2e-3, 5e-2, "20 SGD steps with dropout, GPU bf16 vs the CPU path in fp32: bf16 gradient errors compound" },
	{ "graph",       1e-6, 1e-5, "graph replay vs eager launches: the same kernels; cuDNN's backward-filter may add in another order" },
	{ "bf16 graph",  1e-4, 1e-3, "as graph, and a bf16 weight gradient rounds a different summation order to 2^-9" },
};

static struct cnn_gpu *open_gpu(const struct cnn_model *m, int batch, enum cnn_precision prec,
				int graph, const struct cnn_optim *o)
{
	struct cnn_gpu *g = NULL;
	char err[1024];
	struct cnn_gpu_opts go = { m, batch, batch, 0, prec, graph, o, 1, 0, 1, 60000 };
	if (cnn_gpu_api.open(&g, &go, err, sizeof(err)) < 0) {
		printf("#   open: %s\n", err);
		cnn_gpu_api.close(g);
		return NULL;
	}
	return g;
}

/* The golden step in one precision. */
static void test_golden(enum cnn_precision prec)
{
	const char *P = cnn_precision_name(prec);
	char what[32], desc[160], err[1024];
	FILE *f = golden_open(GOLDEN);
	struct cnn_model m;
	struct cnn_shape sh = { 1, 28, 28, 10 };
	double ref[16], got[16];
	test_cond("golden file " GOLDEN " opens", f != NULL);
	if (!f || cnn_model_init(&m, sh, err, sizeof(err)) < 0)
		return;
	m.p_drop1 = m.p_drop2 = 0;
	struct cnn_optim o0 = { .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f };
	cnn_optim_init(&o0, CNN_SGD, m.nparams);
	struct cnn_gpu *g = open_gpu(&m, 8, prec, 0, &o0);
	snprintf(desc, sizeof(desc), "%s: the GPU path opens", P);
	test_cond(desc, g != NULL);
	if (!g)
		goto out;
	float x[8 * 784], loss, logp0[10];
	float *grads = malloc(m.nparams * 4);
	uint8_t lab[8];
	for (int i = 0; i < 8; i++)
		lab[i] = (uint8_t)(i % 10);
	golden_params(&m);
	hashed(x, 8 * 784, 7, 2.f);
	int ok = cnn_gpu_api.set_state(g, m.params, NULL, err, sizeof(err)) == 0 &&
		 cnn_gpu_debug_step(g, x, lab, 8, &loss, logp0, grads, err, sizeof(err)) == 0;
	snprintf(desc, sizeof(desc), "%s: forward and backward of the golden batch run", P);
	test_cond(desc, ok);
	if (!ok) {
		printf("#   %s\n", err);
		free(grads);
		goto close;
	}
	snprintf(what, sizeof(what), "%s loss", P);
	got[0] = loss;
	golden_get(f, "loss", NULL, ref, 1);
	snprintf(desc, sizeof(desc), "%s golden: loss of the batch", P);
	test_cond(desc, check(what, "loss", got, ref, 1) == 0);
	for (int j = 0; j < 10; j++)
		got[j] = logp0[j];
	snprintf(desc, sizeof(desc), "%s golden: log-probabilities of image 0", P);
	test_cond(desc, golden_get(f, "logp0", NULL, ref, 10) == 10 && check(what, "logp0", got, ref, 10) == 0);
	for (int t = 0; t < P_COUNT; t++) {
		const float *gt = grads + m.t[t].off;
		size_t n = m.t[t].n;
		double v[10], gs[2] = { 0, 0 }, sums[2];
		int have = golden_get(f, "grad", m.t[t].name, v, 10) == 10;
		for (size_t i = 0; i < n; i++) {
			gs[0] += gt[i];
			gs[1] += fabs(gt[i]);
		}
		sums[0] = v[0];
		sums[1] = v[1];
		for (int j = 0; j < 8; j++) {
			got[j] = gt[j * n / 8];
			ref[j] = v[2 + j];
		}
		char w1[32], w2[32];
		snprintf(w1, sizeof(w1), "%s gradsum", P);
		snprintf(w2, sizeof(w2), "%s grad", P);
		snprintf(desc, sizeof(desc), "%s golden: gradient of %s", P, m.t[t].name);
		test_cond(desc, have && check(w1, m.t[t].name, gs, sums, 2) == 0 &&
				check(w2, m.t[t].name, got, ref, 8) == 0);
	}
	free(grads);
close:
	cnn_gpu_api.close(g);

	/* three steps of each optimizer, as the CPU test does */
	const char *names[2] = { "sgd", "adadelta" };
	for (int k = 0; k < 2; k++) {
		struct cnn_optim o = { .lr = k ? 1.0f : 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f };
		cnn_optim_init(&o, k ? CNN_ADADELTA : CNN_SGD, m.nparams);
		g = open_gpu(&m, 8, prec, 0, &o);
		float *gr = malloc(m.nparams * 4);
		golden_params(&m);
		ok = g && gr && cnn_gpu_api.set_state(g, m.params, &o, err, sizeof(err)) == 0;
		for (int step = 0; ok && step < 3; step++)
			ok = cnn_gpu_debug_step(g, x, lab, 8, &loss, logp0, gr, err, sizeof(err)) == 0 &&
			     cnn_gpu_debug_update(g, o.lr, err, sizeof(err)) == 0;
		/* the loss after 3 steps is the forward of a 4th */
		ok = ok && cnn_gpu_debug_step(g, x, lab, 8, &loss, logp0, gr, err, sizeof(err)) == 0 &&
		     cnn_gpu_api.get_state(g, m.params, NULL, err, sizeof(err)) == 0;
		if (!ok)
			printf("#   %s\n", err);
		char key[32];
		snprintf(key, sizeof(key), "%s_loss3", names[k]);
		snprintf(what, sizeof(what), "%s loss", P);
		got[0] = loss;
		golden_get(f, key, NULL, ref, 1);
		snprintf(desc, sizeof(desc), "%s golden: %s, loss after 3 steps", P, names[k]);
		test_cond(desc, ok && check(what, key, got, ref, 1) == 0);
		snprintf(key, sizeof(key), "%s_param", names[k]);
		snprintf(what, sizeof(what), "%s param", P);
		int bad = !ok;
		for (int t = 0; t < P_COUNT; t++) {
			size_t n = m.t[t].n;
			if (golden_get(f, key, m.t[t].name, ref, 8) != 8) {
				bad++;
				continue;
			}
			for (int j = 0; j < 8; j++)
				got[j] = m.params[m.t[t].off + j * n / 8];
			bad += check(what, m.t[t].name, got, ref, 8);
		}
		snprintf(desc, sizeof(desc), "%s golden: %s, parameters after 3 steps", P, names[k]);
		test_cond(desc, bad == 0);
		free(gr);
		cnn_gpu_api.close(g);
		cnn_optim_free(&o);
	}
out:
	cnn_optim_free(&o0);
	cnn_model_free(&m);
	fclose(f);
}

/* 20 steps through the module's API (gather on the GPU, dropout, SGD with
 * momentum, the learning rate from device memory); graph: 0 eager, 1
 * captured after 2 eager steps; comm: NCCL at world 1 inside the step. */
static int gpu_run(const struct cnn_dataset *tr, const struct cnn_dataset *te,
		   const struct cnn_model *m0, enum cnn_precision prec, int graph, int nccl, float *out,
		   char *err, size_t errlen)
{
	struct cnn_model m = *m0;
	struct cnn_optim o = { .lr = 0.05f, .momentum = 0.9f };
	struct cnn_comm *c = NULL;
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	struct cnn_gpu *g = open_gpu(&m, 32, prec, graph, &o);
	int ok = g != NULL;
	if (ok && nccl) {
		struct cnn_comm_opts co = { "nccl", "127.0.0.1", 0, 0, 1, NULL, NULL, 60000, cnn_gpu_api.comm };
		ok = cnn_comm_open(&c, &co, err, errlen) == 0;
		if (ok)
			cnn_gpu_api.use_comm(g, c);
	}
	ok = ok && cnn_gpu_api.load_data(g, tr, te, err, errlen) == 0 &&
	     cnn_gpu_api.set_state(g, m0->params, &o, err, errlen) == 0;
	uint32_t idx[32];
	for (int step = 0; ok && step < 20; step++) {
		for (int i = 0; i < 32; i++)
			idx[i] = (uint32_t)((step * 32 + i) * 7 % tr->n);
		ok = cnn_gpu_api.train_step(g, idx, 32, 0.05f, (uint64_t)step, err, errlen) == 0;
	}
	float loss;
	ok = ok && cnn_gpu_api.last_loss(g, &loss, err, errlen) == 0 &&
	     cnn_gpu_api.get_state(g, out, NULL, err, errlen) == 0;
	cnn_gpu_api.close(g);
	cnn_comm_close(c);
	cnn_optim_free(&o);
	return ok ? 0 : -1;
}

static void test_steps_vs_cpu(int bf16)
{
	struct cnn_dataset tr, te;
	struct cnn_model m;
	struct cnn_acts a;
	char err[1024];
	if (cnn_data_load("synthetic", NULL, &tr, &te, err, sizeof(err)) < 0) {
		test_cond("synthetic data set", 0);
		return;
	}
	struct cnn_shape sh = { tr.c, tr.h, tr.w, tr.classes };
	cnn_model_init(&m, sh, err, sizeof(err));
	cnn_model_init_params(&m, 1);
	float *p0 = malloc(m.nparams * 4), *eager = malloc(m.nparams * 4),
	      *graph = malloc(m.nparams * 4), *nccl = malloc(m.nparams * 4),
	      *beager = malloc(m.nparams * 4), *bgraph = malloc(m.nparams * 4);
	memcpy(p0, m.params, m.nparams * 4);

	/* the CPU path: same indices, same masks (seed 1, rank 0, step k) */
	struct cnn_optim o = { .lr = 0.05f, .momentum = 0.9f };
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	cnn_acts_init(&a, &m, 32, 2, err, sizeof(err));
	uint8_t y[32];
	uint32_t idx[32];
	float loss;
	for (int step = 0; step < 20; step++) {
		for (int i = 0; i < 32; i++)
			idx[i] = (uint32_t)((step * 32 + i) * 7 % tr.n);
		cnn_data_gather(&tr, idx, 32, a.x, y);
		cnn_forward(&m, &a, y, 32, 1, 1, (uint64_t)step, 0, &loss, NULL);
		cnn_backward(&m, &a, y, 32, 32.f, NULL, NULL);
		cnn_optim_step(&o, m.params, m.grads, 0.05f);
	}
	struct cnn_model mg = m;
	mg.params = p0;
	int r1 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 0, 0, eager, err, sizeof(err));
	if (r1 < 0)
		printf("#   eager: %s\n", err);
	test_cond("20 eager GPU steps (dropout, SGD) run", r1 == 0);
	test_cond("20 eager GPU steps equal the CPU path's (same images, same dropout masks)",
		  r1 == 0 && checkf("steps", "params", eager, m.params, m.nparams) == 0);
	int r2 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 1, 0, graph, err, sizeof(err));
	if (r2 < 0)
		printf("#   graph: %s\n", err);
	test_cond("20 GPU steps replayed as a CUDA graph run", r2 == 0);
	test_cond("the graph's result equals the eager one's",
		  r1 == 0 && r2 == 0 && checkf("graph", "params", graph, eager, m.nparams) == 0);
	int r3 = gpu_run(&tr, &te, &mg, CNN_PREC_FP32, 1, 1, nccl, err, sizeof(err));
	if (r3 < 0)
		printf("#   nccl: %s\n", err);
	test_cond("20 GPU steps with the NCCL all-reduce in the graph run (world 1)", r3 == 0);
	test_cond("NCCL's average over one rank changes nothing",
		  r2 == 0 && r3 == 0 && checkf("graph", "params", nccl, graph, m.nparams) == 0);
	if (!bf16) {
		test_skip("bf16 training steps", "this GPU has no bf16 tensor cores (sm_80+)");
	} else {
		int r4 = gpu_run(&tr, &te, &mg, CNN_PREC_BF16, 0, 0, beager, err, sizeof(err));
		if (r4 < 0)
			printf("#   bf16 eager: %s\n", err);
		test_cond("20 eager GPU steps in bf16 run", r4 == 0);
		test_cond("20 bf16 steps track the CPU path's fp32 ones (bf16 steps tolerance)",
			  r4 == 0 && checkf("bf16 steps", "params", beager, m.params, m.nparams) == 0);
		int r5 = gpu_run(&tr, &te, &mg, CNN_PREC_BF16, 1, 1, bgraph, err, sizeof(err));
		if (r5 < 0)
			printf("#   bf16 graph: %s\n", err);
		test_cond("20 bf16 GPU steps as a CUDA graph with NCCL (world 1) run", r5 == 0);
		test_cond("the bf16 graph's result equals the bf16 eager one's",
			  r4 == 0 && r5 == 0 && checkf("bf16 graph", "params", bgraph, beager, m.nparams) == 0);
	}
	cnn_acts_free(&a);
	cnn_optim_free(&o);
	cnn_model_free(&m);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	free(p0), free(eager), free(graph), free(nccl), free(beager), free(bgraph);
}

int main(void)
{
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("ok 1 - GPU training step vs the golden file and the CPU path # SKIP no GPU here "
		       "(cudaGetDeviceCount: %s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		printf("1..1\n");
		fprintf(stderr, "test_gpu_step: SKIPPED: no GPU (%s); the GPU path was compiled and "
			"linked, not run\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 0;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	int bf16 = prop.major >= 8;
	printf("# GPU 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
	test_golden(CNN_PREC_TF32);   /* first: the fp32 run sets NVIDIA_TF32_OVERRIDE=0 */
	if (bf16)
		test_golden(CNN_PREC_BF16);
	else
		test_skip("bf16 golden step", "this GPU has no bf16 tensor cores (sm_80+)");
	test_golden(CNN_PREC_FP32);
	test_steps_vs_cpu(bf16);
	return test_report();
}
