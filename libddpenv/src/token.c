/* The rendezvous token: an HMAC of the step's ids and user under a site
 * secret (nettle's, as slurmstepd derives it: hmac.c), and which ids
 * those are (ddpenv_step_trust). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddpenv.h"
#include "internal.h"

int ddpenv_token_derive(const void *secret, size_t len, uint32_t job_id,
			uint32_t step_id, uint32_t uid, char out[DDPENV_TOKEN_LEN + 1],
			char *err, size_t errlen)
{
	unsigned char mac[DDPENV_HMAC_LEN];
	char msg[80], why[DDPENV_ERRLEN];
	int n;

	if (!secret || len == 0 || len > DDPENV_SECRET_MAX) {
		snprintf(err, errlen, "rendezvous secret of %zu bytes: expected 1-%d", len,
			 DDPENV_SECRET_MAX);
		return -1;
	}
	n = snprintf(msg, sizeof(msg), "slurm-ddp rdzv v2 %u.%u uid %u", job_id, step_id, uid);
	if (ddpenv_hmac_sha256(secret, len, msg, (size_t)n, mac, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "the token of step %u.%u: %s", job_id, step_id, why);
		return -1;
	}
	for (unsigned i = 0; i < DDPENV_HMAC_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

int ddpenv_secret_read(const char *path, unsigned char *buf, size_t cap,
		       char *err, size_t errlen)
{
	struct stat sb;
	size_t len = 0;
	int fd, rv = -1;

	/* O_NOFOLLOW: the path an admin wrote, not what a link points to;
	 * O_NONBLOCK: a FIFO must not hang slurmstepd. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "rdzv_secret %.200s: %s: expected a file readable by root",
			 path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "rdzv_secret %.200s: not a regular file", path);
		goto out;
	}
	if (sb.st_uid != 0 || (sb.st_mode & 077)) {
		snprintf(err, errlen, "rdzv_secret %.200s: owner uid %u, mode %04o: expected owned by root with mode 0600 or 0400 (chown root: ; chmod 600)",
			 path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
		goto out;
	}
	while (len < cap) {
		ssize_t r = read(fd, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "rdzv_secret %.200s: %s", path, strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len < 16 || len >= cap || len > DDPENV_SECRET_MAX) {
		snprintf(err, errlen, "rdzv_secret %.200s: %zu%s bytes: expected 16 to %d bytes (e.g. head -c 32 /dev/urandom)",
			 path, len, len >= cap ? "+" : "", DDPENV_SECRET_MAX);
		goto out;
	}
	rv = (int)len;
out:
	close(fd);
	if (rv < 0) /* what was read of a refused one */
		explicit_bzero(buf, cap);
	return rv;
}

int ddpenv_step_trust(const struct ddpenv_step *step, const struct ddpenv_step_auth *auth,
		      uint32_t *token_job, char *err, size_t errlen)
{
	static const char why[] = "the environment srun sent is not this step's (a modified srun or "
				  "environment?): refused";

	if (step->step_id != auth->step_id) {
		snprintf(err, errlen, "SLURM_STEP_ID=%u in the step's environment, but Slurm authenticated step %u.%u: %s",
			 step->step_id, auth->job_id, auth->step_id, why);
		return -1;
	}
	if (step->het_size <= 1 && step->job_id != auth->job_id) {
		snprintf(err, errlen, "SLURM_JOB_ID=%u in the step's environment, but Slurm authenticated job %u: %s",
			 step->job_id, auth->job_id, why);
		return -1;
	}
	*token_job = step->job_id;
	return 0;
}
