/* ddp-check's report: a '#' header, one placement line per task, the
 * bandwidth table in nccl-tests' columns, the checks, and the count line;
 * or all of it as one JSON object (--json). */
#include <stdio.h>
#include <string.h>

#include "check.h"

static const char *const level_name[] = { "OK", "WARN", "FAIL", "SKIP" };

static const struct ck_rank *first_joined(const struct ck_world *w)
{
	for (int i = 0; i < w->n; i++)
		if (w->ranks[i].joined)
			return &w->ranks[i];
	return NULL;
}

static int count_nodes(const struct ck_world *w)
{
	int n = 0;

	for (int i = 0; i < w->n; i++) {
		int seen = 0;
		if (!w->ranks[i].joined)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = w->ranks[j].joined && !strcmp(w->ranks[j].host, w->ranks[i].host);
		n += !seen;
	}
	return n;
}

/* The step's nodes: Slurm's count where known, else those that reported. */
static int step_nodes(const struct ck_world *w)
{
	int seen = count_nodes(w);
	return w->step_nodes > seen ? w->step_nodes : seen;
}

static void counts(const struct ck_world *w, int c[4])
{
	c[0] = c[1] = c[2] = c[3] = 0;
	for (size_t i = 0; i < w->nres; i++)
		c[w->res[i].level]++;
}

int ck_exit_code(const struct ck_world *w)
{
	int c[4];

	counts(w, c);
	return c[CK_FAIL] ? 1 : 0;
}

static const char *dash(const char *s)
{
	return s && s[0] ? s : "-";
}

/* A task's GPU in the placement: its bus id, else its MIG device. */
static const char *gpu_shown(const struct ck_rank *r)
{
	return r->gpu[0] ? r->gpu : r->mig;
}

static const char *head_host(const struct ck_world *w)
{
	for (int i = 0; i < w->n; i++)
		if (w->ranks[i].joined && w->ranks[i].head_local == 1)
			return w->ranks[i].host;
	return w->n && w->ranks[0].joined ? w->ranks[0].host : "?";
}

void ck_report_text(const struct ck_world *w, FILE *out)
{
	const struct ck_rank *r0 = first_joined(w);
	int c[4];

	int nodes = step_nodes(w), seen = count_nodes(w);
	char reported[48] = "";
	if (seen < nodes)
		snprintf(reported, sizeof(reported), " (%d reported)", seen);
	fprintf(out, "# ddp-check %s: backend %s, world size %d on %d node%s%s, head %s "
		"(MASTER_ADDR=%s MASTER_PORT=%s)\n", DDPENV_VERSION, w->backend, w->n, nodes,
		nodes == 1 ? "" : "s", reported, head_host(w),
		r0 ? dash(r0->env[CK_MASTER_ADDR]) : "-", r0 ? dash(r0->env[CK_MASTER_PORT]) : "-");

	/* Placement, in columns as wide as their widest entry. */
	int wh = 4, wi = 5, wa = 7, wg = 3, wc = 4;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined)
			continue;
#define WIDEN(v, s) if ((int)strlen(dash(s)) > v) v = (int)strlen(dash(s))
		WIDEN(wh, r->host);
		WIDEN(wi, r->ifname);
		WIDEN(wa, r->ifaddr);
		WIDEN(wg, gpu_shown(r));
		WIDEN(wc, r->cpus);
#undef WIDEN
	}
	fprintf(out, "#\n# %5s  %-*s  %8s  %-*s  %-*s  %-*s  %-*s  %s\n", "rank", wh, "host", "pid",
		wi, "iface", wa, "address", wg, "gpu", wc, "cpus", "numa");
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined) {
			fprintf(out, "  %5d  %-*s  (never joined the rendezvous)\n", i, wh, "?");
			continue;
		}
		fprintf(out, "  %5d  %-*s  %8ld  %-*s  %-*s  %-*s  %-*s  %s\n", i, wh, r->host, r->pid,
			wi, dash(r->ifname), wa, dash(r->ifaddr), wg, dash(gpu_shown(r)), wc, dash(r->cpus),
			dash(r->numa));
	}

	if (w->coll_ran && w->nsizes) {
		fprintf(out, "#\n# all-reduce, %s, %d ranks, %d warm-up and %d timed iterations, "
			"the slowest rank's time\n", w->backend, w->n, w->opts.warmup, w->opts.iters);
		fprintf(out, "# %12s  %12s  %6s  %5s  %10s  %8s  %8s\n", "size", "count", "type", "redop",
			"time", "algbw", "busbw");
		fprintf(out, "# %12s  %12s  %6s  %5s  %10s  %8s  %8s\n", "(B)", "(elements)", "", "",
			"(us)", "(GB/s)", "(GB/s)");
		for (size_t k = 0; k < w->nsizes; k++) {
			double t = ck_time_max(w, k);
			if (t <= 0)
				continue;
			double alg = (double)w->sizes[k] / t / 1e9;
			fprintf(out, "  %12zu  %12zu  %6s  %5s  %10.2f  %8.2f  %8.2f\n", w->sizes[k],
				w->sizes[k] / 4, "float", "sum", t * 1e6, alg, ck_busbw(alg, w->n));
		}
	}

	ck_report_ops_text(w, out);
	fprintf(out, "#\n# checks\n");
	for (size_t i = 0; i < w->nres; i++)
		fprintf(out, "%-4s  %-21s  %s\n", level_name[w->res[i].level], w->res[i].name,
			w->res[i].msg);
	counts(w, c);
	fprintf(out, "ddp-check: %d checks OK, %d WARN, %d FAILED", c[CK_OK], c[CK_WARN], c[CK_FAIL]);
	if (c[CK_SKIP])
		fprintf(out, ", %d skipped", c[CK_SKIP]);
	fputc('\n', out);
	fflush(out);
}

void ck_json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(out, "\\u%04x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

/* ", "KEY": N", null where N is negative (unlimited or unknown) */
static void json_num(FILE *out, const char *key, long long v)
{
	if (v < 0)
		fprintf(out, ", \"%s\": null", key);
	else
		fprintf(out, ", \"%s\": %lld", key, v);
}

/* ", "gpu_health": {...}": NVML's answers (counts null where the GPU has
 * none), or the error alone. */
static void json_gpu_health(FILE *out, const struct ck_gpu_health *g)
{
	fprintf(out, ", \"gpu_health\": {\"error\": ");
	ck_json_str(out, g->have ? "" : g->err);
	if (g->have) {
		fprintf(out, ", \"driver\": ");
		ck_json_str(out, g->driver);
		json_num(out, "cuda", g->cuda);
		json_num(out, "ecc_uncorrected_volatile", g->ecc_vol);
		json_num(out, "ecc_uncorrected_aggregate", g->ecc_agg);
		json_num(out, "retired_pages_sbe", g->retired_sbe);
		json_num(out, "retired_pages_dbe", g->retired_dbe);
		json_num(out, "retired_pending", g->retired_pending);
		json_num(out, "remapped_rows_correctable", g->remap_corr);
		json_num(out, "remapped_rows_uncorrectable", g->remap_unc);
		json_num(out, "remap_pending", g->remap_pending);
		json_num(out, "remap_failed", g->remap_failed);
		json_num(out, "persistence", g->persistence);
		fprintf(out, ", \"clocks_event_reasons\": %llu", g->reasons);
		json_num(out, "sm_mhz", g->sm_mhz);
		json_num(out, "sm_max_mhz", g->sm_max_mhz);
		json_num(out, "power_mw", g->power_mw);
		json_num(out, "power_limit_mw", g->limit_mw);
	}
	if (g->have) {
		json_num(out, "nvlinks", g->nvlinks);
		json_num(out, "nvlink_recovery", g->nvlinks < 0 ? -1 : g->nvl_recovery);
		json_num(out, "nvlink_crc", g->nvlinks < 0 ? -1 : g->nvl_crc);
		fprintf(out, ", \"p2p\": ");
		ck_json_str(out, g->p2p);
	}
	fprintf(out, ", \"xids\": ");
	ck_json_str(out, g->xids);
	fprintf(out, ", \"xid_error\": ");
	ck_json_str(out, g->xid_err);
	fputc('}', out);
}

/* A PCIe link read from sysfs: ", "key": {name, busid, speed, width,
 * max_speed, max_width}" (nothing where none was read). */
static void json_link(FILE *out, const char *key, const struct ck_link *l)
{
	if (!l || !l->name[0] || l->err[0])
		return;
	fprintf(out, ", \"%s\": {\"name\": ", key);
	ck_json_str(out, l->name);
	fprintf(out, ", \"busid\": ");
	ck_json_str(out, l->busid);
	fprintf(out, ", \"speed\": ");
	ck_json_str(out, l->cur_speed);
	fprintf(out, ", \"width\": %d, \"max_speed\": ", l->cur_width);
	ck_json_str(out, l->max_speed);
	fprintf(out, ", \"max_width\": %d}", l->max_width);
}

void ck_report_json(const struct ck_world *w, FILE *out)
{
	const struct ck_rank *r0 = first_joined(w);
	int c[4];

	fprintf(out, "{\n  \"version\": ");
	ck_json_str(out, DDPENV_VERSION);
	fprintf(out, ",\n  \"backend\": ");
	ck_json_str(out, w->backend);
	fprintf(out, ",\n  \"world_size\": %d,\n  \"nodes\": %d,\n  \"nodes_reported\": %d,\n"
		"  \"head\": {\"host\": ", w->n, step_nodes(w), count_nodes(w));
	ck_json_str(out, head_host(w));
	fprintf(out, ", \"master_addr\": ");
	ck_json_str(out, r0 ? r0->env[CK_MASTER_ADDR] : "");
	fprintf(out, ", \"master_port\": ");
	ck_json_str(out, r0 ? r0->env[CK_MASTER_PORT] : "");
	fprintf(out, "},\n  \"kill_wait\": ");
	if (w->slurm.have)
		fprintf(out, "%d", w->slurm.kill_wait);
	else
		fprintf(out, "null");
	fprintf(out, ",\n  \"ranks\": [");
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		fprintf(out, "%s\n    {\"rank\": %d, \"joined\": %s", i ? "," : "", i,
			r->joined ? "true" : "false");
		if (w->gone && w->gone[i])
			fprintf(out, ", \"gone\": \"%s\"", w->gone[i] == CK_GONE_DIED ? "died" : "left");
		if (r->joined) {
			fprintf(out, ", \"host\": ");
			ck_json_str(out, r->host);
			fprintf(out, ", \"pid\": %ld, \"iface\": ", r->pid);
			ck_json_str(out, r->ifname);
			fprintf(out, ", \"address\": ");
			ck_json_str(out, r->ifaddr);
			if (r->ifmtu > 0)
				fprintf(out, ", \"mtu\": %d", r->ifmtu);
			json_num(out, "nofile", r->nofile);
			json_num(out, "nproc", r->nproc);
			json_num(out, "user_threads", r->user_threads);
			if (r->shm_path[0]) {
				fprintf(out, ", \"shm\": {\"path\": ");
				ck_json_str(out, r->shm_path);
				/* bytes; null unknown, size 0 no limit */
				json_num(out, "size", r->shm_size);
				json_num(out, "free", r->shm_size < 0 ? -1 : r->shm_free);
				fprintf(out, ", \"nccl_segments\": %d, \"error\": ", r->shm_nccl);
				ck_json_str(out, r->shm_err);
				fprintf(out, ", \"removeipc\": %s, \"uid\": %ld}",
					r->removeipc < 0 ? "null" : r->removeipc ? "true" : "false", r->uid);
			}
			if (r->rdma[0]) {
				fprintf(out, ", \"rdma\": ");
				ck_json_str(out, r->rdma);
				json_num(out, "memlock", r->memlock);
			}
			if (r->ibports[0]) {
				fprintf(out, ", \"ib_ports\": ");
				ck_json_str(out, r->ibports);
			}
			json_link(out, "pcie_gpu", r->gpu[0] ? &r->gpu_link : NULL);
			json_link(out, "pcie_nic", &r->nic_link);
			fprintf(out, ", \"gpu\": ");
			ck_json_str(out, r->gpu);
			if (r->mig[0]) {
				fprintf(out, ", \"mig\": ");
				ck_json_str(out, r->mig);
			}
			if (r->gpu[0])
				json_gpu_health(out, &r->gh);
			if (r->h2d_gbps > 0)
				fprintf(out, ", \"h2d_gbps\": %.3f", r->h2d_gbps);
			fprintf(out, ", \"cpus\": ");
			ck_json_str(out, r->cpus);
			fprintf(out, ", \"numa\": ");
			ck_json_str(out, r->numa);
			if (w->coll_ran && w->colls[i].have)
				fprintf(out, ", \"first_collective_s\": %.6f", w->colls[i].first_s);
		}
		fputc('}', out);
	}
	fprintf(out, "\n  ],\n  \"bandwidth\": [");
	int first = 1;
	for (size_t k = 0; w->coll_ran && k < w->nsizes; k++) {
		double t = ck_time_max(w, k);
		if (t <= 0)
			continue;
		double alg = (double)w->sizes[k] / t / 1e9;
		fprintf(out, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"float\", \"redop\": "
			"\"sum\", \"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f}", first ? "" : ",",
			w->sizes[k], w->sizes[k] / 4, t * 1e6, alg, ck_busbw(alg, w->n));
		first = 0;
	}
	fprintf(out, "\n  ]");
	ck_report_ops_json(w, out);
	fprintf(out, ",\n  \"checks\": [");
	for (size_t i = 0; i < w->nres; i++) {
		fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
		ck_json_str(out, w->res[i].name);
		fprintf(out, ", \"level\": ");
		ck_json_str(out, level_name[w->res[i].level]);
		fprintf(out, ", \"message\": ");
		ck_json_str(out, w->res[i].msg);
		fputc('}', out);
	}
	counts(w, c);
	fprintf(out, "\n  ],\n  \"summary\": {\"ok\": %d, \"warn\": %d, \"fail\": %d, \"skip\": %d},\n"
		"  \"exit_code\": %d\n}\n", c[CK_OK], c[CK_WARN], c[CK_FAIL], c[CK_SKIP],
		ck_exit_code(w));
	fflush(out);
}
