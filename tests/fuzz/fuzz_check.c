/* ddp-check's task 0 decodes records that other tasks send over the
 * network and judges them: fuzz the decoders, every verdict and both
 * reports.  The input is split on "\x1e" into up to 4 rank records, then
 * a probe record and a collective record for each; the whole input is also
 * the output of task 0's query of the controller (ck_slurm_parse). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum { N = 4 };
	struct ck_rank ranks[N];
	struct ck_probe probes[N];
	struct ck_coll colls[N];
	struct ck_world w = { .backend = size & 1 ? "nccl" : "gloo", .n = N, .ranks = ranks,
			      .probes = probes, .colls = colls };
	const char *p = (const char *)data, *end = p + size;

	memset(ranks, 0, sizeof(ranks));
	memset(probes, 0, sizeof(probes));
	memset(colls, 0, sizeof(colls));
	w.opts = (struct ck_opts){ .min_bytes = 8, .max_bytes = 1 << 20, .step_factor = 2, .iters = 1,
				   .max_skew_ms = 100, .probe_ms = 100, .timeout_s = 1,
				   .min_busbw = size & 2 ? 1 : 0, .pair_bytes = 1 << 20,
				   .min_pair = 1 + (int)(size % 100) };
	w.nsizes = ck_sizes(&w.opts, w.sizes, CK_MAX_SIZES);
	for (int part = 0; part < 3 * N && p <= end; part++) {
		const char *q = memchr(p, 0x1e, (size_t)(end - p));
		size_t len = q ? (size_t)(q - p) : (size_t)(end - p);
		int i = part % N;
		if (part < N) {
			if (ck_rank_decode(&ranks[i], p, len) == 0)
				ranks[i].joined = 1;
			ranks[i].id = i;
		} else if (part < 2 * N) {
			ck_probe_decode(&probes[i], p, len);
		} else {
			ck_coll_decode(&colls[i], p, len);
			w.coll_ran = 1;
		}
		if (!q)
			break;
		p = q + 1;
	}
	/* the whole input as the controller query's output, too */
	char *text = malloc(size + 1);
	if (text) {
		memcpy(text, data, size);
		text[size] = 0;
		ck_slurm_parse(text, (int)(size & 0xffff), &w.slurm);
		free(text);
	}
	w.opts.min_kill_wait = (int)(size % 40);
	ck_eval_setup(&w);
	ck_coll_safe(&w, w.coll_skip, sizeof(w.coll_skip));
	ck_eval_coll(&w);
	ck_eval_ops(&w);
	ck_eval_pairs(&w);
	FILE *f = fopen("/dev/null", "w");
	if (f) {
		ck_report_text(&w, f);
		ck_report_json(&w, f);
		fclose(f);
	}
	for (int i = 0; i < N; i++)
		ck_probe_free(&probes[i]);
	free(w.res);
	return 0;
}
