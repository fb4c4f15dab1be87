/*
 * ddp.yaml: read with libyaml's document loader, checked against the
 * schema as it is walked.  Every error names file:line:column (of the
 * value when there is one), the key and what was expected.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ddpenv.h"
#include "internal.h"
#include "libs.h"

#define MAX_PARTITIONS 64

struct ctx {
	const char *name;
	const struct ddpenv_yaml_fns *y; /* libyaml, opened at the first parse */
	yaml_document_t *doc;
	char *err;
	size_t errlen;
};

static const char *kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE: return "a scalar";
	case YAML_SEQUENCE_NODE: return "a list";
	case YAML_MAPPING_NODE: return "a mapping";
	default: return "nothing";
	}
}

static void where(const struct ctx *x, const yaml_node_t *n, char *buf, size_t len)
{
	snprintf(buf, len, "%.60s:%lu:%lu", x->name, (unsigned long)n->start_mark.line + 1,
		 (unsigned long)n->start_mark.column + 1);
}

__attribute__((format(printf, 4, 5)))
static int fail(const struct ctx *x, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
	char msg[DDPENV_ERRLEN], at[DDPENV_WHERELEN + 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(at, sizeof(at), "%s:%lu:%lu", x->name, (unsigned long)n->start_mark.line + 1,
		 (unsigned long)n->start_mark.column + 1);
	snprintf(x->err, x->errlen, "%s: %s%s%s", at, key ? key : "", key ? ": " : "", msg);
	return -1;
}

/* A scalar's text, refused when it holds a NUL. */
static int scalar(const struct ctx *x, const yaml_node_t *n, const char *key, const char **out)
{
	*out = NULL;
	if (n->type != YAML_SCALAR_NODE) {
		fail(x, n, key, "%s: expected a single value", kind_name(n));
		return -1;
	}
	if (strlen((const char *)n->data.scalar.value) != n->data.scalar.length) {
		fail(x, n, key, "value holds a NUL character");
		return -1;
	}
	*out = (const char *)n->data.scalar.value;
	return 0;
}

static yaml_node_t *node(const struct ctx *x, int id)
{
	return x->y->document_get_node(x->doc, id);
}

static void mark(const struct ctx *x, const yaml_node_t *n, struct ddpenv_settings *s, int k,
		 const char *section)
{
	char at[DDPENV_WHERELEN];

	where(x, n, at, sizeof(at));
	snprintf(s->where[k], sizeof(s->where[k]), "%s%s%.40s%s", at,
		 section ? " (partition " : "", section ? section : "", section ? ")" : "");
	s->set |= 1u << k;
}

static int duplicate(const struct ctx *x, const yaml_node_t *n, const struct ddpenv_settings *s,
		     int k)
{
	if (!(s->set & 1u << k))
		return 0;
	return fail(x, n, ddpenv_setting_name(k), "duplicate key (first given at %s)", s->where[k]);
}

static int list(const struct ctx *x, const yaml_node_t *n, struct ddpenv_settings *s, int k)
{
	const char *key = ddpenv_setting_name(k);
	char why[DDPENV_ERRLEN];

	if (n->type != YAML_SEQUENCE_NODE)
		return fail(x, n, key, "%s: expected a list such as [a, b] (or [] for none)",
			    kind_name(n));
	ddpenv_setting_clear(s, k);
	for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		const yaml_node_t *item = node(x, *it);
		const char *v;

		if (!item || scalar(x, item, key, &v) < 0)
			return -1;
		if (ddpenv_setting_apply(s, k, v, why, sizeof(why)) < 0)
			return fail(x, item, key, "%s", why);
	}
	return 0;
}

static int env_map(const struct ctx *x, const yaml_node_t *n, struct ddpenv_settings *s,
		   const char *section)
{
	static const char *const names[2] = { "nccl", "gloo" };
	char why[DDPENV_ERRLEN], key[32];

	if (n->type != YAML_MAPPING_NODE)
		return fail(x, n, "env", "%s: expected a mapping with nccl: and gloo: sections", kind_name(n));
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const yaml_node_t *kn = node(x, p->key), *vn = node(x, p->value);
		const char *bk;
		int w = -1, k;

		if (!kn || !vn || scalar(x, kn, "env", &bk) < 0)
			return -1;
		for (int i = 0; i < 2; i++)
			if (strcmp(bk, names[i]) == 0)
				w = i;
		if (w < 0)
			return fail(x, kn, "env", "unknown key '%.64s': expected nccl or gloo", bk);
		k = w ? DDPENV_SET_ENV_GLOO : DDPENV_SET_ENV_NCCL;
		if (duplicate(x, kn, s, k) < 0)
			return -1;
		snprintf(key, sizeof(key), "env.%s", names[w]);
		if (vn->type != YAML_MAPPING_NODE)
			return fail(x, vn, key, "%s: expected a mapping of variable names to values (NCCL_IB_HCA: mlx5)",
				    kind_name(vn));
		ddpenv_setting_clear(s, k);
		for (yaml_node_pair_t *q = vn->data.mapping.pairs.start; q < vn->data.mapping.pairs.top; q++) {
			const yaml_node_t *en = node(x, q->key), *ev = node(x, q->value);
			const char *name, *val;

			if (!en || !ev || scalar(x, en, key, &name) < 0 || scalar(x, ev, key, &val) < 0)
				return -1;
			for (size_t i = 0; i < s->nenv[w]; i++)
				if (strcmp(s->env[w][i].key, name) == 0)
					return fail(x, en, key, "duplicate variable %.64s", name);
			if (ddpenv_settings_env_set(s, w, name, val, why, sizeof(why)) < 0)
				return fail(x, en, key, "%s", why);
		}
		mark(x, vn, s, k, section);
	}
	return 0;
}

static int network(const struct ctx *x, const yaml_node_t *n, struct ddpenv_settings *s,
		   const char *section)
{
	char full[32];

	if (n->type != YAML_MAPPING_NODE)
		return fail(x, n, "network", "%s: expected a mapping with cidrs:, include: and exclude:",
			    kind_name(n));
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const yaml_node_t *kn = node(x, p->key), *vn = node(x, p->value);
		const char *name;
		int k;

		if (!kn || !vn || scalar(x, kn, "network", &name) < 0)
			return -1;
		snprintf(full, sizeof(full), "network.%.20s", name);
		k = ddpenv_setting_lookup(full);
		if (k < 0)
			return fail(x, kn, "network", "unknown key '%.64s': expected cidrs, include or exclude", name);
		if (duplicate(x, kn, s, k) < 0 || list(x, vn, s, k) < 0)
			return -1;
		mark(x, vn, s, k, section);
	}
	return 0;
}

static int partitions(const struct ctx *x, const yaml_node_t *n, struct ddpenv_config *c);

static int settings(const struct ctx *x, const yaml_node_t *n, struct ddpenv_settings *s,
		    struct ddpenv_config *top, const char *section)
{
	int seen_network = 0, seen_env = 0, seen_parts = 0;
	char why[DDPENV_ERRLEN];

	if (n->type != YAML_MAPPING_NODE)
		return fail(x, n, section ? section : NULL, "%s: expected a mapping of settings (key: value)",
			    kind_name(n));
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const yaml_node_t *kn = node(x, p->key), *vn = node(x, p->value);
		const char *name, *v;
		int k;

		if (!kn || !vn || scalar(x, kn, NULL, &name) < 0)
			return -1;
		if (strcmp(name, "network") == 0 || strcmp(name, "env") == 0 ||
		    (top && strcmp(name, "partitions") == 0)) {
			int *seen = name[0] == 'n' ? &seen_network : name[0] == 'e' ? &seen_env : &seen_parts;
			if (*seen)
				return fail(x, kn, name, "duplicate key");
			*seen = 1;
			if (name[0] == 'n' && network(x, vn, s, section) < 0)
				return -1;
			if (name[0] == 'e' && env_map(x, vn, s, section) < 0)
				return -1;
			if (name[0] == 'p' && partitions(x, vn, top) < 0)
				return -1;
			continue;
		}
		k = ddpenv_setting_lookup(name);
		if (k < 0 || strchr(name, '.'))
			return fail(x, kn, NULL, "unknown key '%.64s': expected default_backend, allowed_backends, port_range, network, head_from, omp_num_threads, env, rdzv_secret, user_overrides, bind, topology, bind_nic, nvidia_gpus, gres_order, topology_cache%s",
				    name, top ? " or partitions" : "");
		/* slurmstepd learns a step's partition only from its
		 * environment (SLURM_JOB_PARTITION, what srun sent): a secret
		 * chosen by it would be the user's choice */
		if (section && k == DDPENV_SET_RDZV_SECRET)
			return fail(x, kn, name, "not in a partition section (partition %s): slurmstepd knows a "
				    "step's partition only from the environment srun sent, which the user controls; "
				    "set rdzv_secret at the top level", section);
		if (duplicate(x, kn, s, k) < 0)
			return -1;
		if (ddpenv_setting_is_list(k)) {
			if (list(x, vn, s, k) < 0)
				return -1;
		} else {
			if (scalar(x, vn, name, &v) < 0)
				return -1;
			if (ddpenv_setting_apply(s, k, v, why, sizeof(why)) < 0)
				return fail(x, vn, name, "%s", why);
		}
		mark(x, vn, s, k, section);
	}
	return 0;
}

static int partitions(const struct ctx *x, const yaml_node_t *n, struct ddpenv_config *c)
{
	size_t count;

	if (n->type != YAML_MAPPING_NODE)
		return fail(x, n, "partitions", "%s: expected a mapping of partition names to settings",
			    kind_name(n));
	count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	if (count > MAX_PARTITIONS)
		return fail(x, n, "partitions", "%zu sections: expected at most %d", count, MAX_PARTITIONS);
	free(c->parts);
	c->nparts = 0;
	c->parts = count ? calloc(count, sizeof(*c->parts)) : NULL;
	if (count && !c->parts)
		return fail(x, n, "partitions", "out of memory");
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const yaml_node_t *kn = node(x, p->key), *vn = node(x, p->value);
		struct ddpenv_partition *part;
		const char *name;

		if (!kn || !vn || scalar(x, kn, "partitions", &name) < 0)
			return -1;
		if (!*name || strlen(name) >= sizeof(part->name) || strpbrk(name, ", \t\n"))
			return fail(x, kn, "partitions", "'%.64s': expected a partition name (no commas or spaces, under %zu characters)",
				    name, sizeof(part->name));
		for (size_t i = 0; i < c->nparts; i++)
			if (strcmp(c->parts[i].name, name) == 0)
				return fail(x, kn, "partitions", "duplicate partition %s", name);
		part = &c->parts[c->nparts++];
		snprintf(part->name, sizeof(part->name), "%s", name);
		ddpenv_settings_defaults(&part->s);
		if (settings(x, vn, &part->s, NULL, part->name) < 0)
			return -1;
	}
	return 0;
}

/* Every layer combination a step can meet must fit: base + each partition
 * (+ the plugstack layer when given). */
static int check_merges(const struct ddpenv_config *c, const struct ddpenv_settings *top,
			const char *what, char *err, size_t errlen)
{
	struct ddpenv_settings *tmp = malloc(sizeof(*tmp));
	char why[DDPENV_ERRLEN];
	int rv = 0;

	if (!tmp) {
		snprintf(err, errlen, "%.200s: out of memory", c->path);
		return -1;
	}
	for (size_t i = 0; i <= c->nparts && rv == 0; i++) {
		*tmp = c->base;
		if ((i && ddpenv_settings_merge(tmp, &c->parts[i - 1].s, why, sizeof(why)) < 0) ||
		    (top && ddpenv_settings_merge(tmp, top, why, sizeof(why)) < 0)) {
			snprintf(err, errlen, "%.200s%s%.64s: %s", what, i ? ": partition " : "",
				 i ? c->parts[i - 1].name : "", why);
			rv = -1;
		}
	}
	free(tmp);
	return rv;
}

void ddpenv_config_init(struct ddpenv_config *c)
{
	memset(c, 0, sizeof(*c));
	ddpenv_settings_defaults(&c->base);
	ddpenv_settings_defaults(&c->plugstack);
	snprintf(c->path, sizeof(c->path), "%s", DDPENV_CONFIG_PATH);
}

void ddpenv_config_free(struct ddpenv_config *c)
{
	free(c->parts);
	c->parts = NULL;
	c->nparts = 0;
}

static int parse_error(const char *name, const yaml_parser_t *p, char *err, size_t errlen)
{
	if (p->error == YAML_READER_ERROR) {
		snprintf(err, errlen, "%.200s: byte %zu: malformed YAML: %s: expected UTF-8 text",
			 name, p->problem_offset, p->problem ? p->problem : "unreadable");
		return -1;
	}
	snprintf(err, errlen, "%.200s:%lu:%lu: malformed YAML: %s%s%s", name,
		 (unsigned long)p->problem_mark.line + 1, (unsigned long)p->problem_mark.column + 1,
		 p->problem ? p->problem : "error", p->context ? " " : "", p->context ? p->context : "");
	return -1;
}

int ddpenv_config_parse(struct ddpenv_config *c, const char *name, const void *buf,
			size_t len, char *err, size_t errlen)
{
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	yaml_node_t *root;
	struct ctx x = { name, NULL, &doc, err, errlen };
	const struct ddpenv_yaml_fns *y;
	char why[DDPENV_ERRLEN];
	int rv = -1;

	ddpenv_config_free(c);
	ddpenv_settings_defaults(&c->base);
	if (len > DDPENV_CONFIG_MAX_BYTES) {
		snprintf(err, errlen, "%.200s: %zu bytes: expected a configuration under %u bytes",
			 name, len, DDPENV_CONFIG_MAX_BYTES);
		return -1;
	}
	if (!(y = x.y = ddpenv_yaml(why, sizeof(why)))) {
		snprintf(err, errlen, "%.200s: %s", name, why);
		return -1;
	}
	if (!y->parser_initialize(&parser)) {
		snprintf(err, errlen, "%.200s: out of memory starting the YAML parser", name);
		return -1;
	}
	y->parser_set_input_string(&parser, buf, len);
	if (!y->parser_load(&parser, &doc)) {
		parse_error(name, &parser, err, errlen);
		y->parser_delete(&parser);
		return -1;
	}
	root = y->document_get_root_node(&doc);
	if (!root) {
		snprintf(err, errlen, "%.200s: empty: expected a mapping of settings (write {} to take every default)",
			 name);
		goto out;
	}
	if (!y->parser_load(&parser, &extra)) {
		parse_error(name, &parser, err, errlen);
		goto out;
	}
	if (y->document_get_root_node(&extra)) {
		snprintf(err, errlen, "%.200s:%lu: a second YAML document: expected one", name,
			 (unsigned long)y->document_get_root_node(&extra)->start_mark.line + 1);
		y->document_delete(&extra);
		goto out;
	}
	y->document_delete(&extra);
	if (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0) {
		snprintf(err, errlen, "%.200s: empty: expected a mapping of settings (write {} to take every default)",
			 name);
		goto out;
	}
	if (settings(&x, root, &c->base, c, NULL) < 0 ||
	    check_merges(c, NULL, name, err, errlen) < 0)
		goto out;
	c->from_file = 1;
	rv = 0;
out:
	if (rv < 0) {
		ddpenv_config_free(c);
		ddpenv_settings_defaults(&c->base);
	}
	y->document_delete(&doc);
	y->parser_delete(&parser);
	return rv;
}

int ddpenv_config_load(struct ddpenv_config *c, const char *path, int must_exist,
		       char *err, size_t errlen)
{
	struct stat sb;

	return ddpenv_config_load_stat(c, path, must_exist, &sb, err, errlen);
}

int ddpenv_config_load_stat(struct ddpenv_config *c, const char *path, int must_exist,
			    struct stat *sbp, char *err, size_t errlen)
{
	struct stat sb;
	char *buf = NULL;
	size_t len = 0;
	int fd, rv = -1;

	if (!path || !*path) {
		snprintf(err, errlen, "config path is empty: expected the path of a ddp.yaml");
		return -1;
	}
	if (strlen(path) >= sizeof(c->path)) {
		snprintf(err, errlen, "config path of %zu characters: expected under %zu",
			 strlen(path), sizeof(c->path));
		return -1;
	}
	if (path != c->path)
		snprintf(c->path, sizeof(c->path), "%s", path);
	/* O_NONBLOCK: a FIFO named by mistake must not hang slurmstepd. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT && !must_exist) {
			ddpenv_config_free(c);
			ddpenv_settings_defaults(&c->base);
			c->from_file = 0;
			memset(sbp, 0, sizeof(*sbp));
			return 0;
		}
		snprintf(err, errlen, "%.200s: %s: expected a readable YAML file", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &sb) < 0) {
		snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
		goto out;
	}
	if (S_ISDIR(sb.st_mode)) {
		snprintf(err, errlen, "%.200s: is a directory: expected a YAML file", path);
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%.200s: not a regular file: expected a YAML file", path);
		goto out;
	}
	if ((uint64_t)sb.st_size > DDPENV_CONFIG_MAX_BYTES) {
		snprintf(err, errlen, "%.200s: %lld bytes: expected a configuration under %u bytes",
			 path, (long long)sb.st_size, DDPENV_CONFIG_MAX_BYTES);
		goto out;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		snprintf(err, errlen, "%.200s: out of memory", path);
		goto out;
	}
	while (len <= (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + len, (size_t)sb.st_size + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	rv = ddpenv_config_parse(c, path, buf, len, err, errlen);
	*sbp = sb;
out:
	free(buf);
	close(fd);
	return rv;
}

int ddpenv_config_plugstack(struct ddpenv_config *c, int ac, char *const *av,
			    char *err, size_t errlen)
{
	char why[DDPENV_ERRLEN], name[64];

	const char *kept = ddpenv_config_cache_arg(ac, av);

	if (*kept && *kept != '/') {
		snprintf(err, errlen, "plugstack.conf argument 'config_cache=%.64s': expected an absolute folder path, or nothing for no cache",
			 kept);
		return -1;
	}
	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "config=", 7) == 0 &&
		    ddpenv_config_load_kept(c, av[i] + 7, 1, kept, NULL, err, errlen) < 0)
			return -1;
	ddpenv_settings_defaults(&c->plugstack);
	for (int i = 0; i < ac; i++) {
		const char *eq = strchr(av[i], '=');
		int k;

		if (strncmp(av[i], "config=", 7) == 0 || strncmp(av[i], "config_cache=", 13) == 0)
			continue;
		if (!eq || (size_t)(eq - av[i]) >= sizeof(name)) {
			snprintf(err, errlen, "plugstack.conf argument '%.64s': expected key=value", av[i]);
			return -1;
		}
		memcpy(name, av[i], (size_t)(eq - av[i]));
		name[eq - av[i]] = '\0';
		if (strncmp(name, "env.nccl.", 9) == 0 || strncmp(name, "env.gloo.", 9) == 0) {
			int w = name[4] == 'g';
			k = w ? DDPENV_SET_ENV_GLOO : DDPENV_SET_ENV_NCCL;
			if (ddpenv_settings_env_set(&c->plugstack, w, name + 9, eq + 1, why, sizeof(why)) < 0)
				goto bad;
		} else {
			k = ddpenv_setting_lookup(name);
			if (k < 0 || k == DDPENV_SET_ENV_NCCL || k == DDPENV_SET_ENV_GLOO) {
				snprintf(err, errlen, "plugstack.conf argument '%.64s': unknown key '%s': expected config, config_cache, default_backend, allowed_backends, port_range, network.cidrs, network.include, network.exclude, head_from, omp_num_threads, env.nccl.NAME, env.gloo.NAME, rdzv_secret, user_overrides, bind, topology, bind_nic, nvidia_gpus, gres_order or topology_cache",
					 av[i], name);
				return -1;
			}
			if (c->plugstack.set & 1u << k) {
				snprintf(err, errlen, "plugstack.conf argument '%.64s': %s given twice", av[i], name);
				return -1;
			}
			if ((ddpenv_setting_is_list(k) ?
			     ddpenv_setting_apply_csv(&c->plugstack, k, eq + 1, why, sizeof(why)) :
			     ddpenv_setting_apply(&c->plugstack, k, eq + 1, why, sizeof(why))) < 0)
				goto bad;
		}
		c->plugstack.set |= 1u << k;
		snprintf(c->plugstack.where[k], sizeof(c->plugstack.where[k]), "plugstack.conf %.40s=", name);
		continue;
bad:
		snprintf(err, errlen, "plugstack.conf argument '%.64s': %s", av[i], why);
		return -1;
	}
	return check_merges(c, &c->plugstack, c->path, err, errlen);
}

int ddpenv_config_effective(const struct ddpenv_config *c, const char *partition,
			    const struct ddpenv_env *env, struct ddpenv_settings *out,
			    char *err, size_t errlen)
{
	char why[DDPENV_ERRLEN];

	*out = c->base;
	if (partition && *partition) {
		for (const char *p = partition; *p;) {
			size_t len = strcspn(p, ",");
			const struct ddpenv_partition *hit = NULL;

			for (size_t i = 0; i < c->nparts && !hit; i++)
				if (strlen(c->parts[i].name) == len && strncmp(c->parts[i].name, p, len) == 0)
					hit = &c->parts[i];
			if (hit) {
				if (ddpenv_settings_merge(out, &hit->s, err, errlen) < 0)
					return -1;
				break;
			}
			p += len;
			if (*p == ',')
				p++;
		}
	}
	if (ddpenv_settings_merge(out, &c->plugstack, err, errlen) < 0)
		return -1;
	if (!env)
		return 0;
	for (const struct ddpenv_user_key *u = ddpenv_user_keys; u->var; u++) {
		const char *v = ddpenv_env_get(env, u->var);
		int k = (int)u->setting;
		int rc;

		if (!v)
			continue;
		if (!(out->user_overrides & 1u << k)) {
			snprintf(err, errlen, "%s=%.64s: this cluster does not let users override %s (user_overrides, %s); unset it",
				 u->var, v, ddpenv_setting_name(u->setting), out->where[DDPENV_SET_USER_OVERRIDES]);
			return -1;
		}
		if (strcmp(u->var, "DDP_PORT") == 0) {
			char range[32];
			uint32_t port;

			if (ddpenv_parse_u32("DDP_PORT", v, &port, why, sizeof(why)) < 0 ||
			    port == 0 || port > 65535) {
				snprintf(err, errlen, "DDP_PORT=%.64s (set in the job's environment): expected a port number 1-65535",
					 v);
				return -1;
			}
			snprintf(range, sizeof(range), "%u-%u", port, port);
			rc = ddpenv_setting_apply(out, k, range, why, sizeof(why));
		} else if (ddpenv_setting_is_list(k)) {
			rc = ddpenv_setting_apply_csv(out, k, v, why, sizeof(why));
		} else {
			rc = ddpenv_setting_apply(out, k, v, why, sizeof(why));
		}
		if (rc < 0) {
			snprintf(err, errlen, "%s (set in the job's environment): %s", u->var, why);
			return -1;
		}
		out->set |= 1u << k;
		snprintf(out->where[k], sizeof(out->where[k]), "%s (the job's environment)", u->var);
	}
	return 0;
}
