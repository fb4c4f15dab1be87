/* A gloo all-reduce through the trainer's comm layer, with a result known
 * exactly: rank r contributes (r + 1) * (i % 7 + 1) at index i, so every
 * rank must read W(W+1)/2 * (i % 7 + 1) (exact in float for W <= 2048).
 * Run as a task of srun --ddp=gloo; reads the contract like cnn_train.
 * Prints one line per rank; exit 1 on a wrong sum or a failed collective.
 *
 *   srun -N16 --ntasks-per-node=4 --ddp=gloo allreduce_check [COUNT [TIMEOUT_S]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "ddpenv.h"

extern char **environ;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	struct ddpenv_env env;
	struct ddpenv_rank r;
	struct cnn_comm *c = NULL;
	char err[1024], host[64] = "?";
	long count = argc > 1 ? strtol(argv[1], NULL, 10) : 1 << 16;
	long timeout_s = argc > 2 ? strtol(argv[2], NULL, 10) : 60;
	int rc = 1;

	gethostname(host, sizeof(host) - 1);
	if (count < 1 || count > (1L << 26)) {
		fprintf(stderr, "allreduce_check: count '%s': expected 1..%ld\n", argv[1], 1L << 26);
		return 2;
	}
	if (timeout_s < 1 || timeout_s > 3600) {
		fprintf(stderr, "allreduce_check: timeout '%s': expected 1..3600 seconds\n", argv[2]);
		return 2;
	}
	ddpenv_env_init(&env);
	if (ddpenv_env_from_envp(&env, environ) < 0 || ddpenv_rank_read(&env, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "allreduce_check on %s: %s\n", host, err);
		return 2;
	}
	struct cnn_comm_opts o = {
		.backend = r.world > 1 ? "gloo" : "local", .master_addr = r.master_addr,
		.master_port = r.master_port, .rank = r.rank, .world = r.world,
		.iface = r.gloo_ifname[0] ? r.gloo_ifname : NULL,
		.token = r.token[0] ? r.token : NULL, .timeout_ms = (int)timeout_s * 1000,
	};
	float *buf = malloc((size_t)count * sizeof(float));
	if (!buf) {
		fprintf(stderr, "allreduce_check: out of memory\n");
		return 2;
	}
	for (long i = 0; i < count; i++)
		buf[i] = (float)(r.rank + 1) * (float)(i % 7 + 1);
	double t0 = now();
	if (cnn_comm_open(&c, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "allreduce_check rank %d on %s: %s\n", r.rank, host, err);
		goto out;
	}
	double t1 = now();
	if (cnn_comm_allreduce_sum(c, buf, (size_t)count, err, sizeof(err)) < 0) {
		cnn_comm_explain_failure(c, err, sizeof(err));
		fprintf(stderr, "allreduce_check rank %d on %s: %s\n", r.rank, host, err);
		goto out;
	}
	double t2 = now();
	double tri = (double)r.world * (r.world + 1) / 2;
	long bad = 0, first = -1;
	for (long i = 0; i < count; i++)
		if (buf[i] != (float)(tri * (i % 7 + 1)) && bad++ == 0)
			first = i;
	if (bad) {
		printf("allreduce rank %d of %d on %s: WRONG at %ld of %ld elements, first [%ld] = %.9g, expected %.9g\n",
		       r.rank, r.world, host, bad, count, first, buf[first], tri * (first % 7 + 1));
		goto out;
	}
	printf("allreduce rank %d of %d on %s: %ld floats correct (sum %.0f), bootstrap %.3f s, all-reduce %.3f s\n",
	       r.rank, r.world, host, count, tri, t1 - t0, t2 - t1);
	rc = 0;
out:
	fflush(stdout);
	cnn_comm_close(c);
	free(buf);
	ddpenv_env_free(&env);
	return rc;
}
