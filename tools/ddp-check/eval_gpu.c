/* gpu.health: each task's GPU as NVML and the kernel's log report it
 * (gpu_health.c reads them).  FAIL: uncorrected ECC errors since the driver
 * loaded, a row remapping that failed, an Xid the driver logs for a GPU
 * gone bad; WARN: a page retirement or row remap waiting for a reset,
 * another Xid, a clock held down by heat, power or the hardware,
 * persistence off, a power limit below the node's other GPUs', drivers or
 * CUDA versions that differ across the step, a GPU NVML could not read. */
#include <strings.h>

#include "eval.h"

/* Xids of a GPU to take out of service (NVIDIA's "Xid Errors" guide:
 * double-bit ECC, row remap failure, NVLink, off the bus, high single-bit
 * rate, contained and uncontained ECC, GSP timeout and error). */
static const int xid_fatal[] = { 48, 64, 74, 79, 92, 94, 95, 119, 120 };

static int fatal_xid(const char *xids, int *code)
{
	for (const char *p = xids; *p;) {
		int c = atoi(p);
		for (size_t i = 0; i < sizeof(xid_fatal) / sizeof(xid_fatal[0]); i++)
			if (c == xid_fatal[i]) {
				*code = c;
				return 1;
			}
		p = strchr(p, ',');
		if (!p)
			break;
		p++;
	}
	return 0;
}

/* The reasons that say the GPU is held down (not idle, not the
 * application's clocks): "HW slowdown, HW thermal". */
static void held_down(unsigned long long r, char *out, size_t len)
{
	static const struct { unsigned long long bit; const char *name; } why[] = {
		{ 0x8ULL, "HW slowdown" }, { 0x40ULL, "HW thermal slowdown" },
		{ 0x80ULL, "HW power brake" }, { 0x20ULL, "SW thermal slowdown" },
	};
	size_t off = 0;
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++)
		if (r & why[i].bit)
			off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s", off ? ", " : "", why[i].name);
}

/* One task's GPU into fail or warn (ok unchanged). */
static void judge_task(const struct ck_world *w, int i, const struct nodes *nd, struct msg *fail, struct msg *warn)
{
	const struct ck_rank *r = &w->ranks[i];
	const struct ck_gpu_health *g = &r->gh;
	char why[160];
	int code;

	if (g->ecc_vol > 0)
		ck_say(fail, "%s GPU %s (task %d): %lld uncorrected ECC errors since the driver loaded", r->host, r->gpu,
		       i, g->ecc_vol);
	if (g->remap_failed > 0)
		ck_say(fail, "%s GPU %s (task %d): a row remapping failed (the GPU needs service)", r->host, r->gpu, i);
	if (g->nxid && fatal_xid(g->xids, &code))
		ck_say(fail, "%s GPU %s (task %d): Xid %d in the kernel's log since boot (its Xids: %s)", r->host,
		       r->gpu, i, code, g->xids);
	else if (g->nxid)
		ck_say(warn, "%s GPU %s (task %d): Xid %s in the kernel's log since boot", r->host, r->gpu, i, g->xids);
	if (g->remap_pending > 0 || g->retired_pending > 0)
		ck_say(warn, "%s GPU %s (task %d): a %s waits for a GPU reset", r->host, r->gpu, i,
		       g->remap_pending > 0 ? "row remapping" : "page retirement");
	held_down(g->reasons, why, sizeof(why));
	if (why[0])
		ck_say(warn, "%s GPU %s (task %d): clocks held down (%s), SM at %d of %d MHz", r->host, r->gpu, i, why,
		       g->sm_mhz, g->sm_max_mhz);
	if (g->persistence == 0)
		ck_say(warn, "%s GPU %s (task %d): persistence mode off: each process's start pays the driver's "
		       "set-up (nvidia-persistenced, or nvidia-smi -pm 1)", r->host, r->gpu, i);
	/* a power limit below the node's other GPUs' */
	int node = nd->of[i], best = 0;
	for (int j = 0; j < w->n; j++)
		if (nd->of[j] == node && w->ranks[j].gh.have && w->ranks[j].gh.limit_mw > best)
			best = w->ranks[j].gh.limit_mw;
	if (g->limit_mw > 0 && g->limit_mw < best * 9 / 10)
		ck_say(warn, "%s GPU %s (task %d): power limit %d W where the node's others have %d W", r->host, r->gpu, i,
		       g->limit_mw / 1000, best / 1000);
}

/* Drivers or CUDA versions that differ: "node1 550.54.15, node2 535.104.05". */
static void versions(const struct ck_world *w, struct msg *warn)
{
	int first = -1;
	for (int i = 0; i < w->n; i++) {
		const struct ck_gpu_health *g = &w->ranks[i].gh;
		if (!w->ranks[i].joined || !g->have)
			continue;
		if (first < 0) {
			first = i;
			continue;
		}
		const struct ck_gpu_health *f = &w->ranks[first].gh;
		if (strcmp(g->driver, f->driver) != 0 || g->cuda != f->cuda) {
			ck_say(warn, "drivers differ: %s has %s (CUDA %d), %s has %s (CUDA %d)", w->ranks[first].host,
			       f->driver, f->cuda, w->ranks[i].host, g->driver, g->cuda);
			return;
		}
	}
}

/* name's failure (its warnings after "and:"), or its warning, where there
 * is one: 1; else 0, for the caller's OK. */
static int add_faults(struct ck_world *w, const char *name, struct msg *fail, struct msg *warn)
{
	if (fail->items) {
		if (warn->items)
			ck_say(fail, "and: %s", ck_said(warn));
		ck_add(w, name, CK_FAIL, "%s", ck_said(fail));
		return 1;
	}
	if (warn->items) {
		ck_add(w, name, CK_WARN, "%s", ck_said(warn));
		return 1;
	}
	return 0;
}

void ck_eval_gpu(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 }, unread = { 0 };
	int gpus = 0, read = 0, old = 0, xid_unread = 0;
	const char *xid_why = "";

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0])
			continue;
		gpus++;
		if (r->proto && r->proto < 6) {
			old++;
			continue;
		}
		if (r->gh.xid_err[0]) {
			xid_unread++;
			xid_why = r->gh.xid_err;
		}
		if (!r->gh.have) {
			/* no NVML on the node: not read; NVML that fails or hangs: the GPU's state */
			int absent = !strncmp(r->gh.err, "NVML not loaded", 15);
			ck_say(absent ? &unread : strstr(r->gh.err, "did not answer") ? &fail : &warn,
			       "%s GPU %s (task %d): %s", r->host, r->gpu, i, r->gh.err);
			continue;
		}
		read++;
		judge_task(w, i, nd, &fail, &warn);
	}
	if (!gpus) {
		/* --node: an NVML that hangs listing them has a driver, and a bad one */
		ck_add(w, "gpu.health", strstr(w->no_gpus, "did not answer") ? CK_FAIL : CK_OK, "no GPUs %s%s%s%s",
		       ck_scope(w), w->no_gpus[0] ? " (" : "", w->no_gpus, w->no_gpus[0] ? ")" : "");
		return;
	}
	if (!read && !fail.items && !warn.items) {
		ck_add(w, "gpu.health", CK_SKIP, "NVML answered for none of the %d tasks' GPUs: %s", gpus,
		       unread.items ? ck_said(&unread) : "their ddp-check is older");
		return;
	}
	versions(w, &warn);
	if (unread.items)
		ck_say(&warn, "not read: %s", ck_said(&unread));
	if (old)
		ck_say(&warn, "%d tasks' ddp-check is older and does not read its GPU's health", old);
	const struct ck_gpu_health *g = NULL;
	for (int i = 0; i < w->n && !g; i++)
		if (w->ranks[i].joined && w->ranks[i].gh.have)
			g = &w->ranks[i].gh;
	if (!add_faults(w, "gpu.health", &fail, &warn) && g) {
		ck_add(w, "gpu.health", CK_OK, "%d GPUs read by NVML (driver %s, CUDA %d): no uncorrected ECC error, no "
		       "pending retirement or row remap, no clock held down, persistence on%s%s", read, g->driver,
		       g->cuda, xid_unread ? "; Xids not read: " : ", no Xid since boot", xid_unread ? xid_why : "");
	}
}

/* NVML's P2P status, after OK (0). */
static const char *const p2p_why[] = {
	"ok", "not supported by the chipset", "not supported by the GPU", "not supported by the I/O hub topology",
	"disabled by the driver's registry key", "not supported", "unknown",
};

/* Whether the GPU at bus is one this check judges: a joined task's
 * (in a step), or any (--node: every record is a GPU). */
static int judged_gpu(const struct ck_world *w, const struct nodes *nd, int node, const char *bus)
{
	for (int j = 0; j < w->n; j++)
		if (nd->of[j] == node && w->ranks[j].joined && !strcasecmp(w->ranks[j].gpu, bus))
			return 1;
	return 0;
}

/* gpu.p2p: on each node, CUDA peer reads between the GPUs the step's
 * tasks use (NVML's P2P status), every GPU with as many NVLinks active as
 * the node's others, and no NVLink error counted since the driver loaded
 * (recovery, CRC or ECC). */
void ck_eval_p2p(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	int gpus = 0, read = 0, pairs = 0, links = -1;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		const struct ck_gpu_health *g = &r->gh;
		if (!r->joined || !r->gpu[0])
			continue;
		gpus++;
		if (!g->have)
			continue;
		read++;
		/* the node's most active links */
		int most = -1;
		for (int j = 0; j < w->n; j++)
			if (nd->of[j] == nd->of[i] && w->ranks[j].gh.have && w->ranks[j].gh.nvlinks > most)
				most = w->ranks[j].gh.nvlinks;
		if (g->nvlinks >= 0 && g->nvlinks < most)
			ck_say(&fail, "%s GPU %s: %d of its NVLinks active where the node's others have %d", r->host, r->gpu,
			       g->nvlinks, most);
		links = g->nvlinks > links ? g->nvlinks : links;
		if (g->nvl_recovery > 0 || g->nvl_crc > 0)
			ck_say(&warn, "%s GPU %s: NVLink errors since the driver loaded: %lld recovery, %lld CRC or ECC",
			       r->host, r->gpu, g->nvl_recovery, g->nvl_crc);
		for (const char *p = g->p2p; *p;) {
			char bus[32];
			int st = -1;
			size_t l = strcspn(p, ";");
			snprintf(bus, sizeof(bus), "%.*s", (int)(l < sizeof(bus) ? l : sizeof(bus) - 1), p);
			char *c = strrchr(bus, ':');
			if (c) {
				st = atoi(c + 1);
				*c = '\0';
			}
			p += l + (p[l] == ';');
			if (!judged_gpu(w, nd, nd->of[i], bus))
				continue;
			pairs++;
			if (st != 0)
				ck_say(&warn, "%s: GPU %s cannot read GPU %s's memory directly (%s): NCCL goes through host "
				       "memory between them", r->host, r->gpu, bus,
				       st > 0 && st < (int)(sizeof(p2p_why) / sizeof(p2p_why[0])) ? p2p_why[st] : "NVML did not say");
		}
	}
	if (!gpus) {
		ck_add(w, "gpu.p2p", CK_OK, "no GPUs %s", ck_scope(w));
		return;
	}
	if (!read) {
		ck_add(w, "gpu.p2p", CK_SKIP, "NVML answered for none of the %d tasks' GPUs (gpu.health)", gpus);
		return;
	}
	if (add_faults(w, "gpu.p2p", &fail, &warn))
		return;
	if (links > 0) {
		ck_add(w, "gpu.p2p", CK_OK, "%d GPUs: peer reads between every two of a node's (%d pairs both ways), %d "
		       "NVLinks active on each, no NVLink error", read, pairs, links);
	} else {
		ck_add(w, "gpu.p2p", CK_OK, "%d GPUs: peer reads between every two of a node's (%d pairs both ways); no "
		       "NVLink", read, pairs);
	}
}
