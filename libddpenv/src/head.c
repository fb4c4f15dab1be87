/* The head node's address: never loopback, IPv4 or IPv6. */
#include <stdio.h>
#include <string.h>

#include "ddpenv.h"

static int usable(const struct ddpenv_addr *a)
{
	return !ddpenv_addr_is_loopback(a) && !ddpenv_addr_is_linklocal(a);
}

/* First usable address of name; 1 found, 0 none usable, -1 lookup error.
 * seen lists what was skipped, for the error message. */
static int lookup_usable(const char *name, const struct ddpenv_sys *sys,
			 struct ddpenv_addr *out, char *seen, size_t seenlen,
			 char *err, size_t errlen)
{
	struct ddpenv_addr addrs[DDPENV_MAX_ADDRS];
	int n;

	if (ddpenv_addr_parse(name, &addrs[0]) == 0) {
		n = 1; /* a literal: no lookup */
	} else {
		n = sys->lookup(sys->ctx, name, addrs, DDPENV_MAX_ADDRS, err, errlen);
		if (n < 0)
			return -1;
	}
	for (int i = 0; i < n; i++) {
		char buf[DDPENV_ADDRSTRLEN];

		if (usable(&addrs[i])) {
			*out = addrs[i];
			return 1;
		}
		if (ddpenv_addr_format(&addrs[i], buf, sizeof(buf)) == 0) {
			size_t l = strlen(seen);
			snprintf(seen + l, seenlen - l, "%s%s", l ? ", " : "", buf);
		}
	}
	return 0;
}

int ddpenv_head_from_parse(const char *s, enum ddpenv_head_from *out,
			   char *err, size_t errlen)
{
	if (!s || !*s || strcmp(s, "auto") == 0)
		*out = DDPENV_HEAD_AUTO;
	else if (strcmp(s, "name") == 0)
		*out = DDPENV_HEAD_NAME;
	else if (strcmp(s, "nodeaddr") == 0)
		*out = DDPENV_HEAD_NODEADDR;
	else {
		snprintf(err, errlen, "head address source '%.64s': expected auto, name or nodeaddr",
			 s);
		return -1;
	}
	return 0;
}

const char *ddpenv_head_from_name(enum ddpenv_head_from f)
{
	return f == DDPENV_HEAD_NAME ? "name" : f == DDPENV_HEAD_NODEADDR ? "nodeaddr" : "auto";
}

/* Slurm's NodeAddr only. */
static int from_nodeaddr(const char *head, const struct ddpenv_sys *sys,
			 struct ddpenv_addr *out, char *how, size_t howlen,
			 char *err, size_t errlen)
{
	char nodeaddr[DDPENV_HOSTLEN], seen[256] = "", lerr[DDPENV_ERRLEN] = "";
	int r;

	if (!sys->nodeaddr) {
		snprintf(err, errlen,
			 "head node %.64s: head addresses come from Slurm's NodeAddr (head_from=nodeaddr) but Slurm's NodeAddr cannot be read here (no Slurm configuration, or a libslurm without slurm_conf_get_address); expected head_from auto or name",
			 head);
		return -1;
	}
	if (sys->nodeaddr(sys->ctx, head, nodeaddr, sizeof(nodeaddr)) < 0) {
		snprintf(err, errlen,
			 "head node %.64s: head addresses come from Slurm's NodeAddr (head_from=nodeaddr) but Slurm's configuration has no node of that name",
			 head);
		return -1;
	}
	r = lookup_usable(nodeaddr, sys, out, seen, sizeof(seen), lerr, sizeof(lerr));
	if (r > 0) {
		snprintf(how, howlen, "Slurm NodeAddr=%.60s of %.60s", nodeaddr, head);
		return 0;
	}
	if (r < 0)
		snprintf(err, errlen, "head node %.64s: its Slurm NodeAddr %.64s does not resolve: %.150s; expected an address or a resolvable name in slurm.conf",
			 head, nodeaddr, lerr);
	else
		snprintf(err, errlen, "head node %.64s: its Slurm NodeAddr %.64s is loopback/link-local only (%.100s); expected a routable address in slurm.conf",
			 head, nodeaddr, seen);
	return -1;
}

int ddpenv_head_resolve_from(const char *head, enum ddpenv_head_from from,
			     const struct ddpenv_sys *sys, struct ddpenv_addr *out,
			     char *how, size_t howlen, char *err, size_t errlen)
{
	if (!head || !*head) {
		snprintf(err, errlen, "empty head node name");
		return -1;
	}
	if (from == DDPENV_HEAD_NODEADDR)
		return from_nodeaddr(head, sys, out, how, howlen, err, errlen);
	if (from == DDPENV_HEAD_NAME) {
		struct ddpenv_sys no_nodeaddr = *sys;
		no_nodeaddr.nodeaddr = NULL;
		if (ddpenv_head_resolve(head, &no_nodeaddr, out, how, howlen, err, errlen) == 0)
			return 0;
		size_t l = strlen(err);
		snprintf(err + l, errlen > l ? errlen - l : 0,
			 " (head_from=name: Slurm's NodeAddr was not consulted)");
		return -1;
	}
	return ddpenv_head_resolve(head, sys, out, how, howlen, err, errlen);
}

int ddpenv_head_resolve(const char *head, const struct ddpenv_sys *sys,
			struct ddpenv_addr *out, char *how, size_t howlen,
			char *err, size_t errlen)
{
	char seen[256] = "", seen2[256] = "", lerr[DDPENV_ERRLEN] = "";
	char nodeaddr[DDPENV_HOSTLEN];
	int r;

	if (!head || !*head) {
		snprintf(err, errlen, "empty head node name");
		return -1;
	}
	r = lookup_usable(head, sys, out, seen, sizeof(seen), lerr, sizeof(lerr));
	if (r > 0) {
		struct ddpenv_addr lit;
		int literal = ddpenv_addr_parse(head, &lit) == 0;

		snprintf(how, howlen, "%s %.100s",
			 literal ? "literal address" : "resolved by name:", head);
		return 0;
	}
	/* Nothing usable by name: Slurm's own idea of the node's address. */
	if (sys->nodeaddr && sys->nodeaddr(sys->ctx, head, nodeaddr, sizeof(nodeaddr)) == 0 &&
	    strcmp(nodeaddr, head) != 0) {
		char lerr2[DDPENV_ERRLEN] = "";
		int r2 = lookup_usable(nodeaddr, sys, out, seen2, sizeof(seen2),
				       lerr2, sizeof(lerr2));
		if (r2 > 0) {
			snprintf(how, howlen, "Slurm NodeAddr=%.60s of %.60s (%s%.60s)",
				 nodeaddr, head, r < 0 ? "name lookup failed" : "name resolves only to ",
				 r < 0 ? "" : seen);
			return 0;
		}
		snprintf(err, errlen,
			 "head node %.64s: %s%.64s, and its Slurm NodeAddr %.64s %s%.64s; set NodeAddr in slurm.conf to a routable address, or MASTER_ADDR",
			 head, r < 0 ? "lookup failed: " : "resolves only to loopback/link-local ",
			 r < 0 ? lerr : seen, nodeaddr,
			 r2 < 0 ? "does not resolve: " : "is not usable either: ",
			 r2 < 0 ? lerr2 : seen2);
		return -1;
	}
	if (r < 0)
		snprintf(err, errlen, "head node %.64s: %.200s; expected a name that resolves to a non-loopback address (or set MASTER_ADDR)",
			 head, lerr);
	else if (*seen)
		snprintf(err, errlen,
			 "head node %.64s resolves only to loopback/link-local %.100s (Debian's '127.0.1.1 hostname' line in /etc/hosts?) and Slurm has no other NodeAddr for it; set NodeAddr in slurm.conf, fix /etc/hosts, or set MASTER_ADDR",
			 head, seen);
	else
		snprintf(err, errlen, "head node %.64s has no address; expected a resolvable name (or set MASTER_ADDR)",
			 head);
	return -1;
}
