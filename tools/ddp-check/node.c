/* ddp-check --node (node.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eval.h"
#include "gpu_health.h"
#include "node.h"

/* The node's name as Slurm knows it: SLURMD_NODENAME (slurmd sets it for
 * its HealthCheckProgram and prologs), else the short host name. */
static void node_name(char *out, size_t len)
{
	const char *s = getenv("SLURMD_NODENAME");
	if (s && *s) {
		snprintf(out, len, "%s", s);
		return;
	}
	if (gethostname(out, len - 1) != 0)
		snprintf(out, len, "localhost");
	out[len - 1] = 0;
	out[strcspn(out, ".")] = 0;
}

/* One record per device of the node: its GPUs (the NVIDIA driver's list,
 * each with its health from NVML and the kernel's log) and its RDMA
 * devices, each link read from sysfs; the ports on every record.  The
 * count, -1 out of memory. */
static int node_records(struct ck_world *w, const char *host, const char *sysfs)
{
	static char nv[960], err[200], ports[512];
	struct ddpenv_nvgpu g[DDPENV_MAX_GPUS];
	const char *dir = getenv("DDP_CHECK_NVIDIA_GPUS"), *kmsg = getenv("DDP_CHECK_KMSG");
	int ng = 0;
	if (!kmsg || !*kmsg)
		kmsg = "/dev/kmsg";
	if (!dir || !*dir)
		dir = DDPENV_NVIDIA_GPUS;
	int nr = ck_nvidia_read(dir, nv, sizeof(nv), err, sizeof(err));
	if (nr > 0)
		ng = ck_nvidia_parse(nv, g, DDPENV_MAX_GPUS);
	ng = ng < 0 ? 0 : ng;
	/* the GPUs the driver excludes are no node's to train on */
	int k = 0;
	for (int i = 0; i < ng; i++)
		if (!g[i].excluded)
			g[k++] = g[i];
	ng = k;
	/* No list under /proc (a container hides it; or no driver): NVML's */
	if (!ng) {
		char nerr[200];
		int m = ck_gpu_nvml_list(g, DDPENV_MAX_GPUS, nerr, sizeof(nerr));
		if (m > 0)
			ng = m;
		else
			snprintf(w->no_gpus, sizeof(w->no_gpus), "the driver's list %s: %s; NVML: %s", dir,
				 nr < 0 ? err : nr == 0 ? "none there" : "every GPU excluded",
				 m < 0 ? nerr : "no GPU");
	}
	ck_ib_ports(sysfs, ports, sizeof(ports));
	/* the RDMA devices, each once ("mlx5_0/1:...;mlx5_0/2:...") */
	char devs[16][32];
	int nd = 0;
	for (const char *p = ports; *p && nd < 16;) {
		char dev[32];
		size_t l = strcspn(p, "/;");
		snprintf(dev, sizeof(dev), "%.*s", (int)l, p);
		int dup = 0;
		for (int i = 0; i < nd; i++)
			dup |= !strcmp(devs[i], dev);
		if (!dup && *dev)
			snprintf(devs[nd++], sizeof(devs[0]), "%s", dev);
		p += strcspn(p, ";");
		p += *p == ';';
	}
	char peers[DDPENV_MAX_GPUS * 20] = "";
	size_t off = 0;
	for (int i = 0; i < ng && off + 20 < sizeof(peers); i++)
		off += (size_t)snprintf(peers + off, sizeof(peers) - off, "%s%s", off ? "," : "", g[i].busid);
	int n = ng + nd > 0 ? ng + nd : 1;
	w->ranks = calloc((size_t)n, sizeof(*w->ranks));
	if (!w->ranks)
		return -1;
	w->n = n;
	for (int i = 0; i < n; i++) {
		struct ck_rank *r = &w->ranks[i];
		r->id = i;
		r->joined = 1;
		r->proto = CK_RECORD_PROTO;
		snprintf(r->host, sizeof(r->host), "%s", host);
		snprintf(r->ibports, sizeof(r->ibports), "%s", ports);
		if (i < ng) {
			snprintf(r->gpu, sizeof(r->gpu), "%s", g[i].busid);
			ck_link_read(sysfs, "gpu", g[i].busid, &r->gpu_link);
			/* a driver that hung for one GPU is not asked again */
			if (i && strstr(w->ranks[i - 1].gh.err, "did not answer")) {
				r->gh = w->ranks[i - 1].gh;
				ck_gpu_xids(kmsg, g[i].busid, &r->gh);
			} else {
				ck_gpu_health_read(g[i].busid, peers, kmsg, &r->gh);
			}
		} else if (i - ng < nd) {
			ck_nic_link_read(sysfs, devs[i - ng], &r->nic_link);
		}
	}
	return n;
}

/* scontrol update NodeName=host State=DRAIN Reason=...: 0 drained, else
 * -1 said on stderr.  No shell; bounded to 20 s. */
static int drain(const char *host, const char *reason)
{
	char name[96], why[256];
	snprintf(name, sizeof(name), "NodeName=%s", host);
	snprintf(why, sizeof(why), "Reason=%s", reason);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "ddp-check: --drain: cannot start scontrol: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		execlp("scontrol", "scontrol", "update", name, "State=DRAIN", why, (char *)NULL);
		fprintf(stderr, "ddp-check: --drain: cannot run scontrol: %s\n", strerror(errno));
		_exit(127);
	}
	int status = 0;
	for (int i = 0; i < 200; i++) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 || i == 199) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "ddp-check: --drain: scontrol did not answer within 20 s\n");
			return -1;
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "ddp-check: --drain: scontrol update %s State=DRAIN failed (status %d)\n", name,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -1;
	}
	return 0;
}

static const char *const level_name[] = { "OK", "WARN", "FAIL", "SKIP" };

/* A line per check, the drain if one was made, the verdict. */
static void node_text(const struct ck_world *w, const char *host, int rc, const char *drained)
{
	for (size_t i = 0; i < w->nres; i++)
		printf("%-5s %-22s %s\n", level_name[w->res[i].level], w->res[i].name, w->res[i].msg);
	if (drained)
		printf("ddp-check: %s drained: %s\n", host, drained);
	printf("ddp-check --node %s: %s\n", host, rc ? "FAILED" : "healthy");
}

/* The same as one JSON object: node, checks, drained (the reason, or
 * null), exit_code. */
static void node_json(const struct ck_world *w, const char *host, int rc, const char *drained)
{
	printf("{\n  \"node\": ");
	ck_json_str(stdout, host);
	printf(",\n  \"checks\": [");
	for (size_t i = 0; i < w->nres; i++) {
		printf("%s\n    {\"name\": ", i ? "," : "");
		ck_json_str(stdout, w->res[i].name);
		printf(", \"level\": \"%s\", \"message\": ", level_name[w->res[i].level]);
		ck_json_str(stdout, w->res[i].msg);
		putchar('}');
	}
	printf("\n  ],\n  \"drained\": ");
	if (drained)
		ck_json_str(stdout, drained);
	else
		printf("null");
	printf(",\n  \"exit_code\": %d\n}\n", rc);
}

int ck_node_run(const struct ck_cli *cli)
{
	static struct ck_world w;
	struct nodes nd;
	char host[CK_HOST];
	const char *sysfs = getenv("DDP_CHECK_SYSFS");
	int rc = 0;

	if (!sysfs || !*sysfs)
		sysfs = "/sys";
	node_name(host, sizeof(host));
	memset(&w, 0, sizeof(w));
	w.backend = "nccl";   /* as a training step would use the node */
	w.node_mode = 1;
	w.opts = cli->o;
	if (node_records(&w, host, sysfs) < 0) {
		fprintf(stderr, "ddp-check: --node: out of memory\n");
		return 2;
	}
	if (ck_nodes_build(&w, &nd) < 0) {
		fprintf(stderr, "ddp-check: --node: out of memory\n");
		ck_nodes_free(&nd);
		free(w.ranks);
		return 2;
	}
	ck_eval_hw(&w, &nd);
	ck_eval_gpu(&w, &nd);
	ck_eval_p2p(&w, &nd);
	ck_nodes_free(&nd);
	const struct ck_result *bad = NULL;
	for (size_t i = 0; i < w.nres && !bad; i++)
		bad = w.res[i].level == CK_FAIL ? &w.res[i] : NULL;
	int drained = 0;
	char reason[200] = "";
	if (bad) {
		rc = 1;
		snprintf(reason, sizeof(reason), "ddp-check %s: %s", bad->name, bad->msg);
		drained = cli->drain && drain(host, reason) == 0;
	}
	if (cli->json)
		node_json(&w, host, rc, drained ? reason : NULL);
	else
		node_text(&w, host, rc, drained ? reason : NULL);
	free(w.res);
	free(w.ranks);
	return rc;
}
