/* Head resolution, interface choice, ports. */
#include "test.h"
#include "fakesys.h"

static void test_head(void)
{
	static const struct fake_host hosts[] = {
		{ "node1", { "127.0.1.1" } },                    /* Debian trap */
		{ "node2", { "10.0.0.12" } },
		{ "node3", { "127.0.0.1", "fe80::1", "10.0.0.13" } },
		{ "v6only", { "fd00:dd::5" } },
		{ "dual", { "2001:db8::7", "192.0.2.7" } },
		{ "lonely", { "127.0.1.1" } },
		{ NULL, { NULL } },
	};
	static const struct fake_host nodeaddrs[] = {
		{ "node1", { "10.0.0.11" } },
		{ "lonely", { "lonely" } },                      /* NodeAddr = name */
		{ "unres", { "unres-mgmt" } },
		{ NULL, { NULL } },
	};
	struct fake f = { .hosts = hosts, .nodeaddrs = nodeaddrs };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_addr a;
	char how[DDPENV_HOWLEN], err[DDPENV_ERRLEN], buf[DDPENV_ADDRSTRLEN];

	test_cond("plain name resolves", ddpenv_head_resolve("node2", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("plain name address", buf, "10.0.0.12");
	test_err("plain name how", how, "resolved by name");

	test_cond("127.0.1.1 trap falls back to NodeAddr",
		  ddpenv_head_resolve("node1", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("trap: NodeAddr used", buf, "10.0.0.11");
	test_err("trap: how names NodeAddr", how, "NodeAddr=10.0.0.11");
	test_err("trap: how names the loopback seen", how, "127.0.1.1");

	test_cond("loopback and link-local skipped",
		  ddpenv_head_resolve("node3", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("third address chosen", buf, "10.0.0.13");

	test_cond("IPv6-only head", ddpenv_head_resolve("v6only", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("IPv6 unbracketed", buf, "fd00:dd::5");
	test_cond("IPv6 family", a.family == AF_INET6);

	test_cond("resolver order kept", ddpenv_head_resolve("dual", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("first usable of dual", buf, "2001:db8::7");

	test_cond("literal IPv4 head", ddpenv_head_resolve("192.0.2.9", &sys, &a, how, sizeof(how), err, sizeof(err)) == 0);
	test_err("literal how", how, "literal");
	test_cond("literal needs no lookup", f.lookups == 5);

	test_cond("loopback literal refused", ddpenv_head_resolve("127.0.0.1", &sys, &a, how, sizeof(how), err, sizeof(err)) < 0);

	test_cond("loopback only, NodeAddr same name: error",
		  ddpenv_head_resolve("lonely", &sys, &a, how, sizeof(how), err, sizeof(err)) < 0);
	test_err("error names the head", err, "lonely");
	test_err("error names the loopback address", err, "127.0.1.1");
	test_err("error says what to do", err, "NodeAddr");

	test_cond("unknown name: error", ddpenv_head_resolve("nosuch", &sys, &a, how, sizeof(how), err, sizeof(err)) < 0);
	test_err("unknown: names it", err, "nosuch");
	test_err("unknown: says resolve", err, "resolve");

	test_cond("unresolvable NodeAddr: error", ddpenv_head_resolve("unres", &sys, &a, how, sizeof(how), err, sizeof(err)) < 0);
	test_err("unresolvable NodeAddr named", err, "unres-mgmt");
}

/* head_from: where the head's address comes from, and what it costs. */
static void test_head_from(void)
{
	static const struct fake_host hosts[] = {
		{ "node1", { "127.0.1.1" } },
		{ "node2", { "10.0.0.12" } },
		{ "node4-ib", { "10.9.0.14" } },
		{ NULL, { NULL } },
	};
	static const struct fake_host nodeaddrs[] = {
		{ "node1", { "10.0.0.11" } },
		{ "node2", { "10.0.0.22" } },
		{ "node4", { "node4-ib" } },
		{ NULL, { NULL } },
	};
	struct fake f = { .hosts = hosts, .nodeaddrs = nodeaddrs };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_addr a;
	enum ddpenv_head_from from;
	char how[DDPENV_HOWLEN], err[DDPENV_ERRLEN], buf[DDPENV_ADDRSTRLEN];

	test_cond("head_from: unset is auto", ddpenv_head_from_parse(NULL, &from, err, sizeof(err)) == 0 &&
		  from == DDPENV_HEAD_AUTO);
	test_cond("head_from: nodeaddr", ddpenv_head_from_parse("nodeaddr", &from, err, sizeof(err)) == 0 &&
		  from == DDPENV_HEAD_NODEADDR && strcmp(ddpenv_head_from_name(from), "nodeaddr") == 0);
	test_cond("head_from: 'dns' refused", ddpenv_head_from_parse("dns", &from, err, sizeof(err)) < 0);
	test_err("... naming the value and the choices", err, "'dns': expected auto, name or nodeaddr");

	f.lookups = 0;
	test_cond("nodeaddr: NodeAddr used even though the name resolves",
		  ddpenv_head_resolve_from("node2", DDPENV_HEAD_NODEADDR, &sys, &a, how, sizeof(how),
					   err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("nodeaddr: the address", buf, "10.0.0.22");
	test_err("nodeaddr: how", how, "Slurm NodeAddr=10.0.0.22 of node2");
	test_cond("nodeaddr: an address NodeAddr needs no name lookup", f.lookups == 0);

	test_cond("nodeaddr: a NodeAddr that is a name is looked up",
		  ddpenv_head_resolve_from("node4", DDPENV_HEAD_NODEADDR, &sys, &a, how, sizeof(how),
					   err, sizeof(err)) == 0 && f.lookups == 1);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("nodeaddr: its address", buf, "10.9.0.14");

	test_cond("nodeaddr: a node Slurm does not know is an error",
		  ddpenv_head_resolve_from("node9", DDPENV_HEAD_NODEADDR, &sys, &a, how, sizeof(how),
					   err, sizeof(err)) < 0);
	test_err("... naming the node and the setting", err, "node9: head addresses come from Slurm's NodeAddr (head_from=nodeaddr)");

	test_cond("name: the 127.0.1.1 trap is an error, NodeAddr not consulted",
		  ddpenv_head_resolve_from("node1", DDPENV_HEAD_NAME, &sys, &a, how, sizeof(how),
					   err, sizeof(err)) < 0);
	test_err("... naming the loopback seen", err, "127.0.1.1");
	test_err("... and that NodeAddr was not asked", err, "(head_from=name: Slurm's NodeAddr was not consulted)");
	test_cond("auto: the same trap falls back to NodeAddr",
		  ddpenv_head_resolve_from("node1", DDPENV_HEAD_AUTO, &sys, &a, how, sizeof(how),
					   err, sizeof(err)) == 0);
	ddpenv_addr_format(&a, buf, sizeof(buf));
	test_streq("auto: NodeAddr", buf, "10.0.0.11");
}

static void test_iface(void)
{
	static const struct fake_if ifs[] = {
		{ "lo", "127.0.0.1", 8, UP | IFF_LOOPBACK },
		{ "docker0", "10.1.0.1", 16, UP },           /* overlapping decoy */
		{ "ens17", "10.1.2.3", 24, UP },
		{ "ib0", "10.1.2.4", 16, UP },               /* shorter prefix */
		{ "eth9", "10.1.2.5", 28, 0 },               /* down */
		{ "enp1", "fd00::3", 64, UP },
		{ NULL, NULL, 0, 0 },
	};
	struct ddpenv_addr head;
	char out[IF_NAMESIZE], how[DDPENV_HOWLEN], err[DDPENV_ERRLEN];
	struct ddpenv_ifaddr *v;
	size_t n;
	struct fake f = { .ifs = ifs };

	fake_ifaddrs(&f, &v, &n, err, sizeof(err));
	ddpenv_addr_parse("10.1.2.77", &head);
	test_cond("subnet match", ddpenv_iface_choose(v, n, &head, "ib0", NULL, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0);
	test_streq("longest prefix, never docker, never down", out, "ens17");
	test_err("how names the subnet", how, "10.1.2.3/24");

	ddpenv_addr_parse("fd00::99", &head);
	test_cond("IPv6 subnet match", ddpenv_iface_choose(v, n, &head, NULL, NULL, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0);
	test_streq("IPv6 interface", out, "enp1");

	ddpenv_addr_parse("192.168.5.5", &head);
	test_cond("route fallback", ddpenv_iface_choose(v, n, &head, "ib0", NULL, out, sizeof(out), how, sizeof(how), err, sizeof(err)) == 0);
	test_streq("route interface", out, "ib0");
	test_err("how says route", how, "route");

	test_cond("route through docker0 refused", ddpenv_iface_choose(v, n, &head, "docker0", NULL, out, sizeof(out), how, sizeof(how), err, sizeof(err)) < 0);
	test_err("error names docker0", err, "docker0");
	test_err("error names the head", err, "192.168.5.5");
	test_cond("no route: error", ddpenv_iface_choose(v, n, &head, NULL, NULL, out, sizeof(out), how, sizeof(how), err, sizeof(err)) < 0);
	test_err("no route error says what to set", err, "NCCL_SOCKET_IFNAME");

	test_cond("lo excluded", ddpenv_iface_excluded("lo"));
	test_cond("veth excluded", ddpenv_iface_excluded("veth1234"));
	test_cond("br- excluded", ddpenv_iface_excluded("br-5f3a"));
	test_cond("ens17 allowed", !ddpenv_iface_excluded("ens17"));
	test_cond("ib0 allowed", !ddpenv_iface_excluded("ib0"));
	free(v);
}

static void test_port(void)
{
	uint16_t p, q, seen[DDPENV_PORT_STRIDE];
	char err[DDPENV_ERRLEN];
	int distinct = 1, in_range = 1, cross = 0;

	for (uint32_t s = 0; s < DDPENV_PORT_STRIDE; s++) {
		ddpenv_port_for_step(4242, s, DDPENV_PORT_LO, DDPENV_PORT_HI, &seen[s], err, sizeof(err));
		for (uint32_t t = 0; t < s; t++)
			distinct &= seen[s] != seen[t];
	}
	test_cond("steps of one job get distinct ports", distinct);

	/* Neighbouring jobs (ids within (hi-lo+1)/STRIDE) never collide. */
	for (uint32_t j = 1000; j < 1000 + 768; j++)
		for (uint32_t s = 0; s < 4; s++) {
			ddpenv_port_for_step(j, s, DDPENV_PORT_LO, DDPENV_PORT_HI, &p, err, sizeof(err));
			in_range &= p >= DDPENV_PORT_LO && p <= DDPENV_PORT_HI;
			if (j > 1000) {
				ddpenv_port_for_step(1000, s, DDPENV_PORT_LO, DDPENV_PORT_HI, &q, err, sizeof(err));
				cross += p == q;
			}
		}
	test_cond("every port in range", in_range);
	test_cond("768 neighbouring jobs never collide", cross == 0);

	/* docs/admin.md: steps below 16 of jobs J1, J2 collide exactly when the
	 * steps are equal and J1 = J2 mod 768 (the default range's windows). */
	int claim = 1;
	uint32_t collisions = 0;
	for (uint32_t d = 1; d <= 3 * 768; d++)
		for (uint32_t a = 0; a < DDPENV_PORT_STRIDE; a++)
			for (uint32_t b = 0; b < DDPENV_PORT_STRIDE; b++) {
				ddpenv_port_for_step(5000, a, DDPENV_PORT_LO, DDPENV_PORT_HI, &p, err, sizeof(err));
				ddpenv_port_for_step(5000 + d, b, DDPENV_PORT_LO, DDPENV_PORT_HI, &q, err, sizeof(err));
				claim &= (p == q) == (a == b && d % 768 == 0);
				collisions += p == q;
			}
	test_cond("jobs collide only on the same step with ids 768 apart (1 in 768 for unrelated ids)",
		  claim && collisions == 3 * DDPENV_PORT_STRIDE);
	test_cond("range below the ephemeral range", DDPENV_PORT_HI < 32768);

	ddpenv_port_for_step(0, 0, DDPENV_PORT_LO, DDPENV_PORT_HI, &p, err, sizeof(err));
	test_cond("formula: job 0 step 0 = lo", p == DDPENV_PORT_LO);
	ddpenv_port_for_step(2, 3, DDPENV_PORT_LO, DDPENV_PORT_HI, &p, err, sizeof(err));
	test_cond("formula: job 2 step 3", p == DDPENV_PORT_LO + 2 * DDPENV_PORT_STRIDE + 3);
	ddpenv_port_for_step(UINT32_MAX, UINT32_MAX - 10, DDPENV_PORT_LO, DDPENV_PORT_HI, &p, err, sizeof(err));
	test_cond("huge ids stay in range", p >= DDPENV_PORT_LO && p <= DDPENV_PORT_HI);

	test_cond("inverted range refused", ddpenv_port_for_step(1, 0, 30000, 29999, &p, err, sizeof(err)) < 0);
	test_err("inverted range named", err, "30000-29999");
}

static void test_addr(void)
{
	struct ddpenv_addr a, b;

	test_cond("parse v4", ddpenv_addr_parse("10.2.3.4", &a) == 0 && a.family == AF_INET);
	test_cond("parse v6", ddpenv_addr_parse("::1", &a) == 0 && ddpenv_addr_is_loopback(&a));
	test_cond("v4-mapped loopback", ddpenv_addr_parse("::ffff:127.0.1.1", &a) == 0 && ddpenv_addr_is_loopback(&a));
	test_cond("127.0.1.1 is loopback", ddpenv_addr_parse("127.0.1.1", &a) == 0 && ddpenv_addr_is_loopback(&a));
	test_cond("169.254 is link-local", ddpenv_addr_parse("169.254.1.1", &a) == 0 && ddpenv_addr_is_linklocal(&a));
	test_cond("brackets refused", ddpenv_addr_parse("[::1]", &a) < 0);
	test_cond("name is not an address", ddpenv_addr_parse("node1", &a) < 0);
	ddpenv_addr_parse("10.1.2.3", &a);
	ddpenv_addr_parse("10.1.3.3", &b);
	test_cond("same /16", ddpenv_addr_same_subnet(&a, &b, 16));
	test_cond("not same /24", !ddpenv_addr_same_subnet(&a, &b, 24));
	test_cond("same /23 bit boundary", !ddpenv_addr_same_subnet(&a, &b, 24) && ddpenv_addr_same_subnet(&a, &b, 23));
}

int main(void)
{
	test_addr();
	test_head();
	test_head_from();
	test_iface();
	test_port();
	return test_report();
}
