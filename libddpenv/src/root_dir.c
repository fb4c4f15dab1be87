/*
 * The folders the plugin keeps what it derived as root (topology_cache,
 * config_cache): root's and writable by nobody else, so that what a step
 * reads there only root can have written.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

int ddpenv_root_dir(const char *dir, int make, const char *what, char *err, size_t errlen)
{
	struct stat st;

	if (make && lstat(dir, &st) < 0 && errno == ENOENT) {
		/* 0755 whatever the umask */
		if (mkdir(dir, 0700) < 0 ? errno != EEXIST : chmod(dir, 0755) < 0) {
			snprintf(err, errlen, "%s %.200s: cannot make the folder: %s", what, dir, strerror(errno));
			return -1;
		}
	}
	if (lstat(dir, &st) < 0) {
		snprintf(err, errlen, "%s %.200s: %s", what, dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		snprintf(err, errlen, "%s %.200s: expected a folder of root's that only root can write "
			 "(owner uid %u, mode %04o): not used", what, dir, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}
