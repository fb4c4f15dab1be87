/* Helpers shared inside libddpenv; not part of the API. */
#ifndef DDPENV_INTERNAL_H
#define DDPENV_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

int ddpenv_parse_u32(const char *key, const char *s, uint32_t *out,
		     char *err, size_t errlen);

struct ddpenv_env;
/* env carries the plugin's marker (DDP_STEP) for its own job step: the
 * DDP_* values in it are this step's, not inherited from an outer one. */
int ddpenv_step_marked(const struct ddpenv_env *env);

struct ddpenv_settings;
/* settings.c: the per-setting parsers behind config.c. */
int ddpenv_setting_lookup(const char *name);
int ddpenv_setting_is_list(int k);
void ddpenv_setting_clear(struct ddpenv_settings *s, int k);
int ddpenv_setting_apply(struct ddpenv_settings *s, int k, const char *v, char *why, size_t n);
int ddpenv_setting_apply_csv(struct ddpenv_settings *s, int k, const char *v, char *why, size_t n);
int ddpenv_settings_env_set(struct ddpenv_settings *s, int which, const char *key,
			    const char *value, char *why, size_t n);
int ddpenv_settings_merge(struct ddpenv_settings *dst, const struct ddpenv_settings *src,
			  char *why, size_t n);

/* sys.c: a kernel file's first len - 1 bytes into buf, cut at its first
 * newline: its length, or -1 when it cannot be read. */
ssize_t ddpenv_read_line(const char *path, char *buf, size_t len);
/* sys.c: a kernel file's first len - 1 bytes into buf, whole lines:
 * its length, or -1 when it cannot be read. */
ssize_t ddpenv_read_text(const char *path, char *buf, size_t len);

struct ddpenv_config;
struct stat;
/* config.c: ddpenv_config_load, and sb the file's fstat as it was read
 * (zeroed where a missing file meant the defaults). */
int ddpenv_config_load_stat(struct ddpenv_config *c, const char *path, int must_exist,
			    struct stat *sb, char *err, size_t errlen);

/* hmac.c: HMAC-SHA256 of msg under key into out, nettle's (the token and
 * the store's proofs).  0, else -1 with err (nettle cannot be opened). */
#define DDPENV_HMAC_LEN 32
int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
		       unsigned char out[DDPENV_HMAC_LEN], char *err, size_t errlen);
/* hmac.c: whether a and b (len bytes each) are equal, compared in constant
 * time (nettle's memeql_sec): 1 or 0, else -1 with err. */
int ddpenv_hmac_equal(const void *a, const void *b, size_t len, char *err, size_t errlen);

/* seal.c: a kept file's seal, the modification time its writer gave it
 * last, in the file's own head (seal.c says what it sees and what not). */
struct ddpenv_seal {
	int64_t sec, nsec;
};
/* fd's modification time set to the clock's and written as its seal at
 * offset at: 0, else -1 with err. */
int ddpenv_seal_file(int fd, off_t at, char *err, size_t errlen);
/* sb (the file's fstat) as sealed with s: not written since.  1, else 0. */
int ddpenv_seal_holds(const struct ddpenv_seal *s, const struct stat *sb);

/* root_dir.c: dir a folder of root's that only root can write; make: made
 * (0755) if missing.  what names the setting in messages.  0, else -1 with
 * err. */
int ddpenv_root_dir(const char *dir, int make, const char *what, char *err, size_t errlen);

#endif
