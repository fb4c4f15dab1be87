/* A test's work in a child process (a fresh process: hwloc's first
 * topology, a mount namespace, a signal of its own), its answer back as
 * text through a pipe. */
#ifndef DDP_CHILD_H
#define DDP_CHILD_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run fn in a child; its text (at most len - 1 bytes) comes back in out. */
static inline void in_child(void (*fn)(const void *arg, char *out, size_t len), const void *arg, char *out, size_t len)
{
	int fds[2];
	ssize_t n;

	out[0] = '\0';
	if (pipe(fds) < 0)
		return;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		char b[4096] = "";
		close(fds[0]);
		fn(arg, b, sizeof(b));
		_exit(write(fds[1], b, strlen(b)) < 0);
	}
	close(fds[1]);
	n = pid > 0 ? read(fds[0], out, len - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

#endif
