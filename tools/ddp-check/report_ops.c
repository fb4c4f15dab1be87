/* The report's part for the collectives beside the all-reduce, the node
 * pairs and each node's GPU pairs: a table each in nccl-tests' columns
 * (with #wrong, the elements of each size's checked run that were wrong),
 * the pairs' GB/s, a matrix a node; or the same as JSON members. */
#include <stdio.h>

#include "check.h"

/* Each node's copies between its GPUs, from the row's to the column's. */
static void p2p_text(const struct ck_world *w, FILE *out)
{
	for (int i = 0; i < w->n; i++) {
		const struct ck_p2p *p = &w->ranks[i].p2p;
		if (!w->ranks[i].joined || p->n < 2)
			continue;
		fprintf(out, "#\n# GPU copies on %s, %zu bytes each, the best of 3 (GB/s, from the row's GPU to "
			"the column's)\n# %12s", w->ranks[i].host, w->opts.p2p_bytes, "");
		for (int y = 0; y < p->n; y++)
			fprintf(out, "  %12s", p->bus[y]);
		fputc('\n', out);
		for (int x = 0; x < p->n; x++) {
			fprintf(out, "  %12s", p->bus[x]);
			for (int y = 0; y < p->n; y++)
				if (x == y)
					fprintf(out, "  %12s", "-");
				else
					fprintf(out, "  %12.2f", p->gbps[x * p->n + y]);
			fputc('\n', out);
		}
	}
}

static void p2p_json(const struct ck_world *w, FILE *out)
{
	int first = 1;
	fprintf(out, ",\n  \"gpu_pairs\": [");
	for (int i = 0; i < w->n; i++) {
		const struct ck_p2p *p = &w->ranks[i].p2p;
		for (int x = 0; w->ranks[i].joined && x < p->n; x++)
			for (int y = 0; y < p->n; y++) {
				if (x == y)
					continue;
				fprintf(out, "%s\n    {\"node\": ", first ? "" : ",");
				ck_json_str(out, w->ranks[i].host);
				fprintf(out, ", \"from\": ");
				ck_json_str(out, p->bus[x]);
				fprintf(out, ", \"to\": ");
				ck_json_str(out, p->bus[y]);
				fprintf(out, ", \"gbps\": %.4f}", p->gbps[x * p->n + y]);
				first = 0;
			}
	}
	fprintf(out, "%s]", first ? "" : "\n  ");
}

void ck_report_ops_text(const struct ck_world *w, FILE *out)
{
	struct ck_pair_row rows[64];
	size_t n;

	for (int op = 0; w->coll_ran && op < CK_NOPS; op++) {
		int any = 0;
		for (size_t k = 0; k < w->nsizes; k++) {
			double t = ck_op_time_max(w, (enum ck_op)op, k);
			size_t bytes = ck_op_count(w->sizes[k], w->n) * 4 * (size_t)w->n;
			if (t <= 0 || !bytes)
				continue;
			if (!any++) {
				fprintf(out, "#\n# %s, %s, %d ranks, %d warm-up and %d timed iterations, the slowest "
					"rank's time; #wrong: elements of the checked run\n", ck_op_name[op], w->backend,
					w->n, w->opts.warmup, w->opts.iters);
				fprintf(out, "# %12s  %12s  %6s  %5s  %10s  %8s  %8s  %7s\n", "size", "count", "type",
					"redop", "time", "algbw", "busbw", "#wrong");
				fprintf(out, "# %12s  %12s  %6s  %5s  %10s  %8s  %8s  %7s\n", "(B)", "(elements)", "",
					"", "(us)", "(GB/s)", "(GB/s)", "");
			}
			double alg = (double)bytes / t / 1e9;
			fprintf(out, "  %12zu  %12zu  %6s  %5s  %10.2f  %8.2f  %8.2f  %7ld\n", bytes, bytes / 4,
				"float", op == CK_REDUCE_SCATTER ? "sum" : "none", t * 1e6, alg,
				ck_op_busbw(alg, w->n), ck_op_wrong(w, (enum ck_op)op, k));
		}
	}
	n = w->coll_ran ? ck_pair_rows(w, rows, sizeof(rows) / sizeof(rows[0])) : 0;
	if (n)
		fprintf(out, "#\n# node pairs, %zu bytes each way at once, the best of 5 (GB/s each way)\n",
			w->opts.pair_bytes);
	for (size_t k = 0; k < n; k++)
		fprintf(out, "  %-24s  %-24s  %8.3f\n", w->ranks[rows[k].a].host, w->ranks[rows[k].b].host,
			rows[k].gbps);
	p2p_text(w, out);
}

void ck_report_ops_json(const struct ck_world *w, FILE *out)
{
	struct ck_pair_row rows[64];
	size_t n;

	fprintf(out, ",\n  \"collectives\": {");
	for (int op = 0; op < CK_NOPS; op++) {
		int first = 1;
		fprintf(out, "%s\n    \"%s\": [", op ? "," : "", ck_op_name[op]);
		for (size_t k = 0; w->coll_ran && k < w->nsizes; k++) {
			double t = ck_op_time_max(w, (enum ck_op)op, k);
			size_t bytes = ck_op_count(w->sizes[k], w->n) * 4 * (size_t)w->n;
			if (t <= 0 || !bytes)
				continue;
			double alg = (double)bytes / t / 1e9;
			fprintf(out, "%s\n      {\"size\": %zu, \"count\": %zu, \"type\": \"float\", \"redop\": \"%s\", "
				"\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %ld}", first ? "" : ",",
				bytes, bytes / 4, op == CK_REDUCE_SCATTER ? "sum" : "none", t * 1e6, alg,
				ck_op_busbw(alg, w->n), ck_op_wrong(w, (enum ck_op)op, k));
			first = 0;
		}
		fprintf(out, "%s]", first ? "" : "\n    ");
	}
	fprintf(out, "\n  },\n  \"pairs\": [");
	n = w->coll_ran ? ck_pair_rows(w, rows, sizeof(rows) / sizeof(rows[0])) : 0;
	for (size_t k = 0; k < n; k++) {
		fprintf(out, "%s\n    {\"a\": ", k ? "," : "");
		ck_json_str(out, w->ranks[rows[k].a].host);
		fprintf(out, ", \"b\": ");
		ck_json_str(out, w->ranks[rows[k].b].host);
		fprintf(out, ", \"gbps\": %.4f}", rows[k].gbps);
	}
	fprintf(out, "%s]", n ? "\n  " : "");
	p2p_json(w, out);
}
