/* What binding costs slurmstepd per step, the plugin's own work alone: the
 * node's topology and the binding plan of a two-task CPU step, as the
 * plugin makes them in each step's slurmstepd (a new process, in which
 * hwloc has not yet loaded its components), three ways, interleaved:
 *
 *   discover   hwloc discovers this machine (what steps did before
 *              topology_cache)
 *   kept       post_opt's checks of the kept export and its mapped copy
 *              (a stat and a read of the export's end; the copy's SHA-256),
 *              then the load in slurmstepd (where no hwloc plugin is
 *              installed: Debian 12), which maps the copy; where plugins
 *              are, hwloc 2.x opens each at the process's first topology
 *   write      the first step of a boot: the export and its copy written,
 *              checked and used (the folder emptied before each sample)
 *   task-xml   post_opt's checks, then the export parsed in a task's child
 *              with hwloc's plugins left out (what each task did before
 *              the mapped copy)
 *   task       post_opt's checks, then the copy mapped in a task's child,
 *              plugins left out (ddpenv_topo_load_noplugins): what a step
 *              does now
 *   export     with an export named (EXPORT): a task's load of that one,
 *              hwloc's plugins left out, and the plan of a step of 8 tasks
 *              and its 8 GPUs: what a task of a GPU node whose export it
 *              is paid (tests/topologies/dgx-h100.xml: a DGX H100)
 *   export-map the same from that export's mapped copy (written once at
 *              the start, as the node's first step would): what it pays now
 *
 * Each sample is a fork; the child times its own work (CLOCK_MONOTONIC)
 * and sends it back, so the fork is not counted.  Prints each way's
 * median, quartiles and lowest in milliseconds, and kept/discover.
 *
 *   build/bench/topo_step [ROUNDS [DIR [EXPORT]]]     as root (the cache is root's)
 */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv.h"

enum way { DISCOVER, KEPT, WRITE, TASK_XML, TASK, EXPORT, EXPORT_MAP, NWAYS };
static const char *const way_name[NWAYS] = { "discover", "kept", "write", "task-xml", "task", "export",
					     "export-map" };
static const char *export_path;   /* the EXPORT ways' file, or NULL: no such ways */
static char export_kept[600];     /* its copy in the folder, beside its mapped copy */

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The plan of a step of TASKS tasks on the node (GPUS: its GPUs, or NULL),
 * made on t, then t freed.  0 or -1 with err. */
static int plan_on(struct ddpenv_topo *t, const char *tasks, const char *gpus, char *err, size_t errlen)
{
	struct ddpenv_env env;
	struct ddpenv_bind_plan plan;
	int rv;

	memset(&plan, 0, sizeof(plan));
	ddpenv_env_init(&env);
	if (ddpenv_env_set(&env, "SLURM_NODEID", "0") < 0 || ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", tasks) < 0 ||
	    (gpus && ddpenv_env_set(&env, "SLURM_STEP_GPUS", gpus) < 0)) {
		snprintf(err, errlen, "out of memory");
		rv = -1;
	} else {
		rv = ddpenv_bind_plan(t, &env, DDPENV_BIND_AUTO, NULL, &plan, err, errlen);
	}
	ddpenv_bind_plan_free(&plan);
	ddpenv_env_free(&env);
	ddpenv_topo_free(t);
	return rv;
}

/* The EXPORT ways: another machine's export (or its mapped copy) loaded
 * as a task loads its node's (hwloc's plugins left out: this child is
 * that task's, one thread), then the plan of 8 tasks and 8 GPUs.  0 or -1
 * with err. */
static int export_work(int mapped, char *err, size_t errlen)
{
	struct ddpenv_topo *t = NULL;

	if (ddpenv_topo_load_noplugins(mapped ? export_kept : export_path, mapped, &t, err, errlen) < 0)
		return -1;
	if (mapped && !strstr(ddpenv_topo_source(t), "mapped from")) {
		snprintf(err, errlen, "%s: not mapped: %s", export_kept, ddpenv_topo_source(t));
		ddpenv_topo_free(t);
		return -1;
	}
	return plan_on(t, "8", "0,1,2,3,4,5,6,7", err, errlen);
}

/* post_opt's checks of the kept export and its mapped copy (writing them
 * where they are not whole): 0, path the export's, or -1 with err */
static int kept_check(const char *dir, char *path, size_t len, char *err, size_t errlen)
{
	if (ddpenv_topo_cache_ensure(dir, "", path, len, err, errlen) < 0)
		return -1;
	return ddpenv_topo_cache_map(path, err, errlen);
}

/* The child's work for one way (a step of 2 CPU tasks): 0 or -1 with err. */
static int step_work(enum way w, const char *dir, char *err, size_t errlen)
{
	char path[DDPENV_PATHLEN];
	struct ddpenv_topo *t = NULL;
	int rv;

	if (w == EXPORT || w == EXPORT_MAP)
		return export_work(w == EXPORT_MAP, err, errlen);
	if (w == DISCOVER)
		rv = ddpenv_topo_load(NULL, 1, &t, err, errlen);
	else if (kept_check(dir, path, sizeof(path), err, errlen) < 0)
		rv = -1;
	else if (w == TASK_XML) /* kept 0: the export as an admin's, never the copy */
		rv = ddpenv_topo_load_noplugins(path, 0, &t, err, errlen);
	else
		rv = w == TASK ? ddpenv_topo_load_noplugins(path, 1, &t, err, errlen)
			       : ddpenv_topo_load_cached(path, &t, err, errlen);
	if (rv == 0 && (w == TASK || (w == KEPT && ddpenv_topo_plugin_count() == 0)) &&
	    !strstr(ddpenv_topo_source(t), "mapped from")) {
		snprintf(err, errlen, "%s: not mapped: %s", path, ddpenv_topo_source(t));
		ddpenv_topo_free(t);
		return -1;
	}
	return rv < 0 ? -1 : plan_on(t, "2", NULL, err, errlen);
}

/* Empty dir of its files (the write way's first step of a boot). */
static void empty_dir(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -f '%s'/topology-*", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "topo_step: %s failed\n", cmd);
}

/* One sample in a new process: its milliseconds, or a negative value. */
static double sample(enum way w, const char *dir)
{
	int fds[2];
	double ms = -1;

	if (w == WRITE)
		empty_dir(dir);
	if (pipe(fds) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char err[DDPENV_ERRLEN] = "";
		close(fds[0]);
		double t0 = now_ms();
		double d = step_work(w, dir, err, sizeof(err)) == 0 ? now_ms() - t0 : -1;
		if (d < 0)
			fprintf(stderr, "topo_step: %s: %s\n", way_name[w], err);
		_exit(write(fds[1], &d, sizeof(d)) == (ssize_t)sizeof(d) ? 0 : 1);
	}
	close(fds[1]);
	if (pid > 0 && read(fds[0], &ms, sizeof(ms)) != (ssize_t)sizeof(ms))
		ms = -1;
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return ms;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The value at fraction q of sorted v[n] (linear between ranks). */
static double quantile(const double *v, int n, double q)
{
	double pos = q * (n - 1);
	int i = (int)pos;
	return i + 1 < n ? v[i] + (pos - i) * (v[i + 1] - v[i]) : v[n - 1];
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	char dir[512];
	double *ms[NWAYS], med[NWAYS];

	if (rounds < 1 || rounds > 100000) {
		fprintf(stderr, "topo_step: ROUNDS %s: expected 1 to 100000\n", argv[1]);
		return 2;
	}
	if (argc > 3)
		export_path = argv[3];
	int nways = export_path ? NWAYS : EXPORT;
	if (argc > 2)
		snprintf(dir, sizeof(dir), "%s", argv[2]);
	else
		snprintf(dir, sizeof(dir), "%s/topo-step-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	snprintf(export_kept, sizeof(export_kept), "%s/export.xml", dir);
	/* hwloc as Debian installs it */
	unsetenv("HWLOC_PLUGINS_BLACKLIST");
	unsetenv("HWLOC_PLUGINS_PATH");
	if (geteuid() != 0) {
		fprintf(stderr, "topo_step: needs root (topology_cache is a folder of root's)\n");
		return 2;
	}
	double *all = calloc((size_t)rounds * NWAYS, sizeof(double));
	if (!all)
		return 1;
	for (int w = 0; w < NWAYS; w++)
		ms[w] = all + (size_t)w * (size_t)rounds;
	/* the export the kept ways read, written by a child (this process
	 * loads no hwloc component, as slurmstepd before its first step) */
	int failed = sample(WRITE, dir) < 0;
	if (!failed && export_path) {
		char cmd[1600], err[DDPENV_ERRLEN];
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", export_path, export_kept);
		if (system(cmd) != 0 || ddpenv_topo_cache_map(export_kept, err, sizeof(err)) < 0) {
			fprintf(stderr, "topo_step: the export's mapped copy: %s\n", err);
			failed = 1;
		}
	}
	for (int r = 0; r < rounds && !failed; r++) {
		/* the ways' order turns each round */
		for (int k = 0; k < nways && !failed; k++) {
			int w = (r + k) % nways;
			/* kept after write reads a fresh file, as the next step would */
			failed = (ms[w][r] = sample((enum way)w, dir)) < 0;
		}
	}
	if (failed) {
		empty_dir(dir);
		free(all);
		return 1;
	}
	unsigned v = hwloc_get_api_version();
	printf("# the plugin's binding work per step (topology and plan, 2 CPU tasks), %d rounds, hwloc API %u.%u.%u\n",
	       rounds, v >> 16, (v >> 8) & 0xff, v & 0xff);
	printf("%-12s %9s %9s %9s %9s\n", "way", "median", "q1", "q3", "lowest");
	for (int w = 0; w < nways; w++) {
		qsort(ms[w], (size_t)rounds, sizeof(double), cmp);
		med[w] = quantile(ms[w], rounds, 0.5);
		printf("%-12s %9.3f %9.3f %9.3f %9.3f\n", way_name[w], med[w], quantile(ms[w], rounds, 0.25),
		       quantile(ms[w], rounds, 0.75), ms[w][0]);
	}
	printf("kept/discover %.3f, discover-kept %.3f ms a step\n", med[KEPT] / med[DISCOVER], med[DISCOVER] - med[KEPT]);
	printf("task/discover %.3f, discover-task %.3f ms a step\n", med[TASK] / med[DISCOVER],
	       med[DISCOVER] - med[TASK]);
	printf("task/task-xml %.3f: the mapped copy against the export's parse, in a task\n", med[TASK] / med[TASK_XML]);
	if (export_path)
		printf("export: %s, loaded as a task loads its node's, and the plan of 8 tasks and 8 GPUs; "
		       "export-map/export %.3f\n", export_path, med[EXPORT_MAP] / med[EXPORT]);
	empty_dir(dir);
	if (export_path) {
		char shm[620];
		snprintf(shm, sizeof(shm), "%.*s.shm", (int)strlen(export_kept) - 4, export_kept);
		unlink(export_kept);
		unlink(shm);
	}
	if (argc <= 2)
		rmdir(dir);
	free(all);
	return 0;
}
