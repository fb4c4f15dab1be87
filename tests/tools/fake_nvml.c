/* A stand-in for NVIDIA's libnvidia-ml.so.1, built under that name into
 * build/tests/tools/nvml/ (LD_LIBRARY_PATH there): ddp-check's NVML path
 * (tools/ddp-check/gpu.c) run where no GPU is.  It answers from the file
 * FAKE_NVML names, one line each:
 *
 *   driver 550.54.15
 *   cuda 12040
 *   hang                     nvmlInit never returns (ddp-check's bound)
 *   gpu BUSID key=value ...  a GPU; keys ecc_vol ecc_agg retired_sbe
 *                            retired_dbe retired_pending remap_corr remap_unc
 *                            remap_pending remap_failed persistence reasons
 *                            sm sm_max power limit default_limit, nvlinks
 *                            (active; -1 no NVLink) nvl_recovery nvl_crc
 *                            (each active link's), p2p (the status of its
 *                            reads from every other GPU); a GPU not
 *                            named: NVML_ERROR_NOT_FOUND
 *
 * NVML lists the GPUs in the order named (nvmlDeviceGetCount_v2, _ByIndex_v2,
 * GetPciInfo_v3, which writes "00000000:1B:00.0" as NVML does).  Omitted keys
 * read as a healthy GPU's.  Only the calls ddp-check makes,
 * with nvml.h's types (tools/ddp-check/nvml_abi.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nvml_abi.h"

#define MAXGPU 16

struct nvmlDevice_st {
	char bus[32];
	unsigned dom, busn, dev;
	long long v[21];
};

static const char *const keys[] = {
	"ecc_vol", "ecc_agg", "retired_sbe", "retired_dbe", "retired_pending", "remap_corr", "remap_unc",
	"remap_pending", "remap_failed", "persistence", "reasons", "sm", "sm_max", "power", "limit", "default_limit",
	"nvlinks", "nvl_recovery", "nvl_crc", "p2p", "nvl_replay",
};
#define NKEYS 21
static const long long healthy[NKEYS] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1980, 1980, 70000, 700000, 700000,
					  -1, 0, 0, 0, 0 };
enum { ECC_VOL, ECC_AGG, RSBE, RDBE, RPEND, RCORR, RUNC, RMPEND, RMFAIL, PERS, REASONS, SM, SMMAX, POWER, LIMIT, DLIMIT,
       NVLINKS, NVL_RECOVERY, NVL_CRC, P2P, NVL_REPLAY };

static struct nvmlDevice_st gpus[MAXGPU];
static int ngpus, inited, hang;
static char driver[32] = "550.54.15";
static int cuda = 12040;

static int bus_parse(const char *s, unsigned *d, unsigned *b, unsigned *v)
{
	return sscanf(s, "%x:%x:%x", d, b, v) == 3 ? 0 : -1;
}

static void load(void)
{
	const char *path = getenv("FAKE_NVML");
	FILE *f = path ? fopen(path, "r") : NULL;
	char line[1024];

	while (f && fgets(line, sizeof(line), f)) {
		char *w = strtok(line, " \t\n");
		if (!w)
			continue;
		if (!strcmp(w, "driver") && (w = strtok(NULL, " \t\n")))
			snprintf(driver, sizeof(driver), "%s", w);
		else if (!strcmp(w, "cuda") && (w = strtok(NULL, " \t\n")))
			cuda = atoi(w);
		else if (!strcmp(w, "hang"))
			hang = 1;
		else if (!strcmp(w, "gpu") && ngpus < MAXGPU && (w = strtok(NULL, " \t\n"))) {
			struct nvmlDevice_st *g = &gpus[ngpus];
			snprintf(g->bus, sizeof(g->bus), "%s", w);
			if (bus_parse(w, &g->dom, &g->busn, &g->dev) < 0)
				continue;
			memcpy(g->v, healthy, sizeof(healthy));
			while ((w = strtok(NULL, " \t\n"))) {
				char *eq = strchr(w, '=');
				for (int k = 0; eq && k < NKEYS; k++)
					if (!strncmp(w, keys[k], (size_t)(eq - w)) && strlen(keys[k]) == (size_t)(eq - w))
						g->v[k] = strtoll(eq + 1, NULL, 0);
			}
			ngpus++;
		}
	}
	if (f)
		fclose(f);
}

nvmlReturn_t nvmlInit_v2(void)
{
	ngpus = 0;
	load();
	while (hang)
		pause();
	inited = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
	inited = 0;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t rc)
{
	return rc == NVML_SUCCESS ? "Success" : rc == NVML_ERROR_NOT_FOUND ? "Not Found"
		: rc == NVML_ERROR_NOT_SUPPORTED ? "Not Supported" : "Unknown Error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *out, unsigned int len)
{
	snprintf(out, len, "%s", driver);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
	*v = cuda;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *out)
{
	unsigned d, b, v;
	if (!inited)
		return 1; /* NVML_ERROR_UNINITIALIZED */
	if (bus_parse(bus, &d, &b, &v) == 0)
		for (int i = 0; i < ngpus; i++)
			if (gpus[i].dom == d && gpus[i].busn == b && gpus[i].dev == v) {
				*out = &gpus[i];
				return NVML_SUCCESS;
			}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t g, int type, int counter, unsigned long long *n)
{
	if (type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
		return NVML_ERROR_NOT_SUPPORTED;
	long long v = g->v[counter == NVML_VOLATILE_ECC ? ECC_VOL : ECC_AGG];
	if (v < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*n = (unsigned long long)v;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t g, int cause, unsigned int *count, unsigned long long *addr)
{
	unsigned int have = (unsigned int)g->v[cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? RDBE : RSBE];
	nvmlReturn_t rc = *count < have ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	for (unsigned int i = 0; addr && i < have && i < *count; i++)
		addr[i] = 0x1000ULL * (i + 1);
	*count = have;
	return rc;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t g, nvmlEnableState_t *p)
{
	*p = g->v[RPEND] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t g, unsigned int *corr, unsigned int *unc, unsigned int *pending,
				       unsigned int *failed)
{
	*corr = (unsigned int)g->v[RCORR];
	*unc = (unsigned int)g->v[RUNC];
	*pending = (unsigned int)g->v[RMPEND];
	*failed = (unsigned int)g->v[RMFAIL];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t g, nvmlEnableState_t *m)
{
	*m = g->v[PERS] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t g, unsigned long long *r)
{
	*r = (unsigned long long)g->v[REASONS];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t g, int type, unsigned int *mhz)
{
	if (type != NVML_CLOCK_SM)
		return NVML_ERROR_NOT_SUPPORTED;
	*mhz = (unsigned int)g->v[SM];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t g, int type, unsigned int *mhz)
{
	if (type != NVML_CLOCK_SM)
		return NVML_ERROR_NOT_SUPPORTED;
	*mhz = (unsigned int)g->v[SMMAX];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t g, unsigned int *mw)
{
	*mw = (unsigned int)g->v[POWER];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t g, unsigned int *mw)
{
	*mw = (unsigned int)g->v[LIMIT];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t g, unsigned int *mw)
{
	*mw = (unsigned int)g->v[DLIMIT];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int index, int *status)
{
	(void)b;
	if (index != NVML_P2P_CAPS_INDEX_READ)
		return NVML_ERROR_NOT_SUPPORTED;
	*status = (int)a->v[P2P];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t g, unsigned int link, nvmlEnableState_t *on)
{
	if (g->v[NVLINKS] < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	if (link >= NVML_NVLINK_MAX_LINKS)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*on = (long long)link < g->v[NVLINKS] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t g, unsigned int link, int counter, unsigned long long *v)
{
	(void)link;
	*v = (unsigned long long)(counter == NVML_NVLINK_ERROR_DL_RECOVERY ? g->v[NVL_RECOVERY]
				  : counter == NVML_NVLINK_ERROR_DL_REPLAY ? g->v[NVL_REPLAY]
				  : counter == NVML_NVLINK_ERROR_DL_CRC_FLIT ? g->v[NVL_CRC] : 0);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!inited)
		return 1; /* NVML_ERROR_UNINITIALIZED */
	*n = (unsigned int)ngpus;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *out)
{
	if (!inited)
		return 1;
	if (i >= (unsigned int)ngpus)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*out = &gpus[i];
	return NVML_SUCCESS;
}

/* The bus id as NVML writes it: an 8-digit domain, upper-case hex. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t g, nvmlPciInfo_t *p)
{
	const char *dot = strrchr(g->bus, '.');
	memset(p, 0, sizeof(*p));
	p->domain = g->dom;
	p->bus = g->busn;
	p->device = g->dev;
	snprintf(p->busId, sizeof(p->busId), "%08X:%02X:%02X.%s", g->dom, g->busn, g->dev, dot ? dot + 1 : "0");
	snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%04X:%02X:%02X.%s", g->dom, g->busn, g->dev,
		 dot ? dot + 1 : "0");
	return NVML_SUCCESS;
}
