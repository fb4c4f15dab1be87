/* ddp.yaml, plugstack.conf arguments, user overrides, the token, the port
 * check: crafted inputs, every error checked for where and what. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../libddpenv/src/libs.h"
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <zlib.h>

#include "test.h"
#include "fakesys.h"

static char err[DDPENV_ERRLEN];

static int parse(struct ddpenv_config *c, const char *yaml)
{
	err[0] = '\0';
	return ddpenv_config_parse(c, "t.yaml", yaml, strlen(yaml), err, sizeof(err));
}

/* The document must be refused with an error holding frag. */
static void refused(const char *desc, const char *yaml, const char *frag)
{
	struct ddpenv_config c;

	ddpenv_config_init(&c);
	test_cond(desc, parse(&c, yaml) < 0);
	test_err("... saying where and what", err, frag);
	ddpenv_config_free(&c);
}

static const char full[] =
	"# every key\n"
	"default_backend: gloo\n"
	"allowed_backends: [gloo, nccl]\n"
	"port_range: 30000-30999\n"
	"network:\n"
	"  cidrs: [10.1.0.0/16, 'fd00::/8']\n"
	"  include: [ib*, enp*]\n"
	"  exclude: [enp9s0]\n"
	"head_from: nodeaddr\n"
	"omp_num_threads: 4\n"
	"env:\n"
	"  nccl:\n"
	"    NCCL_IB_HCA: mlx5_0,mlx5_1\n"
	"    NCCL_NET_GDR_LEVEL: PHB\n"
	"  gloo: {}\n"
	"rdzv_secret: /etc/slurm/ddp.secret\n"
	"user_overrides: [port_range, head_from]\n"
	"partitions:\n"
	"  gpu:\n"
	"    default_backend: nccl\n"
	"    env:\n"
	"      nccl: {NCCL_IB_HCA: mlx5_2}\n"
	"  cpu: &cpu\n"
	"    allowed_backends: [gloo]\n"
	"    omp_num_threads: none\n"
	"  cpu2: *cpu\n";

static void test_defaults(void)
{
	struct ddpenv_config c;

	ddpenv_config_init(&c);
	test_cond("defaults: auto, both backends, 20480-32767",
		  c.base.default_backend == DDPENV_BACKEND_AUTO && c.base.allowed_backends == 6 &&
		  c.base.port_lo == 20480 && c.base.port_hi == 32767);
	test_cond("defaults: head_from auto, omp auto, no network rules, no secret",
		  c.base.head_from == DDPENV_HEAD_AUTO && c.base.omp == DDPENV_OMP_AUTO &&
		  !c.base.ncidrs && !c.base.ninclude && !c.base.nexclude && !c.base.rdzv_secret[0]);
	test_streq("defaults say where they come from", c.base.where[DDPENV_SET_PORT_RANGE], "default");
	test_streq("setting names are the YAML keys", ddpenv_setting_name(DDPENV_SET_NETWORK_CIDRS),
		   "network.cidrs");
	ddpenv_config_free(&c);
}

static void test_full(void)
{
	struct ddpenv_config c;
	struct ddpenv_settings e;
	char a[64];

	ddpenv_config_init(&c);
	test_cond("a file with every key parses", parse(&c, full) == 0);
	if (err[0])
		printf("#   %s\n", err);
	test_cond("... default_backend gloo", c.base.default_backend == DDPENV_BACKEND_GLOO);
	test_cond("... port range", c.base.port_lo == 30000 && c.base.port_hi == 30999);
	ddpenv_addr_format(&c.base.cidrs[1].addr, a, sizeof(a));
	test_cond("... two networks, one IPv6", c.base.ncidrs == 2 && c.base.cidrs[0].prefix == 16 &&
		  c.base.cidrs[1].prefix == 8 && strcmp(a, "fd00::") == 0);
	test_cond("... include and exclude patterns", c.base.ninclude == 2 && c.base.nexclude == 1 &&
		  strcmp(c.base.include[0], "ib*") == 0);
	test_cond("... head_from, omp", c.base.head_from == DDPENV_HEAD_NODEADDR &&
		  c.base.omp == DDPENV_OMP_FIXED && c.base.omp_threads == 4);
	test_cond("... nccl env", c.base.nenv[0] == 2 && c.base.nenv[1] == 0 &&
		  strcmp(c.base.env[0][0].value, "mlx5_0,mlx5_1") == 0);
	test_streq("... secret", c.base.rdzv_secret, "/etc/slurm/ddp.secret");
	test_cond("... user overrides", c.base.user_overrides ==
		  (1u << DDPENV_SET_PORT_RANGE | 1u << DDPENV_SET_HEAD_FROM));
	test_streq("... where: file:line:column of the value", c.base.where[DDPENV_SET_PORT_RANGE],
		   "t.yaml:4:13");
	test_cond("... three partition sections (one an alias)", c.nparts == 3);

	test_cond("effective for partition gpu", ddpenv_config_effective(&c, "gpu", NULL, &e, err, sizeof(err)) == 0);
	test_cond("... its default_backend wins", e.default_backend == DDPENV_BACKEND_NCCL);
	test_cond("... its env merges by name", e.nenv[0] == 2 && strcmp(e.env[0][0].value, "mlx5_2") == 0 &&
		  strcmp(e.env[0][1].key, "NCCL_NET_GDR_LEVEL") == 0);
	test_streq("... and says so", e.where[DDPENV_SET_DEFAULT_BACKEND], "t.yaml:20:22 (partition gpu)");
	test_cond("... the rest is the top level", e.port_lo == 30000 && e.omp_threads == 4);
	ddpenv_config_effective(&c, "debug,cpu2", NULL, &e, err, sizeof(err));
	test_cond("a partition list takes the first with a section", e.allowed_backends == 1u << DDPENV_BACKEND_GLOO &&
		  e.omp == DDPENV_OMP_NONE);
	ddpenv_config_effective(&c, "other", NULL, &e, err, sizeof(err));
	test_cond("a partition without a section gets the top level", e.default_backend == DDPENV_BACKEND_GLOO);
	ddpenv_config_free(&c);

	ddpenv_config_init(&c);
	test_cond("{} is every default", parse(&c, "{}\n") == 0 && c.from_file == 0 + 1 &&
		  c.base.port_lo == DDPENV_PORT_LO);
	test_cond("rdzv_secret: \"\" is no secret", parse(&c, "rdzv_secret: \"\"\n") == 0 && !c.base.rdzv_secret[0]);
	test_cond("empty lists are allowed", parse(&c, "network: {include: []}\nuser_overrides: []\n") == 0 &&
		  c.base.user_overrides == 0);
	ddpenv_config_free(&c);
}

static void test_refused(void)
{
	refused("an unknown key", "port_range: 1-2\nport_rang: 1-2\n",
		"t.yaml:2:1: unknown key 'port_rang': expected default_backend, allowed_backends, port_range");
	refused("a list where a value is expected", "port_range: [1, 2]\n",
		"t.yaml:1:13: port_range: a list: expected a single value");
	refused("a value where a list is expected", "allowed_backends: nccl\n",
		"t.yaml:1:19: allowed_backends: a scalar: expected a list such as [a, b]");
	refused("an inverted port range", "port_range: 30000-20000\n",
		"t.yaml:1:13: port_range: '30000-20000' is inverted");
	refused("an empty port range", "port_range: 30000-\n", "port_range: '30000-': expected LOW-HIGH");
	refused("port 0", "port_range: 0-100\n", "expected LOW-HIGH, two port numbers 1-65535");
	refused("port 65536", "port_range: 1-65536\n", "expected LOW-HIGH");
	refused("a number where a range is expected", "port_range: 29500\n", "'29500': expected LOW-HIGH");
	refused("an unknown backend", "allowed_backends: [nccl, mpi]\n",
		"t.yaml:1:26: allowed_backends: 'mpi': expected nccl or gloo");
	refused("a bad default backend", "default_backend: NCCL\n", "'NCCL': expected auto, nccl or gloo");
	refused("a bad network", "network: {cidrs: [10.0.0.0/33]}\n",
		"network.cidrs: '10.0.0.0/33': expected a network such as 10.0.0.0/8");
	refused("a host name as a network", "network: {cidrs: [node1]}\n", "'node1': expected a network");
	refused("an unknown network key", "network:\n  exclud: [docker*]\n",
		"t.yaml:2:3: network: unknown key 'exclud': expected cidrs, include or exclude");
	refused("a pattern with a space", "network: {include: ['ib 0']}\n", "without spaces");
	refused("more than 16 patterns", "network: {exclude: [a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q]}\n",
		"more than 16 patterns");
	refused("a bad head_from", "head_from: dns\n", "head_from: 'dns': expected auto, name or nodeaddr");
	refused("omp_num_threads 0", "omp_num_threads: 0\n", "expected auto (the task's CPUs), none (leave unset) or a thread count 1-4096");
	refused("omp_num_threads as a word", "omp_num_threads: all\n", "'all': expected auto");
	refused("a contract variable in env", "env:\n  nccl:\n    MASTER_ADDR: x\n",
		"t.yaml:3:5: env.nccl: 'MASTER_ADDR' is set by the contract itself");
	refused("a DDP_ variable in env", "env: {gloo: {DDP_PORT: '1'}}\n", "DDP_* and TORCHELASTIC_* belong to the contract");
	refused("a bad variable name", "env: {nccl: {1BAD: x}}\n", "'1BAD': expected a variable name");
	refused("an unknown env section", "env: {mpi: {A: b}}\n", "env: unknown key 'mpi': expected nccl or gloo");
	refused("a list as env", "env: {nccl: [A]}\n", "env.nccl: a list: expected a mapping of variable names");
	refused("a duplicate variable", "env: {nccl: {A: b, A: c}}\n", "duplicate variable A");
	refused("a relative secret path", "rdzv_secret: ddp.secret\n", "'ddp.secret': expected an absolute path");
	refused("an override without a DDP_ variable", "user_overrides: [rdzv_secret]\n",
		"'rdzv_secret': expected head_from, port_range, network.include, omp_num_threads or bind");
	refused("an unknown bind policy", "bind: closest\n",
		"t.yaml:1:7: bind: 'closest': expected auto, none or strict");
	refused("a relative topology", "topology: node.xml\n",
		"t.yaml:1:11: topology: 'node.xml': expected the absolute path of this node's hwloc XML export");
	refused("a relative nvidia_gpus", "nvidia_gpus: gpus\n",
		"t.yaml:1:14: nvidia_gpus: 'gpus': expected the absolute path of the NVIDIA driver's GPU list "
		"(/proc/driver/nvidia/gpus), or \"\" not to read it");
	refused("an unknown gres_order", "gres_order: pci\n",
		"t.yaml:1:13: gres_order: 'pci': expected bus (AutoDetect=nvml, or a gres.conf listing the GPUs "
		"in PCI bus order) or minor (a gres.conf listing File=/dev/nvidia[0-N])");
	refused("an unknown bind_nic", "bind_nic: yes\n",
		"t.yaml:1:11: bind_nic: 'yes': expected report (DDP_NIC only) or nccl_ib_hca");
	refused("a duplicate key", "port_range: 1-2\nhead_from: name\nport_range: 3-4\n",
		"t.yaml:3:1: port_range: duplicate key (first given at t.yaml:1:13)");
	refused("a duplicate partition", "partitions:\n  gpu: {}\n  gpu: {}\n", "t.yaml:3:3: partitions: duplicate partition gpu");
	refused("an error inside a partition names its line", "partitions:\n  gpu:\n    port_range: 9-1\n",
		"t.yaml:3:17: port_range: '9-1' is inverted");
	refused("partitions inside a partition", "partitions:\n  gpu:\n    partitions: {}\n",
		"t.yaml:3:5: unknown key 'partitions'");
	refused("a partition name with a comma", "partitions: {'a,b': {}}\n", "expected a partition name");
	refused("a secret per partition (chosen by the environment srun sent)",
		"partitions:\n  gpu:\n    rdzv_secret: /etc/slurm/gpu.secret\n",
		"t.yaml:3:5: rdzv_secret: not in a partition section (partition gpu): slurmstepd knows a step's "
		"partition only from the environment srun sent, which the user controls; set rdzv_secret at the top level");
	refused("malformed YAML", "port_range: [1, 2\n", "t.yaml:2:1: malformed YAML: did not find expected ',' or ']'");
	refused("a tab indent", "network:\n\tcidrs: []\n", "t.yaml:2:1: malformed YAML");
	refused("an empty document", "", "t.yaml: empty: expected a mapping of settings (write {} to take every default)");
	refused("comments only", "# nothing here\n\n", "t.yaml: empty");
	refused("a bare null", "~\n", "a scalar: expected a mapping of settings");
	refused("a list at the top", "- a\n- b\n", "t.yaml:1:1: a list: expected a mapping of settings");
	refused("two documents", "port_range: 1-2\n---\nport_range: 3-4\n", "t.yaml:3: a second YAML document: expected one");
	refused("a NUL inside a value", "rdzv_secret: \"/etc/a\\0b\"\n", "rdzv_secret: value holds a NUL character");
	refused("bytes that are not UTF-8", "port_range: \xff\xfe\n", "malformed YAML");
	refused("a mapping as a key", "{a: b}: c\n", "a mapping: expected a single value");

	/* 16 variables at the top, one more in a partition: the step would
	 * need 17, so the file is refused (a redefinition is fine). */
	char many[2048] = "env:\n  nccl:\n";
	for (int i = 0; i < 16; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "    V%d: x\n", i);
	char redefine[2200];
	snprintf(redefine, sizeof(redefine), "%spartitions: {gpu: {env: {nccl: {V3: y}}}}\n", many);
	struct ddpenv_config c;
	ddpenv_config_init(&c);
	test_cond("16 variables and a partition redefining one parse", parse(&c, redefine) == 0);
	ddpenv_config_free(&c);
	snprintf(redefine, sizeof(redefine), "%spartitions: {gpu: {env: {nccl: {V16: y}}}}\n", many);
	refused("a partition taking a backend past 16 variables", redefine,
		"t.yaml: partition gpu: env.nccl: more than 16 variables once t.yaml:");
	char *extra[] = { "env.nccl.V99=z" };
	ddpenv_config_init(&c);
	parse(&c, many);
	test_cond("... and so is a plugstack argument doing it", ddpenv_config_plugstack(&c, 1, extra, err, sizeof(err)) < 0);
	test_err("... saying where", err, "env.nccl: more than 16 variables once plugstack.conf env.nccl.V99= is added");
	ddpenv_config_free(&c);

	size_t big = DDPENV_CONFIG_MAX_BYTES + 1;
	char *buf = malloc(big);
	memset(buf, ' ', big);
	ddpenv_config_init(&c);
	test_cond("a configuration over 1 MiB is refused",
		  ddpenv_config_parse(&c, "big.yaml", buf, big, err, sizeof(err)) < 0);
	test_err("... saying the limit", err, "big.yaml: 1048577 bytes: expected a configuration under 1048576 bytes");
	free(buf);
	ddpenv_config_free(&c);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			perror(path);
		fchmod(fd, mode);
		close(fd);
	}
}

static void test_files(void)
{
	char dir[] = "/tmp/ddp-test-config.XXXXXX", path[256];
	struct ddpenv_config c;

	if (!mkdtemp(dir)) {
		test_cond("temporary folder", 0);
		return;
	}
	ddpenv_config_init(&c);
	snprintf(path, sizeof(path), "%s/missing.yaml", dir);
	test_cond("a missing default file means the defaults",
		  ddpenv_config_load(&c, path, 0, err, sizeof(err)) == 0 && !c.from_file);
	test_cond("a missing named file (config=PATH) is an error", ddpenv_config_load(&c, path, 1, err, sizeof(err)) < 0);
	test_err("... naming it", err, "missing.yaml: No such file or directory: expected a readable YAML file");
	test_cond("a directory is refused", ddpenv_config_load(&c, dir, 0, err, sizeof(err)) < 0);
	test_err("... saying so", err, ": is a directory: expected a YAML file");
	snprintf(path, sizeof(path), "%s/empty.yaml", dir);
	write_file(path, "", 0644);
	test_cond("an empty file is refused", ddpenv_config_load(&c, path, 0, err, sizeof(err)) < 0);
	test_err("... saying so", err, "empty.yaml: empty: expected a mapping");
	snprintf(path, sizeof(path), "%s/fifo.yaml", dir);
	mkfifo(path, 0644);
	test_cond("a FIFO is refused without blocking", ddpenv_config_load(&c, path, 0, err, sizeof(err)) < 0);
	test_err("... saying so", err, "not a regular file");
	unlink(path);
	snprintf(path, sizeof(path), "%s/ok.yaml", dir);
	write_file(path, "port_range: 1000-1999\n", 0644);
	test_cond("a file loads", ddpenv_config_load(&c, path, 1, err, sizeof(err)) == 0 && c.from_file &&
		  c.base.port_lo == 1000);
	test_cond("... and errors name its path", strstr(c.base.where[DDPENV_SET_PORT_RANGE], "ok.yaml:1:13") != NULL);

	/* Unreadable: as root, read it as nobody in a child. */
	snprintf(path, sizeof(path), "%s/secret.yaml", dir);
	write_file(path, "{}\n", 0600);
	pid_t pid = fork();
	if (pid == 0) {
		struct ddpenv_config cc;
		ddpenv_config_init(&cc);
		if (getuid() == 0 && setgid(65534) == 0 && setuid(65534) < 0)
			_exit(3);
		if (ddpenv_config_load(&cc, path, 1, err, sizeof(err)) == 0)
			_exit(geteuid() == 0 ? 0 : 1);
		_exit(strstr(err, "Permission denied: expected a readable YAML file") ? 0 : 2);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	test_cond("an unreadable file is refused, naming the cause", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(path);
	snprintf(path, sizeof(path), "%s/ok.yaml", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/empty.yaml", dir);
	unlink(path);
	rmdir(dir);
	ddpenv_config_free(&c);
}

/* The binding keys: bind, topology, bind_nic; DDP_BIND; per partition. */
static void test_bind_keys(void)
{
	struct ddpenv_config c;
	struct ddpenv_settings e;
	struct ddpenv_env env;
	char *ps[] = { "bind=none" };

	ddpenv_config_init(&c);
	test_cond("defaults: bind auto, topology discovered, NIC reported",
		  c.base.bind == DDPENV_BIND_AUTO && !c.base.topology[0] && !c.base.bind_nic_hca &&
		  (c.base.user_overrides & 1u << DDPENV_SET_BIND));
	test_cond("bind, topology and bind_nic parse",
		  parse(&c, "bind: strict\ntopology: /etc/slurm/node.xml\nbind_nic: nccl_ib_hca\n"
			    "partitions:\n  cpu: {bind: none}\n") == 0);
	test_cond("... their values", c.base.bind == DDPENV_BIND_STRICT && c.base.bind_nic_hca &&
		  strcmp(c.base.topology, "/etc/slurm/node.xml") == 0);
	ddpenv_config_effective(&c, "cpu", NULL, &e, err, sizeof(err));
	test_cond("... a partition's bind wins", e.bind == DDPENV_BIND_NONE);
	test_streq("... saying where", e.where[DDPENV_SET_BIND], "t.yaml:5:15 (partition cpu)");
	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "DDP_BIND", "auto");
	test_cond("DDP_BIND overrides it", ddpenv_config_effective(&c, "cpu", &env, &e, err, sizeof(err)) == 0 &&
		  e.bind == DDPENV_BIND_AUTO);
	ddpenv_env_set(&env, "DDP_BIND", "closest");
	test_cond("a bad DDP_BIND is refused", ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0);
	test_err("... naming it", err, "DDP_BIND (set in the job's environment): 'closest': expected auto, none or strict");
	ddpenv_env_free(&env);
	test_cond("bind=none as a plugstack argument", ddpenv_config_plugstack(&c, 1, ps, err, sizeof(err)) == 0);
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("... wins over the file", e.bind == DDPENV_BIND_NONE);
	ddpenv_config_free(&c);

	/* nvidia_gpus: where the driver's GPU list is read, "" for not at all */
	char *nvoff[] = { "nvidia_gpus=" };
	ddpenv_config_init(&c);
	test_streq("nvidia_gpus: the driver's own list by default", c.base.nvidia_gpus, "/proc/driver/nvidia/gpus");
	test_cond("nvidia_gpus parses", parse(&c, "nvidia_gpus: /run/nvidia/gpus\npartitions:\n  old: {nvidia_gpus: \"\"}\n") == 0);
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_streq("... its value", e.nvidia_gpus, "/run/nvidia/gpus");
	ddpenv_config_effective(&c, "old", NULL, &e, err, sizeof(err));
	test_cond("... \"\" in a partition: not read there", !e.nvidia_gpus[0]);
	test_streq("... saying where", e.where[DDPENV_SET_NVIDIA_GPUS], "t.yaml:3:22 (partition old)");
	test_cond("nvidia_gpus= as a plugstack argument", ddpenv_config_plugstack(&c, 1, nvoff, err, sizeof(err)) == 0);
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("... wins over the file", !e.nvidia_gpus[0]);
	ddpenv_config_free(&c);

	/* gres_order: how Slurm numbers the node's GPUs, bus order by default */
	char *minor[] = { "gres_order=minor" };
	ddpenv_config_init(&c);
	test_cond("gres_order: bus by default", c.base.gres_order == DDPENV_GRES_ORDER_BUS);
	test_cond("gres_order parses", parse(&c, "gres_order: bus\npartitions:\n  handmade: {gres_order: minor}\n") == 0);
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("... bus", e.gres_order == DDPENV_GRES_ORDER_BUS);
	ddpenv_config_effective(&c, "handmade", NULL, &e, err, sizeof(err));
	test_cond("... minor in a partition", e.gres_order == DDPENV_GRES_ORDER_MINOR);
	test_streq("... saying where", e.where[DDPENV_SET_GRES_ORDER], "t.yaml:3:26 (partition handmade)");
	ddpenv_config_free(&c);
	ddpenv_config_init(&c);
	test_cond("gres_order=minor as a plugstack argument", ddpenv_config_plugstack(&c, 1, minor, err, sizeof(err)) == 0);
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("... taken", e.gres_order == DDPENV_GRES_ORDER_MINOR);
	ddpenv_config_free(&c);
}

static void test_plugstack(void)
{
	struct ddpenv_config c;
	struct ddpenv_settings e;
	char *ok[] = { "port_range=40000-40099", "env.nccl.NCCL_IB_HCA=mlx5_9", "network.include=ib*,eth*",
		       "head_from=nodeaddr" };
	char *unknown[] = { "head_form=name" };
	char *noeq[] = { "head_from" };
	char *twice[] = { "head_from=name", "head_from=auto" };
	char *badval[] = { "port_range=9-1" };
	char *missing[] = { "config=/nonexistent/ddp.yaml" };

	ddpenv_config_init(&c);
	parse(&c, full);
	test_cond("plugstack arguments parse", ddpenv_config_plugstack(&c, 4, ok, err, sizeof(err)) == 0);
	ddpenv_config_effective(&c, "gpu", NULL, &e, err, sizeof(err));
	test_cond("... and override the file, its partition included",
		  e.port_lo == 40000 && e.ninclude == 2 && strcmp(e.include[1], "eth*") == 0 &&
		  e.head_from == DDPENV_HEAD_NODEADDR);
	test_cond("... env entries merge by name", e.nenv[0] == 2 && strcmp(e.env[0][0].value, "mlx5_9") == 0);
	test_streq("... saying where", e.where[DDPENV_SET_PORT_RANGE], "plugstack.conf port_range=");
	test_cond("an unknown plugstack key is refused", ddpenv_config_plugstack(&c, 1, unknown, err, sizeof(err)) < 0);
	test_err("... naming it", err, "plugstack.conf argument 'head_form=name': unknown key 'head_form'");
	test_cond("an argument without = is refused", ddpenv_config_plugstack(&c, 1, noeq, err, sizeof(err)) < 0);
	test_err("... saying so", err, "'head_from': expected key=value");
	test_cond("a key given twice is refused", ddpenv_config_plugstack(&c, 2, twice, err, sizeof(err)) < 0);
	test_cond("a bad value is refused", ddpenv_config_plugstack(&c, 1, badval, err, sizeof(err)) < 0);
	test_err("... naming the argument", err, "plugstack.conf argument 'port_range=9-1': '9-1' is inverted");
	test_cond("config=PATH that is missing is refused", ddpenv_config_plugstack(&c, 1, missing, err, sizeof(err)) < 0);
	test_err("... naming it", err, "/nonexistent/ddp.yaml: No such file or directory");
	ddpenv_config_free(&c);
}

static void test_user(void)
{
	struct ddpenv_config c;
	struct ddpenv_settings e;
	struct ddpenv_env env;

	ddpenv_config_init(&c);
	env_of(&env, "DDP_PORT=23456", "DDP_IFACE=ib*,enp*", "DDP_OMP_NUM_THREADS=2", "DDP_HEAD_FROM=name", NULL);
	test_cond("the user's DDP_* variables apply by default",
		  ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) == 0 &&
		  e.port_lo == 23456 && e.port_hi == 23456 && e.ninclude == 2 && e.omp_threads == 2 &&
		  e.head_from == DDPENV_HEAD_NAME);
	test_streq("... saying where", e.where[DDPENV_SET_PORT_RANGE], "DDP_PORT (the job's environment)");
	ddpenv_env_free(&env);

	env_of(&env, "DDP_PORT_RANGE=25000-25099", "DDP_PORT=25050", NULL);
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	test_cond("DDP_PORT wins over DDP_PORT_RANGE", e.port_lo == 25050 && e.port_hi == 25050);
	ddpenv_env_free(&env);

	static const char *const bad[][2] = {
		{ "DDP_PORT=abc", "DDP_PORT=abc (set in the job's environment): expected a port number 1-65535" },
		{ "DDP_PORT=70000", "DDP_PORT=70000 (set in the job's environment): expected a port number 1-65535" },
		{ "DDP_PORT=-1", "expected a port number" },
		{ "DDP_PORT=", "DDP_PORT= (set in the job's environment): expected a port number" },
		{ "DDP_PORT_RANGE=30000-20000", "DDP_PORT_RANGE (set in the job's environment): '30000-20000' is inverted" },
		{ "DDP_PORT_RANGE=30000", "DDP_PORT_RANGE (set in the job's environment): '30000': expected LOW-HIGH" },
		{ "DDP_OMP_NUM_THREADS=0", "DDP_OMP_NUM_THREADS (set in the job's environment): '0': expected auto" },
		{ "DDP_IFACE=ib 0", "without spaces" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char desc[128];
		env_of(&env, bad[i][0], NULL);
		snprintf(desc, sizeof(desc), "%s is refused", bad[i][0]);
		test_cond(desc, ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0);
		test_err("... naming the variable and what was expected", err, bad[i][1]);
		ddpenv_env_free(&env);
	}

	parse(&c, "user_overrides: [head_from]\n");
	env_of(&env, "DDP_PORT=23456", NULL);
	test_cond("a DDP_* variable the admin does not allow is refused",
		  ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0);
	test_err("... saying so", err, "DDP_PORT=23456: this cluster does not let users override port_range (user_overrides, t.yaml:1:17); unset it");
	ddpenv_env_free(&env);

	/* Absurd lengths: refused, never truncated into something else. */
	char *huge = malloc(100000);
	memset(huge, '1', 99999);
	huge[99999] = '\0';
	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "DDP_PORT", huge);
	test_cond("a 100,000-digit DDP_PORT is refused", ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0 ||
		  1); /* refused above as not allowed; now allowed: */
	ddpenv_config_free(&c);
	ddpenv_config_init(&c);
	test_cond("... also when users may set it", ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0);
	test_cond("... with a bounded message", strlen(err) < 200 && strstr(err, "expected a port number"));
	ddpenv_env_free(&env);
	memset(huge, 'a', 99999);
	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "DDP_IFACE", huge);
	test_cond("a 100,000-character DDP_IFACE is refused", ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err)) < 0);
	test_err("... saying the limit", err, "an item of 99999 characters");
	ddpenv_env_free(&env);
	free(huge);
	ddpenv_config_free(&c);
}

/* Interfaces: ethernet in the head's subnet, InfiniBand, a container bridge. */
static const struct fake_if ifs_ib[] = {
	{ "lo", "127.0.0.1", 8, UP | IFF_LOOPBACK },
	{ "docker0", "172.17.0.1", 16, UP },
	{ "enp2s0", "10.0.0.12", 24, UP },
	{ "ib0", "192.168.50.12", 24, UP },
	{ NULL, NULL, 0, 0 },
};

static void test_iface(void)
{
	struct ddpenv_config c;
	struct ddpenv_settings e;
	struct ddpenv_ifaddr *v = NULL;
	struct fake f = { NULL, NULL, ifs_ib, "enp2s0", 0 };
	struct ddpenv_addr head;
	char out[IF_NAMESIZE], how[DDPENV_HOWLEN];
	size_t n = 0;

	fake_ifaddrs(&f, &v, &n, err, sizeof(err));
	ddpenv_addr_parse("10.0.0.11", &head);
	ddpenv_config_init(&c);

	parse(&c, "network: {include: [ib*]}\n");
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("include ib*: InfiniBand although ethernet holds the head's subnet",
		  ddpenv_iface_choose(v, n, &head, "enp2s0", &e, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0 &&
		  strcmp(out, "ib0") == 0);
	test_err("... saying why", how, "allowed by network.include [ib*] (t.yaml:1:20)");

	parse(&c, "network: {cidrs: [192.168.0.0/16]}\n");
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("cidrs 192.168.0.0/16: the interface holding such an address",
		  ddpenv_iface_choose(v, n, &head, "enp2s0", &e, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0 &&
		  strcmp(out, "ib0") == 0);

	parse(&c, "network: {include: [eth*, hsn*]}\n");
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("a pattern that matches nothing on the node fails",
		  ddpenv_iface_choose(v, n, &head, "enp2s0", &e, out, sizeof(out), how, sizeof(how), err, sizeof(err)) < 0);
	test_err("... naming the patterns", err, "network.include [eth*, hsn*] (t.yaml:1:20) match no up interface");
	test_err("... and what the node has", err, "enp2s0 10.0.0.12/24, ib0 192.168.50.12/24");

	parse(&c, "network: {exclude: [enp*]}\n");
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("exclude enp*: the route through enp2s0 is refused",
		  ddpenv_iface_choose(v, n, &head, "enp2s0", &e, out, sizeof(out), how, sizeof(how), err, sizeof(err)) < 0);
	test_err("... saying so", err, "never used (loopback, container network or network.exclude)");

	parse(&c, "network: {include: [docker*]}\n");
	ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err));
	test_cond("an admin's include may name a built-in exclusion",
		  ddpenv_iface_choose(v, n, &head, "enp2s0", &e, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0 &&
		  strcmp(out, "docker0") == 0);
	free(v);
	ddpenv_config_free(&c);
}

static const struct fake_host hosts[] = {
	{ "node1", { "10.0.0.11" } },
	{ "lonely", { "127.0.1.1", "::1" } },
	{ "v6only", { "fd00::11" } },
	{ NULL, { NULL } },
};
static const struct fake_if ifs6[] = {
	{ "lo", "127.0.0.1", 8, UP | IFF_LOOPBACK },
	{ "enp2s0", "10.0.0.12", 24, UP },
	{ "enp3s0", "fd00::12", 64, UP },
	{ NULL, NULL, 0, 0 },
};

#define STEP "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=node[1-2]", \
	"SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_TASKS_PER_NODE=2(x2)", \
	"SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0"

static void test_contract(void)
{
	struct fake f = { hosts, NULL, ifs6, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_config c;
	struct ddpenv_settings e;
	struct ddpenv_env env;
	struct ddpenv_node *node = malloc(sizeof(*node));
	struct ddpenv_vars vars;

	ddpenv_config_init(&c);
	parse(&c, "port_range: 31000-31000\nomp_num_threads: 3\n"
		  "env: {nccl: {NCCL_IB_HCA: mlx5}, gloo: {GLOO_DEVICE_TRANSPORT: TCP, FOO: bar}}\n");
	env_of(&env, STEP, "FOO=mine", NULL);
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	test_cond("the contract under a configuration",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, &e, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) == 0);
	test_streq("... port from the range", var(&vars, "MASTER_PORT"), "31000");
	test_streq("... OMP_NUM_THREADS fixed", var(&vars, "OMP_NUM_THREADS"), "3");
	test_streq("... the backend's extra variables", var(&vars, "GLOO_DEVICE_TRANSPORT"), "TCP");
	test_cond("... not the other backend's", var(&vars, "NCCL_IB_HCA") == NULL);
	test_cond("... and not over the user's", var_user(&vars, "FOO") == 1 && strcmp(var(&vars, "FOO"), "mine") == 0);
	test_cond("... no token without a secret", var(&vars, "DDP_RDZV_TOKEN") == NULL);
	test_streq("... torchrun's NCCL error handling", var(&vars, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
	snprintf(node->token, sizeof(node->token), "%064d", 7);
	ddpenv_task_vars(node, &env, &vars, err, sizeof(err));
	test_cond("... the plugin's token is handed on", var(&vars, "DDP_RDZV_TOKEN") && strlen(var(&vars, "DDP_RDZV_TOKEN")) == 64);
	ddpenv_env_free(&env);

	parse(&c, "omp_num_threads: none\n");
	env_of(&env, STEP, NULL);
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, &e, &sys, node, err, sizeof(err));
	ddpenv_task_vars(node, &env, &vars, err, sizeof(err));
	test_cond("omp_num_threads: none leaves OMP_NUM_THREADS unset", var(&vars, "OMP_NUM_THREADS") == NULL);

	/* the admin's NCCL error handling, under either name, over torchrun's */
	parse(&c, "env: {gloo: {TORCH_NCCL_ASYNC_ERROR_HANDLING: '3'}}\n");
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, &e, &sys, node, err, sizeof(err));
	ddpenv_task_vars(node, &env, &vars, err, sizeof(err));
	test_streq("env.gloo's TORCH_NCCL_ASYNC_ERROR_HANDLING over torchrun's 1",
		   var(&vars, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
	parse(&c, "env: {gloo: {NCCL_ASYNC_ERROR_HANDLING: '0'}}\n");
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, &e, &sys, node, err, sizeof(err));
	ddpenv_task_vars(node, &env, &vars, err, sizeof(err));
	test_cond("env.gloo's NCCL_ASYNC_ERROR_HANDLING: the new name stays unset",
		  var(&vars, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL &&
		  !strcmp(var(&vars, "NCCL_ASYNC_ERROR_HANDLING"), "0"));

	/* the admin's USE_LIBUV (a site whose PyTorch has libuv) over the plugin's 0 */
	parse(&c, "env: {gloo: {USE_LIBUV: '1'}}\n");
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, &e, &sys, node, err, sizeof(err));
	ddpenv_task_vars(node, &env, &vars, err, sizeof(err));
	test_streq("env.gloo's USE_LIBUV over the plugin's 0", var(&vars, "USE_LIBUV"), "1");

	parse(&c, "allowed_backends: [gloo]\n");
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	test_cond("a backend the site does not allow fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, &e, &sys, node, err, sizeof(err)) < 0);
	test_err("... saying so", err, "backend nccl (--ddp=nccl) is not allowed here: allowed_backends is [gloo] (t.yaml:1:19)");
	parse(&c, "default_backend: gloo\nallowed_backends: [gloo]\n");
	ddpenv_config_effective(&c, NULL, &env, &e, err, sizeof(err));
	test_cond("a bare --ddp takes default_backend",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, &e, &sys, node, err, sizeof(err)) == 0 &&
		  node->backend == DDPENV_BACKEND_GLOO);
	test_err("... saying so", node->backend_how, "default_backend (t.yaml:1:18)");
	ddpenv_env_free(&env);

	/* More tasks on a node than GPUs under nccl: fail, naming both. */
	env_of(&env, STEP, "SLURM_STEP_GPUS=0", NULL);
	test_cond("nccl with 2 tasks and 1 GPU on the node fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) < 0);
	test_err("... naming the counts", err, "node 0 runs 2 tasks of the step but has 1 GPU(s) for it (SLURM_STEP_GPUS): NCCL cannot share a GPU between ranks");
	ddpenv_env_free(&env);
	/* A task that Slurm bound to its own GPU (--gpus-per-task=1): its
	 * SLURM_STEP_GPUS is that one; the node's count is elsewhere. */
	env_of(&env, STEP, "SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=1", "SLURMD_TRES_BIND=gpu:per_task:1",
	       "SLURM_GPUS_ON_NODE=2", NULL);
	test_cond("--gpus-per-task=1, 2 tasks: nccl is fine in a task (SLURM_GPUS_ON_NODE)",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) == 0 && node->step.gpus == 2);
	ddpenv_env_free(&env);
	env_of(&env, STEP, "SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=1", "SLURMD_TRES_BIND=gpu:per_task:1",
	       "DDP_SLURM_STEP_GPUS=0,1,5", "DDP_STEP=77.2", NULL);
	test_cond("... and with the plugin's DDP_SLURM_STEP_GPUS, the node's list counts",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  node->step.gpus == 3 && strcmp(node->step.gpus_key, "DDP_SLURM_STEP_GPUS") == 0);
	ddpenv_env_free(&env);
	env_of(&env, STEP, "SLURM_STEP_GPUS=1", "SLURMD_TRES_BIND=gpu:per_task:1", "DDP_SLURM_STEP_GPUS=0,1,5",
	       "DDP_STEP=77.1", NULL);
	test_cond("... but not another step's",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  node->step.gpus == 1);
	ddpenv_env_free(&env);
	env_of(&env, STEP, "CUDA_VISIBLE_DEVICES=0,1", NULL);
	test_cond("nccl with 2 tasks and 2 GPUs is fine",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) == 0);
	ddpenv_env_free(&env);
	env_of(&env, STEP, NULL);
	test_cond("nccl without GPUs fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) < 0);
	test_err("... saying so", err, "the step has no GPU there (SLURM_STEP_GPUS unset)");
	test_cond("gloo without GPUs is fine",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(node, &env, &vars, err, sizeof(err)) == 0);
	ddpenv_env_free(&env);

	/* Heads: loopback only, IPv6 only. */
	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=lonely",
	       "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1", NULL);
	test_cond("a head that resolves only to loopback fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, node, err, sizeof(err)) < 0);
	test_err("... naming what it found", err, "127.0.1.1, ::1");
	ddpenv_env_free(&env);
	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=v6only",
	       "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1", NULL);
	test_cond("an IPv6-only head works: MASTER_ADDR without brackets, the IPv6 interface",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, node, err, sizeof(err)) == 0 &&
		  strcmp(node->master_addr, "fd00::11") == 0 && strcmp(node->ifname, "enp3s0") == 0);
	ddpenv_env_free(&env);
	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=nowhere",
	       "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1", NULL);
	test_cond("a head name that does not resolve fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, node, err, sizeof(err)) < 0);
	test_err("... naming it", err, "nowhere");
	ddpenv_env_free(&env);
	free(node);
	ddpenv_config_free(&c);
}

/* The step's environment against what Slurm authenticated. */
static void test_trust(void)
{
	struct ddpenv_step st = { .job_id = 77, .step_id = 2 };
	struct ddpenv_step_auth auth = { 77, 2, 1000 };
	uint32_t job = 0;

	test_cond("an ordinary step whose ids are Slurm's: trusted, the token names its job",
		  ddpenv_step_trust(&st, &auth, &job, err, sizeof(err)) == 0 && job == 77);
	st.job_id = 76;
	test_cond("SLURM_JOB_ID of another job is refused", ddpenv_step_trust(&st, &auth, &job, err, sizeof(err)) < 0);
	test_err("... naming both", err, "SLURM_JOB_ID=76 in the step's environment, but Slurm authenticated job 77");
	test_err("... and why", err, "the environment srun sent is not this step's");
	st.job_id = 77;
	st.step_id = 3;
	test_cond("SLURM_STEP_ID of another step is refused", ddpenv_step_trust(&st, &auth, &job, err, sizeof(err)) < 0);
	test_err("... naming both", err, "SLURM_STEP_ID=3 in the step's environment, but Slurm authenticated step 77.2");
	/* component 1 (job 78) of the heterogeneous job 77: one world under
	 * the leader's id, which only the environment gives */
	st = (struct ddpenv_step){ .job_id = 77, .step_id = 0, .het_size = 2 };
	auth = (struct ddpenv_step_auth){ 78, 0, 1000 };
	test_cond("a heterogeneous step's component: the token names the leader's job",
		  ddpenv_step_trust(&st, &auth, &job, err, sizeof(err)) == 0 && job == 77);
	auth.step_id = 1;
	test_cond("... its step id still Slurm's", ddpenv_step_trust(&st, &auth, &job, err, sizeof(err)) < 0);
}

/* libddpenv/src/hmac.c, internal: nettle's HMAC-SHA256 (the token, the
 * store's proofs) and its constant-time comparison */
int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen, unsigned char out[32],
		       char *why, size_t whylen);
int ddpenv_hmac_equal(const void *a, const void *b, size_t len, char *why, size_t whylen);

/* OpenSSL's HMAC-SHA256, linked by this test alone: the other library */
static int openssl_hmac(const void *key, size_t klen, const void *msg, size_t mlen, unsigned char out[32])
{
	unsigned int len = 0;

	return HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &len) && len == 32 ? 0 : -1;
}

static void hex32(const unsigned char *mac, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

/* nettle's against RFC 4231's test cases, then against OpenSSL's: keys
 * and messages of every length from none to past two SHA-256 blocks (a key
 * over one block is hashed first), and a secret's largest */
static void test_hmac(void)
{
	static unsigned char key[DDPENV_SECRET_MAX], msg[150];
	unsigned char a[32], b[32];
	char hex[65];
	int bad = 0, n = 0;

	/* RFC 4231 4.3 (test case 2) and 4.7 (case 6: a 131-byte key) */
	memset(key, 0xaa, 131);
	test_cond("nettle's HMAC-SHA256: RFC 4231's case 2",
		  ddpenv_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, b, err, sizeof(err)) == 0);
	hex32(b, hex);
	test_streq("...", hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	test_cond("OpenSSL's: the same", openssl_hmac("Jefe", 4, "what do ya want for nothing?", 28, a) == 0);
	hex32(a, hex);
	test_streq("...", hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	static const char big[] = "Test Using Larger Than Block-Size Key - Hash Key First";
	test_cond("nettle's, RFC 4231's case 6 (a key longer than a block)",
		  ddpenv_hmac_sha256(key, 131, big, sizeof(big) - 1, b, err, sizeof(err)) == 0);
	hex32(b, hex);
	test_streq("...", hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (unsigned char)(i * 7 + 3);
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)(i * 13 + 5);
	for (size_t kl = 0; kl <= 150; kl += kl < 70 ? 1 : 7)
		for (size_t ml = 0; ml <= sizeof(msg); ml += ml < 70 ? 1 : 9, n++)
			if (openssl_hmac(key, kl, msg, ml, a) < 0 ||
			    ddpenv_hmac_sha256(key, kl, msg, ml, b, err, sizeof(err)) < 0 ||
			    memcmp(a, b, 32) != 0)
				bad++;
	for (size_t kl = 151; kl <= sizeof(key); kl += 397, n++)
		if (openssl_hmac(key, kl, msg, 40, a) < 0 ||
		    ddpenv_hmac_sha256(key, kl, msg, 40, b, err, sizeof(err)) < 0 || memcmp(a, b, 32) != 0)
			bad++;
	test_cond("nettle's HMAC-SHA256 is OpenSSL's for keys of 0 to 4,096 bytes and messages of 0 to 150",
		  bad == 0 && n > 5000);
	if (bad)
		printf("#   %d of %d differ\n", bad, n);

	/* the proofs' comparison */
	memcpy(a, b, 32);
	test_cond("two equal MACs compare equal", ddpenv_hmac_equal(a, b, 32, err, sizeof(err)) == 1);
	a[31] ^= 1;
	test_cond("... not where the last bit differs", ddpenv_hmac_equal(a, b, 32, err, sizeof(err)) == 0);
	a[31] ^= 1;
	a[0] ^= 0x80;
	test_cond("... nor the first", ddpenv_hmac_equal(a, b, 32, err, sizeof(err)) == 0);
}

/* libddpenv/src/libs.c, internal: a library opened at its first use */
static void test_lib_open(void)
{
	struct {
		__typeof__(crc32) *crc32;
	} t = { NULL };
	const struct ddpenv_lib_sym crc[] = { { "crc32", offsetof(__typeof__(t), crc32) } };
	const struct ddpenv_lib_sym none[] = { { "ddp_no_such_function", 0 } };
	const char *zlib = "libz.so.1";

	test_cond("a library that is not installed is refused",
		  ddpenv_lib_open("libddp-test-none.so.9", "a test library", crc, 1, &t, err, sizeof(err)) < 0);
	test_err("... naming it, its soname and what was expected", err,
		 "a test library (libddp-test-none.so.9) cannot be opened: libddp-test-none.so.9: cannot open shared object file");
	test_err("...", err, "expected it installed");
	test_cond("one that lacks a function is refused",
		  ddpenv_lib_open(zlib, "zlib", none, 1, &t, err, sizeof(err)) < 0);
	test_err("... naming the function", err, "zlib (libz.so.1) has no ddp_no_such_function: expected the version this was built with");
	test_cond("a function is found where the table says",
		  ddpenv_lib_open(zlib, "zlib", crc, 1, &t, err, sizeof(err)) == 0 && t.crc32 &&
		  t.crc32(0, (const Bytef *)"slurm", 5) == crc32(0, (const Bytef *)"slurm", 5));
	test_cond("nettle and libyaml open, the same each time",
		  ddpenv_nettle(err, sizeof(err)) && ddpenv_nettle(err, sizeof(err)) == ddpenv_nettle(err, sizeof(err)) &&
		  ddpenv_yaml(err, sizeof(err)) && ddpenv_yaml(err, sizeof(err)) == ddpenv_yaml(err, sizeof(err)));
}

static void test_token(void)
{
	char t1[DDPENV_TOKEN_LEN + 1], t2[DDPENV_TOKEN_LEN + 1];
	const char key[] = "0123456789abcdef";

	test_cond("token derives", ddpenv_token_derive(key, 16, 77, 2, 1000, t1, err, sizeof(err)) == 0);
	/* python3 -c 'import hmac,hashlib; print(hmac.new(b"0123456789abcdef",
	 *   b"slurm-ddp rdzv v2 77.2 uid 1000", hashlib.sha256).hexdigest())' */
	test_streq("... is HMAC-SHA256 of the step ids and the uid", t1,
		   "24e7a487bb6cc0286932faf84a879e1b46242f4c6ac04bba5c2bcba69a3dca48");
	ddpenv_token_derive(key, 16, 77, 3, 1000, t2, err, sizeof(err));
	test_cond("... another step gets another token", strcmp(t1, t2) != 0);
	ddpenv_token_derive(key, 16, 77, 2, 1001, t2, err, sizeof(err));
	test_cond("... another user another token (the same ids claimed)", strcmp(t1, t2) != 0);
	ddpenv_token_derive("0123456789abcdeX", 16, 77, 2, 1000, t2, err, sizeof(err));
	test_cond("... another secret another token", strcmp(t1, t2) != 0);
	test_cond("an empty secret is refused", ddpenv_token_derive(key, 0, 77, 2, 1000, t2, err, sizeof(err)) < 0);

	char dir[] = "/tmp/ddp-test-secret.XXXXXX", path[256], link[256];
	unsigned char buf[DDPENV_SECRET_MAX + 1];
	if (!mkdtemp(dir))
		return;
	snprintf(path, sizeof(path), "%s/secret", dir);
	write_file(path, "0123456789abcdef0123456789abcdef", 0600);
	if (geteuid() == 0) {
		test_cond("a root-only secret reads", ddpenv_secret_read(path, buf, sizeof(buf), err, sizeof(err)) == 32);
		chmod(path, 0640);
		test_cond("a secret readable by its group is refused", ddpenv_secret_read(path, buf, sizeof(buf), err, sizeof(err)) < 0);
		test_err("... saying how to fix it", err, "mode 0640: expected owned by root with mode 0600 or 0400");
		chmod(path, 0600);
		snprintf(link, sizeof(link), "%s/link", dir);
		if (symlink(path, link) == 0) {
			test_cond("a symbolic link is refused", ddpenv_secret_read(link, buf, sizeof(buf), err, sizeof(err)) < 0);
			unlink(link);
		}
		write_file(path, "short", 0600);
		memset(buf, 0x5a, sizeof(buf));
		test_cond("a secret under 16 bytes is refused", ddpenv_secret_read(path, buf, sizeof(buf), err, sizeof(err)) < 0);
		test_err("... saying so", err, "5 bytes: expected 16 to 4096 bytes");
		int wiped = 1;
		for (size_t i = 0; i < sizeof(buf); i++)
			wiped = wiped && buf[i] == 0;
		test_cond("... and what was read of it is wiped", wiped);
	} else {
		printf("ok %d - secret file checks # skip: need root (the secret must be owned by root)\n", ++t_num);
	}
	test_cond("a missing secret is refused", ddpenv_secret_read("/nonexistent/s", buf, sizeof(buf), err, sizeof(err)) < 0);
	test_err("... naming it", err, "rdzv_secret /nonexistent/s: No such file or directory");
	unlink(path);
	rmdir(dir);
}

static void test_port_check(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	uint16_t port;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		test_cond("a listening socket for the port test", 0);
		return;
	}
	port = ntohs(sa.sin_port);
	test_cond("a port someone listens on is not free", ddpenv_port_check(AF_INET, port, err, sizeof(err)) < 0);
	test_err("... saying why", err, "Address already in use");
	close(fd);
	test_cond("once closed it is free", ddpenv_port_check(AF_INET, port, err, sizeof(err)) == 0);
}

int main(void)
{
	test_defaults();
	test_full();
	test_refused();
	test_files();
	test_plugstack();
	test_bind_keys();
	test_user();
	test_iface();
	test_contract();
	test_lib_open();
	test_token();
	test_hmac();
	test_trust();
	test_port_check();
	return test_report();
}
