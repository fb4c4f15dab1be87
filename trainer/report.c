/* What cnn_train reports at the end of a run (see run.h): the captured
 * step's CUDA graph and what its autos timed and kept, the ranks'
 * parameters compared, the time per rank (and --log-json), --dump-params,
 * and the closing "done:" line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "run.h"

/* conv2's calls as the census's bits choose them (bit 0 forward, 1
 * backward-data, 2 backward-filter: the project's kernels). */
static const char *conv2_mix(int bits)
{
	static const char *name[8] = {
		"all cuDNN",
		"forward direct (the rest cuDNN)",
		"backward-data direct (the rest cuDNN)",
		"forward and backward-data direct (the rest cuDNN)",
		"backward-filter direct (the rest cuDNN)",
		"forward and backward-filter direct (the rest cuDNN)",
		"backward-data and backward-filter direct (the rest cuDNN)",
		"all direct",
	};
	return name[bits & 7];
}

static void report_times(struct run *R)
{
	char err[1024];
	int w = R->rank.world;
	float *t = calloc((size_t)w * 4, sizeof(float));
	if (!t)
		cnn_run_die(R, "out of memory");
	float *mine = t + (size_t)R->rank.rank * 4;
	mine[0] = (float)R->t_data;
	mine[1] = (float)R->t_compute;
	mine[2] = (float)R->red.comm_s;
	mine[3] = (float)R->t_idle;
	if (cnn_comm_allreduce_sum(R->comm, t, (size_t)w * 4, err, sizeof(err)) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	if (R->rank.rank == 0) {
		printf(R->gpu ? "# time per rank, seconds (GPU: the all-reduce runs inside the step, "
			      "overlapped)\n" :
			      "# time per rank, seconds (comm overlaps compute; idle is waiting for it)\n");
		printf("# %6s %10s %10s %10s %10s\n", "rank", "data", "compute", "comm", "idle");
		for (int r = 0; r < w && r < 64; r++)
			printf("  %6d %10.2f %10.2f %10.2f %10.2f\n", r, t[r * 4], t[r * 4 + 1],
			       t[r * 4 + 2], t[r * 4 + 3]);
		if (w > 64)
			printf("  (%d more ranks)\n", w - 64);
	}
	if (R->rank.rank == 0 && R->args.log_json) {
		double ips = R->t_train_wall > 0 ? R->timed_images * (double)w / R->t_train_wall : 0;
		FILE *f = fopen(R->args.log_json, "w");
		if (!f)
			cnn_run_die(R, "--log-json %s: %s", R->args.log_json, strerror(errno));
		fprintf(f, "{\n");
		if (R->evaluated)
			fprintf(f, "  \"test_accuracy\": %.6f,\n  \"test_loss\": %.6f,\n",
				R->test_acc, R->test_loss);
		else
			fprintf(f, "  \"test_accuracy\": null,\n  \"test_loss\": null,\n");
		struct cnn_graph_census gc;
		char ms[64] = "null", c2[512] = "null", lms[64] = "null", pdl[128] = "null";
		if (R->gpu && R->gpu_api->graph_census(R->gpu, &gc) && gc.streams_timed)
			snprintf(ms, sizeof(ms), "[%.4f, %.4f]", gc.ms[0], gc.ms[1]);
		if (R->gpu && R->gpu_api->graph_census(R->gpu, &gc) && gc.layouts_timed)
			snprintf(lms, sizeof(lms), "[%.4f, %.4f]", gc.layout_ms[0], gc.layout_ms[1]);
		static const char *c2kept[3] = { "picked", "cudnn", "direct" };
		if (R->gpu && R->gpu_api->graph_census(R->gpu, &gc) && gc.conv2_variants == 3) {
			char mixes[256] = "null";
			if (gc.mixes_timed)
				snprintf(mixes, sizeof(mixes), "{\"beside\": \"%s\", \"beside_ms\": %.4f, "
					 "\"bits\": [%d, %d, %d, %d, %d, %d], \"ms\": [%.4f, %.4f, %.4f, "
					 "%.4f, %.4f, %.4f]}", c2kept[gc.conv2_kept], gc.mix_base_ms,
					 gc.mix_bits[0], gc.mix_bits[1], gc.mix_bits[2], gc.mix_bits[3],
					 gc.mix_bits[4], gc.mix_bits[5], gc.mix_ms[0], gc.mix_ms[1],
					 gc.mix_ms[2], gc.mix_ms[3], gc.mix_ms[4], gc.mix_ms[5]);
			snprintf(c2, sizeof(c2), "{\"kept\": \"%s\", \"picked_bits\": %d, "
				 "\"kept_bits\": %d, \"ms\": {\"picked\": %.4f, \"cudnn\": %.4f, "
				 "\"direct\": %.4f}, \"mixes\": %s}",
				 gc.conv2_mixed ? "mix" : c2kept[gc.conv2_kept], gc.conv2_bits[0],
				 gc.conv2_kept_bits, gc.conv2_ms[0], gc.conv2_ms[1], gc.conv2_ms[2], mixes);
		}
		if (R->gpu && R->gpu_api->graph_census(R->gpu, &gc) && gc.pdl_edges) {
			char pms[64] = "null";
			if (gc.pdl_timed)
				snprintf(pms, sizeof(pms), "[%.4f, %.4f]", gc.pdl_ms[0], gc.pdl_ms[1]);
			snprintf(pdl, sizeof(pdl), "{\"edges\": %d, \"kept\": %s, \"ms\": %s}",
				 gc.pdl_edges, gc.pdl_kept ? "true" : "false", pms);
		}
		if (R->gpu && R->gpu_api->graph_census(R->gpu, &gc))
			fprintf(f, "  \"cuda_graph\": {\"batch\": %d, \"nodes\": %d, \"kernels\": %d, "
				"\"copies\": %d, \"memsets\": %d, \"other\": %d, \"longest_chain\": %d, "
				"\"backward_streams\": %d, \"streams_ms\": %s, \"conv2_auto\": %s, "
				"\"conv_layout\": \"%s\", \"layout_ms\": %s, \"pdl\": %s},\n",
				gc.batch, gc.nodes, gc.kernels, gc.copies, gc.memsets, gc.other, gc.chain,
				gc.streams, ms, c2, gc.nhwc ? "nhwc" : "nchw", lms, pdl);
		else
			fprintf(f, "  \"cuda_graph\": null,\n");
		/* a stop on a signal (stop.h): which one, or null */
		if (R->stop.at >= 0 && R->steps >= R->stop.at)
			fprintf(f, "  \"stopped_by\": \"%s\",\n",
				R->stop.why > 0 ? cnn_stop_name(R->stop.why) : "another rank's signal");
		else
			fprintf(f, "  \"stopped_by\": null,\n");
		if (R->first_step_unix > 0)
			fprintf(f, "  \"first_step_unix\": %.6f,\n", R->first_step_unix);
		else
			fprintf(f, "  \"first_step_unix\": null,\n");
		fprintf(f, "  \"images_per_sec\": %.1f,\n  \"world_size\": %d,\n  \"batch_size\": %d,\n"
			"  \"threads\": %d,\n  \"steps\": %lld,\n  \"epochs\": %d,\n"
			"  \"optimizer\": \"%s\",\n  \"backend\": \"%s\",\n  \"allreduce\": \"%s\",\n"
			"  \"device\": \"%s\",\n  \"ranks\": [", ips, w, R->args.batch, R->args.threads, R->steps,
			R->args.epochs, R->args.optim == CNN_ADADELTA ? "adadelta" : "sgd", R->comm->ops->name,
			w == 1 ? "none" : R->comm->local ? "shm" : strcmp(R->comm->ops->name, "nccl") ? "gloo" : "nccl",
			R->gpu ? "cuda" : "cpu");
		for (int r = 0; r < w; r++)
			fprintf(f, "%s\n    {\"rank\": %d, \"data_s\": %.3f, \"compute_s\": %.3f, "
				"\"comm_s\": %.3f, \"idle_s\": %.3f}", r ? "," : "", r, t[r * 4],
				t[r * 4 + 1], t[r * 4 + 2], t[r * 4 + 3]);
		fprintf(f, "\n  ]\n}\n");
		if (fclose(f) != 0)
			cnn_run_die(R, "--log-json %s: %s", R->args.log_json, strerror(errno));
	}
	free(t);
}

/* What the captured step's CUDA graph holds, or why none was captured
 * where --cuda-graph-dot asked for it. */
static void graph_report(struct run *R)
{
	struct cnn_graph_census c;
	if (!R->gpu || R->rank.rank != 0)
		return;
	if (R->gpu_api->graph_census(R->gpu, &c)) {
		printf("# CUDA graph of a training step (batch %d): %d nodes: %d kernel%s, %d cop%s, "
		       "%d memset%s, %d other; the longest chain %d\n", c.batch, c.nodes, c.kernels,
		       c.kernels == 1 ? "" : "s", c.copies, c.copies == 1 ? "y" : "ies", c.memsets,
		       c.memsets == 1 ? "" : "s", c.other, c.chain);
		if (c.streams_timed)
			printf("# backward streams auto (batch %d): %d kept; a replay of the step took "
			       "%.4f ms with 1, %.4f ms with 2 (the least of %d each%s)\n", c.batch,
			       c.streams, c.ms[0], c.ms[1], c.tuned,
			       R->rank.world > 1 ? ", summed over the ranks" : "");
		if (c.conv2_variants == 3) {
			static const char *kept[3] = { "each call's own pick", "all cuDNN", "all direct" };
			int b = c.conv2_bits[0];
			printf("# conv2 auto (batch %d): %s%s kept; a replay of the step took %.4f ms with "
			       "each call as timed alone (forward %s, backward-data %s, backward-filter "
			       "%s), %.4f ms all cuDNN, %.4f ms all direct (the least of %d each%s%s)",
			       c.batch, c.conv2_mixed ? conv2_mix(c.conv2_kept_bits) : kept[c.conv2_kept],
			       c.conv2_mixed ? " (a mix)" : "", c.conv2_ms[0],
			       b & 1 ? "direct" : "cuDNN", b & 2 ? "direct" : "cuDNN",
			       b & 4 ? "direct" : "cuDNN", c.conv2_ms[1], c.conv2_ms[2], c.tuned,
			       c.streams_timed ? ", each with its faster backward streams" : "",
			       R->rank.world > 1 ? ", summed over the ranks" : "");
			if (c.mixes_timed) {
				printf("; the picks having lost, each mix of the three timed beside %s: "
				       "%.4f ms that one", kept[c.conv2_kept], c.mix_base_ms);
				for (int j = 0; j < 6; j++)
					printf(", %.4f %s", c.mix_ms[j], conv2_mix(c.mix_bits[j]));
				printf(" (the least of %d each%s)", c.mixes_timed,
				       R->rank.world > 1 ? ", summed over the ranks" : "");
			}
			printf("\n");
		}
		if (c.layouts_timed)
			printf("# conv layout auto (batch %d): %s kept; a replay of the step took %.4f ms "
			       "in NCHW, %.4f ms in NHWC (the least of %d each, each layout with its "
			       "faster conv2 calls and backward streams%s)\n", c.batch,
			       c.nhwc ? "NHWC" : "NCHW", c.layout_ms[0], c.layout_ms[1], c.tuned,
			       R->rank.world > 1 ? ", summed over the ranks" : "");
		if (c.pdl_timed)
			printf("# programmatic launch auto (batch %d): %s kept; a replay of the step took "
			       "%.4f ms as captured, %.4f ms with %d programmatic edge%s (the least of "
			       "%d each%s)\n", c.batch, c.pdl_kept ? "on" : "off", c.pdl_ms[0],
			       c.pdl_ms[1], c.pdl_edges, c.pdl_edges == 1 ? "" : "s", c.pdl_timed,
			       R->rank.world > 1 ? ", summed over the ranks" : "");
		else if (c.pdl_kept)
			printf("# programmatic launch on (batch %d): %d programmatic edge%s\n", c.batch,
			       c.pdl_edges, c.pdl_edges == 1 ? "" : "s");
		else if (R->args.pdl != CNN_PDL_OFF)
			printf("# programmatic launch %s (batch %d): none (%s)\n",
			       cnn_pdl_name((enum cnn_pdl)R->args.pdl), c.batch, c.pdl_none);
		fflush(stdout);
	} else if (R->args.graph_dot) {
		fprintf(stderr, "cnn_train: warning: --cuda-graph-dot %s: no graph was captured (%s)\n",
			R->args.graph_dot,
			R->args.no_graph ? "--no-graph" :
			R->rank.world > 1 && strcmp(R->comm->ops->name, "nccl") ?
				"the gradients go through the host's all-reduce, which no graph holds" :
				"the step is captured at its third full batch: more --max-steps");
	}
}

/* Every rank's parameters must be bit-identical: compare CRCs. */
static void check_identical(struct run *R)
{
	char err[1024];
	int w = R->rank.world;
	uint32_t crc = (uint32_t)crc32(0, (const Bytef *)R->model.params, (uInt)(R->model.nparams * sizeof(float)));
	float *v = calloc((size_t)w * 2, sizeof(float));
	if (!v)
		cnn_run_die(R, "out of memory");
	v[R->rank.rank * 2] = (float)(crc >> 16);
	v[R->rank.rank * 2 + 1] = (float)(crc & 0xffff);
	if (cnn_comm_allreduce_sum(R->comm, v, (size_t)w * 2, err, sizeof(err)) < 0)
		cnn_run_comm_failed(R, err, sizeof(err));
	if (R->rank.rank == 0) {
		int same = 1;
		for (int r = 1; r < w; r++)
			same &= v[r * 2] == v[0] && v[r * 2 + 1] == v[1];
		printf("params: %s on all %d ranks (crc32 %08x)\n", same ? "identical" : "DIFFER",
		       w, crc);
		if (!same)
			cnn_run_die(R, "parameters differ between ranks");
	}
	free(v);
}

static void dump_params(struct run *R)
{
	if (!R->args.dump_params || R->rank.rank != 0)
		return;
	FILE *f = fopen(R->args.dump_params, "wb");
	if (!f || fwrite(R->model.params, sizeof(float), R->model.nparams, f) != R->model.nparams ||
	    fclose(f) != 0)
		cnn_run_die(R, "--dump-params %s: %s", R->args.dump_params, strerror(errno));
}

void cnn_run_report(struct run *R)
{
	graph_report(R);
	check_identical(R);
	report_times(R);
	dump_params(R);
	if (R->rank.rank == 0) {
		double ips = R->t_train_wall > 0 ? R->timed_images * (double)R->rank.world / R->t_train_wall : 0;
		if (R->timed_steps)
			printf("# timed: %lld steps (%lld to %lld), %lld images a rank, %.3f s %s\n", R->timed_steps,
			       R->steps - R->timed_steps + 1, R->steps, R->timed_images, R->t_train_wall,
			       R->gpu ? "between the device's synchronizations" : "of the steps' own time");
		else
			printf("# timed: no step (the first %s are warm-up)\n", R->gpu ? "5" : "3");
		printf("done: %lld steps, %.0f images/s (%d rank%s), test accuracy %s",
		       R->steps, ips, R->rank.world, R->rank.world == 1 ? "" : "s",
		       R->evaluated ? "" : "not evaluated\n");
		if (R->evaluated)
			printf("%.2f%%\n", 100.0 * R->test_acc);
	}
}
