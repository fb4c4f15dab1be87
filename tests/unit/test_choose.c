/* The GPU path's automatic choices (trainer/cuda/choose.c) on numbers: the
 * rules by which --conv-layout, --conv1, --conv2, --fc2, --backward-streams
 * and --pdl auto keep a way, from the times measured on a GPU.  No CUDA:
 * runs everywhere, and under the sanitizers. */
#include "test.h"

#include "cuda/choose.h"

static void test_faster(void)
{
	test_cond("the other way faster: taken", cnn_choose_faster(1.0f, 0.5f) == 1);
	test_cond("the other way slower: the base kept", cnn_choose_faster(0.5f, 1.0f) == 0);
	test_cond("a tie: the base kept", cnn_choose_faster(0.5f, 0.5f) == 0);
	test_cond("the other way could not run (-1): the base kept", cnn_choose_faster(0.5f, -1.f) == 0);
	test_cond("the base could not run, the other did: the other", cnn_choose_faster(-1.f, 2.0f) == 1);
	test_cond("neither ran: the base (the caller's failure to report)", cnn_choose_faster(-1.f, -1.f) == 0);
	test_cond("a zero time is a time", cnn_choose_faster(0.1f, 0.f) == 1);
}

static void test_least(void)
{
	const float a[] = { 0.30f, 0.20f, 0.25f, 0.20f };
	const float b[] = { -1.f, 0.40f, -1.f, 0.35f };
	const float none[] = { -1.f, -1.f };
	const float one[] = { 0.7f };
	test_cond("the least time, a tie to the first of them", cnn_choose_least(a, 4) == 1);
	test_cond("ways that could not run are left out", cnn_choose_least(b, 4) == 3);
	test_cond("none ran: -1", cnn_choose_least(none, 2) == -1);
	test_cond("one way: it", cnn_choose_least(one, 1) == 0);
	test_cond("no ways: -1", cnn_choose_least(a, 0) == -1);
}

static void test_mixes(void)
{
	test_cond("conv2's picks kept (variant 0): no mixes timed", cnn_choose_mixes(3, 12, 0) == 0);
	test_cond("all cuDNN kept over the picks: the mixes timed", cnn_choose_mixes(3, 12, 1) == 1);
	test_cond("all direct kept over the picks: the mixes timed", cnn_choose_mixes(3, 12, 2) == 1);
	test_cond("conv2 had no choice (--conv2 cudnn, or fp32): no mixes", cnn_choose_mixes(0, 2, 1) == 0);
	test_cond("one variant, nothing timed: no mixes", cnn_choose_mixes(3, 1, 1) == 0);
}

static void test_pdl(void)
{
	const float faster[2] = { 0.1887f, 0.1739f }, slower[2] = { 1.2123f, 1.2408f }, tie[2] = { 1.f, 1.f };
	test_cond("auto: the edges kept where the replay ran faster with them (batch 64 on an H200)",
		  cnn_choose_pdl(0, 1, faster) == 1);
	test_cond("auto: left off where slower (batch 1024 on an H200)", cnn_choose_pdl(0, 1, slower) == 0);
	test_cond("auto: a tie stays as captured", cnn_choose_pdl(0, 1, tie) == 0);
	test_cond("on: kept whatever the times", cnn_choose_pdl(1, 1, slower) == 1);
	test_cond("no edges could be made (before sm_90): nothing kept, even on", cnn_choose_pdl(1, 0, faster) == 0);
}

/* --conv2 auto's (and --conv1 auto's) choice for the backward's
 * convolutions in NCHW: the tensor-core kernels read the pool's tensors
 * (a cuDNN call needs the pool's backward written first) and carry conv1's
 * weight gradient, so they go together (a choice per call would take
 * cuDNN's backward-data in the second case and pay the pool's backward for
 * it, and in the sixth take cuDNN's weight gradient for conv1 and pay a
 * pass of its own for it). */
static void test_pick_bwd(void)
{
	static const float no = -1.f;
	static const struct {
		float dg[2][2], wg[2], pool; /* dg[conv1 direct][conv2 direct] */
		int want, want1;
		const char *what;
	} c[] = {
		{ { { no, no }, { 1.0f, 0.5f } }, { 1.0f, 0.6f }, 0.2f, 6, 1,
		  "both of conv2's calls faster direct: both direct" },
		{ { { no, no }, { 0.5f, 0.6f } }, { 1.0f, 0.5f }, 0.3f, 6, 1,
		  "backward-data 0.1 ms slower direct, the pool's backward 0.3 ms: both direct" },
		{ { { no, no }, { 0.5f, 0.6f } }, { 1.0f, 0.5f }, 0.05f, 4, 1,
		  "the same with the pool's backward 0.05 ms: backward-data by cuDNN" },
		{ { { 1.0f, 0.2f }, { no, no } }, { 0.2f, 1.0f }, 0.1f, 2, 0,
		  "backward-filter far faster by cuDNN: it alone by cuDNN" },
		{ { { 0.2f, 1.0f }, { no, no } }, { 0.2f, 1.0f }, 0.1f, 0, 0,
		  "both far faster by cuDNN: both cuDNN" },
		{ { { 0.5f, 0.45f }, { 0.55f, 0.4f } }, { 0.5f, 0.5f }, 0.1f, 6, 1,
		  "conv1's weight gradient slower direct after cuDNN's backward-data (0.55 against 0.5), "
		  "fused with conv2's the fastest pair: all direct" },
		{ { { 0.5f, 0.3f }, { 0.55f, 0.4f } }, { 0.5f, 0.5f }, 0.1f, 6, 0,
		  "conv1's weight gradient by its own cuDNN pass after conv2's direct one, faster than fused: conv1 by cuDNN" },
		{ { { 0.3f, no }, { 0.3f, no } }, { 0.2f, no }, 0.1f, 0, 1,
		  "only cuDNN open for conv2, a tie for conv1: the project's kernels" },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int c1 = -1;
		int got = cnn_choose_bwd(c[i].dg, c[i].wg, c[i].pool, &c1);
		char d[300];
		snprintf(d, sizeof(d), "auto, NCHW backward: %s (conv2 bits %d, conv1 %d)", c[i].what, got, c1);
		test_cond(d, got == c[i].want && c1 == c[i].want1);
	}
	float none[2][2] = { { no, no }, { no, no } }, wg[2] = { 1.f, 1.f };
	int c1 = 7;
	test_cond("auto, NCHW backward: nothing open is -1, conv1's choice untouched",
		  cnn_choose_bwd((const float (*)[2])none, wg, 0.f, &c1) == -1 && c1 == 7);
}

int main(void)
{
	test_faster();
	test_least();
	test_mixes();
	test_pdl();
	test_pick_bwd();
	return test_report();
}
