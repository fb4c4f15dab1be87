/* The task's GPU as NVML sees it (libnvidia-ml.so.1, loaded at run time as
 * NCCL is) and as the kernel's log tells of it (the driver's "NVRM: Xid"
 * lines): what gpu.health judges (eval_gpu.c).  NVML is asked in a child
 * process bounded to NVML_WAIT_S, since a GPU gone bad can hang the
 * driver; the log is read without blocking, bounded in records. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gpu_health.h"
#include "nvml_abi.h"

#define NVML_WAIT_S 10
#define KMSG_MAX_RECORDS 200000

struct nvml {
	void *lib;
	nvml_void_fn init, shutdown;
	nvml_error_string_fn error_string;
	nvml_driver_version_fn driver_version;
	nvml_cuda_version_fn cuda_version;
	nvml_by_bus_id_fn by_bus_id;
	nvml_ecc_fn ecc;
	nvml_retired_fn retired;
	nvml_state_fn retired_pending, persistence;
	nvml_remapped_fn remapped;
	nvml_ull_fn reasons;
	nvml_clock_fn clock, max_clock;
	nvml_uint_fn power, limit, default_limit;
	nvml_p2p_fn p2p;
	nvml_link_state_fn link_state;
	nvml_link_errors_fn link_errors;
	nvml_count_fn count;
	nvml_by_index_fn by_index;
	nvml_pci_info_fn pci_info;
};

/* Optional symbols stay NULL: older drivers lack some. */
static int nvml_load(struct nvml *n, char *err, size_t len)
{
	memset(n, 0, sizeof(*n));
	if (!(n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
		snprintf(err, len, "NVML not loaded: %s", dlerror());
		return -1;
	}
#define SYM(f, name) (*(void **)&n->f = dlsym(n->lib, name))
	SYM(init, "nvmlInit_v2");
	SYM(shutdown, "nvmlShutdown");
	SYM(error_string, "nvmlErrorString");
	SYM(driver_version, "nvmlSystemGetDriverVersion");
	SYM(cuda_version, "nvmlSystemGetCudaDriverVersion_v2");
	SYM(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
	SYM(ecc, "nvmlDeviceGetTotalEccErrors");
	SYM(retired, "nvmlDeviceGetRetiredPages");
	SYM(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
	SYM(persistence, "nvmlDeviceGetPersistenceMode");
	SYM(remapped, "nvmlDeviceGetRemappedRows");
	if (!SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
		SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
	SYM(clock, "nvmlDeviceGetClockInfo");
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo");
	SYM(power, "nvmlDeviceGetPowerUsage");
	SYM(limit, "nvmlDeviceGetEnforcedPowerLimit");
	SYM(default_limit, "nvmlDeviceGetPowerManagementDefaultLimit");
	SYM(p2p, "nvmlDeviceGetP2PStatus");
	SYM(link_state, "nvmlDeviceGetNvLinkState");
	SYM(link_errors, "nvmlDeviceGetNvLinkErrorCounter");
	SYM(count, "nvmlDeviceGetCount_v2");
	SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
	SYM(pci_info, "nvmlDeviceGetPciInfo_v3");
#undef SYM
	if (!n->init || !n->shutdown || !n->by_bus_id || !n->error_string) {
		snprintf(err, len, "NVML lacks nvmlInit_v2, nvmlShutdown, nvmlErrorString or "
			 "nvmlDeviceGetHandleByPciBusId_v2 (a driver older than 2014?)");
		dlclose(n->lib);
		return -1;
	}
	return 0;
}

static int count_retired(struct nvml *n, nvmlDevice_t d, int cause)
{
	unsigned int count = 0;
	nvmlReturn_t rc = n->retired ? n->retired(d, cause, &count, NULL) : NVML_ERROR_NOT_SUPPORTED;
	return rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE ? (int)count : -1;
}

static long long ecc_count(struct nvml *n, nvmlDevice_t d, int counter)
{
	unsigned long long v = 0;
	return n->ecc && n->ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter, &v) == NVML_SUCCESS ? (long long)v : -1;
}

static int uint_of(nvml_uint_fn f, nvmlDevice_t d)
{
	unsigned int v = 0;
	return f && f(d, &v) == NVML_SUCCESS ? (int)v : -1;
}

/* The GPU's NVLinks: how many are active, and their error counters. */
static void nvlinks(struct nvml *n, nvmlDevice_t d, struct ck_gpu_health *gh)
{
	nvmlEnableState_t on;
	unsigned long long v;

	gh->nvlinks = -1;
	gh->nvl_recovery = gh->nvl_crc = gh->nvl_replay = 0;
	for (unsigned int l = 0; n->link_state && l < NVML_NVLINK_MAX_LINKS; l++) {
		if (n->link_state(d, l, &on) != NVML_SUCCESS)
			continue;
		gh->nvlinks += gh->nvlinks < 0 ? 1 : 0;
		if (on != NVML_FEATURE_ENABLED)
			continue;
		gh->nvlinks++;
		if (!n->link_errors)
			continue;
		if (n->link_errors(d, l, NVML_NVLINK_ERROR_DL_RECOVERY, &v) == NVML_SUCCESS)
			gh->nvl_recovery += (long long)v;
		if (n->link_errors(d, l, NVML_NVLINK_ERROR_DL_REPLAY, &v) == NVML_SUCCESS)
			gh->nvl_replay += (long long)v;
		for (int c = NVML_NVLINK_ERROR_DL_CRC_FLIT; c <= NVML_NVLINK_ERROR_DL_ECC_DATA; c++)
			if (n->link_errors(d, l, c, &v) == NVML_SUCCESS)
				gh->nvl_crc += (long long)v;
	}
}

/* Peer reads from this GPU to each of peers ("busid,busid"), as NVML's
 * P2P status: "busid:0;busid:5". */
static void p2p(struct nvml *n, nvmlDevice_t d, const char *busid, const char *peers, struct ck_gpu_health *gh)
{
	size_t off = 0;

	gh->p2p[0] = '\0';
	for (const char *p = peers; n->p2p && p && *p;) {
		char bus[32];
		size_t l = strcspn(p, ",");
		nvmlDevice_t o;
		int st;
		snprintf(bus, sizeof(bus), "%.*s", (int)(l < sizeof(bus) ? l : sizeof(bus) - 1), p);
		p += l + (p[l] == ',');
		if (!bus[0] || !strcasecmp(bus, busid) || n->by_bus_id(bus, &o) != NVML_SUCCESS)
			continue;
		if (n->p2p(d, o, NVML_P2P_CAPS_INDEX_READ, &st) != NVML_SUCCESS)
			st = -1;
		if (off + strlen(bus) + 8 < sizeof(gh->p2p))
			off += (size_t)snprintf(gh->p2p + off, sizeof(gh->p2p) - off, "%s%s:%d", off ? ";" : "", bus, st);
	}
}

/* What NVML says of the GPU at busid (in this process), and of its peer
 * reads to the GPUs in peers. */
static void nvml_query(const char *busid, const char *peers, struct ck_gpu_health *gh)
{
	struct nvml n;
	nvmlDevice_t d;
	nvmlReturn_t rc;
	unsigned int a = 0, b = 0, c = 0, e = 0;
	nvmlEnableState_t st;

	if (nvml_load(&n, gh->err, sizeof(gh->err)) < 0)
		return;
	if ((rc = n.init()) != NVML_SUCCESS) {
		snprintf(gh->err, sizeof(gh->err), "nvmlInit: %s", n.error_string(rc));
		dlclose(n.lib);
		return;
	}
	if ((rc = n.by_bus_id(busid, &d)) != NVML_SUCCESS) {
		snprintf(gh->err, sizeof(gh->err), "NVML has no GPU at %s: %s", busid, n.error_string(rc));
		goto out;
	}
	gh->have = 1;
	if (!n.driver_version || n.driver_version(gh->driver, sizeof(gh->driver)) != NVML_SUCCESS)
		gh->driver[0] = '\0';
	if (!n.cuda_version || n.cuda_version(&gh->cuda) != NVML_SUCCESS)
		gh->cuda = -1;
	gh->ecc_vol = ecc_count(&n, d, NVML_VOLATILE_ECC);
	gh->ecc_agg = ecc_count(&n, d, NVML_AGGREGATE_ECC);
	gh->retired_sbe = count_retired(&n, d, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS);
	gh->retired_dbe = count_retired(&n, d, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR);
	gh->retired_pending = n.retired_pending && n.retired_pending(d, &st) == NVML_SUCCESS ? st == NVML_FEATURE_ENABLED : -1;
	if (n.remapped && n.remapped(d, &a, &b, &c, &e) == NVML_SUCCESS) {
		gh->remap_corr = (int)a;
		gh->remap_unc = (int)b;
		gh->remap_pending = c != 0;
		gh->remap_failed = e != 0;
	} else {
		gh->remap_corr = gh->remap_unc = gh->remap_pending = gh->remap_failed = -1;
	}
	gh->persistence = n.persistence && n.persistence(d, &st) == NVML_SUCCESS ? st == NVML_FEATURE_ENABLED : -1;
	if (!n.reasons || n.reasons(d, &gh->reasons) != NVML_SUCCESS)
		gh->reasons = 0;
	gh->sm_mhz = n.clock && n.clock(d, NVML_CLOCK_SM, &a) == NVML_SUCCESS ? (int)a : -1;
	gh->sm_max_mhz = n.max_clock && n.max_clock(d, NVML_CLOCK_SM, &a) == NVML_SUCCESS ? (int)a : -1;
	gh->power_mw = uint_of(n.power, d);
	gh->limit_mw = uint_of(n.limit, d);
	gh->default_limit_mw = uint_of(n.default_limit, d);
	nvlinks(&n, d, gh);
	p2p(&n, d, busid, peers, gh);
out:
	n.shutdown();
	dlclose(n.lib);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* fn(arg, out) in a child, out's size bytes back through a pipe within
 * NVML_WAIT_S (a GPU gone bad can hang the driver): 0, else -1 with err
 * (what = what was asked, for the message). */
static int in_child(void (*fn)(const void *arg, void *out), const void *arg, void *out, size_t size,
		    const char *what, char *err, size_t errlen)
{
	int fds[2];

	if (pipe(fds) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		memset(out, 0, size);
		fn(arg, out);
		_exit(write(fds[1], out, size) == (ssize_t)size ? 0 : 1);
	}
	close(fds[1]);
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		return -1;
	}
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	size_t have = 0;
	double end = now_s() + NVML_WAIT_S;
	while (have < size) {
		int left = (int)((end - now_s()) * 1000);
		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		ssize_t r = read(fds[0], (char *)out + have, size - have);
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	close(fds[0]);
	if (have < size) {
		kill(pid, SIGKILL);
		snprintf(err, errlen, "NVML did not answer for %s within %d s (a hung driver or GPU?)", what,
			 NVML_WAIT_S);
	}
	waitpid(pid, NULL, 0);
	return have < size ? -1 : 0;
}

struct query_args {
	const char *busid, *peers;
};

static void query_in_child(const void *arg, void *out)
{
	const struct query_args *a = arg;
	nvml_query(a->busid, a->peers, out);
}

/* nvml_query, bounded (in_child). */
static void nvml_bounded(const char *busid, const char *peers, struct ck_gpu_health *gh)
{
	struct query_args a = { busid, peers };
	struct ck_gpu_health got;

	if (in_child(query_in_child, &a, &got, sizeof(got), busid, gh->err, sizeof(gh->err)) == 0)
		*gh = got;
}

/* NVML's GPUs, by PCI bus id, as the child sends them back. */
struct nvml_list {
	int n;                           /* -1: err says why none */
	char busid[DDPENV_MAX_GPUS][DDPENV_BUSIDLEN];
	char err[200];
};

static void list_in_child(const void *arg, void *out)
{
	struct nvml_list *l = out;
	struct nvml n;
	nvmlReturn_t rc;
	unsigned int count = 0;

	(void)arg;
	l->n = -1;
	if (nvml_load(&n, l->err, sizeof(l->err)) < 0)
		return;
	if (!n.count || !n.by_index || !n.pci_info) {
		snprintf(l->err, sizeof(l->err), "NVML lacks nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2 or "
			 "nvmlDeviceGetPciInfo_v3");
		dlclose(n.lib);
		return;
	}
	if ((rc = n.init()) != NVML_SUCCESS) {
		snprintf(l->err, sizeof(l->err), "nvmlInit: %s", n.error_string(rc));
		dlclose(n.lib);
		return;
	}
	if ((rc = n.count(&count)) != NVML_SUCCESS) {
		snprintf(l->err, sizeof(l->err), "nvmlDeviceGetCount: %s", n.error_string(rc));
		goto out;
	}
	l->n = 0;
	for (unsigned int i = 0; i < count && l->n < DDPENV_MAX_GPUS; i++) {
		nvmlDevice_t d;
		nvmlPciInfo_t pci;
		memset(&pci, 0, sizeof(pci));
		if (n.by_index(i, &d) != NVML_SUCCESS || n.pci_info(d, &pci) != NVML_SUCCESS)
			continue;
		pci.busId[sizeof(pci.busId) - 1] = '\0';
		if (ddpenv_busid_norm(pci.busId, l->busid[l->n], sizeof(l->busid[0])) == 0)
			l->n++;
	}
out:
	n.shutdown();
	dlclose(n.lib);
}

int ck_gpu_nvml_list(struct ddpenv_nvgpu *g, int max, char *err, size_t errlen)
{
	struct nvml_list l;

	if (in_child(list_in_child, NULL, &l, sizeof(l), "its GPU list", err, errlen) < 0)
		return -1;
	if (l.n < 0) {
		snprintf(err, errlen, "%s", l.err);
		return -1;
	}
	int k = 0;
	for (int i = 0; i < l.n && k < max; i++, k++) {
		memset(&g[k], 0, sizeof(g[k]));
		g[k].minor = -1;
		snprintf(g[k].busid, sizeof(g[k].busid), "%s", l.busid[i]);
	}
	return k;
}

/* "0000:3b:00.0", "00000000:3B:00.0", "PCI:0000:3b:00" -> domain, bus, device. */
static int bus_parse(const char *s, unsigned *dom, unsigned *bus, unsigned *dev)
{
	if (!strncasecmp(s, "PCI:", 4))
		s += 4;
	return sscanf(s, "%x:%x:%x", dom, bus, dev) == 3 ? 0 : -1;
}

/* One log line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." */
static void xid_line(const char *line, unsigned dom, unsigned bus, unsigned dev, struct ck_gpu_health *gh)
{
	const char *x = strstr(line, "NVRM: Xid (");
	unsigned d2, b2, v2;
	int code;

	if (!x || bus_parse(x + 11, &d2, &b2, &v2) < 0 || d2 != dom || b2 != bus || v2 != dev)
		return;
	const char *c = strstr(x, "): ");
	if (!c || sscanf(c + 3, "%d", &code) != 1)
		return;
	gh->nxid++;
	/* the last 16 codes */
	char *p = gh->xids;
	int n = 0;
	for (char *q = p; *q; q++)
		n += *q == ',';
	if (p[0] && n >= 15) {
		char *comma = strchr(p, ',');
		memmove(p, comma + 1, strlen(comma + 1) + 1);
	}
	size_t l = strlen(p);
	snprintf(p + l, sizeof(gh->xids) - l, "%s%d", l ? "," : "", code);
}

void ck_gpu_xids(const char *path, const char *busid, struct ck_gpu_health *gh)
{
	unsigned dom, bus, dev;
	char rec[2048];
	int kmsg = !strcmp(path, "/dev/kmsg");
	int fd, n = 0;

	gh->xids[0] = '\0';
	gh->nxid = 0;
	if (bus_parse(busid, &dom, &bus, &dev) < 0) {
		snprintf(gh->xid_err, sizeof(gh->xid_err), "%s: not a PCI bus id", busid);
		return;
	}
	if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
		snprintf(gh->xid_err, sizeof(gh->xid_err), "the kernel's log (%s): %s%s: Xid events not read", path,
			 strerror(errno), errno == EPERM || errno == EACCES ? " (kernel.dmesg_restrict?)" : "");
		return;
	}
	if (kmsg) {
		/* one record a read, from the oldest kept; EAGAIN at the end */
		ssize_t r;
		while (n++ < KMSG_MAX_RECORDS && ((r = read(fd, rec, sizeof(rec) - 1)) > 0 || (r < 0 && errno == EPIPE)))
			if (r > 0) {
				rec[r] = '\0';
				xid_line(rec, dom, bus, dev, gh);
			}
	} else {
		FILE *f = fdopen(fd, "r");
		while (f && n++ < KMSG_MAX_RECORDS && fgets(rec, sizeof(rec), f))
			xid_line(rec, dom, bus, dev, gh);
		if (f) {
			fclose(f);
			return;
		}
	}
	close(fd);
}

void ck_gpu_health_read(const char *busid, const char *peers, const char *kmsg, struct ck_gpu_health *gh)
{
	memset(gh, 0, sizeof(*gh));
	gh->nvlinks = -1;
	nvml_bounded(busid, peers, gh);
	ck_gpu_xids(kmsg, busid, gh);
}
