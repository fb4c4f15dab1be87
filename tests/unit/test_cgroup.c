/* The CPUs this process's cpuset cgroup allows (libddpenv/src/cgroup.c),
 * found as hwloc finds them, in fake trees: cgroup v2 and v1 at their
 * standard places, /proc/self/cpuset before /proc/self/cgroup, a mount
 * found in /proc/mounts (cgroup2 with the cpuset controller, a v1 mount
 * with noprefix), none at all, a group without its file, a list too long
 * to take.  On this machine: test_topo_shm.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddpenv.h"
#include "test.h"
#include "tmptree.h"

/* ddpenv_cgroup_cpus on the fake tree tmp/root: r gets its answer */
static int cg(const char *root, char *list, size_t len, char *how, size_t howlen)
{
	char sysroot[600];
	snprintf(sysroot, sizeof(sysroot), "%s/%s", tmp, root);
	return ddpenv_cgroup_cpus(sysroot, list, len, how, howlen);
}

static void test_cgroup_fake(void)
{
	char list[64], how[DDPENV_ERRLEN], big[20000];
	int r;

	/* cgroup v2 at the standard place: the unified line names the group */
	dirs("v2/proc/self");
	dirs("v2/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0");
	put("v2/sys/fs/cgroup/cpuset.cpus.effective", "0-63\n");
	put("v2/proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n");
	put("v2/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/cpuset.cpus.effective", "2-5,8\n");
	r = cg("v2", list, sizeof(list), how, sizeof(how));
	test_cond("cgroup v2: the task's group's effective CPUs", r == 1 && strcmp(list, "2-5,8") == 0);
	test_err("... naming the file", how,
		 "cgroup cpuset, /sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/cpuset.cpus.effective");
	/* the root group */
	put("v2/proc/self/cgroup", "0::/\n");
	r = cg("v2", list, sizeof(list), how, sizeof(how));
	test_cond("cgroup v2: the root group's", r == 1 && strcmp(list, "0-63") == 0);
	test_err("... /sys/fs/cgroup/cpuset.cpus.effective", how, ", /sys/fs/cgroup/cpuset.cpus.effective");
	/* /proc/self/cpuset first, as hwloc reads it */
	put("v2/proc/self/cpuset", "/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n");
	r = cg("v2", list, sizeof(list), how, sizeof(how));
	test_cond("/proc/self/cpuset is read before /proc/self/cgroup", r == 1 && strcmp(list, "2-5,8") == 0);
	/* a group whose file is gone: every CPU, as hwloc says */
	put("v2/proc/self/cpuset", "/gone\n");
	r = cg("v2", list, sizeof(list), how, sizeof(how));
	test_cond("a group without the file: every CPU", r == 0 && list[0] == '\0');
	test_err("... saying which file", how, "/sys/fs/cgroup/gone/cpuset.cpus.effective unreadable: every CPU");

	/* cgroup v1: the cpuset line among the others */
	dirs("v1/proc/self");
	dirs("v1/sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/step_0");
	put("v1/sys/fs/cgroup/cpuset/cpuset.cpus", "0-63\n");
	put("v1/proc/self/cgroup", "12:memory:/slurm/uid_1000/job_7/step_0\n3:cpuset:/slurm/uid_1000/job_7/step_0\n"
	    "1:name=systemd:/\n");
	put("v1/sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/step_0/cpuset.cpus", "1,3,5-7\n");
	r = cg("v1", list, sizeof(list), how, sizeof(how));
	test_cond("cgroup v1: the cpuset hierarchy's group", r == 1 && strcmp(list, "1,3,5-7") == 0);
	test_err("... naming the file", how, "/sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/step_0/cpuset.cpus");

	/* no standard place: /proc/mounts, a cgroup2 mount with cpuset */
	dirs("mnt/proc/self");
	dirs("mnt/srv/cg/a");
	dirs("mnt/srv/cg2");
	put("mnt/proc/mounts", "proc /proc proc rw 0 0\n"
	    "cgroup2 /srv/cg2 cgroup2 rw,nosuid 0 0\n"
	    "cgroup2 /srv/cg cgroup2 rw,nosuid 0 0\n");
	put("mnt/srv/cg2/cgroup.controllers", "cpu io memory pids\n");
	put("mnt/srv/cg/cgroup.controllers", "cpu cpuset io memory\n");
	put("mnt/proc/self/cgroup", "0::/a\n");
	put("mnt/srv/cg/a/cpuset.cpus.effective", "4-7\n");
	r = cg("mnt", list, sizeof(list), how, sizeof(how));
	test_cond("/proc/mounts: the first cgroup2 mount whose controllers name cpuset", r == 1 && strcmp(list, "4-7") == 0);
	test_err("... its file named", how, "/srv/cg/a/cpuset.cpus.effective");
	/* a v1 mount with noprefix reads as the cpuset file system: "cpus" */
	put("mnt/proc/mounts", "cgroup /srv/cg cgroup rw,cpuset,noprefix 0 0\n");
	put("mnt/proc/self/cgroup", "2:cpuset:/a\n");
	put("mnt/srv/cg/a/cpus", "6\n");
	r = cg("mnt", list, sizeof(list), how, sizeof(how));
	test_cond("a cgroup v1 mount with noprefix: the cpus file", r == 1 && strcmp(list, "6") == 0);
	put("mnt/proc/mounts", "cgroup /srv/cg cgroup rw,cpu,cpuacct 0 0\n");
	r = cg("mnt", list, sizeof(list), how, sizeof(how));
	test_cond("a cgroup mount without cpuset: none, every CPU", r == 0 && list[0] == '\0');
	test_err("... said", how, "no cpuset cgroup: every CPU");

	/* nothing at all */
	dirs("none/proc");
	r = cg("none", list, sizeof(list), how, sizeof(how));
	test_cond("no cgroup file system: every CPU", r == 0 && list[0] == '\0');

	/* a list longer than the caller's buffer is refused, not cut */
	memset(big, '1', sizeof(big) - 2);
	big[sizeof(big) - 2] = '\n';
	big[sizeof(big) - 1] = '\0';
	put("v1/sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/step_0/cpuset.cpus", big);
	r = cg("v1", list, sizeof(list), how, sizeof(how));
	test_cond("a list that does not fit is refused", r < 0);
	test_err("... saying what was expected", how, "cpuset.cpus: expected a CPU list of under 63 bytes");
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/cgroup-XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	test_cgroup_fake();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmp);
	return test_report();
}
