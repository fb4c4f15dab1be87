/* Name lookups within DDPENV_LOOKUP_MS, whatever the resolver's own
 * timeouts: slurmstepd resolves a head name that a user's environment
 * chose.  And a lookup started ahead (ddpenv_sys_lookup_ahead), whose
 * answer the lookup of the same name takes.
 *
 * A child in its own mount namespace sees a resolv.conf naming a name
 * server that never answers (a UDP socket on 127.0.0.2:53 nobody reads)
 * with 20 s a try, a hosts file the test rewrites, and "hosts: files dns".
 * It writes one line of results to a pipe; the parent checks them. */
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

#define SILENT "ddp-test-silent.example"

/* PATH bind-mounted over TARGET with CONTENT (a temporary file, removed
 * once mounted).  0, or -1 with why. */
static int mount_file(const char *target, const char *content, char *why, size_t len)
{
	char path[] = "/tmp/ddp-test-lookup.XXXXXX";
	int fd = mkstemp(path);
	size_t n = strlen(content);

	if (fd < 0 || write(fd, content, n) != (ssize_t)n) {
		snprintf(why, len, "cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	close(fd);
	if (mount(path, target, NULL, MS_BIND, NULL) < 0) {
		snprintf(why, len, "cannot bind-mount a file over %s: %s", target, strerror(errno));
		unlink(path);
		return -1;
	}
	unlink(path);
	return 0;
}

/* /etc/hosts rewritten in place: the mounted file is the same inode. */
static int set_hosts(const char *content)
{
	int fd = open("/etc/hosts", O_WRONLY | O_TRUNC);
	size_t n = strlen(content);
	int ok = fd >= 0 && write(fd, content, n) == (ssize_t)n;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* In the child: a silent name server, a hosts file and the resolver's
 * files naming them, seen by this process only.  0, or -1 with why. */
static int test_resolver(char *why, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53),
				 .sin_addr.s_addr = htonl(0x7f000002) };
	int s = socket(AF_INET, SOCK_DGRAM, 0), ts = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || ts < 0 ||
	    bind(ts, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ts, 1) < 0) {
		snprintf(why, len, "cannot bind 127.0.0.2:53: %s", strerror(errno));
		return -1;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		snprintf(why, len, "cannot make a mount namespace: %s", strerror(errno));
		return -1;
	}
	if (mount_file("/etc/resolv.conf", "nameserver 127.0.0.2\noptions timeout:20 attempts:2\n", why, len) < 0 ||
	    mount_file("/etc/nsswitch.conf", "hosts: files dns\n", why, len) < 0 ||
	    mount_file("/etc/hosts", "127.0.0.1 localhost\n", why, len) < 0)
		return -1;
	return 0; /* the sockets stay open, unread, until the child exits */
}

static double since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* NAME's first address as text ("-" when the lookup fails), into OUT. */
static void first_addr(const char *name, char *out, size_t len)
{
	struct ddpenv_addr addrs[4];
	char err[DDPENV_ERRLEN];

	if (ddpenv_sys_lookup(NULL, name, addrs, 4, err, sizeof(err)) <= 0 ||
	    ddpenv_addr_format(&addrs[0], out, len) < 0)
		snprintf(out, len, "-");
}

static void nap_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

/* The child's measurements, as one line: see main for their order. */
static void child(char *out, size_t len)
{
	char err[DDPENV_ERRLEN] = "", aerr[DDPENV_ERRLEN] = "", taken[64], fresh[64], other[64], after[64];
	char long_name[300];
	struct ddpenv_addr addrs[4];
	struct timespec t0;
	int n, literal, too_long;
	double silent_t, ahead_t;

	/* a silent name server: the bound */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	n = ddpenv_sys_lookup(NULL, SILENT, addrs, 4, err, sizeof(err));
	silent_t = since(&t0);

	/* started ahead, answered, then the name moves: the lookup takes the
	 * answer started ahead; the next one asks afresh */
	set_hosts("127.0.0.1 localhost\n10.1.2.3 ddp-ahead.test\n10.4.4.4 ddp-other.test\n");
	ddpenv_sys_lookup_ahead("ddp-ahead.test", aerr, sizeof(aerr));
	nap_ms(200);
	set_hosts("127.0.0.1 localhost\n10.9.9.9 ddp-ahead.test\n10.4.4.4 ddp-other.test\n");
	first_addr("ddp-ahead.test", taken, sizeof(taken));
	first_addr("ddp-ahead.test", fresh, sizeof(fresh));

	/* started ahead for one name, another looked up: each gets its own,
	 * and the one started ahead is dropped, not kept stale */
	ddpenv_sys_lookup_ahead("ddp-ahead.test", aerr, sizeof(aerr));
	nap_ms(200);
	set_hosts("127.0.0.1 localhost\n10.7.7.7 ddp-ahead.test\n10.4.4.4 ddp-other.test\n");
	first_addr("ddp-other.test", other, sizeof(other));
	first_addr("ddp-ahead.test", after, sizeof(after));

	/* the bound counts from the start ahead: 2 s later, 3 s are left */
	ddpenv_sys_lookup_ahead(SILENT, aerr, sizeof(aerr));
	nap_ms(2000);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ddpenv_sys_lookup(NULL, SILENT, addrs, 4, aerr, sizeof(aerr));
	ahead_t = since(&t0);

	literal = ddpenv_sys_lookup_ahead("10.0.0.1", aerr, sizeof(aerr));
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	too_long = ddpenv_sys_lookup_ahead(long_name, aerr, sizeof(aerr));
	snprintf(out, len, "%d %.2f %s %s %s %s %.2f %d %d %s|%s", n, silent_t, taken, fresh, other, after,
		 ahead_t, literal, too_long, aerr, err);
}

int main(void)
{
	int fds[2];
	if (geteuid() != 0 || pipe(fds) < 0) {
		test_skip("name lookups: bounded, and started ahead", "need root (a mount namespace)");
		return test_report();
	}
	pid_t kid = fork();
	if (kid == 0) {
		char why[256] = "", out[1200];
		close(fds[0]);
		if (test_resolver(why, sizeof(why)) < 0)
			snprintf(out, sizeof(out), "skip %s", why);
		else
			child(out, sizeof(out));
		if (write(fds[1], out, strlen(out)) < 0)
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	char res[1200] = "";
	ssize_t got = 0, r;
	while (got < (ssize_t)sizeof(res) - 1 && (r = read(fds[0], res + got, sizeof(res) - 1 - (size_t)got)) > 0)
		got += r;
	res[got > 0 ? got : 0] = 0;
	waitpid(kid, NULL, 0);
	if (!strncmp(res, "skip ", 5)) {
		test_skip("name lookups: bounded, and started ahead", res + 5);
		return test_report();
	}
	int n = 0, literal = 0, too_long = 0;
	double t = -1, ahead_t = -1;
	char taken[64] = "", fresh[64] = "", other[64] = "", after[64] = "", aerr[600] = "", msg[600] = "";
	sscanf(res, "%d %lf %63s %63s %63s %63s %lf %d %d %599[^|]|%599[^\n]", &n, &t, taken, fresh, other, after,
	       &ahead_t, &literal, &too_long, aerr, msg);
	test_cond("a lookup the name server never answers fails", n < 0);
	test_cond("... within the bound of 5 s, not the resolver's 40 (4.5 to 7 s)", t >= 4.5 && t < 7);
	printf("#   %.2f s\n", t);
	test_err("... naming the name and the bound", msg,
		 "cannot resolve '" SILENT "': no answer within 5 s");
	test_streq("a lookup started ahead: the lookup of its name takes its answer", taken, "10.1.2.3");
	test_streq("... once: the next lookup asks afresh", fresh, "10.9.9.9");
	test_streq("started ahead for one name, another looked up: that one's answer", other, "10.4.4.4");
	test_streq("... and the one started ahead dropped, not kept: the name's answer now", after, "10.7.7.7");
	test_cond("a silent lookup started 2 s ahead fails 2.5 to 4 s later: its bound counts from its start",
		  ahead_t >= 2.5 && ahead_t < 4);
	printf("#   %.2f s\n", ahead_t);
	test_cond("a literal address: nothing to start, no error", literal == 0);
	test_cond("a name of 299 characters: not started", too_long == -1);
	test_err("... saying so", aerr, "a name of 299 characters (at most 255)");
	return test_report();
}
