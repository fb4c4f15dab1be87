/* What a ddp-check task finds out about itself (self.h). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>
#include <systemd/sd-bus.h>

#include "gpu_health.h"
#include "coll.h"
#include "self.h"

static int marker_matches(void)
{
	const char *m = getenv(DDPENV_MARKER), *j = getenv("SLURM_JOB_ID"), *s = getenv("SLURM_STEP_ID");
	char want[64];
	snprintf(want, sizeof(want), "%s.%s", j ? j : "", s ? s : "");
	return m && !strcmp(m, want);
}

static int list_count(const char *s)
{
	int n = 0;
	if (!s || !*s)
		return 0;
	for (n = 1; *s; s++)
		n += *s == ',';
	return n;
}

void ck_self_env(struct self *me)
{
	struct ck_rank *r = &me->r;
	r->proto = CK_RECORD_PROTO;
	snprintf(r->version, sizeof(r->version), "%s", DDPENV_VERSION);
	for (int k = 0; k < CK_NENV; k++) {
		const char *v = getenv(ck_env_names[k]);
		/* The plugin's per-step variables, unless inherited from another step. */
		if ((k == CK_GPU_BUSID || k == CK_SLURM_CVD) && !marker_matches())
			v = NULL;
		if (v) {
			snprintf(r->env[k], sizeof(r->env[k]), "%s", v);
			r->have |= 1u << k;
		}
	}
}

/* The interface the backend will use, as NCCL or gloo reads the variable. */
void ck_self_iface(struct self *me)
{
	struct ck_rank *r = &me->r;
	int nccl = !strcmp(me->backend, "nccl");
	enum ck_env k = nccl ? CK_NCCL_IF : CK_GLOO_IF;
	struct ddpenv_ifaddr *ifa = NULL;
	size_t nifa = 0;
	char err[DDPENV_ERRLEN];
	struct if_nameindex *ni = if_nameindex();
	size_t off = 0;

	snprintf(r->ifvar, sizeof(r->ifvar), "%s", ck_env_names[k]);
	for (struct if_nameindex *p = ni; p && p->if_name; p++)
		off += (size_t)snprintf(r->ifs_here + off, off < sizeof(r->ifs_here) ? sizeof(r->ifs_here) - off : 0,
					"%s%s", off ? ", " : "", p->if_name);
	ddpenv_sys_ifaddrs(NULL, &ifa, &nifa, err, sizeof(err));

	const char *want = r->have & (1u << k) ? r->env[k] : NULL;
	char name[2 * IF_NAMESIZE] = "";
	if (!want || !*want) {
		snprintf(r->ifstate, sizeof(r->ifstate), "unset");
		if (me->head_ok)
			ddpenv_sys_route(NULL, &me->head, name, sizeof(name), err, sizeof(err));
	} else if (want[0] == '^') {
		snprintf(r->ifstate, sizeof(r->ifstate), "pattern");
	} else {
		/* NCCL: "=eth0" exact, "eth" a prefix, "a,b" a list (first
		 * used here); gloo: the exact name. */
		int exact = !nccl || want[0] == '=';
		const char *w = want + (want[0] == '=');
		size_t wl = strcspn(w, ",");
		for (struct if_nameindex *p = ni; p && p->if_name && !name[0]; p++)
			if (strlen(p->if_name) == wl && !strncmp(p->if_name, w, wl))
				snprintf(name, sizeof(name), "%s", p->if_name);
		for (struct if_nameindex *p = ni; !exact && p && p->if_name && !name[0]; p++)
			if (!strncmp(p->if_name, w, wl))
				snprintf(name, sizeof(name), "%s", p->if_name);
		if (!name[0]) {
			snprintf(r->ifstate, sizeof(r->ifstate), "missing");
			snprintf(r->ifname, sizeof(r->ifname), "%.*s", (int)(wl < 31 ? wl : 31), w);
		}
	}
	if (name[0]) {
		snprintf(r->ifname, sizeof(r->ifname), "%s", name);
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct ifreq ifr;
		memset(&ifr, 0, sizeof(ifr));
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
		unsigned flags = 0;
		if (fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0)
			flags = (unsigned)ifr.ifr_flags;
		if (fd >= 0 && ioctl(fd, SIOCGIFMTU, &ifr) == 0)
			r->ifmtu = ifr.ifr_mtu;
		if (fd >= 0)
			close(fd);
		/* The address peers will reach it on: of the head's family. */
		int fam = me->head_ok ? me->head.family : AF_INET;
		for (size_t i = 0; i < nifa && !r->ifaddr[0]; i++)
			if (!strcmp(ifa[i].name, name) && ifa[i].addr.family == fam &&
			    !ddpenv_addr_is_linklocal(&ifa[i].addr))
				ddpenv_addr_format(&ifa[i].addr, r->ifaddr, sizeof(r->ifaddr));
		/* The link type from the interface itself: /sys/class/net may
		 * belong to another network namespace. */
		int type = -1;
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && ioctl(fd, SIOCGIFHWADDR, &ifr) == 0)
			type = ifr.ifr_hwaddr.sa_family;
		if (fd >= 0)
			close(fd);
		snprintf(r->ifkind, sizeof(r->ifkind), type == ARPHRD_ETHER ? "ethernet" :
			 type == ARPHRD_INFINIBAND ? "infiniband" : type == ARPHRD_LOOPBACK ? "loopback" :
			 "type %d", type);
		if (r->ifstate[0]) {
			/* unset: the route's interface, for the probe and the report */
		} else if ((flags & IFF_LOOPBACK))
			snprintf(r->ifstate, sizeof(r->ifstate), "loopback");
		else if (!(flags & IFF_UP) || !(flags & IFF_RUNNING))
			snprintf(r->ifstate, sizeof(r->ifstate), "down");
		else if (!r->ifaddr[0])
			snprintf(r->ifstate, sizeof(r->ifstate), "noaddr");
		else if (ddpenv_iface_excluded(name))
			snprintf(r->ifstate, sizeof(r->ifstate), "virtual");
		else
			snprintf(r->ifstate, sizeof(r->ifstate), "up");
	}

	/* Is MASTER_ADDR one of this node's addresses? */
	r->head_local = -1;
	if (me->head_ok) {
		r->head_local = 0;
		for (size_t i = 0; i < nifa; i++)
			if (ifa[i].addr.family == me->head.family &&
			    ddpenv_addr_same_subnet(&ifa[i].addr, &me->head, me->head.family == AF_INET ? 32 : 128))
				r->head_local = 1;
	}
	free(ifa);
	if_freenameindex(ni);
}

/* The settings the plugin used for this step (the site's ddp.yaml, this
 * partition, the user's DDP_* variables); -1 when they cannot be had. */
static int site_settings(struct ddpenv_settings *eff)
{
	struct ddpenv_config cfg;
	struct ddpenv_env env;
	extern char **environ;
	const char *cpath = getenv("DDP_CONFIG");
	char err[DDPENV_ERRLEN];
	int rv;
	ddpenv_config_init(&cfg);
	ddpenv_env_init(&env);
	ddpenv_env_from_envp(&env, environ);
	rv = ddpenv_config_load(&cfg, cpath ? cpath : cfg.path, cpath != NULL, err, sizeof(err)) == 0 &&
	     ddpenv_config_effective(&cfg, getenv("SLURM_JOB_PARTITION"), &env, eff, err, sizeof(err)) == 0 ? 0 : -1;
	ddpenv_env_free(&env);
	ddpenv_config_free(&cfg);
	return rv;
}

void ck_self_binding(struct self *me)
{
	struct ck_rank *r = &me->r;
	cpu_set_t cs;
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	char err[DDPENV_ERRLEN];

	if (b && sched_getaffinity(0, sizeof(cs), &cs) == 0) {
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &cs))
				hwloc_bitmap_set(b, (unsigned)c);
		hwloc_bitmap_list_snprintf(r->cpus, sizeof(r->cpus), b);
	}
	hwloc_bitmap_free(b);

	/* The topology the plugin planned with: the site's export, else this machine. */
	struct ddpenv_settings eff;
	const char *tp = NULL;
	if (site_settings(&eff) == 0 && eff.topology[0])
		tp = eff.topology;
	struct ddpenv_topo *t = NULL;
	if (ddpenv_topo_load(tp, 1, &t, err, sizeof(err)) < 0) {
		snprintf(r->topo_err, sizeof(r->topo_err), "%s", err);
	} else {
		ddpenv_topo_allowed(t, r->allowed, sizeof(r->allowed), err, sizeof(err));
		if (r->cpus[0])
			ddpenv_topo_numa_of(t, r->cpus, r->numa, sizeof(r->numa), err, sizeof(err));
		if (r->gpu[0] && ddpenv_topo_gpu_near(t, r->gpu, r->gpu_near, sizeof(r->gpu_near),
						      &r->gpu_numa, err, sizeof(err)) < 0)
			snprintf(r->topo_err, sizeof(r->topo_err), "%s", err);
	}
	/* A cgroup narrower than the topology file: the process knows best. */
	if (!r->allowed[0])
		snprintf(r->allowed, sizeof(r->allowed), "%s", r->cpus);
	ddpenv_topo_free(t);
}

void ck_self_gpus(struct self *me)
{
	struct ck_rank *r = &me->r;
	r->visible = r->have & (1u << CK_CVD) ? list_count(r->env[CK_CVD]) : -1;
	/* Under Slurm's per-task binding the task's SLURM_STEP_GPUS is its own:
	 * the plugin hands on the node's. */
	r->step_gpus = r->have & (1u << CK_NODE_GPUS) ? list_count(r->env[CK_NODE_GPUS]) :
		       r->have & (1u << CK_SLURM_CVD) ? list_count(r->env[CK_SLURM_CVD]) :
		       r->have & (1u << CK_STEP_GPUS) ? list_count(r->env[CK_STEP_GPUS]) :
		       r->visible > 0 ? r->visible : 0;
	/* A MIG device: CUDA opens the first one it is shown, and only it. */
	if (r->have & (1u << CK_CVD) && ddpenv_is_mig(r->env[CK_CVD]))
		snprintf(r->mig, sizeof(r->mig), "%.*s", (int)strcspn(r->env[CK_CVD], ","), r->env[CK_CVD]);
	if (r->have & (1u << CK_GPU_BUSID)) {
		snprintf(r->gpu, sizeof(r->gpu), "%s", r->env[CK_GPU_BUSID]);
		snprintf(r->gpu_from, sizeof(r->gpu_from), "DDP_GPU_BUSID");
	}
	/* The driver's minor -> bus id table, to check Slurm's GPU numbers
	 * with: DDP_CHECK_NVIDIA_GPUS, else where the plugin reads it (none
	 * where the site turned it off: nvidia_gpus: ""). */
	struct ddpenv_settings eff;
	int have_eff = site_settings(&eff) == 0;
	const char *dir = getenv("DDP_CHECK_NVIDIA_GPUS");
	if (!dir || !*dir)
		dir = have_eff ? eff.nvidia_gpus : DDPENV_NVIDIA_GPUS;
	/* How Slurm numbers the GPUs, as the plugin was told (gres_order). */
	r->gres_order = have_eff ? eff.gres_order : DDPENV_GRES_ORDER_BUS;
	if (!*dir || ck_nvidia_read(dir, r->nvgpus, sizeof(r->nvgpus), r->nvgpus_err,
				    sizeof(r->nvgpus_err)) < 0)
		r->nvgpus[0] = 0;
}

void ck_self_hw(struct self *me)
{
	struct ck_rank *r = &me->r;
	const char *sysfs = getenv("DDP_CHECK_SYSFS");
	if (!sysfs || !*sysfs)
		sysfs = "/sys";
	ck_ib_ports(sysfs, r->ibports, sizeof(r->ibports));
	if (r->gpu[0])
		ck_link_read(sysfs, "gpu", r->gpu, &r->gpu_link);
	if ((r->have & 1u << CK_NIC) && r->env[CK_NIC][0])
		ck_nic_link_read(sysfs, r->env[CK_NIC], &r->nic_link);
}

void ck_self_h2d(struct self *me, size_t bytes)
{
	struct ck_rank *r = &me->r;
	const char *sysfs = getenv("DDP_CHECK_SYSFS");

	if (!r->gpu[0] || !bytes)
		return;
	if (ck_cuda_h2d(r->gpu, bytes, 5, &r->h2d_gbps, r->h2d_err, sizeof(r->h2d_err)) < 0)
		return;
	ck_link_read(sysfs && *sysfs ? sysfs : "/sys", "gpu", r->gpu, &r->h2d_link);
}

void ck_self_p2p(struct self *me, size_t bytes)
{
	struct ck_rank *r = &me->r;

	if (!me->prober || !r->gpu[0] || !bytes)
		return;
	ck_cuda_p2p(bytes, &r->p2p, r->p2p.err, sizeof(r->p2p.err));
}

void ck_self_gpu_health(struct self *me)
{
	const char *kmsg = getenv("DDP_CHECK_KMSG");

	if (!me->r.gpu[0]) {
		memset(&me->r.gh, 0, sizeof(me->r.gh));
		snprintf(me->r.gh.err, sizeof(me->r.gh.err), "no GPU");
		return;
	}
	/* peer reads to the node's other GPUs, as the driver lists them */
	struct ddpenv_nvgpu g[DDPENV_MAX_GPUS];
	char peers[DDPENV_MAX_GPUS * 20] = "";
	int n = ck_nvidia_parse(me->r.nvgpus, g, DDPENV_MAX_GPUS);
	size_t off = 0;
	for (int i = 0; i < n && off + 20 < sizeof(peers); i++)
		if (!g[i].excluded)
			off += (size_t)snprintf(peers + off, sizeof(peers) - off, "%s%s", off ? "," : "", g[i].busid);
	ck_gpu_health_read(me->r.gpu, peers, kmsg && *kmsg ? kmsg : "/dev/kmsg", &me->r.gh);
}

void ck_self_limits(struct self *me)
{
	struct ck_rank *r = &me->r;
	struct rlimit rl;
	const char *dir = getenv("DDP_CHECK_INFINIBAND");
	DIR *d;
	size_t off = 0;

	r->memlock = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
		     (long long)rl.rlim_cur : -1;
	r->nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
		    (long long)rl.rlim_cur : -1;
	r->nproc = getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
		   (long long)rl.rlim_cur : -1;
	r->uid = (long)getuid();
	r->user_threads = r->nproc >= 0 && r->uid != 0 ? ck_user_threads("/proc", r->uid) : -1;
	if (!dir || !*dir)
		dir = "/sys/class/infiniband";
	d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		/* as the directory lists them, as many as fit: enough to
		 * show what is there */
		off += (size_t)snprintf(r->rdma + off, off < sizeof(r->rdma) ? sizeof(r->rdma) - off : 0,
					"%s%s", off ? "," : "", e->d_name);
	}
	if (off >= sizeof(r->rdma))
		snprintf(r->rdma + sizeof(r->rdma) - 5, 5, ",...");
	if (d)
		closedir(d);
}

/* NCCL's smallest shared-memory segment (a 4 MiB buffer and its header:
 * "failed to extend /dev/shm/nccl-XXXXXX to 4194660 bytes" in NCCL's
 * troubleshooting guide). */
#define SHM_PROBE_BYTES (4 << 20)

/* logind's RemoveIPC, asked of logind itself over the system bus (what the
 * running daemon uses, whatever its files say).  libsystemd is loaded at
 * run time: a node or container without it still runs ddp-check. */
static int logind_removeipc(int *val, char *err, size_t len)
{
	static void *h;
	__typeof__(sd_bus_open_system) *open_system;
	__typeof__(sd_bus_set_method_call_timeout) *set_timeout;
	__typeof__(sd_bus_get_property_trivial) *get;
	__typeof__(sd_bus_error_free) *error_free;
	__typeof__(sd_bus_flush_close_unref) *close_unref;

	if (!h)
		h = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, len, "libsystemd.so.0 not found (%s)", dlerror());
		return -1;
	}
	*(void **)&open_system = dlsym(h, "sd_bus_open_system");
	*(void **)&set_timeout = dlsym(h, "sd_bus_set_method_call_timeout");
	*(void **)&get = dlsym(h, "sd_bus_get_property_trivial");
	*(void **)&error_free = dlsym(h, "sd_bus_error_free");
	*(void **)&close_unref = dlsym(h, "sd_bus_flush_close_unref");
	if (!open_system || !set_timeout || !get || !error_free || !close_unref) {
		snprintf(err, len, "libsystemd.so.0 lacks sd-bus (systemd before 240)");
		return -1;
	}
	sd_bus *bus = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	int b = 0, rc = open_system(&bus);
	if (rc < 0) {
		snprintf(err, len, "no system bus (%s)", strerror(-rc));
		return -1;
	}
	/* bounded: a task never waits long on a busy or wedged daemon */
	set_timeout(bus, 2 * 1000 * 1000);
	rc = get(bus, "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
		 "RemoveIPC", &e, 'b', &b);
	if (rc < 0)
		snprintf(err, len, "logind did not answer on the system bus (%s)",
			 e.message ? e.message : strerror(-rc));
	else
		*val = !!b;
	error_free(&e);
	close_unref(bus);
	return rc < 0 ? -1 : 0;
}

void ck_self_shm(struct self *me)
{
	struct ck_rank *r = &me->r;
	const char *dir = "/dev/shm";   /* where NCCL (shm_open) makes them */
	struct statvfs sv;
	char path[PATH_MAX];

	snprintf(r->shm_path, sizeof(r->shm_path), "%s", dir);
	r->shm_size = r->shm_free = -1;
	r->uid = (long)getuid();
	r->removeipc = -1;
	if (logind_removeipc(&r->removeipc, r->removeipc_err, sizeof(r->removeipc_err)) < 0)
		r->removeipc = -1;
	if (statvfs(dir, &sv) < 0) {
		snprintf(r->shm_err, sizeof(r->shm_err), "%s: %s", dir, strerror(errno));
		return;
	}
	/* a tmpfs mounted without a size has no block count */
	r->shm_size = sv.f_blocks ? (long long)sv.f_blocks * (long long)sv.f_frsize : 0;
	r->shm_free = sv.f_blocks ? (long long)sv.f_bavail * (long long)sv.f_frsize : 0;
	/* A segment as NCCL makes one (shm_open is an open(2) there, then
	 * the file is extended): made, reserved and removed.  Unnamed where
	 * the file system can (tmpfs): a task killed meanwhile leaves nothing;
	 * else a named one, removed at once. */
	path[0] = 0;
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		snprintf(path, sizeof(path), "%s/ddp-check-XXXXXX", dir);
		fd = mkostemp(path, O_CLOEXEC);
	}
	if (fd < 0) {
		snprintf(r->shm_err, sizeof(r->shm_err), "cannot create a file in %s: %s", dir, strerror(errno));
	} else {
		int rc = posix_fallocate(fd, 0, SHM_PROBE_BYTES);
		if (rc != 0)
			snprintf(r->shm_err, sizeof(r->shm_err), "cannot reserve 4 MiB (NCCL's smallest segment) "
				 "in %s: %s", dir, strerror(rc));
		close(fd);
		if (path[0])
			unlink(path);
	}
	DIR *d = opendir(dir);
	int dfd = d ? dirfd(d) : -1;
	for (struct dirent *e; dfd >= 0 && (e = readdir(d));) {
		struct stat st;
		if (strncmp(e->d_name, "nccl-", 5) != 0 || fstatat(dfd, e->d_name, &st, 0) < 0)
			continue;
		r->shm_nccl++;
		r->shm_nccl_bytes += (long long)st.st_blocks * 512;
	}
	if (d)
		closedir(d);
}

/* NCCL's variables that name this node's own things, which differ from
 * node to node by design: left out of the comparison. */
static const char *const nccl_local[] = {
	"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",
	"NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE", "NCCL_HOSTID", NULL,
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void ck_self_nccl_env(struct self *me)
{
	extern char **environ;
	const char *v[64];
	size_t n = 0, off = 0;
	char *out = me->r.nccl_env;
	size_t len = sizeof(me->r.nccl_env);

	for (char **e = environ; e && *e && n < 64; e++) {
		int local = 0;
		if (strncmp(*e, "NCCL_", 5) != 0)
			continue;
		for (const char *const *k = nccl_local; *k && !local; k++)
			local = !strncmp(*e, *k, strlen(*k)) && (*e)[strlen(*k)] == '=';
		if (!local)
			v[n++] = *e;
	}
	qsort(v, n, sizeof(v[0]), cmp_str);
	out[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(v[i]);
		if (off + l + 2 > len)
			break; /* what fits: the comparison is of what every rank sent */
		off += (size_t)snprintf(out + off, len - off, "%s%s", off ? ";" : "", v[i]);
	}
}

/* CLOCK_MONOTONIC seconds: the clock of every deadline. */
double ck_mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Seconds since this process started (what a user waits through). */
double ck_task_age(void)
{
	FILE *f = fopen("/proc/self/stat", "r");
	char buf[1024];
	struct timespec t;
	unsigned long long start = 0;

	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');   /* the command name may hold spaces */
	if (!p)
		return 0;
	/* fields after ")": state is field 3, starttime field 22 */
	int field = 2;
	for (char *s = p + 1; *s && field < 22; s++)
		if (*s == ' ' && ++field == 22)
			start = strtoull(s + 1, NULL, 10);
	clock_gettime(CLOCK_BOOTTIME, &t);
	double age = (double)t.tv_sec + t.tv_nsec * 1e-9 - (double)start / (double)sysconf(_SC_CLK_TCK);
	return age > 0 ? age : 0;
}
