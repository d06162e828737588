/*
 * A stand-in libnvidia-ml.so.1 for the tests: the part of the NVML C API that the exporter's NVML
 * backend (exporter/sources/nvml*.py) reaches through the real pynvml binding, with nvml.h's
 * signatures, structure layouts, return codes and units (mW, mJ, bytes, MHz, ns, KiB, KB/s).
 * tests/exporter/test_nvml_stub.py builds it (cc -shared -fPIC -o <dir>/libnvidia-ml.so.1 stub_nvml.c)
 * and runs the backend in a process of its own with LD_LIBRARY_PATH=<dir>: pynvml opens the library
 * with CDLL("libnvidia-ml.so.1"), through the dynamic loader's search path only.
 *
 * Behaviour comes from a text file named by GPUSCOPE_NVML_STUB_CONFIG, read by the first nvmlInit.
 * One `key=value` per line; `#` starts a comment line. Numbers may be decimal or 0x-hex.
 *
 *   gpus=N                       GPUs nvmlDeviceGetCount_v2 counts (at most 16)
 *   driver_version=550.54.15
 *   init_error=CODE              nvmlInit answers CODE (e.g. 9, NVML_ERROR_DRIVER_NOT_LOADED)
 *   wait_cap_ms=MS               nvmlEventSetWait waits at most MS (keeps tests fast; 0: as asked)
 *   gpu.I.KEY=VALUE              GPU I's KEY; I may be `*` (every GPU)
 *
 * GPU keys (defaults: an H100 SXM; GPU I has UUID GPU-5a1d0000-0000-4000-8000-00000000000I and bus
 * 0x18 + 0x10 * I): uuid, name, bus_id (0000DDDD:BB:DD.F), util_gpu, util_mem (%), temp_c,
 * mem_temp_c (C), power_mw, power_limit_mw, energy_mj, sm_clock_mhz, mem_clock_mhz,
 * clock_event_reasons, fb_total, fb_used (allocated by processes), fb_reserved (driver and firmware;
 * the v1 memory struct counts it as used, v2 apart), power_violation_ns, thermal_violation_ns,
 * pcie_replay, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s (the PCIe byte counter fields grow at this
 * rate; nvmlDeviceGetPcieThroughput answers it in KB/s after sampling 20 ms), ecc_corrected,
 * ecc_uncorrected, remapped_correctable, remapped_uncorrectable, remap_pending, remap_failure,
 * nvlink_links, nvlink_tx_kib, nvlink_rx_kib (link L: value + L; scopeId UINT_MAX: the sum),
 * nvlink_error.C (NVML_NVLINK_ERROR_DL_* counter C, per link), gpm (0/1), sm_active_pct,
 * tensor_active_pct, processes (PIDs, comma-separated), privileged (0: in MIG mode the GPU's memory
 * and process list answer NO_PERMISSION), lost (1: every call answers GPU_IS_LOST), lost_file (lost
 * while this file exists), xid_file (a file of XID codes: nvmlEventSetWait delivers them, then
 * deletes the file), mig (1: MIG mode), mig_plain_names (1: MIG device names without the profile),
 * mig.S=GI,CI,PROFILE,MEMORY_MIB,USED_MIB[,SM_PCT,TENSOR_PCT[,PID PID...]] (MIG device index S),
 * recovery_action (NVML_GPU_RECOVERY_ACTION_*, field 230; default 0, none), recovery_action_file (while
 * this file exists, the action is the number in it: a value that changes mid-run), recovery_action_field
 * (0: a driver older than field 230, which answers an id it does not know INVALID_ARGUMENT in the field's
 * own status, as driver 580.159.04 does for id 9999; fail.field.230=3 is one answering NOT_SUPPORTED).
 *
 *   gpu.I.fail.WHAT=CODE         that call answers CODE. WHAT: handle, uuid, name, pci_info,
 *       utilization, memory, memory_v2, temperature, power, energy, clock, clock_events, fields (the
 *       whole nvmlDeviceGetFieldValues call), field.ID or field.ID.SCOPE (one field's own status),
 *       mig_mode, power_limit, violation, pcie_replay, ecc, remapped_rows, nvlink_error.C or
 *       nvlink_error.C.LINK, pcie_throughput, processes, gpm, events.
 *
 * Build with -DSTUB_NO_MEMORY_V2 for a driver older than R510, which lacks nvmlDeviceGetMemoryInfo_v2.
 * gpuscope_stub_layout() lists the offsets and sizes used here, to compare with pynvml's structures.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- nvml.h: return codes, constants, handles, structures ---- */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
enum { NVML_PERF_POLICY_POWER = 0, NVML_PERF_POLICY_THERMAL = 1 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };
enum { NVML_NVLINK_ERROR_DL_COUNT = 5 }; /* REPLAY, RECOVERY, CRC_FLIT, CRC_DATA, ECC_DATA */
enum { NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1 };
enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
};
enum {
    NVML_FI_DEV_MEMORY_TEMP = 82,
    NVML_FI_DEV_NVLINK_LINK_COUNT = 91,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139,
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197,
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230,
};
enum {
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1,
    NVML_GPM_METRIC_SM_UTIL = 2,
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5,
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
};
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24U))) /* 0x02000028 */
#define NVML_NVLINK_MAX_LINKS 36
#define SCOPE_ALL_LINKS 0xFFFFFFFFu /* UINT_MAX: NVML's sum over every link */

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef struct {
    char busIdLegacy[16]; /* NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32]; /* NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE */
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp; /* CPU time, microseconds */
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned long long referenceTime;
    unsigned long long violationTime;
} nvmlViolationTime_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[]; /* NVML_GPM_METRIC_MAX entries; numMetrics are read */
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* ---- the stub's GPUs ---- */

#define MAX_GPUS 16
#define MAX_MIG 7 /* nvmlDeviceGetMaxMigDeviceCount of an H100 */
#define MAX_FAILS 48
#define MAX_PIDS 8
#define MAX_XIDS 64
#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

typedef struct {
    char what[48];
    nvmlReturn_t code;
} fail_t;

struct stub_gpu;

typedef struct {
    struct stub_gpu *parent;
    int present;
    unsigned int gi, ci, slices;
    char profile[32];
    char uuid[96];
    unsigned long long memory_mib, used_mib;
    double sm_pct, tensor_pct, graphics_pct, dram_pct;
    unsigned int pids[MAX_PIDS];
    int npids;
} stub_mig;

typedef struct stub_gpu {
    unsigned int index;
    char uuid[96], name[96], bus_id[32];
    unsigned int domain, bus, dev, pci_device_id, pci_subsystem_id;
    unsigned int util_gpu, util_mem, temp_c, mem_temp_c, power_mw, power_limit_mw, sm_clock, mem_clock;
    unsigned long long energy_mj, clock_event_reasons, fb_total, fb_used, fb_reserved;
    unsigned long long power_violation_ns, thermal_violation_ns;
    unsigned int pcie_replay;
    double pcie_tx_bps, pcie_rx_bps;
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned int remap[4]; /* correctable, uncorrectable, pending, failure */
    unsigned int nvlink_links;
    unsigned long long nvlink_tx_kib, nvlink_rx_kib;
    unsigned long long nvlink_errors[NVML_NVLINK_ERROR_DL_COUNT];
    int gpm;
    double sm_pct, tensor_pct, graphics_pct, dram_pct;
    unsigned int enc_util, dec_util;
    char serial[32];
    unsigned int pids[MAX_PIDS];
    int npids;
    int privileged, lost;
    char lost_file[512], xid_file[512];
    unsigned int recovery_action;
    int recovery_action_field; /* 0: the driver predates field 230 */
    char recovery_action_file[512];
    int mig_mode, mig_plain_names;
    stub_mig mig[MAX_MIG];
    fail_t fails[MAX_FAILS];
    int nfails;
    unsigned long long xids[MAX_XIDS]; /* XIDs waiting for nvmlEventSetWait */
    int nxids;
} stub_gpu;

struct nvmlEventSet_st {
    unsigned int magic;
    unsigned long long types[MAX_GPUS]; /* events registered per GPU */
};

struct nvmlGpmSample_st {
    unsigned int magic;
    stub_gpu *gpu;
    int gpu_instance; /* -1: the whole GPU */
    int taken;
};

#define SET_MAGIC 0x5e75e7u
#define SAMPLE_MAGIC 0x6a3a6au

static stub_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static char driver_version[80];
static nvmlReturn_t init_error;
static unsigned int wait_cap_ms;
static int init_count; /* nvmlInit minus nvmlShutdown */
static int configured;
static long long started_us; /* nvmlInit: the PCIe byte counters start at 0 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void sleep_ms(unsigned int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void copy_text(char *to, size_t size, const char *from) {
    snprintf(to, size, "%s", from);
}

/* ---- configuration ---- */

static void parse_bus_id(stub_gpu *g) {
    unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(g->bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) == 4) {
        g->domain = domain;
        g->bus = bus;
        g->dev = dev;
    }
}

static void defaults(stub_gpu *g, unsigned int i) {
    memset(g, 0, sizeof(*g));
    g->index = i;
    snprintf(g->uuid, sizeof(g->uuid), "GPU-5a1d0000-0000-4000-8000-%012u", i);
    copy_text(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
    snprintf(g->bus_id, sizeof(g->bus_id), "00000000:%02X:00.0", 0x18 + 0x10 * i);
    parse_bus_id(g);
    g->pci_device_id = 0x233010DE;
    g->pci_subsystem_id = 0x16C110DE;
    g->util_gpu = 97;
    g->util_mem = 31;
    g->temp_c = 71;
    g->mem_temp_c = 78;
    g->power_mw = 612500;
    g->power_limit_mw = 700000;
    g->energy_mj = 9000000000ULL;
    g->sm_clock = 1980;
    g->mem_clock = 2619;
    g->fb_total = 80 * GIB;
    g->fb_used = 61 * GIB;
    g->fb_reserved = 512 * MIB;
    g->pcie_tx_bps = 1200000.0 * 1024.0;
    g->pcie_rx_bps = 900000.0 * 1024.0;
    g->nvlink_links = 18;
    g->nvlink_tx_kib = 10000000;
    g->nvlink_rx_kib = 9000000;
    g->gpm = 1;
    g->sm_pct = 83.0;
    g->tensor_pct = 57.0;
    g->graphics_pct = 96.0;
    g->dram_pct = 38.0;
    g->dec_util = 3;
    snprintf(g->serial, sizeof(g->serial), "165492200%04u", i);
    g->privileged = 1;
    g->recovery_action_field = 1;
    for (int s = 0; s < MAX_MIG; s++)
        g->mig[s].parent = g;
}

static unsigned long long number(const char *value) {
    return strtoull(value, NULL, 0);
}

static void parse_pids(const char *value, unsigned int *pids, int *count) {
    char *end;
    *count = 0;
    while (*value && *count < MAX_PIDS) {
        unsigned long pid = strtoul(value, &end, 10);
        if (end == value) {
            value++;
            continue;
        }
        pids[(*count)++] = (unsigned int)pid;
        value = end;
    }
}

static int parse_mig(stub_gpu *g, unsigned int slot, const char *value) {
    if (slot >= MAX_MIG)
        return 0;
    stub_mig *m = &g->mig[slot];
    char buffer[256], *save = NULL;
    copy_text(buffer, sizeof(buffer), value);
    char *part[8] = {0};
    int n = 0;
    for (char *p = strtok_r(buffer, ",", &save); p && n < 8; p = strtok_r(NULL, ",", &save))
        part[n++] = p;
    if (n < 5)
        return 0;
    m->present = 1;
    m->gi = (unsigned int)number(part[0]);
    m->ci = (unsigned int)number(part[1]);
    copy_text(m->profile, sizeof(m->profile), part[2]);
    m->slices = (unsigned int)strtoul(part[2], NULL, 10); /* "3g.40gb": 3 */
    m->memory_mib = number(part[3]);
    m->used_mib = number(part[4]);
    m->sm_pct = n > 5 ? strtod(part[5], NULL) : 40.0;
    m->tensor_pct = n > 6 ? strtod(part[6], NULL) : 21.0;
    m->graphics_pct = 44.0; /* the instance's engines: busy whenever a kernel runs */
    m->dram_pct = 18.0;
    m->npids = 0;
    if (n > 7)
        parse_pids(part[7], m->pids, &m->npids);
    snprintf(m->uuid, sizeof(m->uuid), "MIG-5a1d0000-%04x-4000-8000-%012u", g->index, slot);
    return 1;
}

static int set_gpu_key(stub_gpu *g, const char *key, const char *value) {
    unsigned int n;
#define TEXT(name, field)                                                                                              \
    if (strcmp(key, name) == 0) {                                                                                      \
        copy_text(g->field, sizeof(g->field), value);                                                                  \
        return 1;                                                                                                      \
    }
#define NUMBER(name, field)                                                                                            \
    if (strcmp(key, name) == 0) {                                                                                      \
        g->field = number(value);                                                                                      \
        return 1;                                                                                                      \
    }
#define REAL(name, field)                                                                                              \
    if (strcmp(key, name) == 0) {                                                                                      \
        g->field = strtod(value, NULL);                                                                                \
        return 1;                                                                                                      \
    }
    TEXT("uuid", uuid)
    TEXT("name", name)
    TEXT("serial", serial)
    NUMBER("enc_util", enc_util)
    NUMBER("dec_util", dec_util)
    TEXT("lost_file", lost_file)
    TEXT("xid_file", xid_file)
    TEXT("recovery_action_file", recovery_action_file)
    NUMBER("recovery_action", recovery_action)
    NUMBER("recovery_action_field", recovery_action_field)
    if (strcmp(key, "bus_id") == 0) {
        copy_text(g->bus_id, sizeof(g->bus_id), value);
        parse_bus_id(g);
        return 1;
    }
    NUMBER("util_gpu", util_gpu)
    NUMBER("util_mem", util_mem)
    NUMBER("temp_c", temp_c)
    NUMBER("mem_temp_c", mem_temp_c)
    NUMBER("power_mw", power_mw)
    NUMBER("power_limit_mw", power_limit_mw)
    NUMBER("energy_mj", energy_mj)
    NUMBER("sm_clock_mhz", sm_clock)
    NUMBER("mem_clock_mhz", mem_clock)
    NUMBER("clock_event_reasons", clock_event_reasons)
    NUMBER("fb_total", fb_total)
    NUMBER("fb_used", fb_used)
    NUMBER("fb_reserved", fb_reserved)
    NUMBER("power_violation_ns", power_violation_ns)
    NUMBER("thermal_violation_ns", thermal_violation_ns)
    NUMBER("pcie_replay", pcie_replay)
    REAL("pcie_tx_bytes_per_s", pcie_tx_bps)
    REAL("pcie_rx_bytes_per_s", pcie_rx_bps)
    NUMBER("ecc_corrected", ecc_corrected)
    NUMBER("ecc_uncorrected", ecc_uncorrected)
    NUMBER("remapped_correctable", remap[0])
    NUMBER("remapped_uncorrectable", remap[1])
    NUMBER("remap_pending", remap[2])
    NUMBER("remap_failure", remap[3])
    NUMBER("nvlink_tx_kib", nvlink_tx_kib)
    NUMBER("nvlink_rx_kib", nvlink_rx_kib)
    NUMBER("gpm", gpm)
    REAL("sm_active_pct", sm_pct)
    REAL("tensor_active_pct", tensor_pct)
    NUMBER("privileged", privileged)
    NUMBER("lost", lost)
    NUMBER("mig", mig_mode)
    NUMBER("mig_plain_names", mig_plain_names)
#undef TEXT
#undef NUMBER
#undef REAL
    if (strcmp(key, "nvlink_links") == 0) {
        g->nvlink_links = (unsigned int)number(value);
        return g->nvlink_links <= NVML_NVLINK_MAX_LINKS;
    }
    if (strcmp(key, "processes") == 0) {
        parse_pids(value, g->pids, &g->npids);
        return 1;
    }
    if (sscanf(key, "nvlink_error.%u", &n) == 1 && n < NVML_NVLINK_ERROR_DL_COUNT) {
        g->nvlink_errors[n] = number(value);
        return 1;
    }
    if (sscanf(key, "mig.%u", &n) == 1)
        return parse_mig(g, n, value);
    if (strncmp(key, "fail.", 5) == 0 && g->nfails < MAX_FAILS) {
        fail_t *f = &g->fails[g->nfails++];
        copy_text(f->what, sizeof(f->what), key + 5);
        f->code = (nvmlReturn_t)number(value);
        return 1;
    }
    return 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        *--end = '\0';
    return s;
}

static int set_key(const char *key, const char *value) {
    if (strcmp(key, "gpus") == 0) {
        gpu_count = (unsigned int)number(value);
        return gpu_count <= MAX_GPUS;
    }
    if (strcmp(key, "driver_version") == 0) {
        copy_text(driver_version, sizeof(driver_version), value);
        return 1;
    }
    if (strcmp(key, "init_error") == 0) {
        init_error = (nvmlReturn_t)number(value);
        return 1;
    }
    if (strcmp(key, "wait_cap_ms") == 0) {
        wait_cap_ms = (unsigned int)number(value);
        return 1;
    }
    if (strncmp(key, "gpu.", 4) == 0) {
        const char *rest = key + 4;
        const char *dot = strchr(rest, '.');
        if (dot == NULL)
            return 0;
        if (rest[0] == '*' && dot == rest + 1) {
            for (unsigned int i = 0; i < MAX_GPUS; i++)
                if (!set_gpu_key(&gpus[i], dot + 1, value))
                    return 0;
            return 1;
        }
        char *end;
        unsigned long i = strtoul(rest, &end, 10);
        if (end != dot || i >= MAX_GPUS)
            return 0;
        return set_gpu_key(&gpus[i], dot + 1, value);
    }
    return 0;
}

/* NVML_SUCCESS, or NVML_ERROR_UNKNOWN after saying on stderr what is wrong with the configuration. */
static nvmlReturn_t configure(void) {
    const char *path = getenv("GPUSCOPE_NVML_STUB_CONFIG");
    for (unsigned int i = 0; i < MAX_GPUS; i++)
        defaults(&gpus[i], i);
    gpu_count = 1;
    copy_text(driver_version, sizeof(driver_version), "550.54.15");
    init_error = NVML_SUCCESS;
    wait_cap_ms = 0;
    if (path == NULL) {
        fprintf(stderr, "stub_nvml: GPUSCOPE_NVML_STUB_CONFIG is not set\n");
        return NVML_ERROR_UNKNOWN;
    }
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        fprintf(stderr, "stub_nvml: cannot read %s\n", path);
        return NVML_ERROR_UNKNOWN;
    }
    char line[1024];
    int number_of_line = 0;
    nvmlReturn_t result = NVML_SUCCESS;
    while (fgets(line, sizeof(line), file)) {
        number_of_line++;
        char *text = trim(line);
        if (*text == '\0' || *text == '#')
            continue;
        char *eq = strchr(text, '=');
        if (eq != NULL)
            *eq = '\0';
        if (eq == NULL || !set_key(trim(text), trim(eq + 1))) {
            fprintf(stderr, "stub_nvml: %s:%d: not understood: %s\n", path, number_of_line, text);
            result = NVML_ERROR_UNKNOWN;
        }
    }
    fclose(file);
    return result;
}

/* ---- what each call shares: is NVML up, which device, is it lost, is this call made to fail ---- */

static nvmlReturn_t failure(const stub_gpu *g, const char *what) {
    for (int i = 0; i < g->nfails; i++)
        if (strcmp(g->fails[i].what, what) == 0)
            return g->fails[i].code;
    return NVML_SUCCESS;
}

static int is_lost(const stub_gpu *g) {
    return g->lost || (g->lost_file[0] && access(g->lost_file, F_OK) == 0);
}

static stub_gpu *gpu_of(nvmlDevice_t device) {
    for (unsigned int i = 0; i < gpu_count; i++)
        if ((void *)device == (void *)&gpus[i])
            return &gpus[i];
    return NULL;
}

static stub_mig *mig_of(nvmlDevice_t device) {
    for (unsigned int i = 0; i < gpu_count; i++)
        for (int s = 0; s < MAX_MIG; s++)
            if ((void *)device == (void *)&gpus[i].mig[s] && gpus[i].mig[s].present)
                return &gpus[i].mig[s];
    return NULL;
}

/* A call on a GPU handle: the GPU, or why the call fails. */
static nvmlReturn_t enter_gpu(nvmlDevice_t device, const char *what, stub_gpu **g) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if ((*g = gpu_of(device)) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(*g))
        return NVML_ERROR_GPU_IS_LOST;
    return failure(*g, what);
}

/* A call that takes a GPU's or a MIG device's handle (*m is NULL for a GPU). */
static nvmlReturn_t enter_any(nvmlDevice_t device, const char *what, stub_gpu **g, stub_mig **m) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    *m = mig_of(device);
    *g = *m ? (*m)->parent : gpu_of(device);
    if (*g == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(*g))
        return NVML_ERROR_GPU_IS_LOST;
    return failure(*g, what);
}

#define ENTER_GPU(device, what)                                                                                        \
    stub_gpu *g;                                                                                                       \
    do {                                                                                                               \
        nvmlReturn_t entered_ = enter_gpu(device, what, &g);                                                           \
        if (entered_ != NVML_SUCCESS)                                                                                  \
            return entered_;                                                                                           \
    } while (0)

#define ENTER_ANY(device, what)                                                                                        \
    stub_gpu *g;                                                                                                       \
    stub_mig *m;                                                                                                       \
    do {                                                                                                               \
        nvmlReturn_t entered_ = enter_any(device, what, &g, &m);                                                       \
        if (entered_ != NVML_SUCCESS)                                                                                  \
            return entered_;                                                                                           \
    } while (0)

#define NEED(pointer)                                                                                                  \
    do {                                                                                                               \
        if ((pointer) == NULL)                                                                                         \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                        \
    } while (0)

/* ---- initialisation ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = NVML_SUCCESS;
    if (!configured) {
        result = configure();
        configured = result == NVML_SUCCESS;
        started_us = now_us();
    }
    if (result == NVML_SUCCESS && init_error != NVML_SUCCESS)
        result = init_error;
    if (result == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0)
        init_count--;
    pthread_mutex_unlock(&lock);
    return result;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_NO_DATA:
        return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(version);
    if (strlen(driver_version) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_text(version, length, driver_version);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(count);
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(device);
    if (index >= gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    stub_gpu *g = &gpus[index];
    if (is_lost(g))
        return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t refused = failure(g, "handle"); /* e.g. NO_PERMISSION: a GPU the cgroup may not use */
    if (refused != NVML_SUCCESS)
        return refused;
    *device = (nvmlDevice_t)(void *)g;
    return NVML_SUCCESS;
}

/* ---- identity ---- */

static nvmlReturn_t give_text(char *to, unsigned int length, const char *text) {
    NEED(to);
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_text(to, length, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER_ANY(device, "uuid");
    return give_text(uuid, length, m ? m->uuid : g->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_ANY(device, "name");
    if (m == NULL)
        return give_text(name, length, g->name);
    char mig_name[160];
    if (g->mig_plain_names)
        snprintf(mig_name, sizeof(mig_name), "%s MIG", g->name);
    else
        snprintf(mig_name, sizeof(mig_name), "%s MIG %s", g->name, m->profile);
    return give_text(name, length, mig_name);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER_GPU(device, "pci_info");
    NEED(pci);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g->domain & 0xFFFF, g->bus, g->dev);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->dev;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    copy_text(pci->busId, sizeof(pci->busId), g->bus_id);
    return NVML_SUCCESS;
}

/* ---- fast readings ---- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    ENTER_GPU(device, "utilization");
    NEED(utilization);
    if (g->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED; /* nvml.h: no utilisation for a GPU in MIG mode */
    utilization->gpu = g->util_gpu;
    utilization->memory = g->util_mem;
    return NVML_SUCCESS;
}

/* Video engines: busy percent and the period (µs) it was averaged over; NOT_SUPPORTED if asked to fail. */
static nvmlReturn_t video(nvmlDevice_t device, const char *what, unsigned int util_of_gpu,
                          unsigned int *utilization, unsigned int *samplingPeriodUs) {
    stub_gpu *g;
    nvmlReturn_t entered = enter_gpu(device, what, &g);
    if (entered != NVML_SUCCESS)
        return entered;
    NEED(utilization);
    NEED(samplingPeriodUs);
    *utilization = util_of_gpu;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    stub_gpu *g = gpu_of(device);
    return video(device, "encoder", g ? g->enc_util : 0, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    stub_gpu *g = gpu_of(device);
    return video(device, "decoder", g ? g->dec_util : 0, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    ENTER_GPU(device, "serial");
    return give_text(serial, length, g->serial);
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, int *pVirtualMode) {
    ENTER_GPU(device, "virtualization_mode");
    NEED(pVirtualMode);
    *pVirtualMode = 0; /* NVML_GPU_VIRTUALIZATION_MODE_NONE: bare metal */
    return NVML_SUCCESS;
}

/* (total, reserved, used by processes) of a GPU or of a MIG device's GPU instance. */
static nvmlReturn_t memory_of(stub_gpu *g, stub_mig *m, unsigned long long out[3]) {
    if (m != NULL) {
        out[0] = m->memory_mib * MIB;
        out[1] = 38 * MIB;
        out[2] = m->used_mib * MIB;
        return NVML_SUCCESS;
    }
    if (g->mig_mode && !g->privileged)
        return NVML_ERROR_NO_PERMISSION; /* a MIG GPU's memory needs privileges; its instances' does not */
    out[0] = g->fb_total;
    out[1] = g->fb_reserved;
    out[2] = g->fb_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_ANY(device, "memory");
    NEED(memory);
    unsigned long long fb[3];
    nvmlReturn_t result = memory_of(g, m, fb);
    if (result != NVML_SUCCESS)
        return result;
    memory->total = fb[0];
    memory->used = fb[2] + fb[1]; /* v1: what the driver reserves counts as used */
    memory->free = fb[0] - memory->used;
    return NVML_SUCCESS;
}

#ifndef STUB_NO_MEMORY_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NEED(memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    ENTER_ANY(device, "memory");
    nvmlReturn_t result = failure(g, "memory_v2");
    unsigned long long fb[3];
    if (result == NVML_SUCCESS)
        result = memory_of(g, m, fb);
    if (result != NVML_SUCCESS)
        return result;
    memory->total = fb[0];
    memory->reserved = fb[1];
    memory->used = fb[2];
    memory->free = fb[0] - fb[1] - fb[2];
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    ENTER_GPU(device, "temperature");
    NEED(temp);
    if (sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = g->temp_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER_GPU(device, "power");
    NEED(power);
    *power = g->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    ENTER_GPU(device, "energy");
    NEED(energy);
    *energy = g->energy_mj;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    ENTER_GPU(device, "clock");
    NEED(clock);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *clock = g->sm_clock;
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        *clock = g->mem_clock;
        return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
        *clock = 1545;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_GPU(device, "clock_events");
    NEED(reasons);
    *reasons = g->clock_event_reasons;
    return NVML_SUCCESS;
}

/* The GPU's recovery action: the number in its recovery_action_file while that exists, else the configured one. */
static unsigned int recovery_action(const stub_gpu *g) {
    unsigned int action = g->recovery_action;
    FILE *file = g->recovery_action_file[0] ? fopen(g->recovery_action_file, "r") : NULL;
    if (file != NULL) {
        if (fscanf(file, "%u", &action) != 1)
            action = g->recovery_action;
        fclose(file);
    }
    return action;
}

/* One field's value: its status, and its value when NVML_SUCCESS. */
static void field_value(stub_gpu *g, nvmlFieldValue_t *v, double elapsed_s) {
    char what[48];
    snprintf(what, sizeof(what), "field.%u.%u", v->fieldId, v->scopeId);
    nvmlReturn_t failed = failure(g, what);
    if (failed == NVML_SUCCESS) {
        snprintf(what, sizeof(what), "field.%u", v->fieldId);
        failed = failure(g, what);
    }
    if (failed != NVML_SUCCESS) {
        v->nvmlReturn = failed;
        return;
    }
    v->nvmlReturn = NVML_SUCCESS;
    switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->mem_temp_c;
        return;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->nvlink_links;
        return;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: {
        unsigned long long base =
            v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? g->nvlink_tx_kib : g->nvlink_rx_kib;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        if (g->nvlink_links == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (v->scopeId == SCOPE_ALL_LINKS) {
            unsigned long long sum = 0;
            for (unsigned int link = 0; link < g->nvlink_links; link++)
                sum += base + link;
            v->value.ullVal = sum;
        } else if (v->scopeId < g->nvlink_links) {
            v->value.ullVal = base + v->scopeId;
        } else {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        }
        return;
    }
    case NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = (unsigned long long)(g->pcie_tx_bps * elapsed_s);
        return;
    case NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = (unsigned long long)(g->pcie_rx_bps * elapsed_s);
        return;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
        if (!g->recovery_action_field) { /* an older driver: a field id it does not know */
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            return;
        }
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = recovery_action(g);
        return;
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    ENTER_GPU(device, "fields");
    NEED(values);
    if (valuesCount <= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long stamp = now_us();
    double elapsed_s = (double)(stamp - started_us) / 1e6;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = stamp;
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        field_value(g, v, elapsed_s);
    }
    return NVML_SUCCESS;
}

/* ---- slow readings ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    ENTER_GPU(device, "mig_mode");
    NEED(currentMode);
    NEED(pendingMode);
    *currentMode = *pendingMode = g->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    ENTER_GPU(device, "power_limit");
    NEED(limit);
    *limit = g->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, int perfPolicyType, nvmlViolationTime_t *violTime) {
    ENTER_GPU(device, "violation");
    NEED(violTime);
    violTime->referenceTime = (unsigned long long)now_us() * 1000ULL;
    if (perfPolicyType == NVML_PERF_POLICY_POWER)
        violTime->violationTime = g->power_violation_ns;
    else if (perfPolicyType == NVML_PERF_POLICY_THERMAL)
        violTime->violationTime = g->thermal_violation_ns;
    else
        violTime->violationTime = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    ENTER_GPU(device, "pcie_replay");
    NEED(value);
    *value = g->pcie_replay;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *eccCounts) {
    ENTER_GPU(device, "ecc");
    NEED(eccCounts);
    if (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *eccCounts = g->ecc_corrected;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = g->ecc_uncorrected;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    ENTER_GPU(device, "remapped_rows");
    NEED(corrRows);
    NEED(uncRows);
    NEED(isPending);
    NEED(failureOccurred);
    if (g->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = g->remap[0];
    *uncRows = g->remap[1];
    *isPending = g->remap[2];
    *failureOccurred = g->remap[3];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                             unsigned long long *counterValue) {
    ENTER_GPU(device, "nvlink_error");
    NEED(counterValue);
    if (link >= g->nvlink_links || counter < 0 || counter >= NVML_NVLINK_ERROR_DL_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    char what[48];
    snprintf(what, sizeof(what), "nvlink_error.%d.%u", counter, link);
    nvmlReturn_t failed = failure(g, what);
    if (failed == NVML_SUCCESS) {
        snprintf(what, sizeof(what), "nvlink_error.%d", counter);
        failed = failure(g, what);
    }
    if (failed != NVML_SUCCESS)
        return failed;
    *counterValue = g->nvlink_errors[counter];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value) {
    ENTER_GPU(device, "pcie_throughput");
    NEED(value);
    double bytes_per_s;
    if (counter == NVML_PCIE_UTIL_TX_BYTES)
        bytes_per_s = g->pcie_tx_bps;
    else if (counter == NVML_PCIE_UTIL_RX_BYTES)
        bytes_per_s = g->pcie_rx_bps;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    sleep_ms(20); /* nvml.h: the counter is sampled for 20 ms */
    *value = (unsigned int)(bytes_per_s / 1024.0); /* KB/s */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    ENTER_ANY(device, "processes");
    NEED(infoCount);
    if (m == NULL && g->mig_mode && !g->privileged)
        return NVML_ERROR_NO_PERMISSION;
    const unsigned int *pids = m ? m->pids : g->pids;
    unsigned int count = (unsigned int)(m ? m->npids : g->npids);
    if (count == 0) {
        *infoCount = 0;
        return NVML_SUCCESS;
    }
    if (infos == NULL || *infoCount < count) {
        *infoCount = count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < count; i++) {
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = GIB;
        infos[i].gpuInstanceId = m ? m->gi : 0xFFFFFFFFu;
        infos[i].computeInstanceId = m ? m->ci : 0xFFFFFFFFu;
    }
    *infoCount = count;
    return NVML_SUCCESS;
}

/* ---- MIG ---- */

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER_GPU(device, "mig_mode");
    NEED(count);
    *count = MAX_MIG;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    ENTER_GPU(device, "mig_mode");
    NEED(migDevice);
    if (index >= MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_mode || !g->mig[index].present)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)(void *)&g->mig[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER_ANY(device, "mig_mode");
    NEED(id);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT; /* a GPU, not a MIG device */
    *id = m->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER_ANY(device, "mig_mode");
    NEED(id);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    ENTER_ANY(device, "mig_mode");
    NEED(attributes);
    memset(attributes, 0, sizeof(*attributes));
    unsigned int slices = m ? m->slices : 7;
    attributes->multiprocessorCount = 16 * slices;
    attributes->sharedCopyEngineCount = slices;
    attributes->sharedDecoderCount = slices;
    attributes->sharedJpegCount = slices;
    attributes->sharedOfaCount = 1;
    attributes->gpuInstanceSliceCount = slices;
    attributes->computeInstanceSliceCount = slices;
    attributes->memorySizeMB = m ? m->memory_mib : g->fb_total / MIB;
    return NVML_SUCCESS;
}

/* ---- GPU Performance Monitoring ---- */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    NEED(gpmSupport);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    ENTER_GPU(device, "gpm");
    gpmSupport->isSupportedDevice = g->gpm ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(gpmSample);
    struct nvmlGpmSample_st *sample = calloc(1, sizeof(*sample));
    if (sample == NULL)
        return NVML_ERROR_MEMORY;
    sample->magic = SAMPLE_MAGIC;
    *gpmSample = sample;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    if (gpmSample == NULL || gpmSample->magic != SAMPLE_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0;
    free(gpmSample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    ENTER_GPU(device, "gpm");
    if (gpmSample == NULL || gpmSample->magic != SAMPLE_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->gpm)
        return NVML_ERROR_NOT_SUPPORTED;
    gpmSample->gpu = g;
    gpmSample->gpu_instance = -1;
    gpmSample->taken = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample) {
    ENTER_GPU(device, "gpm");
    if (gpmSample == NULL || gpmSample->magic != SAMPLE_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->gpm)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!g->mig_mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int s = 0; s < MAX_MIG; s++) {
        if (g->mig[s].present && g->mig[s].gi == gpuInstanceId) {
            gpmSample->gpu = g;
            gpmSample->gpu_instance = (int)gpuInstanceId;
            gpmSample->taken = 1;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    static char sm_name[] = "SM_UTIL", sm_long[] = "SM utilization", tensor_name[] = "ANY_TENSOR_UTIL",
                tensor_long[] = "Any tensor utilization", graphics_name[] = "GRAPHICS_UTIL",
                graphics_long[] = "Graphics utilization", dram_name[] = "DRAM_BW_UTIL",
                dram_long[] = "DRAM bandwidth utilization", percent[] = "%";
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(metricsGet);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t first = metricsGet->sample1, second = metricsGet->sample2;
    if (first == NULL || second == NULL || first->magic != SAMPLE_MAGIC || second->magic != SAMPLE_MAGIC ||
        !first->taken || !second->taken || first->gpu != second->gpu ||
        first->gpu_instance != second->gpu_instance || metricsGet->numMetrics > 1024)
        return NVML_ERROR_INVALID_ARGUMENT;
    stub_gpu *g = first->gpu;
    if (is_lost(g))
        return NVML_ERROR_GPU_IS_LOST;
    double sm = g->sm_pct, tensor = g->tensor_pct, graphics = g->graphics_pct, dram = g->dram_pct;
    for (int s = 0; s < MAX_MIG && first->gpu_instance >= 0; s++) {
        if (g->mig[s].present && (int)g->mig[s].gi == first->gpu_instance) {
            sm = g->mig[s].sm_pct;
            tensor = g->mig[s].tensor_pct;
            graphics = g->mig[s].graphics_pct;
            dram = g->mig[s].dram_pct;
            break;
        }
    }
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        metric->nvmlReturn = NVML_SUCCESS;
        metric->metricInfo.unit = percent;
        if (metric->metricId == NVML_GPM_METRIC_SM_UTIL) {
            metric->value = sm;
            metric->metricInfo.shortName = sm_name;
            metric->metricInfo.longName = sm_long;
        } else if (metric->metricId == NVML_GPM_METRIC_ANY_TENSOR_UTIL) {
            metric->value = tensor;
            metric->metricInfo.shortName = tensor_name;
            metric->metricInfo.longName = tensor_long;
        } else if (metric->metricId == NVML_GPM_METRIC_GRAPHICS_UTIL) {
            metric->value = graphics;
            metric->metricInfo.shortName = graphics_name;
            metric->metricInfo.longName = graphics_long;
        } else if (metric->metricId == NVML_GPM_METRIC_DRAM_BW_UTIL) {
            metric->value = dram;
            metric->metricInfo.shortName = dram_name;
            metric->metricInfo.longName = dram_long;
        } else {
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            metric->value = 0.0;
        }
    }
    return NVML_SUCCESS;
}

/* ---- events (XIDs) ---- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(set);
    struct nvmlEventSet_st *created = calloc(1, sizeof(*created));
    if (created == NULL)
        return NVML_ERROR_MEMORY;
    created->magic = SET_MAGIC;
    *set = created;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (set == NULL || set->magic != SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    set->magic = 0;
    pthread_mutex_unlock(&lock);
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    ENTER_GPU(device, "events");
    if (set == NULL || set->magic != SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~nvmlEventTypeXidCriticalError)
        return NVML_ERROR_NOT_SUPPORTED; /* only XIDs here */
    pthread_mutex_lock(&lock);
    set->types[g->index] |= eventTypes;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

/* Queues the XIDs written to the GPU's xid_file and deletes it; called with `lock` held. */
static void take_xid_file(stub_gpu *g) {
    if (!g->xid_file[0])
        return;
    FILE *file = fopen(g->xid_file, "r");
    if (file == NULL)
        return;
    unsigned long long xid;
    while (g->nxids < MAX_XIDS) {
        int got = fscanf(file, " %llu", &xid);
        if (got == 1) {
            g->xids[g->nxids++] = xid;
        } else if (got == EOF || fgetc(file) == EOF) {
            break; /* a separator (comma) skipped otherwise */
        }
    }
    fclose(file);
    unlink(g->xid_file);
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || set->magic != SET_MAGIC || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int wait_ms = wait_cap_ms && wait_cap_ms < timeoutms ? wait_cap_ms : timeoutms;
    double deadline = now_s() + wait_ms / 1000.0;
    for (;;) {
        pthread_mutex_lock(&lock);
        for (unsigned int i = 0; i < gpu_count; i++) {
            if (set->types[i] && is_lost(&gpus[i])) {
                pthread_mutex_unlock(&lock); /* nvml.h: any GPU of the set lost answers GPU_IS_LOST */
                return NVML_ERROR_GPU_IS_LOST;
            }
        }
        for (unsigned int i = 0; i < gpu_count; i++) {
            stub_gpu *g = &gpus[i];
            if (!(set->types[i] & nvmlEventTypeXidCriticalError))
                continue;
            take_xid_file(g);
            if (g->nxids > 0) {
                data->device = (nvmlDevice_t)(void *)g;
                data->eventType = nvmlEventTypeXidCriticalError;
                data->eventData = g->xids[0];
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
                memmove(g->xids, g->xids + 1, (size_t)(g->nxids - 1) * sizeof(g->xids[0]));
                g->nxids--;
                pthread_mutex_unlock(&lock);
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        if (now_s() >= deadline)
            return NVML_ERROR_TIMEOUT;
        sleep_ms(5);
    }
}

/* ---- for the tests: this file's structure layouts, to compare with pynvml's ctypes structures ---- */

typedef struct {
    const char *type;
    const char *field; /* NULL: the entry is the structure's size */
    size_t value;
} layout_t;

#define OFFSET(t, f) {#t, #f, offsetof(t, f)}
#define SIZE(t) {#t, NULL, sizeof(t)}

static const layout_t layout[] = {
    SIZE(nvmlPciInfo_t),
    OFFSET(nvmlPciInfo_t, busIdLegacy),
    OFFSET(nvmlPciInfo_t, domain),
    OFFSET(nvmlPciInfo_t, bus),
    OFFSET(nvmlPciInfo_t, device),
    OFFSET(nvmlPciInfo_t, pciDeviceId),
    OFFSET(nvmlPciInfo_t, pciSubSystemId),
    OFFSET(nvmlPciInfo_t, busId),
    SIZE(nvmlMemory_t),
    OFFSET(nvmlMemory_t, total),
    OFFSET(nvmlMemory_t, free),
    OFFSET(nvmlMemory_t, used),
    SIZE(nvmlMemory_v2_t),
    OFFSET(nvmlMemory_v2_t, version),
    OFFSET(nvmlMemory_v2_t, total),
    OFFSET(nvmlMemory_v2_t, reserved),
    OFFSET(nvmlMemory_v2_t, free),
    OFFSET(nvmlMemory_v2_t, used),
    SIZE(nvmlUtilization_t),
    OFFSET(nvmlUtilization_t, gpu),
    OFFSET(nvmlUtilization_t, memory),
    SIZE(nvmlValue_t),
    SIZE(nvmlFieldValue_t),
    OFFSET(nvmlFieldValue_t, fieldId),
    OFFSET(nvmlFieldValue_t, scopeId),
    OFFSET(nvmlFieldValue_t, timestamp),
    OFFSET(nvmlFieldValue_t, latencyUsec),
    OFFSET(nvmlFieldValue_t, valueType),
    OFFSET(nvmlFieldValue_t, nvmlReturn),
    OFFSET(nvmlFieldValue_t, value),
    SIZE(nvmlViolationTime_t),
    OFFSET(nvmlViolationTime_t, referenceTime),
    OFFSET(nvmlViolationTime_t, violationTime),
    SIZE(nvmlProcessInfo_t),
    OFFSET(nvmlProcessInfo_t, pid),
    OFFSET(nvmlProcessInfo_t, usedGpuMemory),
    OFFSET(nvmlProcessInfo_t, gpuInstanceId),
    OFFSET(nvmlProcessInfo_t, computeInstanceId),
    SIZE(nvmlEventData_t),
    OFFSET(nvmlEventData_t, device),
    OFFSET(nvmlEventData_t, eventType),
    OFFSET(nvmlEventData_t, eventData),
    OFFSET(nvmlEventData_t, gpuInstanceId),
    OFFSET(nvmlEventData_t, computeInstanceId),
    SIZE(nvmlGpmSupport_t),
    OFFSET(nvmlGpmSupport_t, version),
    OFFSET(nvmlGpmSupport_t, isSupportedDevice),
    SIZE(nvmlGpmMetric_t),
    OFFSET(nvmlGpmMetric_t, metricId),
    OFFSET(nvmlGpmMetric_t, nvmlReturn),
    OFFSET(nvmlGpmMetric_t, value),
    OFFSET(nvmlGpmMetric_t, metricInfo),
    OFFSET(nvmlGpmMetricsGet_t, version),
    OFFSET(nvmlGpmMetricsGet_t, numMetrics),
    OFFSET(nvmlGpmMetricsGet_t, sample1),
    OFFSET(nvmlGpmMetricsGet_t, sample2),
    OFFSET(nvmlGpmMetricsGet_t, metrics),
    SIZE(nvmlDeviceAttributes_t),
    OFFSET(nvmlDeviceAttributes_t, multiprocessorCount),
    OFFSET(nvmlDeviceAttributes_t, sharedCopyEngineCount),
    OFFSET(nvmlDeviceAttributes_t, sharedDecoderCount),
    OFFSET(nvmlDeviceAttributes_t, sharedEncoderCount),
    OFFSET(nvmlDeviceAttributes_t, sharedJpegCount),
    OFFSET(nvmlDeviceAttributes_t, sharedOfaCount),
    OFFSET(nvmlDeviceAttributes_t, gpuInstanceSliceCount),
    OFFSET(nvmlDeviceAttributes_t, computeInstanceSliceCount),
    OFFSET(nvmlDeviceAttributes_t, memorySizeMB),
};

/* Entry `i` of the layout table: 1 with its parts filled in, 0 past the end. */
int gpuscope_stub_layout(unsigned int i, const char **type, const char **field, size_t *value) {
    if (i >= sizeof(layout) / sizeof(layout[0]))
        return 0;
    *type = layout[i].type;
    *field = layout[i].field;
    *value = layout[i].value;
    return 1;
}

/* nvmlMemory_v2 as this file computes it (pynvml has it as a constant: they must agree). */
unsigned int gpuscope_stub_memory_v2_version(void) {
    return nvmlMemory_v2;
}
