/*
 * ddp-check: what every rank finds out about itself, what rank 0 concludes
 * from all of them, and how it says so.
 *
 * Each rank fills a struct ck_rank (its environment, interface, binding,
 * probe endpoint), sends it through the libddpenv store as text
 * ("key=value" lines, see ck_rank_encode), and rank 0 decodes every one
 * into a struct ck_world.  The checks themselves (eval.c) only look at that
 * struct, so every verdict is testable on crafted records without a
 * cluster.
 */
#ifndef DDP_CHECK_H
#define DDP_CHECK_H

#include <stddef.h>
#include <stdio.h>

#include "ddpenv.h"
#include "hw.h"

#define CK_HOST 64
#define CK_MSG 1024
#define CK_MAX_SIZES 64
/* The rank record's format: 2 adds the interface's MTU, the limits, the
 * RDMA devices, NCCL's variables and the full-size probe reply; 3 the
 * shared-memory folder and logind's RemoveIPC; 4 the process limit and the
 * user's threads; 5 the RDMA ports and PCIe links; 6 the GPU's health
 * (NVML, the kernel's Xid lines); a record without it (0) is an older
 * ddp-check's, whose task lacks them. */
#define CK_RECORD_PROTO 7

enum ck_level { CK_OK, CK_WARN, CK_FAIL, CK_SKIP };

/* The variables each rank reports.  The first CK_NCONTRACT are the
 * torchrun contract every rank must have. */
enum ck_env {
	CK_MASTER_ADDR, CK_MASTER_PORT, CK_RANK, CK_LOCAL_RANK, CK_WORLD_SIZE,
	CK_LOCAL_WORLD_SIZE, CK_NODE_RANK,
	CK_NCONTRACT,
	CK_NCCL_IF = CK_NCONTRACT, CK_GLOO_IF, CK_CVD, CK_GPU_BUSID, CK_SLURM_CVD,
	CK_STEP_GPUS, CK_BIND_POLICY, CK_BACKEND, CK_NODEID, CK_SHARDS, CK_MPS,
	CK_NODE_GPUS, CK_NCCL_IB_DISABLE, CK_NCCL_NET, CK_OMP, CK_NIC, CK_NCCL_IB_HCA,
	CK_NENV
};
extern const char *const ck_env_names[CK_NENV];

/* The task's GPU as NVML and the kernel's log tell it (gpu_health.c); counts are
 * -1 where the GPU does not support them. */
struct ck_gpu_health {
	int have;                        /* NVML answered for the task's GPU */
	char err[200];                   /* else why not: no NVML, GPU not found */
	char driver[32];                 /* the driver's version */
	int cuda;                        /* the CUDA version the driver gives: 12040 */
	long long ecc_vol, ecc_agg;      /* uncorrected ECC errors: since the driver
					  * loaded, and in the GPU's lifetime */
	int retired_sbe, retired_dbe;    /* pages retired: single-bit, double-bit */
	int retired_pending;             /* a retirement waits for a reset: 1 */
	int remap_corr, remap_unc;       /* rows remapped (A100 and later) */
	int remap_pending, remap_failed;
	int persistence;                 /* 1 on, 0 off */
	unsigned long long reasons;      /* the clocks' event (throttle) reasons */
	int sm_mhz, sm_max_mhz;
	int power_mw, limit_mw, default_limit_mw;
	/* the kernel's Xid lines for this GPU since boot ("79,48": the codes,
	 * the last 16) and how many; xid_err where the log was not read */
	char xids[96];
	int nxid;
	char xid_err[160];
	/* NVLink: links active (-1 no NVLink), and the errors their counters
	 * hold since the driver loaded: recovery, CRC and ECC, replay */
	int nvlinks;
	long long nvl_recovery, nvl_crc, nvl_replay;
	/* CUDA peer reads to the node's other GPUs: "BUSID:STATUS;..." with
	 * NVML's P2P status (0 OK) */
	char p2p[1024];
};

/* Copies between every two GPUs one task of a node sees (cudaMemcpyPeer),
 * GB/s from row to column (proto 7). */
#define CK_P2P_MAX 16
struct ck_p2p {
	int n;                           /* GPUs timed; 0 not measured (err, or fewer than 2) */
	char bus[CK_P2P_MAX][16];        /* their PCI bus ids, as CUDA numbers them */
	float gbps[CK_P2P_MAX * CK_P2P_MAX];
	char err[160];
};

/* One rank, as it sees itself. */
struct ck_rank {
	int id;                          /* SLURM_PROCID (the check's own identity) */
	int proto;                       /* its ddp-check's CK_RECORD_PROTO, 0 older */
	char version[16];                /* its ddp-check's version */
	int joined;                      /* its record reached rank 0 */
	char host[CK_HOST];
	long pid;
	char env[CK_NENV][DDPENV_VALLEN];
	unsigned have;                   /* bit per enum ck_env: the variable is set */
	/* The interface the backend will use (NCCL_/GLOO_SOCKET_IFNAME). */
	char ifvar[24];                  /* which variable named it */
	char ifname[2 * IF_NAMESIZE];    /* the interface it matched, or the value */
	char ifstate[16];                /* up, down, missing, unset, loopback */
	char ifaddr[DDPENV_ADDRSTRLEN];  /* its address of the head's family */
	char ifkind[16];                 /* ethernet, infiniband, loopback, type N */
	int ifmtu;                       /* its MTU, 0 unknown */
	/* RDMA: the node's devices ("mlx5_0,mlx5_1", "" none) and the task's
	 * locked-memory limit (RLIMIT_MEMLOCK's soft one, bytes; -1
	 * unlimited), which NCCL's registration of its buffers counts on. */
	char rdma[128];
	/* The node's RDMA ports (ck_ib_ports), and the PCIe links of the
	 * task's GPU and of its NIC (DDP_NIC), from sysfs; proto 5 */
	char ibports[512];
	struct ck_link gpu_link, nic_link;
	long long memlock;
	long long nofile;                /* RLIMIT_NOFILE's soft limit; -1 unlimited */
	/* RLIMIT_NPROC's soft limit (-1 unlimited) and the threads the task's
	 * user ran on its node when it looked (-1 not counted: no limit, root,
	 * or /proc unreadable); proto 4 */
	long long nproc, user_threads;
	/* The shared-memory folder NCCL keeps its segments in (/dev/shm):
	 * its size and the room left (bytes; -1 unknown, size
	 * 0 no limit), "" or why a task could not make a segment there, and
	 * the NCCL segments it holds (any job's, or left by a crashed one). */
	char shm_path[64];
	long long shm_size, shm_free;
	char shm_err[160];
	int shm_nccl;
	long long shm_nccl_bytes;
	/* logind's RemoveIPC (1 yes, 0 no, -1 not known: shm_ipc_err says
	 * why) and the task's user, whose IPC it removes unless a system one. */
	int removeipc;
	char removeipc_err[160];
	long uid;
	/* Its NCCL_* variables but the per-node ones (ck_nccl_env), sorted,
	 * "NAME=value;..." ("" none). */
	char nccl_env[1024];
	char ifs_here[256];              /* the node's interfaces, for messages */
	int head_local;                  /* MASTER_ADDR is this node's: 1, 0, -1 unknown */
	char head_err[160];
	/* Binding. */
	char cpus[DDPENV_CPULIST];       /* sched_getaffinity */
	char numa[32];                   /* NUMA nodes of those CPUs */
	char allowed[DDPENV_CPULIST];    /* CPUs the node's cgroup allows */
	char gpu[DDPENV_BUSIDLEN];       /* its GPU's PCI bus id, "" none */
	char gpu_from[24];               /* DDP_GPU_BUSID or CUDA */
	char mig[DDPENV_GPUVAL];         /* the MIG device CUDA opens (the first of
					  * CUDA_VISIBLE_DEVICES), "" none */
	char gpu_near[DDPENV_CPULIST];   /* allowed CPUs near that GPU */
	int gpu_numa;
	int visible;                     /* GPUs it can see, -1 unknown */
	int step_gpus;                   /* the step's GPUs on its node */
	/* The NVIDIA driver's GPUs on its node, "minor=busid,..." by minor
	 * (ck_nvidia_read): "" when the driver has no list there. */
	char nvgpus[960];
	char nvgpus_err[200];
	int gres_order;                  /* enum ddpenv_gres_order of its node's config */
	char topo_err[160];
	/* Where its node's prober listens ("10.0.0.1:40000"), "" none. */
	char probe[80];
	double joined_s;
	/* The collective library: "" loaded, else why not (no GPU, no NCCL). */
	char backend_err[DDPENV_ERRLEN];
	int nccl_version;                 /* task start to joining the rendezvous */
	struct ck_gpu_health gh;          /* proto 6 */
	/* Host-to-device copies from pinned memory to its GPU under the
	 * task's binding (proto 7): GB/s, 0 not measured (h2d_err says why;
	 * "" no GPU, or --h2d-bytes 0), and its GPU's link as sysfs says right
	 * after them (a GPU lowers its link's speed when idle). */
	double h2d_gbps;
	char h2d_err[160];
	struct ck_link h2d_link;
	/* The node's first task: copies between the GPUs it sees (proto 7). */
	struct ck_p2p p2p;
};

/* A prober's view of the other nodes. */
struct ck_peer {
	char node[CK_HOST];
	char addr[80];
	int ok;
	int bulk_short;                  /* greeted, but its bulk reply did not all come */
	double rtt_us;
	char err[320];
};

struct ck_probe {
	int have;                        /* this rank probed for its node */
	size_t npeers;
	struct ck_peer *peers;
	int have_clock;                  /* measured against the head node */
	double clock_off_us, clock_unc_us;
};

/* The collectives swept beside the all-reduce (gloo), in nccl-tests'
 * terms: a size is the whole buffer, world shares of count elements. */
enum ck_op { CK_ALLGATHER, CK_REDUCE_SCATTER, CK_ALLTOALL, CK_NOPS };
extern const char *const ck_op_name[CK_NOPS];   /* "all_gather", ... */
/* Node pairs a task times (pairs.c): one per other node, by its first task. */
#define CK_MAX_PAIRS 256

struct ck_pair {
	int peer;                        /* the other node's first task */
	double gbps;                     /* GB/s each way, the best of the trials */
};

/* What a rank got from the collectives. */
struct ck_coll {
	int have;
	int ok;                          /* the exact all-reduces were right */
	char msg[CK_MSG];
	double first_s;                  /* task start to the first completed all-reduce */
	double init_s;                   /* communicator set-up */
	size_t ntimes;
	double times[CK_MAX_SIZES];      /* seconds per all-reduce, per size */
	/* the other collectives: ran (gloo), per size the seconds and the
	 * elements of the checked run that were wrong; msg of the first that
	 * failed */
	int ops_ran;
	size_t nop_times[CK_NOPS];
	double op_times[CK_NOPS][CK_MAX_SIZES];
	long op_wrong[CK_NOPS][CK_MAX_SIZES];
	char op_msg[CK_MSG];
	/* the node pairs this task timed (the first task of its node) */
	int pairs_ran;
	size_t npairs;
	struct ck_pair pairs[CK_MAX_PAIRS];
	char pair_msg[CK_MSG];           /* why this task's pairs stopped */
};

struct ck_result {
	char name[32];
	enum ck_level level;
	char msg[CK_MSG];
};

struct ck_opts {
	size_t min_bytes, max_bytes;
	int step_factor;
	int iters, warmup;
	double min_busbw;                /* GB/s, 0: no threshold */
	double max_skew_ms;
	int probe_ms;                    /* bound on each probe connection */
	int timeout_s;
	int min_kill_wait;               /* seconds; KillWait below it warns, 0 never */
	const char *baseline;            /* --baseline FILE, NULL none */
	int min_baseline;                /* percent of the baseline's busbw */
	size_t pair_bytes;               /* each node pair's exchange, each way; 0: none */
	int min_pair;                    /* percent of the best pair's GB/s */
	size_t h2d_bytes;                /* each task's host-to-device copies; 0: none */
	int min_h2d;                     /* percent of the GPU's PCIe link */
	size_t p2p_bytes;                /* each copy between two GPUs of a node; 0: none */
	int min_p2p;                     /* percent of the node's best pair */
};

/* What the controller says of the time a task has to stop (task 0 asks,
 * slurm.c): slurm.conf's KillWait. */
struct ck_slurm {
	int have;                        /* 1 the controller answered; 0 err says why not */
	int kill_wait;                   /* seconds from SIGTERM to SIGKILL */
	char err[640];
};

enum { CK_GONE_NO, CK_GONE_DIED, CK_GONE_LEFT };

struct ck_world {
	const char *backend;             /* "gloo" or "nccl" */
	int n;                           /* tasks of the step */
	int step_nodes;                  /* nodes of the step, as Slurm says (0: unknown) */
	int node_mode;                   /* --node: the node alone, no step (a record per device) */
	char no_gpus[CK_MSG];            /* --node without GPUs: where none was found */
	struct ck_rank *ranks;           /* [n], by id */
	struct ck_probe *probes;         /* [n] */
	struct ck_coll *colls;           /* [n] */
	/* [n] or NULL: CK_GONE_DIED or CK_GONE_LEFT for a task whose
	 * connection to the rendezvous closed before it sent a record task 0
	 * waited for (killed or crashed; or stopped on an error of its own,
	 * which its stderr gives): task 0 stopped waiting for it then */
	unsigned char *gone;
	char refused[CK_MSG];            /* clients the store refused (token) */
	struct ck_opts opts;
	int coll_ran;                    /* collectives were attempted */
	char coll_skip[CK_MSG];          /* why they were not */
	size_t nsizes;
	size_t sizes[CK_MAX_SIZES];      /* bytes */
	struct ck_slurm slurm;
	struct ck_result *res;
	size_t nres, capres;
};

/* ---- records on the wire ------------------------------------------------- */

/* Text of "key=value" lines; newlines in values become spaces. */
int ck_rank_encode(const struct ck_rank *r, char *buf, size_t len);
int ck_rank_decode(struct ck_rank *r, const char *buf, size_t len);
int ck_probe_encode(const struct ck_probe *p, char *buf, size_t len);
int ck_probe_decode(struct ck_probe *p, const char *buf, size_t len);
void ck_probe_free(struct ck_probe *p);
int ck_coll_encode(const struct ck_coll *c, char *buf, size_t len);
int ck_coll_decode(struct ck_coll *c, const char *buf, size_t len);

/* ---- the NVIDIA driver's GPU list (nvidia.c) ------------------------------ */

/* Read the driver's list at dir (ddpenv_nvidia_gpus; ddp-check passes
 * DDPENV_NVIDIA_GPUS unless DDP_CHECK_NVIDIA_GPUS names another directory,
 * for a container that mounts the host's /proc/driver/nvidia elsewhere)
 * into out as "minor=busid,..." sorted by minor.  Returns the GPU count, 0 (out "") when dir does not
 * exist (no NVIDIA driver), -1 with err naming the file and line. */
int ck_nvidia_read(const char *dir, char *out, size_t len, char *err, size_t errlen);
/* The threads that processes of real user uid run, from PROC's
 * <pid>/status files (what RLIMIT_NPROC is held against at every fork and
 * pthread_create): the processes it can see (not another PID namespace's,
 * nor other users' under hidepid); -1 when PROC cannot be read. */
long long ck_user_threads(const char *proc, long uid);
/* Parse that text back; the count, -1 if it is not such a list. */
int ck_nvidia_parse(const char *s, struct ddpenv_nvgpu *g, size_t max);

/* ---- the controller's answer (slurm.c) ---------------------------------- */

/* A query of the controller, run by a child process that task 0 forks
 * before it starts a thread: libslurm's calls can block for its
 * MessageTimeout and end the process on a configuration they cannot read,
 * and neither may take ddp-check down with them. */
struct ck_slurm_query {
	long pid;                        /* the child, 0 none (s holds why) */
	int fd;                          /* its stdout and stderr */
	double started;                  /* ck_mono */
	char buf[2048];
	size_t len;
	struct ck_slurm s;
};
/* Start asking for KillWait (job: SLURM_JOB_ID; NULL or "" outside a
 * Slurm job, which asks nothing). */
void ck_slurm_ask(struct ck_slurm_query *q, const char *job);
/* Its answer, waiting for the child until deadline (ck_mono seconds; a
 * child still running then is killed and named so). */
void ck_slurm_answer(struct ck_slurm_query *q, double deadline, struct ck_slurm *out);
/* The child's output: a "kill_wait N" line, or "error TEXT", among
 * libslurm's own messages, ended with status (a wait status).
 * Fills out, with err saying what went wrong when no KillWait came. */
void ck_slurm_parse(const char *text, int status, struct ck_slurm *out);

/* ---- verdicts (eval.c) --------------------------------------------------- */

void ck_add(struct ck_world *w, const char *name, enum ck_level lv, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Everything that can be said before the collectives: the contract, the
 * rendezvous, interfaces, the probe mesh, clocks and binding. */
void ck_eval_setup(struct ck_world *w);
/* Whether the collectives may run: every rank joined, every interface is
 * usable and every node reached every other (else gloo or NCCL would only
 * hang until their timeout).  why says what stops them. */
int ck_coll_safe(const struct ck_world *w, char *why, size_t len);
/* The all-reduce verdicts, the bandwidth table's threshold and the time to
 * the first collective. */
void ck_eval_coll(struct ck_world *w);
/* busbw as nccl-tests defines it for all-reduce: algbw * 2(n-1)/n. */
double ck_busbw(double algbw, int n);
/* The slowest rank's time for size k, -1 when none measured. */
double ck_time_max(const struct ck_world *w, size_t k);
/* The other collectives (eval_ops.c): coll.all_gather, coll.reduce_scatter,
 * coll.alltoall: data exact at every size, the busbw at the largest. */
void ck_eval_ops(struct ck_world *w);
/* busbw of all-gather, reduce-scatter and all-to-all: algbw * (n-1)/n. */
double ck_op_busbw(double algbw, int n);
/* Each rank's share of a sweep size in elements (0: the size is below one
 * float per rank), the size that moves, the slowest rank's time (-1 none)
 * and the elements wrong on all ranks. */
size_t ck_op_count(size_t bytes, int world);
double ck_op_time_max(const struct ck_world *w, enum ck_op op, size_t k);
long ck_op_wrong(const struct ck_world *w, enum ck_op op, size_t k);
/* The node pairs (eval_pairs.c): each pair of nodes once (a < b, the
 * nodes' first tasks) at the lower of the two sides' GB/s. */
struct ck_pair_row {
	int a, b;
	double gbps;
};
size_t ck_pair_rows(const struct ck_world *w, struct ck_pair_row *rows, size_t max);
/* net.pairs: a node slow in every one of its pairs, or a link, below
 * --min-pair percent of the best pair. */
void ck_eval_pairs(struct ck_world *w);

/* ---- output (report.c) --------------------------------------------------- */

void ck_report_text(const struct ck_world *w, FILE *out);
void ck_report_json(const struct ck_world *w, FILE *out);
/* The other collectives' tables and the node pairs (report_ops.c; the
 * first 64 pairs); the JSON's "collectives" and "pairs" members, each
 * after a comma. */
void ck_report_ops_text(const struct ck_world *w, FILE *out);
void ck_report_ops_json(const struct ck_world *w, FILE *out);
/* s as a JSON string, quoted and escaped (NULL: ""). */
void ck_json_str(FILE *out, const char *s);
/* 0 all OK or WARN, 1 any FAIL. */
int ck_exit_code(const struct ck_world *w);

/* Sizes of the sweep: min, min*f, ... up to max (bytes, multiples of 4). */
size_t ck_sizes(const struct ck_opts *o, size_t *out, size_t max);

#endif
