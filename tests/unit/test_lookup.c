/* Name lookups within DDPENV_LOOKUP_MS, whatever the resolver's own
 * timeouts: slurmstepd resolves a head name that a user's environment
 * chose.  A child in its own mount namespace points /etc/resolv.conf at a
 * name server that never answers (a UDP socket on 127.0.0.2:53 nobody
 * reads) with 20 s a try; the lookup must give up after 5 s, saying so. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv.h"
#include "test.h"

/* In the child: a silent name server and a resolv.conf naming it, seen by
 * this process only.  0, or -1 with why. */
static int silent_resolver(char *why, size_t len)
{
	static const char conf[] = "nameserver 127.0.0.2\noptions timeout:20 attempts:2\n";
	char path[] = "/tmp/ddp-test-resolv.XXXXXX";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53),
				 .sin_addr.s_addr = htonl(0x7f000002) };
	int fd = mkstemp(path), s = socket(AF_INET, SOCK_DGRAM, 0), ts = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || write(fd, conf, sizeof(conf) - 1) != (ssize_t)sizeof(conf) - 1) {
		snprintf(why, len, "cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	close(fd);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || ts < 0 ||
	    bind(ts, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ts, 1) < 0) {
		snprintf(why, len, "cannot bind 127.0.0.2:53: %s", strerror(errno));
		return -1;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0) {
		snprintf(why, len, "cannot bind-mount a resolv.conf in a mount namespace: %s", strerror(errno));
		unlink(path);
		return -1;
	}
	unlink(path);
	return 0; /* the sockets stay open, unread, until the child exits */
}

int main(void)
{
	int fds[2];
	if (geteuid() != 0 || pipe(fds) < 0) {
		test_skip("a lookup the name server never answers gives up within 5 s", "need root (a mount namespace)");
		return test_report();
	}
	pid_t kid = fork();
	if (kid == 0) {
		char why[256] = "", err[DDPENV_ERRLEN] = "", out[600];
		struct ddpenv_addr addrs[4];
		struct timespec t0, t1;
		close(fds[0]);
		if (silent_resolver(why, sizeof(why)) < 0) {
			snprintf(out, sizeof(out), "skip %s", why);
		} else {
			clock_gettime(CLOCK_MONOTONIC, &t0);
			int n = ddpenv_sys_lookup(NULL, "ddp-test-silent.example", addrs, 4, err, sizeof(err));
			clock_gettime(CLOCK_MONOTONIC, &t1);
			snprintf(out, sizeof(out), "%d %.2f %s", n,
				 (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, err);
		}
		if (write(fds[1], out, strlen(out)) < 0)
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	char res[600] = "";
	ssize_t got = 0, r;
	while (got < (ssize_t)sizeof(res) - 1 && (r = read(fds[0], res + got, sizeof(res) - 1 - (size_t)got)) > 0)
		got += r;
	res[got > 0 ? got : 0] = 0;
	waitpid(kid, NULL, 0);
	if (!strncmp(res, "skip ", 5)) {
		test_skip("a lookup the name server never answers gives up within 5 s", res + 5);
		return test_report();
	}
	int n = 0;
	double t = -1;
	char msg[520] = "";
	sscanf(res, "%d %lf %519[^\n]", &n, &t, msg);
	test_cond("a lookup the name server never answers fails", n < 0);
	test_cond("... within the bound of 5 s, not the resolver's 40 (4.5 to 7 s)", t >= 4.5 && t < 7);
	printf("#   %.2f s\n", t);
	test_err("... naming the name and the bound", msg,
		 "cannot resolve 'ddp-test-silent.example': no answer within 5 s");
	return test_report();
}
