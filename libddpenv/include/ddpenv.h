/*
 * libddpenv: the distributed-training environment contract for Slurm steps.
 *
 * Given a snapshot of a Slurm task's environment, libddpenv works out what
 * torchrun would have set (MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK,
 * WORLD_SIZE, ...) plus the network interface NCCL and gloo should use.
 *
 * The library never prints, never exits and never calls getenv(): callers
 * fill a struct ddpenv_env (spank_getenv in the plugin, environ in the CLIs)
 * and get errors back in a buffer they own.  Everything that asks the system
 * (name resolution, interface list, routing table) goes through struct
 * ddpenv_sys, so every decision is testable on crafted inputs.
 *
 * Functions return 0 on success and -1 on error, with a message in err that
 * names the input and what was expected.
 */
#ifndef DDPENV_H
#define DDPENV_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <net/if.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDPENV_VERSION "0.1.0"
#define DDPENV_ERRLEN 512    /* a good size for err buffers */

/* ---- environment snapshot ------------------------------------------- */

struct ddpenv_env {
	char **kv;       /* "KEY=VALUE" strings, owned */
	size_t n, cap;
};

void ddpenv_env_init(struct ddpenv_env *env);
void ddpenv_env_free(struct ddpenv_env *env);
/* Set (or replace) KEY.  -1 with errno ENOMEM/EINVAL on failure. */
int ddpenv_env_set(struct ddpenv_env *env, const char *key, const char *value);
/* Value of KEY, or NULL when absent. */
const char *ddpenv_env_get(const struct ddpenv_env *env, const char *key);
/* Remove KEY (nothing when absent). */
void ddpenv_env_unset(struct ddpenv_env *env, const char *key);
/* Copy every entry of an envp-style array (e.g. environ). */
int ddpenv_env_from_envp(struct ddpenv_env *env, char *const *envp);
/* The entries of ENVP (an environment array, as Slurm holds a step's)
 * named in KEYS or in EXTRA (NULL-terminated lists; EXTRA may be NULL),
 * in one pass: a name's first entry, as getenv finds it; a name ENV holds
 * already is kept.  -1 with errno E2BIG and *BAD the entry when a wanted
 * value is over MAXLEN bytes, ENOMEM, or EINVAL for over 1,024 names. */
int ddpenv_env_pick(struct ddpenv_env *env, char *const *envp, const char *const *keys,
		    const char *const *extra, size_t maxlen, const char **bad);
/* DST (initialized, empty) a copy of SRC.  -1 with errno ENOMEM (DST
 * then empty). */
int ddpenv_env_copy(struct ddpenv_env *dst, const struct ddpenv_env *src);

/* NULL-terminated list of every variable the library may read; a caller
 * that cannot copy a whole environment (the SPANK plugin) fetches these. */
extern const char *const ddpenv_env_keys[];
/* NULL-terminated: the variables only the plugin sets, each for the tasks
 * of one step.  A task has them from its own step or not at all: an outer
 * step's, inherited by a nested srun, would mislead the plan (the user's
 * --cpu-bind, the node's GPUs), cnn_train's GPU and the rendezvous. */
extern const char *const ddpenv_plugin_keys[];

/* ---- backends ---------------------------------------------------------- */

enum ddpenv_backend {
	DDPENV_BACKEND_AUTO = 0, /* nccl when the step has GPUs, else gloo */
	DDPENV_BACKEND_NCCL,
	DDPENV_BACKEND_GLOO,
};

/* Parse "nccl", "gloo" or "auto" (NULL means auto: a bare --ddp). */
int ddpenv_backend_parse(const char *s, enum ddpenv_backend *out,
			 char *err, size_t errlen);
const char *ddpenv_backend_name(enum ddpenv_backend b);

/* ---- addresses ---------------------------------------------------------- */

struct ddpenv_addr {
	int family;                  /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} u;
};

#define DDPENV_ADDRSTRLEN INET6_ADDRSTRLEN

/* Parse a numeric IPv4/IPv6 address (no brackets, no scope). */
int ddpenv_addr_parse(const char *s, struct ddpenv_addr *out);
/* Format without brackets, as torch's MASTER_ADDR expects. */
int ddpenv_addr_format(const struct ddpenv_addr *a, char *buf, size_t len);
int ddpenv_addr_is_loopback(const struct ddpenv_addr *a);
int ddpenv_addr_is_linklocal(const struct ddpenv_addr *a);
/* Whether a and b share the first prefix bits (same family required). */
int ddpenv_addr_same_subnet(const struct ddpenv_addr *a,
			    const struct ddpenv_addr *b, unsigned prefix);

/* ---- what the library asks the system, injectable ---------------------- */

#define DDPENV_MAX_ADDRS 16
/* The longest a name lookup may take (ddpenv_sys_lookup). */
#define DDPENV_LOOKUP_MS 5000

struct ddpenv_ifaddr {
	char name[IF_NAMESIZE];
	struct ddpenv_addr addr;
	unsigned prefix;             /* netmask length */
	unsigned flags;              /* IFF_UP, IFF_LOOPBACK, ... */
};

struct ddpenv_sys {
	/* Resolve a host name to addresses in preference order; returns the
	 * count (0: the name has no address) or -1 with err set. */
	int (*lookup)(void *ctx, const char *name, struct ddpenv_addr *out,
		      size_t max, char *err, size_t errlen);
	/* Slurm's NodeAddr for a NodeName into out; 0 found, -1 unknown.
	 * May be NULL when Slurm's configuration is not available. */
	int (*nodeaddr)(void *ctx, const char *node, char *out, size_t len);
	/* The local interfaces and their addresses (malloc'd array). */
	int (*ifaddrs)(void *ctx, struct ddpenv_ifaddr **out, size_t *n,
		       char *err, size_t errlen);
	/* The interface the kernel routes dst through. */
	int (*route)(void *ctx, const struct ddpenv_addr *dst, char *ifname,
		     size_t len, char *err, size_t errlen);
	void *ctx;
};

/* The real system: getaddrinfo, getifaddrs and rtnetlink; nodeaddr NULL
 * (the plugin and the CLIs supply Slurm's). */
extern const struct ddpenv_sys ddpenv_sys_default;

/* Slurm's NodeAddr from the configuration libslurm has loaded (a
 * ddpenv_sys nodeaddr): 0 found, -1 unknown.  has_nodeaddr: 0 where
 * libslurm does not export the (internal) function it needs, so that the
 * caller leaves nodeaddr NULL. */
int ddpenv_slurm_nodeaddr(void *ctx, const char *node, char *out, size_t len);
int ddpenv_slurm_has_nodeaddr(void);

int ddpenv_sys_lookup(void *ctx, const char *name, struct ddpenv_addr *out,
		      size_t max, char *err, size_t errlen);
/* NAME's lookup started now, on glibc's thread, for a later
 * ddpenv_sys_lookup of NAME in this process to take (its answer, or the
 * rest of its bound): a process that knows the name before it needs the
 * address does other work meanwhile.  One at a time: a later one, or a
 * ddpenv_sys_lookup of another name, drops it.  A literal address starts
 * none.  0, else -1 with err (a later lookup looks up afresh). */
int ddpenv_sys_lookup_ahead(const char *name, char *err, size_t errlen);
int ddpenv_sys_ifaddrs(void *ctx, struct ddpenv_ifaddr **out, size_t *n,
		       char *err, size_t errlen);
int ddpenv_sys_route(void *ctx, const struct ddpenv_addr *dst, char *ifname,
		     size_t len, char *err, size_t errlen);

/* ---- the step --------------------------------------------------------- */

#define DDPENV_HOSTLEN 256
#define DDPENV_HOWLEN 256
#define DDPENV_VALLEN 256

struct ddpenv_step {
	uint32_t job_id;       /* het leader's id for heterogeneous steps */
	uint32_t step_id;
	uint32_t num_tasks;    /* whole step, all het components */
	uint32_t num_nodes;
	uint32_t restart_count;
	uint32_t het_size;     /* 0 for ordinary steps */
	int has_gpus;          /* SLURM_STEP_GPUS / CUDA_VISIBLE_DEVICES */
	int mig;               /* CUDA_VISIBLE_DEVICES names MIG devices (MIG-<uuid>) */
	/* The step's GPUs are shares of GPUs: "gres/shard" (Slurm set
	 * SLURM_SHARDS_ON_NODE) or "gres/mps" (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE);
	 * NULL for whole GPUs or none. */
	const char *shared;
	uint32_t max_local;    /* most tasks on any node (SLURM_STEP_TASKS_PER_NODE); 0 unknown */
	uint32_t gpus;         /* how many of them on this node */
	const char *gpus_key;  /* which of the two said so */
	char head[DDPENV_HOSTLEN];
	char head_how[DDPENV_HOWLEN];
};

/* Step ids Slurm uses for the batch, extern and interactive steps. */
#define DDPENV_STEP_BATCH       0xFFFFFFFBu
#define DDPENV_STEP_EXTERN      0xFFFFFFFCu
#define DDPENV_STEP_INTERACTIVE 0xFFFFFFFAu
/* Whether the step gets the contract (not batch, extern, interactive). */
int ddpenv_step_is_parallel(uint32_t step_id);

/* Read the step's facts.  The head node is the first host of the step's
 * node list (SLURM_STEP_NODELIST, expanded with libslurm's hostlist); for a
 * heterogeneous step, the first host of component 0 within the step; under
 * an arbitrary distribution, the node of task 0 that srun --ddp passed in
 * DDPENV_TASK0_NODE (an error without it: no node can tell). */
int ddpenv_step_parse(const struct ddpenv_env *env, struct ddpenv_step *step,
		      char *err, size_t errlen);

/* First host of a Slurm host list expression ("gpu[0001-0004],login1"). */
int ddpenv_hostlist_first(const char *list, char *out, size_t len,
			  char *err, size_t errlen);
/* Host n (0-based) of a Slurm host list, as Slurm numbers a step's nodes. */
int ddpenv_hostlist_nth(const char *list, uint32_t n, char *out, size_t len, char *err,
			size_t errlen);
/* Whether host is in the list; -1 on a malformed list. */
int ddpenv_hostlist_contains(const char *list, const char *host);
/* Count of tasks on node node_id from "2(x3),1" (SLURM_STEP_TASKS_PER_NODE). */
int ddpenv_tasks_on_node(const char *tasks_per_node, uint32_t node_id,
			 uint32_t *count, char *err, size_t errlen);
/* The most tasks any node of the step runs, from the same list. */
int ddpenv_tasks_max(const char *tasks_per_node, uint32_t *max, char *err, size_t errlen);

/* ---- head address ------------------------------------------------------- */

/* Where the head's address comes from (DDP_HEAD_FROM, the plugstack
 * argument head_from=):
 *   auto      the name (one lookup per node and step); if it yields only
 *             loopback or nothing, Slurm's NodeAddr
 *   name      the name only
 *   nodeaddr  Slurm's NodeAddr only: no lookup at all when NodeAddr is an
 *             address (what large clusters want: no DNS storm at step start) */
enum ddpenv_head_from { DDPENV_HEAD_AUTO, DDPENV_HEAD_NAME, DDPENV_HEAD_NODEADDR };

/* NULL or "" is auto; anything else but the three names is an error. */
int ddpenv_head_from_parse(const char *s, enum ddpenv_head_from *out,
			   char *err, size_t errlen);
const char *ddpenv_head_from_name(enum ddpenv_head_from f);

/* Resolve the head node's name to a usable, non-loopback address.  Order
 * (auto): a literal address; the name through sys->lookup; if that yields
 * only loopback (Debian's "127.0.1.1 hostname" line) or nothing, Slurm's
 * NodeAddr for the node through sys->nodeaddr.  how says which was used. */
int ddpenv_head_resolve(const char *head, const struct ddpenv_sys *sys,
			struct ddpenv_addr *out, char *how, size_t howlen,
			char *err, size_t errlen);
int ddpenv_head_resolve_from(const char *head, enum ddpenv_head_from from,
			     const struct ddpenv_sys *sys, struct ddpenv_addr *out,
			     char *how, size_t howlen, char *err, size_t errlen);

/* ---- port ----------------------------------------------------------------- */

/* Default range: outside Linux's default ephemeral range (32768-60999). */
#define DDPENV_PORT_LO 20480
#define DDPENV_PORT_HI 32767
/* Each job owns a window of this many consecutive ports, one per step id. */
#define DDPENV_PORT_STRIDE 16

/*
 * port = lo + (job_id * STRIDE + step_id) mod (hi - lo + 1)
 *
 * Steps of one job get distinct ports while their ids are below the range
 * size; jobs whose ids differ by less than (hi-lo+1)/STRIDE (768 with the
 * default range) never collide while their step ids are below STRIDE.
 */
int ddpenv_port_for_step(uint32_t job_id, uint32_t step_id, uint16_t lo,
			 uint16_t hi, uint16_t *port, char *err, size_t errlen);

/* ---- interface ------------------------------------------------------------ */

/* Whether an interface name is never a choice: lo, docker*, veth*, virbr*,
 * br-* (container networks), cni*, podman*, lxcbr*. */
int ddpenv_iface_excluded(const char *name);

/* Choose the interface for traffic to head among the allowed ones: up,
 * not loopback, not excluded (built in, or cfg's network.exclude), matching
 * network.include when given (an include names even a built-in exclusion),
 * holding an address in network.cidrs when given.  First the allowed one
 * holding an address in the head's subnet (longest prefix wins), else
 * route_if (the kernel's route to head) when allowed, else, when the admin
 * named the network, the first allowed one of the head's family.
 * cfg NULL: the built-in defaults. */
struct ddpenv_settings;
int ddpenv_iface_choose(const struct ddpenv_ifaddr *ifs, size_t n,
			const struct ddpenv_addr *head, const char *route_if,
			const struct ddpenv_settings *cfg,
			char *out, size_t outlen, char *how, size_t howlen,
			char *err, size_t errlen);

/* ---- admin configuration (ddp.yaml) ------------------------------------- */

/* Where the plugin looks when plugstack.conf names no config=PATH. */
#ifndef DDPENV_CONFIG_PATH
#define DDPENV_CONFIG_PATH "/etc/slurm/ddp.yaml"
#endif
#define DDPENV_CONFIG_MAX_BYTES (1u << 20)  /* a larger file is refused */
#define DDPENV_CFG_LIST 16      /* entries of a list setting */
#define DDPENV_CFG_PATLEN 64    /* an interface pattern or a CIDR */
#define DDPENV_CFG_ENV 16       /* extra variables per backend */
#define DDPENV_CFG_KEYLEN 64    /* an extra variable's name */
#define DDPENV_PATHLEN 1024
#define DDPENV_WHERELEN 96      /* "ddp.yaml:12:3", "plugstack.conf", ... */

/* One bit per setting: which ones a layer (file, partition, plugstack,
 * user) gives, and which ones users may override with DDP_* variables. */
enum ddpenv_setting {
	DDPENV_SET_DEFAULT_BACKEND,
	DDPENV_SET_ALLOWED_BACKENDS,
	DDPENV_SET_PORT_RANGE,
	DDPENV_SET_NETWORK_CIDRS,
	DDPENV_SET_NETWORK_INCLUDE,
	DDPENV_SET_NETWORK_EXCLUDE,
	DDPENV_SET_HEAD_FROM,
	DDPENV_SET_OMP,
	DDPENV_SET_ENV_NCCL,
	DDPENV_SET_ENV_GLOO,
	DDPENV_SET_RDZV_SECRET,
	DDPENV_SET_USER_OVERRIDES,
	DDPENV_SET_BIND,
	DDPENV_SET_TOPOLOGY,
	DDPENV_SET_BIND_NIC,
	DDPENV_SET_NVIDIA_GPUS,
	DDPENV_SET_GRES_ORDER,
	DDPENV_SET_TOPOLOGY_CACHE,
	DDPENV_SET_COUNT
};

enum ddpenv_omp { DDPENV_OMP_AUTO, DDPENV_OMP_NONE, DDPENV_OMP_FIXED };

struct ddpenv_cidr {
	struct ddpenv_addr addr;
	unsigned prefix;
};

struct ddpenv_cfg_var {
	char key[DDPENV_CFG_KEYLEN];
	char value[DDPENV_VALLEN];
};

/* Every setting, and where each came from (for --explain and errors). */
struct ddpenv_settings {
	unsigned set;                        /* bits 1 << DDPENV_SET_* given */
	enum ddpenv_backend default_backend; /* a bare --ddp */
	unsigned allowed_backends;           /* bits 1 << DDPENV_BACKEND_* */
	uint16_t port_lo, port_hi;
	struct ddpenv_cidr cidrs[DDPENV_CFG_LIST];
	size_t ncidrs;
	char include[DDPENV_CFG_LIST][DDPENV_CFG_PATLEN];
	size_t ninclude;
	char exclude[DDPENV_CFG_LIST][DDPENV_CFG_PATLEN];
	size_t nexclude;
	enum ddpenv_head_from head_from;
	enum ddpenv_omp omp;
	unsigned omp_threads;                /* DDPENV_OMP_FIXED */
	struct ddpenv_cfg_var env[2][DDPENV_CFG_ENV]; /* [0] nccl, [1] gloo */
	size_t nenv[2];
	char rdzv_secret[DDPENV_PATHLEN];    /* "" : no token */
	unsigned user_overrides;             /* bits 1 << DDPENV_SET_* */
	int bind;                            /* enum ddpenv_bind: the default policy */
	char topology[DDPENV_PATHLEN];       /* "" : discover; else this node's hwloc XML */
	int bind_nic_hca;                    /* set NCCL_IB_HCA to each rank's NIC */
	char nvidia_gpus[DDPENV_PATHLEN];    /* the NVIDIA driver's GPU list; "" : not read */
	int gres_order;                      /* enum ddpenv_gres_order: how Slurm numbers GPUs */
	char topology_cache[DDPENV_PATHLEN]; /* where the discovered topology is kept; "" : none */
	char where[DDPENV_SET_COUNT][DDPENV_WHERELEN];
};

struct ddpenv_partition {
	char name[DDPENV_CFG_PATLEN];
	struct ddpenv_settings s;            /* only the set bits count */
};

struct ddpenv_config {
	char path[DDPENV_PATHLEN];
	int from_file;                       /* 0: no file, built-in defaults */
	struct ddpenv_settings base;         /* defaults, then the file's top level */
	struct ddpenv_partition *parts;      /* partitions: sections */
	size_t nparts;
	struct ddpenv_settings plugstack;    /* plugstack.conf key=value */
};

/* The built-in defaults, in one place. */
void ddpenv_settings_defaults(struct ddpenv_settings *s);
/* Name of a setting as written in ddp.yaml ("port_range", "network.cidrs"). */
const char *ddpenv_setting_name(enum ddpenv_setting k);

void ddpenv_config_init(struct ddpenv_config *c);   /* defaults, no file */
void ddpenv_config_free(struct ddpenv_config *c);
/* Read and validate a YAML file.  must_exist 0: a missing file means the
 * built-in defaults (the default path); 1: it is an error (config=PATH).
 * Errors name path:line:column, the key and what was expected. */
int ddpenv_config_load(struct ddpenv_config *c, const char *path, int must_exist,
		       char *err, size_t errlen);
/* The same from memory (name is used in messages). */
int ddpenv_config_parse(struct ddpenv_config *c, const char *name, const void *buf,
			size_t len, char *err, size_t errlen);
/* ddpenv_config_load through ddp.yaml's parse kept in dir (config_cache,
 * an absolute path; "" or NULL: none): read from there while the file is
 * as it was when kept, else parsed, and kept where this process is root
 * and the file last changed over a second ago.  kept (may be NULL): one of
 * DDPENV_CONFIG_*.  The folder and the file must be root's, writable by
 * nobody else; whatever is amiss there is parsed as without them. */
#define DDPENV_CONFIG_CACHE_DIR "/run/slurm-ddp"
enum { DDPENV_CONFIG_PARSED, DDPENV_CONFIG_READ_KEPT, DDPENV_CONFIG_KEPT };
int ddpenv_config_load_kept(struct ddpenv_config *c, const char *path, int must_exist,
			    const char *dir, int *kept, char *err, size_t errlen);
/* plugstack.conf's config_cache=DIR (the last), else DDPENV_CONFIG_CACHE_DIR. */
const char *ddpenv_config_cache_arg(int ac, char *const *av);
/* plugstack.conf arguments: config=PATH (loaded first, must exist), then
 * key=value for any setting (lists comma-separated, env.nccl.NAME=VALUE).
 * config=PATH is read through config_cache=DIR (ddpenv_config_load_kept).
 * Unknown keys are errors. */
int ddpenv_config_plugstack(struct ddpenv_config *c, int ac, char *const *av,
			    char *err, size_t errlen);
/* The settings for a step: defaults < file < the partition's section <
 * plugstack.conf < the user's DDP_* variables (only those user_overrides
 * allows; another is an error) < the command line (the caller's).
 * partition may be NULL or a comma-separated list (first match wins). */
int ddpenv_config_effective(const struct ddpenv_config *c, const char *partition,
			    const struct ddpenv_env *env, struct ddpenv_settings *out,
			    char *err, size_t errlen);
/* The DDP_* variables users set, with the setting each overrides. */
struct ddpenv_user_key {
	const char *var;
	enum ddpenv_setting setting;
};
extern const struct ddpenv_user_key ddpenv_user_keys[];

/* The rendezvous token: hex HMAC-SHA256 of
 * "slurm-ddp rdzv v2 <job>.<step> uid <uid>" under the site secret; the
 * same on every node, nothing exchanged.  The uid binds it to the user
 * Slurm authenticated: ids a user's environment claims name at most that
 * user's own tokens. */
#define DDPENV_TOKEN_LEN 64
int ddpenv_token_derive(const void *secret, size_t len, uint32_t job_id,
			uint32_t step_id, uint32_t uid, char out[DDPENV_TOKEN_LEN + 1],
			char *err, size_t errlen);

/* What Slurm authenticated about a step (slurmstepd's spank_get_item:
 * S_JOB_ID, S_JOB_STEPID, S_JOB_UID), never the job's environment. */
struct ddpenv_step_auth {
	uint32_t job_id;   /* in a heterogeneous step, the component's own */
	uint32_t step_id;
	uint32_t uid;
};

/* The step's environment (parsed into step) against what Slurm
 * authenticated: 0 with *token_job the job id the token names, or -1
 * with err naming the variable, its value and Slurm's.  An ordinary
 * step's SLURM_JOB_ID and SLURM_STEP_ID must be Slurm's.  A
 * heterogeneous step's components share one world under the leader's
 * id, which slurmstepd learns only from the environment: that id is
 * taken, and the token's uid keeps a claimed one from naming anyone
 * else's token. */
int ddpenv_step_trust(const struct ddpenv_step *step, const struct ddpenv_step_auth *auth,
		      uint32_t *token_job, char *err, size_t errlen);

/* Read a secret file: a regular file owned by root, not readable by group
 * or others, 16 bytes to 4 KiB.  Returns the length. */
#define DDPENV_SECRET_MAX 4096
int ddpenv_secret_read(const char *path, unsigned char *buf, size_t cap,
		       char *err, size_t errlen);

/* Whether a port can be listened on at the wildcard address of family
 * (SO_REUSEADDR, as rendezvous servers do): 0 free, -1 with err naming
 * the port and the cause. */
int ddpenv_port_check(int family, uint16_t port, char *err, size_t errlen);

/* ---- binding: GPUs, CPUs, memory and NICs (hwloc) ------------------------- */

/* --ddp-bind (and the admin's bind: default):
 *   auto    each task gets one of the step's GPUs (identified by PCI bus id)
 *           and the cores near it; CUDA_VISIBLE_DEVICES lists every GPU of
 *           the step, permuted so that entry LOCAL_RANK is the task's own
 *   none    binding left to Slurm and the user
 *   strict  as auto, but CUDA_VISIBLE_DEVICES names the task's GPU only */
enum ddpenv_bind { DDPENV_BIND_AUTO, DDPENV_BIND_NONE, DDPENV_BIND_STRICT };

/* NULL or "" is auto. */
int ddpenv_bind_parse(const char *s, enum ddpenv_bind *out, char *err, size_t errlen);
const char *ddpenv_bind_name(enum ddpenv_bind b);

/* A machine's topology with its PCI devices: this machine's (discovered
 * through /sys, with hwloc's CUDA, NVML, OpenCL and RSMI components
 * disabled so nothing loads a GPU driver library), or an hwloc XML export
 * (lstopo --of xml).  this_machine: the XML describes the calling machine
 * (an admin's export, to skip discovery), so memory binding applies. */
struct ddpenv_topo;
int ddpenv_topo_load(const char *xml_path, int this_machine, struct ddpenv_topo **out,
		     char *err, size_t errlen);
void ddpenv_topo_free(struct ddpenv_topo *t);
/* This machine's topology kept as an hwloc XML export in dir (the
 * topology_cache setting; topo_cache.c): path gets the export of this boot,
 * hwloc and machine, checked (root's, whole, loadable) or written anew (as
 * root) when it is not.  0, or -1 with err (the caller discovers instead).
 * sysroot: "" for this machine ("/proc", "/sys" under it, for tests). */
int ddpenv_topo_cache_ensure(const char *dir, const char *sysroot, char *path, size_t len,
			     char *err, size_t errlen);
/* The key of this boot, hwloc and machine in that file's name. */
int ddpenv_topo_cache_key(const char *sysroot, char *out, size_t len, char *err, size_t errlen);
/* Beside the export ensure gave (path), hwloc's shared-memory copy of it
 * (topology-KEY.shm): checked (root's, whole pages) or written anew (as
 * root) and mapped back once.  0, or -1 with err (steps read the export). */
int ddpenv_topo_cache_map(const char *path, char *err, size_t errlen);
/* The CPUs this process's cpuset cgroup allows, found as hwloc finds them
 * (cgroup.c): list gets the cgroup's list ("0-27,112-139") and 1, or ""
 * and 0 when there is none (every CPU); -1 when the list does not fit in
 * len.  how says which file, or why none.  sysroot: "" for this machine. */
int ddpenv_cgroup_cpus(const char *sysroot, char *list, size_t len, char *how, size_t howlen);
/* Those CPUs (every CPU where there is no cpuset cgroup) as t's allowed
 * set, for a topology this process did not load itself: a parent's in
 * another cgroup (under cgroup v2 slurmstepd keeps the job's CPUs, a
 * task's child has its step's).  0, or -1 with err (t unchanged). */
int ddpenv_topo_allow_cgroup(struct ddpenv_topo *t, const char *sysroot, char *err, size_t errlen);
/* Load an export ensure gave as this machine's: its mapped copy where
 * there is one hwloc maps (no parse), else the export; the allowed CPUs
 * from this process's cgroup, binding acting on this machine. */
int ddpenv_topo_load_cached(const char *path, struct ddpenv_topo **out, char *err, size_t errlen);
/* An export of this machine (kept: the one ensure gave; else the admin's
 * topology) loaded without hwloc's plugins: hwloc opens every plugin of
 * its folder at a process's first topology (Debian 13's libhwloc-plugins:
 * about 5 ms), though reading an export needs none.  For the load alone,
 * hwloc reads (environ) a copy of the environment whose HWLOC_PLUGINS_PATH
 * names no folder; the process's own is as it was after: only in a process
 * of one thread (a task's child of slurmstepd before exec). */
int ddpenv_topo_load_noplugins(const char *path, int kept, struct ddpenv_topo **out, char *err,
			       size_t errlen);
/* How many plugins hwloc would open at this process's first topology: the
 * .so files of its plugin folders (HWLOC_PLUGINS_PATH, else the hwloc/
 * beside libhwloc, where hwloc's build puts them) not named in
 * HWLOC_PLUGINS_BLACKLIST.  Reads the environment, never changes it. */
int ddpenv_topo_plugin_count(void);
/* "this machine" or the XML path. */
const char *ddpenv_topo_source(const struct ddpenv_topo *t);
/* How many GPUs (NVIDIA or AMD PCI functions) the topology holds. */
size_t ddpenv_topo_gpu_count(const struct ddpenv_topo *t);

/* What a checker (ddp-check) asks of a node's topology. */
/* The CPUs the topology allows (this process's cgroup), as a list. */
int ddpenv_topo_allowed(const struct ddpenv_topo *t, char *out, size_t len,
			char *err, size_t errlen);
/* The allowed CPUs near the GPU at busid ("0000:1b:00.0", any case) and
 * its NUMA node (-1 unknown): where the binding plan puts its rank.
 * -1 with err when the topology has no such PCI device. */
int ddpenv_topo_gpu_near(const struct ddpenv_topo *t, const char *busid, char *cpus,
			 size_t len, int *numa, char *err, size_t errlen);
/* The NUMA nodes (a list, "0-1") that the CPUs of cpulist belong to. */
/* A CPU (or NUMA node) list as Linux writes it, "0-3,8,10-11", into an hwloc
 * bitmap: decimal numbers (hwloc's own parser reads "010" as octal and lets
 * "08-3" make a bitmap that hangs its printer), ranges ascending, every
 * number at most max.  The empty string is the empty set. */
struct hwloc_bitmap_s;
int ddpenv_cpulist_parse(struct hwloc_bitmap_s *out, const char *list, unsigned max, char *err,
			 size_t errlen);
#define DDPENV_MAX_CPU 65535u  /* beyond any machine's CPU numbers */
int ddpenv_topo_numa_of(const struct ddpenv_topo *t, const char *cpulist, char *out,
			size_t len, char *err, size_t errlen);

#define DDPENV_MAX_GPUS 64      /* GPUs of a step on one node */
#define DDPENV_MAX_LOCAL 1024   /* tasks of a step on one node */
#define DDPENV_CPULIST 512      /* a CPU list: "0-27,112-139" */
#define DDPENV_BUSIDLEN 16      /* "0000:1b:00.0" */

/* The NVIDIA driver's own list of a node's GPUs: a directory per GPU under
 * /proc/driver/nvidia/gpus whose "information" file gives its "Bus
 * Location", "Device Minor" (the N of /dev/nvidiaN), "GPU UUID" and "GPU
 * Excluded".  Slurm's GPU numbers index slurmd's GPU list (in bus order
 * with AutoDetect=nvml, in File= order from a hand-written gres.conf: see
 * enum ddpenv_gres_order), so this list, less the excluded GPUs that NVML
 * and CUDA do not count, is how a GPU number of Slurm's becomes a PCI
 * device.  Plain file reads: no driver library is loaded. */
#define DDPENV_NVIDIA_GPUS "/proc/driver/nvidia/gpus"
/* topology_cache's default: a folder of root's on the node's tmpfs */
#define DDPENV_TOPO_CACHE "/run/slurm-ddp"
#define DDPENV_UUIDLEN 48       /* "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6" */
struct ddpenv_nvgpu {
	int minor;                       /* N of /dev/nvidiaN */
	char busid[DDPENV_BUSIDLEN];     /* "0000:1b:00.0" */
	char uuid[DDPENV_UUIDLEN];       /* "GPU UUID", "" when the driver gives none */
	int excluded;                    /* "GPU Excluded: Yes": CUDA does not see it */
};
/* Read dir (NULL: DDPENV_NVIDIA_GPUS) into out, sorted by minor.  The GPU
 * count; 0 when dir does not exist (no NVIDIA driver); -1 with err naming
 * the file and the line at fault. */
int ddpenv_nvidia_gpus(const char *dir, struct ddpenv_nvgpu *out, size_t max, char *err,
		       size_t errlen);
/* A PCI bus id as hwloc and Slurm write it: "0000:1B:00.0" or CUDA's
 * "00000000:1b:00.0" -> "0000:1b:00.0"; -1 if s is not one. */
int ddpenv_busid_norm(const char *s, char *out, size_t len);
/* Give a topology the driver's list (n 0: forget it): the binding plan
 * then counts Slurm's GPUs among the GPUs the driver lets CUDA open (not
 * the excluded ones), in the gres order set below.  -1 with err if g is
 * not a list of distinct minors. */
int ddpenv_topo_set_nvidia(struct ddpenv_topo *t, const struct ddpenv_nvgpu *g, size_t n,
			   char *err, size_t errlen);

/* How Slurm numbers a node's GPUs (SLURM_STEP_GPUS, and
 * CUDA_VISIBLE_DEVICES without ConstrainDevices): its GPU k is the k-th
 * of slurmd's GPU list.  With AutoDetect=nvml that list is NVML's, in PCI
 * bus order (bus); a hand-written gres.conf keeps the order of its File=
 * lines, which for File=/dev/nvidia[0-N] is device-minor order (minor).
 * Minor order needs the driver's list; bus is the default. */
enum ddpenv_gres_order { DDPENV_GRES_ORDER_BUS, DDPENV_GRES_ORDER_MINOR };
int ddpenv_gres_order_parse(const char *s, enum ddpenv_gres_order *out, char *err, size_t errlen);
const char *ddpenv_gres_order_name(enum ddpenv_gres_order o);
void ddpenv_topo_set_gres_order(struct ddpenv_topo *t, enum ddpenv_gres_order o);
/* The driver's GPUs that Slurm counts (the ones not excluded), in Slurm's
 * order: out[k] is Slurm's GPU k.  The count. */
size_t ddpenv_nvidia_slurm_order(const struct ddpenv_nvgpu *g, size_t n, enum ddpenv_gres_order o,
				 const struct ddpenv_nvgpu **out, size_t max);
/* Slurm's CUDA_VISIBLE_DEVICES before the plugin permuted it. */
#define DDPENV_SLURM_CVD "DDP_SLURM_CUDA_VISIBLE_DEVICES"
/* The step's GPUs on this node, as SLURM_STEP_GPUS was before Slurm bound
 * each task to its own (--gpus-per-task, --gpu-bind=per_task:N, map_gpu or
 * mask_gpu): only the node knows them, and a task's plan needs them. */
#define DDPENV_SLURM_STEP_GPUS "DDP_SLURM_STEP_GPUS"
/* The user's --cpu-bind, as srun passed it to the step (SLURM_CPU_BIND):
 * task/affinity then sets SLURM_CPU_BIND in every task, asked or not (its
 * auto binding, TaskPluginParam), so in a task only this tells them apart. */
#define DDPENV_SLURM_CPU_BIND "DDP_SLURM_CPU_BIND"
/* An entry of CUDA_VISIBLE_DEVICES: "3", a GPU UUID, or a MIG device's
 * ("MIG-<uuid>", which Slurm sets for MIG GRES). */
#define DDPENV_GPUVAL 64
/* A MIG device's entry: CUDA opens at most one MIG device per process
 * (the first it is shown), and NCCL does not run ranks on them. */
int ddpenv_is_mig(const char *cvd_entry);

struct ddpenv_bind_gpu {
	uint32_t index;                  /* Slurm's GRES index (SLURM_STEP_GPUS) */
	char value[DDPENV_GPUVAL];       /* its entry in Slurm's CUDA_VISIBLE_DEVICES */
	char cuda[DDPENV_GPUVAL];        /* its entry in ours: value, or its UUID */
	char busid[DDPENV_BUSIDLEN];     /* "" when the topology has no such GPU */
	int numa;                        /* os index of its NUMA node, -1 unknown */
	char near[DDPENV_CPULIST];       /* allowed CPUs near it ("" none) */
	char nic[2 * IF_NAMESIZE];       /* closest NIC: mlx5_0, or a netdev */
	char nic_netdev[IF_NAMESIZE];    /* its network interface, "" none */
	char nic_how[64];                /* "same PCIe switch", ... */
	int nic_hca;                     /* nic is an OpenFabrics (IB/RoCE) device */
};

struct ddpenv_bind_task {
	int gpu;                         /* index into plan gpus, -1 none */
	char cpus[DDPENV_CPULIST];       /* Cpus_allowed_list it gets */
	char mems[64];                   /* its NUMA nodes (memory binding) */
	unsigned cores, pus;
	int near;                        /* cpus are near its GPU */
	int shared;                      /* fewer CPUs than tasks: shares them */
};

struct ddpenv_bind_plan {
	enum ddpenv_bind policy;
	char policy_how[DDPENV_HOWLEN];
	int cpu, gpu, mem;               /* what the plugin binds; 0: left alone */
	char cpu_how[DDPENV_HOWLEN], mem_how[DDPENV_HOWLEN];
	char gpu_how[2 * DDPENV_HOWLEN]; /* Slurm's per-task picks take a list */
	char topology[DDPENV_PATHLEN];   /* ddpenv_topo_source() */
	char allowed[DDPENV_CPULIST];    /* CPUs Slurm allowed the step here */
	size_t ngpus;
	struct ddpenv_bind_gpu gpus[DDPENV_MAX_GPUS];
	int mig;                         /* the GPUs are MIG devices: each task sees
					  * only its own, locality unknown */
	uint32_t ntasks;                 /* tasks of the step on this node */
	struct ddpenv_bind_task *tasks;  /* [ntasks], malloc'd */
	char visible[DDPENV_VALLEN];     /* CUDA_VISIBLE_DEVICES of every task (auto;
					  * "" under MIG) */
	uint32_t slurm_per_task;         /* Slurm binds each task to its own N GPUs
					  * (SLURMD_TRES_BIND=gpu:per_task:N, from
					  * --gpus-per-task or --gpu-bind): gpu is 0,
					  * and tasks[].gpu is Slurm's pick (the first
					  * of its N) when the step's GPUs here are
					  * known (DDP_SLURM_STEP_GPUS in a task) */
	char slurm_map[DDPENV_VALLEN];   /* Slurm binds each task to the GPUs a
					  * --gpu-bind=map_gpu:LIST or mask_gpu:LIST
					  * names ("map_gpu:3,1" as SLURMD_TRES_BIND
					  * has it; "" none): gpu is 0, and tasks[].gpu
					  * is Slurm's pick (the first of the task's
					  * GPUs here) when the step's GPUs are known */
	int slurm_binds;                 /* either of the two: Slurm picks each
					  * task's GPUs, and tasks[].gpu follows it */
	char user_cpu_bind[DDPENV_VALLEN]; /* the user's --cpu-bind ("" none): CPUs
					  * left alone (DDP_SLURM_CPU_BIND in a task) */
	char allowed_how[DDPENV_HOWLEN]; /* where allowed came from */
};

/* Plan the binding of the step's tasks on this node from the topology
 * and the step's environment: SLURM_STEP_GPUS (else CUDA_VISIBLE_DEVICES)
 * names the GPUs, CUDA_VISIBLE_DEVICES their values, SLURM_NODEID and
 * SLURM_STEP_TASKS_PER_NODE the task count, SLURM_CPU_BIND (in a task of
 * a --ddp step DDP_SLURM_CPU_BIND, there SLURM_CPU_BIND being task/affinity's
 * own masks, which narrow the allowed CPUs to those Slurm gave the node's
 * tasks), SLURMD_TRES_BIND/SLURM_GPU_BIND and SLURM_MEM_BIND an explicit binding
 * the user asked Slurm for (left alone, but a SLURM_CPU_BIND of map_cpu or
 * mask_cpu picks each task's GPU near its CPUs; under Slurm's per_task GPU binding
 * the CPUs still follow each task's GPU, Slurm's pick: task i has the
 * i-th N of the step's GPUs here, DDP_SLURM_STEP_GPUS in a task; under
 * map_gpu/mask_gpu the list's entry i, repeated from its start, of Slurm's
 * GPU numbers on the node, the step's first GPU where it names none of
 * them).  allowed: a CPU list, or NULL for
 * the topology's allowed set (the calling process's cgroup).  Slurm's GPU
 * number k is the k-th of the driver's GPUs (not excluded) in the
 * topology's gres order when it has the driver's list
 * (ddpenv_topo_set_nvidia, ddpenv_topo_set_gres_order), else the k-th GPU
 * of the topology in PCI bus id order (nvidia-smi's order, and CUDA's
 * under CUDA_DEVICE_ORDER=PCI_BUS_ID).  In minor order each GPU's cuda is
 * what CUDA calls it: Slurm's value where CUDA means the same GPU by it,
 * else CUDA's number for it (its count of the step's GPUs under
 * ConstrainDevices, of all the driver's without) or, where Slurm's values
 * do not tell which count, its UUID (abbreviated); in bus order Slurm's
 * values are CUDA's.  MIG devices (Slurm's values MIG-<uuid>, paired
 * with SLURM_STEP_GPUS by position): task k gets the k-th, alone in its
 * CUDA_VISIBLE_DEVICES (CUDA would open only the first of a list), and
 * their locality is unknown (only NVML knows a MIG device's GPU): CPUs
 * are spread as for a CPU-only step.
 * Free with ddpenv_bind_plan_free, also after an error. */
int ddpenv_bind_plan(const struct ddpenv_topo *t, const struct ddpenv_env *env,
		     enum ddpenv_bind policy, const char *allowed,
		     struct ddpenv_bind_plan *plan, char *err, size_t errlen);
void ddpenv_bind_plan_free(struct ddpenv_bind_plan *plan);

/* Bind the calling process (a task before exec) as planned for local_rank:
 * CPUs (sched_setaffinity) and memory (hwloc, to the task's NUMA nodes). */
int ddpenv_bind_apply(const struct ddpenv_topo *t, const struct ddpenv_bind_plan *plan,
		      uint32_t local_rank, char *err, size_t errlen);

/* ---- the contract --------------------------------------------------------- */


/* Per node and step: everything that does not depend on the task.
 * Computed once per node (the plugin's user_init). */
struct ddpenv_node {
	struct ddpenv_step step;
	enum ddpenv_backend backend;
	char backend_how[DDPENV_HOWLEN];
	char master_addr[DDPENV_HOSTLEN];
	char master_addr_how[DDPENV_HOWLEN];
	int master_addr_user;              /* set by the user: left alone */
	char master_port[16];
	char master_port_how[DDPENV_HOWLEN];
	int master_port_user;
	char ifname[IF_NAMESIZE];
	char ifname_how[DDPENV_HOWLEN];
	struct ddpenv_settings cfg;        /* the effective settings used */
	char token[DDPENV_TOKEN_LEN + 1];  /* DDP_RDZV_TOKEN: the plugin's, or "" */
	char config_path[DDPENV_PATHLEN];  /* DDP_CONFIG for ddp-env, or "" */
	/* The node's binding plan (the caller's, may be NULL): task variables
	 * then include CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, DDP_GPU_BUSID,
	 * DDP_NIC (NCCL_IB_HCA when bind_nic asks) and OMP_NUM_THREADS from
	 * the cores given. */
	const struct ddpenv_bind_plan *plan;
};

/* Node facts for the step.  cfg: the effective settings
 * (ddpenv_config_effective); NULL means the built-in defaults with the
 * user's DDP_* variables.  requested AUTO (a bare --ddp) takes
 * cfg->default_backend; the result must be one of cfg->allowed_backends. */
int ddpenv_node_resolve(const struct ddpenv_env *env,
			enum ddpenv_backend requested,
			const struct ddpenv_settings *cfg,
			const struct ddpenv_sys *sys, struct ddpenv_node *node,
			char *err, size_t errlen);

/* The name ddpenv_node_resolve looks up first for ENV under CFG, if it
 * looks one up: the user's MASTER_ADDR, else the head node's name, or its
 * NodeAddr under head_from nodeaddr.  1 with NAME, 0: none (a literal
 * address, or an environment resolve refuses). */
int ddpenv_node_lookup_name(const struct ddpenv_env *env, const struct ddpenv_settings *cfg,
			    const struct ddpenv_sys *sys, char *name, size_t len);

#define DDPENV_MAX_VARS 64

struct ddpenv_var {
	const char *key;
	char value[DDPENV_VALLEN];
	char how[DDPENV_HOWLEN];
	int user;          /* the user set it: report, never overwrite */
};

struct ddpenv_vars {
	struct ddpenv_var v[DDPENV_MAX_VARS];
	size_t n;
};

/* The variables for one task, from the node facts and the task's own
 * environment (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, ...). */
int ddpenv_task_vars(const struct ddpenv_node *node,
		     const struct ddpenv_env *task_env,
		     struct ddpenv_vars *out, char *err, size_t errlen);

/* Marker the contract sets: "<job>.<step>".  A MASTER_ADDR etc. present
 * with a different marker was inherited from an outer --ddp step, not set
 * by the user, and is recomputed. */
#define DDPENV_MARKER "DDP_STEP"

/* Set by srun --ddp under an arbitrary distribution: "<job>.<step>:<host>",
 * the node that runs task 0, from the step's layout (slurmctld).  SLURM_
 * because that is what srun --export=NONE still passes to the step. */
#define DDPENV_TASK0_NODE "SLURM_DDP_TASK0_NODE"

/* ---- reading the contract (a training process) ---------------------------- */

/* What a training process finds in its environment, whoever set it: the
 * plugin, torchrun, or a person.  Nothing set at all is a standalone run
 * (rank 0 of 1); a multi-task Slurm step without RANK is an error that says
 * to use srun --ddp. */
struct ddpenv_rank {
	int rank, world, local_rank, local_world, node_rank;
	int standalone;                   /* none of the variables were set */
	char master_addr[DDPENV_HOSTLEN];
	int master_port;                  /* 0 when unset (world of 1) */
	char gloo_ifname[IF_NAMESIZE];
	char nccl_ifname[IF_NAMESIZE];
	char token[128];                  /* DDP_RDZV_TOKEN */
	enum ddpenv_backend backend;      /* DDP_BACKEND, auto when unset */
	int restart_count;                /* SLURM_RESTART_COUNT */
};

int ddpenv_rank_read(const struct ddpenv_env *env, struct ddpenv_rank *r,
		     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DDPENV_H */
