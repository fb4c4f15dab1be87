/* ddp.yaml's parse kept (libddpenv/src/config_cache.c): kept by root once
 * the file has settled, read back while the file is as it was (the same
 * configuration as a parse), parsed again when the file changed, when the
 * kept file is corrupt, truncated, a user's, writable by others, a link or
 * another build's; never in a folder that is not root's; read, never
 * written, by a user; and never an error of its own.  The seal of a kept
 * file (libddpenv/src/seal.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddpenv.h"
#include "../../libddpenv/src/internal.h"
#include "test.h"
#include "tmptree.h"

static char err[DDPENV_ERRLEN], yaml[300], dir[300], kept_file[600];

static const char doc[] =
	"default_backend: gloo\n"
	"port_range: 30000-30999\n"
	"network:\n"
	"  include: [ib*, enp*]\n"
	"env:\n"
	"  nccl: {NCCL_DEBUG: WARN}\n"
	"partitions:\n"
	"  gpu:\n"
	"    default_backend: nccl\n"
	"  cpu:\n"
	"    omp_num_threads: none\n";

/* ddp.yaml changed, then left to settle (a kept parse is of a file last
 * changed over a second before) */
static void write_yaml(const char *text, int settle)
{
	put("ddp.yaml", text);
	if (settle)
		usleep(1100 * 1000);
}

static int load(struct ddpenv_config *c, const char *d, int *kept)
{
	ddpenv_config_init(c);
	err[0] = '\0';
	return ddpenv_config_load_kept(c, yaml, 1, d, kept, err, sizeof(err));
}

/* c is what a parse of the file gives: every setting and partition */
static int same_as_parse(const struct ddpenv_config *c)
{
	struct ddpenv_config p;
	int same;

	ddpenv_config_init(&p);
	if (ddpenv_config_load(&p, yaml, 1, err, sizeof(err)) < 0)
		return 0;
	same = c->from_file == p.from_file && strcmp(c->path, p.path) == 0 &&
	       memcmp(&c->base, &p.base, sizeof(p.base)) == 0 && c->nparts == p.nparts &&
	       (!p.nparts || memcmp(c->parts, p.parts, p.nparts * sizeof(*p.parts)) == 0);
	ddpenv_config_free(&p);
	return same;
}

static ino_t inode(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_ino : 0;
}

/* the one kept file in dir (config-HASH.bin) into kept_file */
static int find_kept(void)
{
	char cmd[700];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls %s/config-*.bin 2>/dev/null", dir);
	kept_file[0] = '\0';
	if (!(f = popen(cmd, "r")))
		return 0;
	if (!fgets(kept_file, sizeof(kept_file), f))
		kept_file[0] = '\0';
	pclose(f);
	kept_file[strcspn(kept_file, "\n")] = '\0';
	return kept_file[0] != '\0';
}

/* one more load: kept is what it said, and the configuration a parse's */
static void expect(const char *desc, int want)
{
	struct ddpenv_config c;
	int kept = -1;

	test_cond(desc, load(&c, dir, &kept) == 0 && kept == want && same_as_parse(&c));
	if (kept != want)
		printf("#   kept %d, want %d (%s)\n", kept, want, err);
	ddpenv_config_free(&c);
}

static void poke(const char *file, off_t off, const void *bytes, size_t n)
{
	int fd = open(file, O_WRONLY);
	if (fd >= 0) {
		if (pwrite(fd, bytes, n, off) != (ssize_t)n)
			printf("# could not change %s\n", file);
		close(fd);
	}
}

static void test_no_cache(void)
{
	struct ddpenv_config c;
	int kept = -1;

	write_yaml(doc, 0);
	test_cond("no folder: parsed", load(&c, "", &kept) == 0 && kept == DDPENV_CONFIG_PARSED && same_as_parse(&c));
	ddpenv_config_free(&c);
	test_cond("a relative folder: parsed, nothing kept", load(&c, "cache", &kept) == 0 &&
		  kept == DDPENV_CONFIG_PARSED && access("cache", F_OK) < 0);
	ddpenv_config_free(&c);
	ddpenv_config_init(&c);
	test_cond("a missing ddp.yaml that may be missing: the defaults, nothing kept",
		  ddpenv_config_load_kept(&c, "/nonexistent/ddp.yaml", 0, dir, &kept, err, sizeof(err)) == 0 &&
		  !c.from_file && kept == DDPENV_CONFIG_PARSED);
	test_cond("one that must exist: the parse's error",
		  ddpenv_config_load_kept(&c, "/nonexistent/ddp.yaml", 1, dir, &kept, err, sizeof(err)) < 0);
	test_err("... naming the file", err, "/nonexistent/ddp.yaml: No such file or directory: expected a readable YAML file");
	const char *av[] = { "config_cache=run/cache", "config_cache=/run/x" };
	test_streq("config_cache=: the last one", ddpenv_config_cache_arg(2, (char *const *)av), "/run/x");
	test_streq("... else /run/slurm-ddp", ddpenv_config_cache_arg(0, NULL), "/run/slurm-ddp");
	ddpenv_config_init(&c);
	test_cond("plugstack.conf config_cache=relative: refused",
		  ddpenv_config_plugstack(&c, 1, (char *const *)av, err, sizeof(err)) < 0);
	test_err("... saying what was expected", err,
		 "plugstack.conf argument 'config_cache=run/cache': expected an absolute folder path, or nothing for no cache");
	ddpenv_config_free(&c);
}

static void test_kept(void)
{
	struct ddpenv_config c;
	struct stat st;
	int kept = -1;
	ino_t ino;

	write_yaml(doc, 0);
	expect("a file just changed: parsed, not kept", DDPENV_CONFIG_PARSED);
	test_cond("... nothing in the folder", !find_kept());
	usleep(1100 * 1000);
	expect("settled: parsed and kept", DDPENV_CONFIG_KEPT);
	test_cond("... in a folder of root's, 0755 (made)", stat(dir, &st) == 0 && st.st_uid == 0 &&
		  (st.st_mode & 07777) == 0755);
	test_cond("... a file of root's, 0644 (ddp.yaml is readable by others)",
		  find_kept() && stat(kept_file, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 0644);
	ino = inode(kept_file);
	expect("the next step: read back, the parse's configuration", DDPENV_CONFIG_READ_KEPT);
	expect("... and again", DDPENV_CONFIG_READ_KEPT);
	test_cond("... the file untouched", inode(kept_file) == ino);

	/* the file edited */
	write_yaml("default_backend: nccl\nport_range: 31000-31999\n", 0);
	test_cond("ddp.yaml edited: parsed again, its new settings",
		  load(&c, dir, &kept) == 0 && kept == DDPENV_CONFIG_PARSED && c.base.port_lo == 31000 &&
		  c.base.default_backend == DDPENV_BACKEND_NCCL && c.nparts == 0);
	ddpenv_config_free(&c);
	usleep(1100 * 1000);
	expect("... kept again once settled", DDPENV_CONFIG_KEPT);
	expect("... and read back", DDPENV_CONFIG_READ_KEPT);
	write_yaml(doc, 1);
	expect("the first file back: kept anew", DDPENV_CONFIG_KEPT);

	/* the file replaced by another of the same size and times (a copy
	 * with its times kept: another inode) */
	char other[600], cmd[1400];
	snprintf(other, sizeof(other), "%s/other.yaml", tmp);
	snprintf(cmd, sizeof(cmd), "sed 's/30000-30999/30000-30998/' '%s' > '%s' && touch -r '%s' '%s' && mv '%s' '%s'",
		 yaml, other, yaml, other, other, yaml);
	if (system(cmd) == 0) {
		test_cond("ddp.yaml replaced (another inode, its times kept): parsed again",
			  load(&c, dir, &kept) == 0 && kept == DDPENV_CONFIG_PARSED && c.base.port_hi == 30998);
		ddpenv_config_free(&c);
		usleep(1100 * 1000);
		expect("... kept once settled", DDPENV_CONFIG_KEPT);
	}

	/* what is amiss in the kept file is parsed again and kept anew */
	find_kept();
	ino = inode(kept_file);
	test_cond("... (kept file found)", stat(kept_file, &st) == 0);
	poke(kept_file, st.st_size - 16, "\x55\xaa", 2); /* in the last partition */
	expect("a kept file written since it was sealed: parsed again and kept anew", DDPENV_CONFIG_KEPT);
	test_cond("... a new file", inode(kept_file) != ino);
	poke(kept_file, 128 + 8, "\x01\x02\x03", 3); /* its head's code.ino */
	expect("a parse another build kept (the code's identity): parsed again", DDPENV_CONFIG_KEPT);
	if (truncate(kept_file, 5000) == 0)
		expect("a truncated kept file: parsed again", DDPENV_CONFIG_KEPT);
	if (chown(kept_file, 1000, 1000) == 0)
		expect("a kept file of a user's: parsed again, kept root's", DDPENV_CONFIG_KEPT);
	test_cond("... root's again", stat(kept_file, &st) == 0 && st.st_uid == 0);
	chmod(kept_file, 0666);
	expect("a kept file others can write: parsed again", DDPENV_CONFIG_KEPT);
	test_cond("... 0644 again", stat(kept_file, &st) == 0 && (st.st_mode & 07777) == 0644);
	char target[600];
	snprintf(target, sizeof(target), "%s/target", tmp);
	put("target", "precious\n");
	unlink(kept_file);
	if (symlink(target, kept_file) == 0) {
		expect("a link in its place: not followed, replaced by a file", DDPENV_CONFIG_KEPT);
		test_cond("... a file now", lstat(kept_file, &st) == 0 && S_ISREG(st.st_mode));
		test_cond("... the link's target untouched", stat(target, &st) == 0 && st.st_size == 9);
	}

	/* a folder that is not root's alone is never used */
	chmod(dir, 0777);
	expect("a folder others can write: parsed, not read", DDPENV_CONFIG_PARSED);
	chmod(dir, 0755);
	if (chown(dir, 1000, 1000) == 0) {
		expect("a folder of a user's: parsed, not read", DDPENV_CONFIG_PARSED);
		chown(dir, 0, 0);
	}
	snprintf(cmd, sizeof(cmd), "%s/no/such", tmp);
	test_cond("a folder whose parent is missing: parsed, no error",
		  load(&c, cmd, &kept) == 0 && kept == DDPENV_CONFIG_PARSED);
	ddpenv_config_free(&c);

	/* a file only root reads: kept only root-readable */
	chmod(yaml, 0600);
	usleep(1100 * 1000);
	expect("ddp.yaml 0600: kept", DDPENV_CONFIG_KEPT);
	test_cond("... 0600 too", stat(kept_file, &st) == 0 && (st.st_mode & 07777) == 0600);
	chmod(yaml, 0644);
	usleep(1100 * 1000);
	expect("ddp.yaml 0644 again (its mode is in the key): kept 0644", DDPENV_CONFIG_KEPT);

	/* a file in error: its error, nothing kept */
	write_yaml("port_range: 9-1\n", 1);
	ino = inode(kept_file);
	test_cond("ddp.yaml in error: its error", load(&c, dir, &kept) < 0);
	test_err("... the parse's", err, "port_range: '9-1' is inverted");
	test_cond("... the kept file untouched", inode(kept_file) == ino);
	ddpenv_config_free(&c);
}

/* srun, a user: reads what root kept, never writes */
static void test_user(void)
{
	int fds[2];
	char buf[64] = "";

	put("user.yaml", doc); /* a file root has kept nothing of */
	write_yaml(doc, 1);
	expect("root keeps the file", DDPENV_CONFIG_KEPT);
	ino_t ino = inode(kept_file);
	if (pipe(fds) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		struct ddpenv_config c;
		int a = -1, b = -1;
		close(fds[0]);
		if (setgid(1000) == 0 && setuid(1000) == 0) {
			if (load(&c, dir, &a) == 0 && same_as_parse(&c))
				ddpenv_config_free(&c);
			else
				a = -2;
			/* a settled file root has kept nothing of: no write as a user */
			snprintf(yaml, sizeof(yaml), "%s/user.yaml", tmp);
			if (load(&c, dir, &b) == 0)
				ddpenv_config_free(&c);
		}
		snprintf(buf, sizeof(buf), "%d %d", a, b);
		_exit(write(fds[1], buf, strlen(buf)) < 0);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	waitpid(pid, NULL, 0);
	test_streq("a user reads the kept parse, and keeps none of a file of its own", buf, "1 0");
	test_cond("... the kept file untouched", inode(kept_file) == ino);
}

/* seal.c: a file sealed holds while it is not written, and not after */
static void test_seal(void)
{
	char file[400];
	struct ddpenv_seal s;
	struct stat sb;
	int fd;

	snprintf(file, sizeof(file), "%s/sealed", tmp);
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	test_cond("a file to seal", fd >= 0 && write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
	if (fd < 0)
		return;
	test_cond("sealed at offset 8", ddpenv_seal_file(fd, 8, err, sizeof(err)) == 0);
	if (t_fail)
		printf("#   %s\n", err);
	test_cond("... its head holds its modification time",
		  pread(fd, &s, sizeof(s), 8) == (ssize_t)sizeof(s) && fstat(fd, &sb) == 0 &&
		  ddpenv_seal_holds(&s, &sb) && sb.st_size == 32);
	test_cond("... which is the clock's, not a time of its own", sb.st_mtim.tv_sec > 1700000000);
	test_cond("... the rest as it was", pread(fd, &s, 8, 0) == 8 && memcmp(&s, "01234567", 8) == 0 &&
		  pread(fd, &s, 8, 24) == 8 && memcmp(&s, "89abcdef", 8) == 0);
	pread(fd, &s, sizeof(s), 8);
	test_cond("a byte written after: the seal no longer holds",
		  pwrite(fd, "x", 1, 30) == 1 && fstat(fd, &sb) == 0 && !ddpenv_seal_holds(&s, &sb));
	test_cond("sealed again, it holds", ddpenv_seal_file(fd, 8, err, sizeof(err)) == 0 &&
		  pread(fd, &s, sizeof(s), 8) == (ssize_t)sizeof(s) && fstat(fd, &sb) == 0 && ddpenv_seal_holds(&s, &sb));
	test_cond("truncated: no longer", ftruncate(fd, 24) == 0 && fstat(fd, &sb) == 0 && !ddpenv_seal_holds(&s, &sb));
	close(fd);
	fd = open(file, O_RDONLY);
	test_cond("a file opened read-only cannot be sealed", fd >= 0 && ddpenv_seal_file(fd, 8, err, sizeof(err)) < 0);
	test_err("... saying why", err, "cannot seal it: Bad file descriptor");
	if (fd >= 0)
		close(fd);
	unlink(file);
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/config-cache-XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	chmod(tmp, 0755);
	snprintf(yaml, sizeof(yaml), "%s/ddp.yaml", tmp);
	snprintf(dir, sizeof(dir), "%s/cache", tmp);
	test_seal();
	test_no_cache();
	if (geteuid() != 0) {
		test_skip("the kept parse (root's, in a folder of root's)", "not root");
	} else {
		test_kept();
		test_user();
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmp);
	return test_report();
}
