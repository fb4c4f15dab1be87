/* What the controller says of the time a task has to stop: slurm.conf's
 * KillWait (SIGTERM to SIGKILL on scancel, requeue, preemption and the time
 * limit).  libslurm asks slurmctld; a child process
 * does it, so that neither its MessageTimeout nor a fatal() on a
 * configuration it cannot read reaches ddp-check. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "check.h"

/* CLOCK_MONOTONIC seconds, ck_mono's clock (self.c is not in the library) */
static double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The child: its lines go to fd, libslurm's messages with them. */
static void __attribute__((noreturn)) ask(int fd)
{
	if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
		_exit(125);
	close(fd);
	slurm_init(NULL);
	slurm_conf_t *c = NULL;
	if (slurm_load_ctl_conf((time_t)0, &c) != SLURM_SUCCESS) {
		printf("error slurm_load_ctl_conf: %s\n", slurm_strerror(errno));
		fflush(stdout);
		_exit(1);
	}
	printf("kill_wait %u\n", (unsigned)c->kill_wait);
	fflush(stdout);
	_exit(0);
}

void ck_slurm_ask(struct ck_slurm_query *q, const char *job)
{
	int p[2];

	memset(q, 0, sizeof(*q));
	q->fd = -1;
	q->started = mono();
	if (!job || !*job) {
		snprintf(q->s.err, sizeof(q->s.err), "not a Slurm job (no SLURM_JOB_ID)");
		return;
	}
	/* libslurm retries a SLURM_CONF it cannot stat for 60 s, then fails */
	const char *conf = getenv("SLURM_CONF");
	struct stat st;
	if (conf && *conf && stat(conf, &st) < 0) {
		snprintf(q->s.err, sizeof(q->s.err), "SLURM_CONF=%s: %s", conf, strerror(errno));
		return;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(q->s.err, sizeof(q->s.err), "pipe: %s", strerror(errno));
		return;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(q->s.err, sizeof(q->s.err), "fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		close(p[0]);
		ask(p[1]);
	}
	close(p[1]);
	q->pid = (long)pid;
	q->fd = p[0];
}

/* libslurm's own lines of text ("" none) in out, joined by "; ", each
 * once and without the program's name it starts with ("ddp-check: error:
 * ..." becomes "error: ..."), cut to len. */
static void libslurm_words(const char *text, char *out, size_t len)
{
	size_t used = 0;

	out[0] = 0;
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		const char *next = l + n + (nl != NULL);
		if (!n || !strncmp(l, "kill_wait ", 10) || !strncmp(l, "error ", 6)) {
			l = next;
			continue;
		}
		const char *colon = memchr(l, ':', n);
		if (colon && colon + 2 < l + n && colon[1] == ' ' && !memchr(l, ' ', (size_t)(colon - l))) {
			n -= (size_t)(colon + 2 - l);
			l = colon + 2;
		}
		char line[256];
		snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), l);
		if (!strstr(out, line) && used + 2 < len) {
			int w = snprintf(out + used, len - used, "%s%s", used ? "; " : "", line);
			if (w > 0)
				used = used + (size_t)w < len ? used + (size_t)w : len - 1;
		}
		l = next;
	}
}

void ck_slurm_parse(const char *text, int status, struct ck_slurm *out)
{
	char words[400], error[200] = "";

	memset(out, 0, sizeof(*out));
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		char line[256];
		unsigned a;
		snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), l);
		if (sscanf(line, "kill_wait %u", &a) == 1 && a < 65536) {
			out->have = 1;
			out->kill_wait = (int)a;
		} else if (!strncmp(line, "error ", 6) && !error[0]) {
			snprintf(error, sizeof(error), "%s", line + 6);
		}
		l += n + (nl != NULL);
	}
	if (out->have)
		return;
	libslurm_words(text, words, sizeof(words));
	if (error[0])
		snprintf(out->err, sizeof(out->err), "%s%s%s%s", error, words[0] ? " (libslurm: " : "", words,
			 words[0] ? ")" : "");
	else if (words[0])
		snprintf(out->err, sizeof(out->err), "libslurm: %s", words);
	else if (WIFSIGNALED(status))
		snprintf(out->err, sizeof(out->err), "the query of the controller died by signal %d",
			 WTERMSIG(status));
	else
		snprintf(out->err, sizeof(out->err), "the query of the controller ended with status %d and "
			 "no answer", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

void ck_slurm_answer(struct ck_slurm_query *q, double deadline, struct ck_slurm *out)
{
	int status = 0, late = 0;

	if (!q->pid) {
		*out = q->s;
		return;
	}
	for (;;) {
		double left = deadline - mono();
		if (left <= 0) {
			late = 1;
			break;
		}
		struct pollfd pf = { .fd = q->fd, .events = POLLIN };
		int r = poll(&pf, 1, (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			late = r == 0;
			break;
		}
		if (q->len + 1 >= sizeof(q->buf)) {
			/* more than the answer ever is: keep its start */
			char sink[512];
			if (read(q->fd, sink, sizeof(sink)) <= 0)
				break;
			continue;
		}
		ssize_t n = read(q->fd, q->buf + q->len, sizeof(q->buf) - 1 - q->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		q->len += (size_t)n;
	}
	q->buf[q->len] = 0;
	close(q->fd);
	q->fd = -1;
	if (late)
		kill((pid_t)q->pid, SIGKILL);
	while (waitpid((pid_t)q->pid, &status, 0) < 0 && errno == EINTR)
		;
	q->pid = 0;
	ck_slurm_parse(q->buf, status, out);
	if (late && !out->have) {
		char words[400];
		libslurm_words(q->buf, words, sizeof(words));
		snprintf(out->err, sizeof(out->err), "no answer from the controller within %.0f s%s%s%s",
			 deadline - q->started, words[0] ? " (libslurm: " : "", words, words[0] ? ")" : "");
	}
}
