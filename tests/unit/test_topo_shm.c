/* The kept topology's mapped copy (libddpenv/src/topo_shm.c), whose
 * allowed set is this process's cgroup's (test_cgroup.c: the fake trees),
 * here in a cpuset of the test's own; the copy written beside the export,
 * mapped by a task with
 * the plan an export gives (a DGX H100's too), and refused (the export
 * read instead) when stale, corrupt, truncated, another hwloc's, a user's,
 * writable by others or where its address is taken; never written on a
 * read-only file system. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddpenv.h"
#include "test.h"
#include "tmptree.h"
#include "child.h"

/* The kept export loaded in a new process as a task's child loads it
 * (hwloc's plugins left out): "CPUS gpus N | SOURCE" or "error: ..." */
static void task_load(const void *arg, char *out, size_t len)
{
	char err[DDPENV_ERRLEN], a[512] = "";
	struct ddpenv_topo *t;

	if (ddpenv_topo_load_noplugins(arg, 1, &t, err, sizeof(err)) < 0) {
		snprintf(out, len, "error: %s", err);
		return;
	}
	ddpenv_topo_allowed(t, a, sizeof(a), err, sizeof(err));
	snprintf(out, len, "%s gpus %zu | %s", a, ddpenv_topo_gpu_count(t), ddpenv_topo_source(t));
	ddpenv_topo_free(t);
}

/* The same with something already at the mapped copy's address. */
static void task_load_taken(const void *arg, char *out, size_t len)
{
	void *want = (void *)(uintptr_t)0x200000000000ull;
	void *m = mmap(want, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (m != want) {
		snprintf(out, len, "SKIP cannot map the address first: %s", strerror(errno));
		return;
	}
	task_load(arg, out, len);
}

static ino_t inode(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_ino : 0;
}

/* The part of a task_load line before " | " */
static int same_inputs(const char *a, const char *b)
{
	const char *x = strstr(a, " | "), *y = strstr(b, " | ");
	return x && y && x - a == y - b && strncmp(a, b, (size_t)(x - a)) == 0;
}

/* change n bytes at off of path, in place (as only root could) */
static void scribble(const char *path, off_t off, const char *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);
	if (fd >= 0) {
		if (pwrite(fd, bytes, n, off) != (ssize_t)n)
			printf("# could not write %s\n", path);
		close(fd);
	}
}

static void test_map(void)
{
	char cache[300], xml[DDPENV_PATHLEN], shm[DDPENV_PATHLEN], err[DDPENV_ERRLEN], exported[1200], mapped[1200];
	char want[DDPENV_PATHLEN + 64];
	long page = sysconf(_SC_PAGESIZE);
	struct stat st;
	ino_t ino;

	snprintf(cache, sizeof(cache), "%s/cache", tmp);
	if (ddpenv_topo_cache_ensure(cache, "", xml, sizeof(xml), err, sizeof(err)) < 0) {
		test_cond("the kept export", 0);
		printf("#   %s\n", err);
		return;
	}
	snprintf(shm, sizeof(shm), "%.*s.shm", (int)strlen(xml) - 4, xml);
	in_child(task_load, xml, exported, sizeof(exported));
	test_err("no mapped copy yet: the task reads the export, saying why", exported,
		 ".shm: No such file or directory)");
	test_cond("the mapped copy written beside the export", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0);
	if (t_fail)
		printf("#   %s\n", err);
	test_cond("... a file of root's, 0644, whole pages", stat(shm, &st) == 0 && st.st_uid == 0 &&
		  (st.st_mode & 07777) == 0644 && st.st_size > page && st.st_size % page == 0);
	ino = inode(shm);
	test_cond("the next step: kept (its seal checked)", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 &&
		  inode(shm) == ino);
	in_child(task_load, xml, mapped, sizeof(mapped));
	printf("#   export: %s\n#   mapped: %s\n", exported, mapped);
	snprintf(want, sizeof(want), "this machine (hwloc, mapped from %s)", shm);
	test_err("a task maps it", mapped, want);
	test_cond("... with the export's allowed CPUs and GPUs", same_inputs(exported, mapped));

	/* what is not the copy written is refused by the task, which reads
	 * the export, and written anew by the next step's check */
	scribble(shm, page + 64, "\x5a\xa5\x5a\xa5", 4);
	in_child(task_load, xml, mapped, sizeof(mapped));
	test_err("a copy written since it was kept: refused by the task", mapped,
		 "written since it was kept (its modification time is not the one its head holds)");
	test_cond("... the export's CPUs and GPUs all the same", same_inputs(exported, mapped));
	ino = inode(shm);
	test_cond("... and written anew at the next step (its seal)",
		  ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 && inode(shm) != ino);
	scribble(shm, 0, "not ours", 8);
	in_child(task_load, xml, mapped, sizeof(mapped));
	test_err("a copy without this program's header: the task reads the export", mapped,
		 "not mapped: ");
	test_err("... saying why", mapped, "not a mapped topology of this program's");
	test_cond("... the export's CPUs and GPUs all the same", same_inputs(exported, mapped));
	ino = inode(shm);
	test_cond("... and written anew at the next step", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 &&
		  inode(shm) != ino);
	if (truncate(shm, page) == 0) {
		in_child(task_load, xml, mapped, sizeof(mapped));
		test_err("a truncated copy: refused by the task", mapped, "expected whole pages of");
		ino = inode(shm);
		test_cond("... and written anew", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 && inode(shm) != ino);
	}
	/* the header's hwloc API (offset 20) of another hwloc */
	scribble(shm, 20, "\x00\x00\x01\x00", 4);
	in_child(task_load, xml, mapped, sizeof(mapped));
	test_err("a copy of another hwloc's: refused by the task", mapped, "written by hwloc API 0x10000");
	test_cond("... and written anew", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0);
	if (chown(shm, 1000, 1000) == 0) {
		in_child(task_load, xml, mapped, sizeof(mapped));
		test_err("a copy of a user's: refused by the task", mapped,
			 "expected a file of root's that only root can write (owner uid 1000");
		ino = inode(shm);
		test_cond("... and written anew, root's", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 &&
			  inode(shm) != ino && stat(shm, &st) == 0 && st.st_uid == 0);
	}
	chmod(shm, 0666);
	in_child(task_load, xml, mapped, sizeof(mapped));
	test_err("a copy others can write: refused by the task", mapped, "mode 0666");
	test_cond("... and written anew, 0644", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 &&
		  stat(shm, &st) == 0 && (st.st_mode & 07777) == 0644);

	in_child(task_load_taken, xml, mapped, sizeof(mapped));
	if (strncmp(mapped, "SKIP ", 5) == 0) {
		test_skip("the address taken in the task", mapped + 5);
	} else {
		test_err("its address taken in the task: the export read instead", mapped,
			 "the address is taken in this process");
		test_cond("... with the same CPUs and GPUs", same_inputs(exported, mapped));
	}

	/* a new export (another boot's file, or this one rewritten) takes
	 * the old copy with it */
	unlink(xml);
	test_cond("an export written anew removes the old mapped copy",
		  ddpenv_topo_cache_ensure(cache, "", xml, sizeof(xml), err, sizeof(err)) == 0 && access(shm, F_OK) < 0);
	test_cond("... which the next step writes again", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0 &&
		  access(shm, F_OK) == 0);
	test_cond("a path that is no kept export is refused", ddpenv_topo_cache_map("/tmp/x.json", err, sizeof(err)) < 0);
	test_err("... saying what was expected", err, "/tmp/x.json: expected the path of a kept export (.xml)");
}

/* A DGX H100's export, kept and mapped as if it were this machine's: the
 * plan of 8 tasks and 8 GPUs, CPUs as given, is the export's. */
static void test_plan_dgx(void)
{
	char xml[600], err[DDPENV_ERRLEN], cmd[1300];
	struct ddpenv_topo *a = NULL, *b = NULL;
	struct ddpenv_bind_plan pa, pb;
	struct ddpenv_env env;

	snprintf(xml, sizeof(xml), "%s/dgx.xml", tmp);
	snprintf(cmd, sizeof(cmd), "cp '%s/dgx-h100.xml' '%s'", TOPODIR, xml);
	if (system(cmd) != 0) {
		test_cond("a DGX H100's export copied", 0);
		return;
	}
	memset(&pa, 0, sizeof(pa));
	memset(&pb, 0, sizeof(pb));
	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "SLURM_NODEID", "0");
	ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", "8");
	ddpenv_env_set(&env, "SLURM_STEP_GPUS", "0,1,2,3,4,5,6,7");
	ddpenv_env_set(&env, "CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
	test_cond("a DGX H100's mapped copy written", ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0);
	test_cond("... and mapped", ddpenv_topo_load_cached(xml, &b, err, sizeof(err)) == 0 &&
		  strstr(ddpenv_topo_source(b), "mapped from") != NULL);
	test_cond("... its export read", ddpenv_topo_load(xml, 1, &a, err, sizeof(err)) == 0);
	if (!a || !b)
		goto out;
	test_cond("the plans of 8 tasks and 8 GPUs",
		  ddpenv_bind_plan(a, &env, DDPENV_BIND_AUTO, "0-223", &pa, err, sizeof(err)) == 0 &&
		  ddpenv_bind_plan(b, &env, DDPENV_BIND_AUTO, "0-223", &pb, err, sizeof(err)) == 0);
	int same = pa.ngpus == pb.ngpus && pa.ntasks == pb.ntasks && pa.ntasks == 8 && pa.ngpus == 8 &&
		   strcmp(pa.visible, pb.visible) == 0;
	for (size_t i = 0; same && i < pa.ngpus; i++)
		same = strcmp(pa.gpus[i].busid, pb.gpus[i].busid) == 0 && pa.gpus[i].numa == pb.gpus[i].numa &&
		       strcmp(pa.gpus[i].near, pb.gpus[i].near) == 0 && strcmp(pa.gpus[i].nic, pb.gpus[i].nic) == 0 &&
		       strcmp(pa.gpus[i].nic_how, pb.gpus[i].nic_how) == 0;
	for (uint32_t i = 0; same && i < pa.ntasks; i++)
		same = pa.tasks[i].gpu == pb.tasks[i].gpu && strcmp(pa.tasks[i].cpus, pb.tasks[i].cpus) == 0 &&
		       strcmp(pa.tasks[i].mems, pb.tasks[i].mems) == 0;
	if (pa.ntasks == 8 && pb.ntasks == 8)
		printf("#   task 7: GPU %s near %s NIC %s, CPUs %s (export) and GPU %s, CPUs %s (mapped)\n",
		       pa.gpus[pa.tasks[7].gpu >= 0 ? pa.tasks[7].gpu : 0].busid, pa.gpus[0].near, pa.gpus[0].nic,
		       pa.tasks[7].cpus, pb.gpus[pb.tasks[7].gpu >= 0 ? pb.tasks[7].gpu : 0].busid, pb.tasks[7].cpus);
	test_cond("... the same: GPUs, NUMA nodes, near CPUs, NICs, each task's CPUs and memory", same);
out:
	ddpenv_bind_plan_free(&pa);
	ddpenv_bind_plan_free(&pb);
	ddpenv_env_free(&env);
	ddpenv_topo_free(a);
	ddpenv_topo_free(b);
}

/* In a cpuset of the test's own (cgroup v1 or v2, whichever this machine
 * runs), CPU LAST alone: the export's load (hwloc reading the cgroup) and
 * the mapped copy (ours) allow the same CPU. */
static char cg_dir[600], cg_procs[700];

static int cg_write(const char *dir, const char *file, const char *v)
{
	char p[800];
	int fd, ok;
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	if ((fd = open(p, O_WRONLY)) < 0)
		return -1;
	ok = write(fd, v, strlen(v)) == (ssize_t)strlen(v);
	close(fd);
	return ok ? 0 : -1;
}

static void in_cpuset(const void *arg, char *out, size_t len)
{
	char pid[32];
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (cg_write(cg_dir, cg_procs, pid) < 0) {
		snprintf(out, len, "SKIP cannot join %s: %s", cg_dir, strerror(errno));
		return;
	}
	task_load(arg, out, len);
}

static void test_real_cgroup(const char *xml_kept)
{
	char out[1200], last[16], exported[1200];
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	const char *why = NULL;
	int v2 = access("/sys/fs/cgroup/cpuset.cpus.effective", R_OK) == 0;

	snprintf(last, sizeof(last), "%ld", n - 1);
	snprintf(cg_procs, sizeof(cg_procs), "%s", v2 ? "cgroup.procs" : "tasks");
	if (v2) {
		snprintf(cg_dir, sizeof(cg_dir), "/sys/fs/cgroup/ddp-test-%d", (int)getpid());
		if (cg_write("/sys/fs/cgroup", "cgroup.subtree_control", "+cpuset") < 0)
			why = "cgroup v2: cannot enable cpuset for the root's children";
	} else if (access("/sys/fs/cgroup/cpuset/cpuset.cpus", R_OK) == 0) {
		snprintf(cg_dir, sizeof(cg_dir), "/sys/fs/cgroup/cpuset/ddp-test-%d", (int)getpid());
	} else {
		why = "no cpuset cgroup mounted at /sys/fs/cgroup";
	}
	if (!why && mkdir(cg_dir, 0755) < 0)
		why = "cannot make a cpuset";
	if (!why && ((!v2 && cg_write(cg_dir, "cpuset.mems", "0") < 0) || cg_write(cg_dir, "cpuset.cpus", last) < 0))
		why = "cannot set the cpuset's CPUs";
	if (why) {
		test_skip("a task in a cpuset of one CPU", why);
		if (cg_dir[0])
			rmdir(cg_dir);
		return;
	}
	/* the export read without the copy, then the copy */
	char shm[DDPENV_PATHLEN], moved[DDPENV_PATHLEN + 8];
	snprintf(shm, sizeof(shm), "%.*s.shm", (int)strlen(xml_kept) - 4, xml_kept);
	snprintf(moved, sizeof(moved), "%s.away", shm);
	rename(shm, moved);
	in_child(in_cpuset, xml_kept, exported, sizeof(exported));
	rename(moved, shm);
	in_child(in_cpuset, xml_kept, out, sizeof(out));
	rmdir(cg_dir);
	if (strncmp(out, "SKIP ", 5) == 0) {
		test_skip("a task in a cpuset of one CPU", out + 5);
		return;
	}
	printf("#   in cpuset %s (CPU %s): export: %s\n#   mapped: %s\n", cg_dir, last, exported, out);
	test_cond("in a cpuset of CPU LAST: the export's load allows that CPU alone (hwloc)",
		  strncmp(exported, last, strlen(last)) == 0 && exported[strlen(last)] == ' ');
	test_cond("... and so does the mapped copy (the cgroup read as hwloc reads it)",
		  strstr(out, "mapped from") != NULL && same_inputs(exported, out));
}

/* On a read-only file system: the copy is not written, and says why. */
static void ro_map(const void *arg, char *out, size_t len)
{
	char err[DDPENV_ERRLEN] = "";
	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(tmp, tmp, "none", MS_BIND, NULL) < 0 ||
	    mount("none", tmp, "none", MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0) {
		snprintf(out, len, "SKIP %s", strerror(errno));
		return;
	}
	snprintf(out, len, "%d %s", ddpenv_topo_cache_map(arg, err, sizeof(err)), err);
}

static void test_read_only(const char *xml_kept)
{
	char shm[DDPENV_PATHLEN], out[1200];

	snprintf(shm, sizeof(shm), "%.*s.shm", (int)strlen(xml_kept) - 4, xml_kept);
	unlink(shm);
	in_child(ro_map, xml_kept, out, sizeof(out));
	if (strncmp(out, "SKIP ", 5) == 0) {
		test_skip("a read-only file system", out + 5);
		return;
	}
	test_err("read-only: the mapped copy is not written, saying why", out, "-1 ");
	test_err("... naming it", out, ".shm: cannot write beside it: Read-only file system");
	in_child(task_load, xml_kept, out, sizeof(out));
	test_err("... and the task reads the export", out, "kept in ");
}

int main(void)
{
	char cache[300], xml[DDPENV_PATHLEN], err[DDPENV_ERRLEN];

	snprintf(tmp, sizeof(tmp), "/tmp/topo-shm-XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	if (geteuid() != 0) {
		test_skip("the mapped copy (root's, in a folder of root's)", "not root");
	} else {
		test_map();
		test_plan_dgx();
		snprintf(cache, sizeof(cache), "%s/cache", tmp);
		if (ddpenv_topo_cache_ensure(cache, "", xml, sizeof(xml), err, sizeof(err)) == 0 &&
		    ddpenv_topo_cache_map(xml, err, sizeof(err)) == 0) {
			test_real_cgroup(xml);
			test_read_only(xml);
		} else {
			test_cond("the kept export and its copy", 0);
		}
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmp);
	return test_report();
}
