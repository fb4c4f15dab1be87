/* The kept topology (libddpenv/src/topo_cache.c): its key from the kernel's
 * view of the machine, and a file that is reused when whole and root's,
 * written anew when stale, corrupt, truncated, another user's, writable by
 * others or a link; never in a folder that is not root's; and an error, not
 * a crash, on a read-only file system. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddpenv.h"
#include "test.h"
#include "tmptree.h"
#include "child.h"

/* a fake /proc and /sys under tmp/sys1 */
static void fake_sys(void)
{
	static const char *const made[] = {
		"sys1", "sys1/proc", "sys1/proc/sys", "sys1/proc/sys/kernel", "sys1/proc/sys/kernel/random",
		"sys1/sys", "sys1/sys/devices", "sys1/sys/devices/system", "sys1/sys/devices/system/cpu",
		"sys1/sys/devices/system/node", "sys1/sys/bus", "sys1/sys/bus/pci", "sys1/sys/bus/pci/devices",
		"sys1/sys/bus/pci/devices/0000:00:00.0", "sys1/sys/bus/pci/devices/0000:1b:00.0",
	};
	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++)
		dirs(made[i]);
	put("sys1/proc/sys/kernel/random/boot_id", "0f5a4c1e-8d2b-4c7e-9a31-5b6e2f0d9c84\n");
	put("sys1/sys/devices/system/cpu/online", "0-63\n");
	put("sys1/sys/devices/system/cpu/possible", "0-63\n");
	put("sys1/sys/devices/system/node/online", "0-1\n");
}

static void test_key(void)
{
	char root[300], k1[160], k2[160], err[DDPENV_ERRLEN];

	fake_sys();
	snprintf(root, sizeof(root), "%s/sys1", tmp);
	test_cond("a key from the kernel's view", ddpenv_topo_cache_key(root, k1, sizeof(k1), err, sizeof(err)) == 0);
	test_cond("... begins with the boot id", strncmp(k1, "0f5a4c1e-8d2b-4c7e-9a31-5b6e2f0d9c84-hwloc", 42) == 0);
	test_cond("... the same when asked again", ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err)) == 0 &&
		  strcmp(k1, k2) == 0);
	dirs("sys1/sys/bus/pci/devices/0000:b3:00.0");
	ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err));
	test_cond("a PCI device more (hot-plugged): another key", strcmp(k1, k2) != 0);
	char p[512];
	snprintf(p, sizeof(p), "%s/sys1/sys/bus/pci/devices/0000:b3:00.0", tmp);
	rmdir(p);
	ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err));
	test_cond("... and the same key once it is gone", strcmp(k1, k2) == 0);
	put("sys1/sys/devices/system/cpu/online", "0-31,33-63\n");
	ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err));
	test_cond("a CPU taken offline: another key", strcmp(k1, k2) != 0);
	put("sys1/sys/devices/system/cpu/online", "0-63\n");
	put("sys1/proc/sys/kernel/random/boot_id", "7e0c9b1a-2d4f-4a66-8b11-c3d5e7f90a12\n");
	ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err));
	test_cond("another boot: another key", strcmp(k1, k2) != 0);
	put("sys1/proc/sys/kernel/random/boot_id", "not a boot id\n");
	test_cond("a boot id that is not one is refused", ddpenv_topo_cache_key(root, k2, sizeof(k2), err, sizeof(err)) < 0);
	test_err("... naming the file and what was expected", err, "boot_id: cannot read this boot's id (expected 36 hex digits and dashes)");
	test_cond("this machine's key", ddpenv_topo_cache_key("", k2, sizeof(k2), err, sizeof(err)) == 0);
}

static ino_t inode(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_ino : 0;
}

/* the file is a whole export again, root's, 0644 */
static int rewritten(const char *p, ino_t before)
{
	struct stat st;
	char head[6] = "";
	FILE *f = fopen(p, "r");
	if (f) {
		if (!fgets(head, sizeof(head), f))
			head[0] = '\0';
		fclose(f);
	}
	return lstat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && (st.st_mode & 07777) == 0644 &&
	       st.st_ino != before && strcmp(head, "<?xml") == 0;
}

static void test_file(void)
{
	char cache[300], path[DDPENV_PATHLEN], p2[DDPENV_PATHLEN], err[DDPENV_ERRLEN], a[512], b[512];
	struct ddpenv_topo *t1, *t2;
	ino_t ino;

	snprintf(cache, sizeof(cache), "%s/cache", tmp);
	test_cond("the first step: the folder made and the machine's export written",
		  ddpenv_topo_cache_ensure(cache, "", path, sizeof(path), err, sizeof(err)) == 0);
	if (t_fail)
		printf("#   %s\n", err);
	struct stat st;
	test_cond("... a folder of root's, 0755", stat(cache, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 0755);
	test_cond("... a file of root's, 0644", rewritten(path, 0));
	ino = inode(path);
	test_cond("the next step: the same file, kept",
		  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && strcmp(path, p2) == 0 &&
		  inode(path) == ino);
	/* the same machine as discovery sees it */
	test_cond("the kept topology loads", ddpenv_topo_load_cached(path, &t1, err, sizeof(err)) == 0);
	test_cond("discovery", ddpenv_topo_load(NULL, 1, &t2, err, sizeof(err)) == 0);
	test_cond("... the same allowed CPUs (this process's cgroup, read at load)",
		  ddpenv_topo_allowed(t1, a, sizeof(a), err, sizeof(err)) == 0 &&
		  ddpenv_topo_allowed(t2, b, sizeof(b), err, sizeof(err)) == 0 && strcmp(a, b) == 0);
	test_cond("... the same GPUs", ddpenv_topo_gpu_count(t1) == ddpenv_topo_gpu_count(t2));
	test_cond("... and says where it came from", strstr(ddpenv_topo_source(t1), "this machine (hwloc, kept in ") != NULL);
	ddpenv_topo_free(t1);
	ddpenv_topo_free(t2);

	/* what is not a whole export of root's is written anew */
	char stale[512];
	snprintf(stale, sizeof(stale), "%s/topology-0f5a4c1e-8d2b-4c7e-9a31-5b6e2f0d9c84-hwloc20900-00.xml", cache);
	FILE *f = fopen(stale, "w");
	if (f) {
		fputs("<?xml version=\"1.0\"?>\n", f);
		fclose(f);
	}
	f = fopen(path, "w");
	if (f) {
		fputs("<?xml version=\"1.0\"?>\n<topology>not hwloc's", f);
		fclose(f);
	}
	ino = inode(path);
	test_cond("a corrupt file is written anew", ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 &&
		  rewritten(path, ino));
	test_cond("... and another boot's file removed", access(stale, F_OK) < 0);
	/* whole at its end but not hwloc's inside (only root writes there):
	 * the per-step check reads the end alone; the step's load refuses it
	 * and the plugin discovers instead */
	f = fopen(path, "w");
	if (f) {
		fputs("<?xml version=\"1.0\"?>\n<topology>not hwloc's</topology>\n", f);
		fclose(f);
	}
	ino = inode(path);
	test_cond("a file whole at its end is kept by the per-step check (no hwloc load)",
		  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && inode(path) == ino);
	test_cond("... and refused by the step's load, naming the file",
		  ddpenv_topo_load_cached(path, &t1, err, sizeof(err)) < 0 && strstr(err, path) != NULL);
	unlink(path);
	test_cond("... a missing file is written anew", ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 &&
		  rewritten(path, 0));
	if (truncate(path, 0) == 0) {
		ino = inode(path);
		test_cond("an empty (truncated) file is written anew",
			  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && rewritten(path, ino));
	}
	if (chown(path, 1000, 1000) == 0) {
		ino = inode(path);
		test_cond("a file of a user's is written anew, root's",
			  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && rewritten(path, ino));
	}
	chmod(path, 0666);
	ino = inode(path);
	test_cond("a file others can write is written anew, 0644",
		  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && rewritten(path, ino));
	/* a link planted in its place: replaced, its target untouched */
	char target[512];
	snprintf(target, sizeof(target), "%s/target", tmp);
	put("target", "precious\n");
	unlink(path);
	if (symlink(target, path) == 0) {
		test_cond("a link in its place is replaced by a file",
			  ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) == 0 && rewritten(path, 0));
		f = fopen(target, "r");
		char line[32] = "";
		if (f) {
			if (!fgets(line, sizeof(line), f))
				line[0] = '\0';
			fclose(f);
		}
		test_streq("... and the link's target untouched", line, "precious\n");
	}
	/* a folder that is not root's alone is not used */
	chmod(cache, 0777);
	test_cond("a folder others can write is refused", ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) < 0);
	test_err("... naming it and what was expected", err, "expected a folder of root's that only root can write (owner uid 0, mode 0777): not used");
	chmod(cache, 0755);
	if (chown(cache, 1000, 1000) == 0) {
		test_cond("a folder of a user's is refused", ddpenv_topo_cache_ensure(cache, "", p2, sizeof(p2), err, sizeof(err)) < 0);
		test_err("... saying whose", err, "(owner uid 1000, mode 0755): not used");
		chown(cache, 0, 0);
	}
	snprintf(p2, sizeof(p2), "%s/no/such", tmp);
	test_cond("a folder whose parent is missing", ddpenv_topo_cache_ensure(p2, "", path, sizeof(path), err, sizeof(err)) < 0);
	test_err("... is named", err, "/no/such: cannot make the folder: No such file or directory");
	test_cond("no topology_cache: refused", ddpenv_topo_cache_ensure("", "", path, sizeof(path), err, sizeof(err)) < 0);
}

/* On a read-only file system (a bind mount of tmp, read-only, in a mount
 * namespace of a child's own): the error from ensure, through a pipe. */
static void test_read_only(void)
{
	int fds[2];
	char err[DDPENV_ERRLEN] = "", err2[DDPENV_ERRLEN] = "";

	if (pipe(fds) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		char dir[300], path[DDPENV_PATHLEN], e[2 * DDPENV_ERRLEN + 2] = "";
		close(fds[0]);
		if (unshare(CLONE_NEWNS) == 0 && mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0 &&
		    mount(tmp, tmp, "none", MS_BIND, NULL) == 0 &&
		    mount("none", tmp, "none", MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) == 0) {
			/* a new folder, then the existing one emptied of its file */
			snprintf(dir, sizeof(dir), "%s/ro-new", tmp);
			ddpenv_topo_cache_ensure(dir, "", path, sizeof(path), e, DDPENV_ERRLEN);
			size_t l = strlen(e);
			e[l++] = '\n';
			snprintf(dir, sizeof(dir), "%s/cache-empty", tmp);
			ddpenv_topo_cache_ensure(dir, "", path, sizeof(path), e + l, DDPENV_ERRLEN);
		} else {
			snprintf(e, sizeof(e), "SKIP %s", strerror(errno));
		}
		ssize_t w = write(fds[1], e, strlen(e));
		_exit(w < 0);
	}
	close(fds[1]);
	char buf[2 * DDPENV_ERRLEN + 2] = "";
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	waitpid(pid, NULL, 0);
	if (strncmp(buf, "SKIP ", 5) == 0) {
		test_skip("a read-only file system", buf + 5);
		return;
	}
	char *nl = strchr(buf, '\n');
	if (nl) {
		*nl = '\0';
		snprintf(err2, sizeof(err2), "%s", nl + 1);
	}
	snprintf(err, sizeof(err), "%s", buf);
	test_err("read-only: a folder cannot be made, saying why", err, "cannot make the folder: Read-only file system");
	test_err("read-only: an export cannot be written, saying why", err2, "cannot write in it: Read-only file system");
}

/* slurmd run with HWLOC_PLUGINS_BLACKLIST naming hwloc's plugins
 * (docs/admin.md: each new slurmstepd then loads none): the kept export,
 * written and read in such a process, gives the same plan inputs as
 * discovery with every plugin (a child: hwloc reads the variable once). */
static void test_no_plugins(void)
{
	char cache[300], path[DDPENV_PATHLEN], err[DDPENV_ERRLEN], a[512] = "", b[512] = "";
	struct ddpenv_topo *t;
	int fds[2];
	char got[1100] = "";

	snprintf(cache, sizeof(cache), "%s/cache-noplug", tmp);
	if (ddpenv_topo_load(NULL, 1, &t, err, sizeof(err)) == 0) {
		ddpenv_topo_allowed(t, a, sizeof(a), err, sizeof(err));
		snprintf(a + strlen(a), sizeof(a) - strlen(a), " gpus %zu", ddpenv_topo_gpu_count(t));
		ddpenv_topo_free(t);
	}
	if (pipe(fds) < 0)
		return;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		setenv("HWLOC_PLUGINS_BLACKLIST",
		       "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_levelzero,hwloc_xml_libxml,hwloc_cuda,hwloc_nvml,hwloc_rsmi", 1);
		if (ddpenv_topo_cache_ensure(cache, "", path, sizeof(path), err, sizeof(err)) == 0 &&
		    ddpenv_topo_load_cached(path, &t, err, sizeof(err)) == 0) {
			ddpenv_topo_allowed(t, b, sizeof(b), err, sizeof(err));
			snprintf(b + strlen(b), sizeof(b) - strlen(b), " gpus %zu", ddpenv_topo_gpu_count(t));
			ddpenv_topo_free(t);
		} else {
			snprintf(b, sizeof(b), "error: %.500s", err);
		}
		_exit(write(fds[1], b, strlen(b)) < 0);
	}
	close(fds[1]);
	ssize_t n = pid > 0 ? read(fds[0], got, sizeof(got) - 1) : -1;
	got[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	printf("#   every plugin: %s; none: %s\n", a, got);
	test_cond("without hwloc's plugins: the export written and kept gives discovery's CPUs and GPUs",
		  a[0] && strcmp(a, got) == 0);
}

/* hwloc plugins (.../hwloc/hwloc_NAME.so) this process has mapped. */
static int plugins_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024], last[1024] = "";
	int n = 0;

	while (f && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "/hwloc/hwloc_");
		if (p && strstr(p, ".so") && strcmp(p, last) != 0) {
			n++;
			snprintf(last, sizeof(last), "%s", p);
		}
	}
	if (f)
		fclose(f);
	return n;
}

struct load_args {
	const char *path;
	int noplug;
	const char *was;
};

/* In a new process (hwloc's first topology there): load a->path with or
 * without the plugins, HWLOC_PLUGINS_PATH preset to a->was (NULL: unset);
 * out gets "CPUS gpus N plugins N path VALUE source SOURCE", or "error:". */
static void load_child(const void *arg, char *b, size_t len)
{
	const struct load_args *a = arg;
	char err[DDPENV_ERRLEN];
	struct ddpenv_topo *t;

	if (a->was)
		setenv("HWLOC_PLUGINS_PATH", a->was, 1);
	else
		unsetenv("HWLOC_PLUGINS_PATH");
	if ((a->noplug ? ddpenv_topo_load_noplugins(a->path, 1, &t, err, sizeof(err))
		       : ddpenv_topo_load_cached(a->path, &t, err, sizeof(err))) == 0) {
		const char *now = getenv("HWLOC_PLUGINS_PATH");
		ddpenv_topo_allowed(t, b, 300, err, sizeof(err));
		snprintf(b + strlen(b), len - strlen(b), " gpus %zu plugins %d path %s source %.300s",
			 ddpenv_topo_gpu_count(t), plugins_mapped(), now ? now : "(unset)", ddpenv_topo_source(t));
		ddpenv_topo_free(t);
	} else {
		const char *now = getenv("HWLOC_PLUGINS_PATH");
		snprintf(b, len, "error: %.500s; path %s", err, now ? now : "(unset)");
	}
}

static void load_in_child(const char *path, int noplug, const char *was, char *out, size_t len)
{
	struct load_args a = { path, noplug, was };
	in_child(load_child, &a, out, len);
}

/* What each task's child does (spank/ddp_stepd.c): the kept export's
 * mapped copy adopted (hwloc initializes its components there too) with
 * HWLOC_PLUGINS_PATH at no folder for the load alone: the same CPUs
 * and GPUs as with the plugins, none of them opened, the variable as it
 * was before (unset or the admin's), and an export that cannot be read
 * refused with the variable put back all the same. */
static void test_load_noplugins(void)
{
	char cache[300], path[DDPENV_PATHLEN], err[DDPENV_ERRLEN], with[1200], none[1200], exp[1300];
	int mapped;

	snprintf(cache, sizeof(cache), "%s/cache-task", tmp);
	if (ddpenv_topo_cache_ensure(cache, "", path, sizeof(path), err, sizeof(err)) < 0 ||
	    ddpenv_topo_cache_map(path, err, sizeof(err)) < 0) {
		test_cond("the kept export and its mapped copy for the task's load", 0);
		printf("#   %s\n", err);
		return;
	}
	load_in_child(path, 0, NULL, with, sizeof(with));
	load_in_child(path, 1, NULL, none, sizeof(none));
	printf("#   with the plugins: %s\n#   without: %s\n", with, none);
	/* the plain load's count of plugins: 0 where none is installed (the
	 * Debian 12 host), 5 in Debian 13's root (tests/cluster/release.sh) */
	char *pl = strstr(with, " plugins ");
	mapped = pl ? atoi(pl + 9) : -1;
	printf("#   hwloc plugins the plain load opened: %d%s\n", mapped,
	       mapped == 0 ? " (none installed here: the count below cannot tell the loads apart)" : "");
	char *w = strstr(with, " plugins "), *o = strstr(none, " plugins ");
	test_cond("the task's load: the same CPUs and GPUs as with hwloc's plugins",
		  w && o && w - with == o - none && strncmp(with, none, (size_t)(w - with)) == 0);
	snprintf(exp, sizeof(exp), " plugins 0 path (unset) source this machine (hwloc, mapped from %.*s.shm)",
		 (int)strlen(path) - 4, path);
	test_cond("the task's load: no hwloc plugin opened, HWLOC_PLUGINS_PATH unset again, the mapped copy named",
		  o && strcmp(o, exp) == 0);
	unsetenv("HWLOC_PLUGINS_PATH");
	unsetenv("HWLOC_PLUGINS_BLACKLIST");
	int said = ddpenv_topo_plugin_count();
	printf("#   ddpenv_topo_plugin_count: %d\n", said);
	test_cond("ddpenv_topo_plugin_count: as many plugins as hwloc opened at a first topology", said == mapped);
	load_in_child(path, 1, "/opt/site/hwloc", none, sizeof(none));
	test_cond("the task's load: an admin's HWLOC_PLUGINS_PATH is put back", strstr(none, " path /opt/site/hwloc ") != NULL);
	load_in_child("/nonexistent/node.xml", 1, "/opt/site/hwloc", none, sizeof(none));
	test_err("the task's load: a missing export refused, the variable put back", none,
		 "cannot be read as an hwloc XML file (lstopo --of xml): No such file or directory; path /opt/site/hwloc");
}

/* The plugins hwloc would open: the .so files of HWLOC_PLUGINS_PATH's
 * folders, less those HWLOC_PLUGINS_BLACKLIST names. */
static void test_plugin_count(void)
{
	char d[300], e[300], list[700];

	snprintf(d, sizeof(d), "%s/plugins", tmp);
	snprintf(e, sizeof(e), "%s/plugins-none", tmp);
	mkdir(d, 0755);
	mkdir(e, 0755);
	put("plugins/hwloc_pci.so", "");
	put("plugins/hwloc_xml_libxml.so", "");
	put("plugins/README", "");
	dirs("plugins/hwloc_dir.so");
	setenv("HWLOC_PLUGINS_PATH", d, 1);
	unsetenv("HWLOC_PLUGINS_BLACKLIST");
	test_cond("plugin count: the folder's two .so files (not a README, not a folder)", ddpenv_topo_plugin_count() == 2);
	setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_pci,hwloc_gl", 1);
	test_cond("plugin count: one the blacklist names left out", ddpenv_topo_plugin_count() == 1);
	unsetenv("HWLOC_PLUGINS_BLACKLIST");
	snprintf(list, sizeof(list), "%s:/nonexistent:%s", e, d);
	setenv("HWLOC_PLUGINS_PATH", list, 1);
	test_cond("plugin count: each folder of a list, a missing one none", ddpenv_topo_plugin_count() == 2);
	setenv("HWLOC_PLUGINS_PATH", "/dev/null", 1);
	test_cond("plugin count: /dev/null (what the task's load sets) none", ddpenv_topo_plugin_count() == 0);
	unsetenv("HWLOC_PLUGINS_PATH");
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/topo-cache-XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	test_key();
	test_plugin_count();
	if (geteuid() != 0) {
		test_skip("the kept file (root's, in a folder of root's)", "not root");
	} else {
		test_file();
		char p[300];
		snprintf(p, sizeof(p), "%s/cache-empty", tmp);
		mkdir(p, 0755);
		test_read_only();
		test_no_plugins();
		test_load_noplugins();
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmp);
	return test_report();
}
