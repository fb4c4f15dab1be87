/*
 * A kept file's seal: the modification time its writer gave it last,
 * written in the file's own head.  Every write to a file (write, a shared
 * mapping's, truncate) moves its modification time to the kernel's clock,
 * so a kept file whose time is still the one in its head has not been
 * written since it was sealed: one fstat a step.  A CRC-32 of the whole
 * file did this before, at the cost of zlib's load (0.06 to 0.25 ms in
 * srun and in each --ddp step's slurmstepd, on the launch's path) and of a
 * read of every byte (a DGX H100's mapped topology: 250 KB a step).
 *
 * What it does not see: root setting a file's time back on purpose
 * (touch -d, futimens), and bytes a disk or memory changed without a
 * write, which are the file system's and ECC's to catch.  Only root can
 * write the folders these files are in (root_dir.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int ddpenv_seal_holds(const struct ddpenv_seal *s, const struct stat *sb)
{
	return s->sec == (int64_t)sb->st_mtim.tv_sec && s->nsec == (int64_t)sb->st_mtim.tv_nsec;
}

int ddpenv_seal_file(int fd, off_t at, char *err, size_t errlen)
{
	struct ddpenv_seal s;
	struct timespec now;
	struct stat sb;

	if (clock_gettime(CLOCK_REALTIME, &now) < 0) {
		snprintf(err, errlen, "cannot seal it: no clock: %s", strerror(errno));
		return -1;
	}
	s.sec = (int64_t)now.tv_sec;
	s.nsec = (int64_t)now.tv_nsec;
	/* Twice at most: a file system that keeps coarser times than the
	 * clock's stores its rounding of the first, kept as it is the second
	 * time. */
	for (int i = 0; i < 2; i++) {
		struct timespec t[2] = { { 0, UTIME_OMIT }, { (time_t)s.sec, (long)s.nsec } };

		if (pwrite(fd, &s, sizeof(s), at) != (ssize_t)sizeof(s) || futimens(fd, t) < 0 ||
		    fstat(fd, &sb) < 0) {
			snprintf(err, errlen, "cannot seal it: %s", strerror(errno));
			return -1;
		}
		if (ddpenv_seal_holds(&s, &sb))
			return 0;
		s.sec = (int64_t)sb.st_mtim.tv_sec;
		s.nsec = (int64_t)sb.st_mtim.tv_nsec;
	}
	snprintf(err, errlen, "cannot seal it: its file system does not keep the modification time it is given");
	return -1;
}
