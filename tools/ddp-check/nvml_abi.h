/* The part of NVIDIA's NVML (nvml.h, API version 12) that ddp-check calls,
 * for machines without that header (it ships with the CUDA toolkit's
 * full install and the driver's development files, neither here): the
 * types and values as nvml.h defines them, and the functions' types for
 * dlsym.  libnvidia-ml.so.1 itself comes with the driver. */
#ifndef CK_NVML_ABI_H
#define CK_NVML_ABI_H

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlEnableState_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };
enum { NVML_CLOCK_SM = 1 };
enum { NVML_P2P_CAPS_INDEX_READ = 0 };
enum { NVML_P2P_STATUS_OK = 0 };      /* then CHIPSET, GPU, IOH_TOPOLOGY, REGKEY, NOT_SUPPORTED, UNKNOWN */
#define NVML_NVLINK_MAX_LINKS 18
enum {
	NVML_NVLINK_ERROR_DL_REPLAY = 0,
	NVML_NVLINK_ERROR_DL_RECOVERY = 1,
	NVML_NVLINK_ERROR_DL_CRC_FLIT = 2,
	NVML_NVLINK_ERROR_DL_CRC_DATA = 3,
	NVML_NVLINK_ERROR_DL_ECC_DATA = 4,
};
enum {
	NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
	NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1,
};

/* nvmlClocksEventReason* (the throttle reasons) */
#define NVML_REASON_GPU_IDLE 0x1ULL
#define NVML_REASON_SW_POWER_CAP 0x4ULL
#define NVML_REASON_HW_SLOWDOWN 0x8ULL
#define NVML_REASON_SW_THERMAL 0x20ULL
#define NVML_REASON_HW_THERMAL 0x40ULL
#define NVML_REASON_HW_POWER_BRAKE 0x80ULL

/* nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
typedef struct {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "00000000:1B:00.0" */
} nvmlPciInfo_t;

typedef nvmlReturn_t (*nvml_void_fn)(void);
typedef nvmlReturn_t (*nvml_count_fn)(unsigned int *);
typedef nvmlReturn_t (*nvml_by_index_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_pci_info_fn)(nvmlDevice_t, nvmlPciInfo_t *);
typedef const char *(*nvml_error_string_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvml_driver_version_fn)(char *, unsigned int);
typedef nvmlReturn_t (*nvml_cuda_version_fn)(int *);
typedef nvmlReturn_t (*nvml_by_bus_id_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_ecc_fn)(nvmlDevice_t, int, int, unsigned long long *);
typedef nvmlReturn_t (*nvml_retired_fn)(nvmlDevice_t, int, unsigned int *, unsigned long long *);
typedef nvmlReturn_t (*nvml_state_fn)(nvmlDevice_t, nvmlEnableState_t *);
typedef nvmlReturn_t (*nvml_remapped_fn)(nvmlDevice_t, unsigned int *, unsigned int *, unsigned int *,
					 unsigned int *);
typedef nvmlReturn_t (*nvml_ull_fn)(nvmlDevice_t, unsigned long long *);
typedef nvmlReturn_t (*nvml_clock_fn)(nvmlDevice_t, int, unsigned int *);
typedef nvmlReturn_t (*nvml_uint_fn)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*nvml_p2p_fn)(nvmlDevice_t, nvmlDevice_t, int, int *);
typedef nvmlReturn_t (*nvml_link_state_fn)(nvmlDevice_t, unsigned int, nvmlEnableState_t *);
typedef nvmlReturn_t (*nvml_link_errors_fn)(nvmlDevice_t, unsigned int, int, unsigned long long *);

#endif
