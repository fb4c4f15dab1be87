#!/usr/bin/env python3
"""Write the hwloc XML topologies of tests/topologies/ (hwloc 2.x format).

Each machine is described by its published shape: sockets, cores, SMT,
NUMA nodes, the PU numbering Linux gives it, and the PCI tree (root ports,
PCIe switches, GPUs, NICs, NVSwitches, the BMC's VGA) with real vendor and
device ids and bus numbers as lspci shows them on such machines.  hwloc
itself reads every file in the tests (tests/unit/test_bind.c and
`lstopo -i`), so a malformed tree fails there.

    python3 tests/topologies/gen.py      # rewrites the *.xml beside it

ci-vm.xml is not generated: it is `lstopo --of xml --whole-io` of the
2-core build machine, kept as a real export.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bitmap(ids):
    """hwloc's bitmap string: 32-bit words, highest first."""
    ids = set(ids)
    if not ids:
        return "0x0"
    words = []
    for w in range(max(ids) // 32 + 1):
        v = 0
        for b in range(32):
            if w * 32 + b in ids:
                v |= 1 << b
        words.append(v)
    return ",".join("0x%08x" % v for v in reversed(words))


class Obj:
    def __init__(self, type_, attrs=None, cpus=None, nodes=None, infos=None):
        self.type = type_
        self.attrs = dict(attrs or {})
        self.cpus = cpus
        self.nodes = nodes
        self.infos = infos or []
        self.children = []

    def add(self, child):
        self.children.append(child)
        return child


class Writer:
    def __init__(self):
        self.gp = 0
        self.lines = []

    def emit(self, o, depth, allowed_cpus=None, allowed_nodes=None):
        self.gp += 1
        a = {"type": o.type}
        a.update({k: v for k, v in o.attrs.items() if k in ("os_index",)})
        if o.cpus is not None:
            a["cpuset"] = a["complete_cpuset"] = bitmap(o.cpus)
            if allowed_cpus is not None:
                a["allowed_cpuset"] = bitmap(allowed_cpus)
            a["nodeset"] = a["complete_nodeset"] = bitmap(o.nodes)
            if allowed_nodes is not None:
                a["allowed_nodeset"] = bitmap(allowed_nodes)
        a["gp_index"] = str(self.gp)
        a.update({k: v for k, v in o.attrs.items() if k not in ("os_index",)})
        pad = "  " * depth
        attrs = " ".join('%s="%s"' % (k, v) for k, v in a.items())
        if not o.children and not o.infos:
            self.lines.append("%s<object %s/>" % (pad, attrs))
            return
        self.lines.append("%s<object %s>" % (pad, attrs))
        for k, v in o.infos:
            self.lines.append('%s  <info name="%s" value="%s"/>' % (pad, k, v))
        for c in o.children:
            self.emit(c, depth + 1)
        self.lines.append("%s</object>" % pad)


def write(name, machine, allowed_cpus=None, allowed_nodes=None):
    w = Writer()
    w.lines += ['<?xml version="1.0" encoding="UTF-8"?>',
                '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                '<topology version="2.0">']
    w.emit(machine, 1,
           allowed_cpus if allowed_cpus is not None else machine.cpus,
           allowed_nodes if allowed_nodes is not None else machine.nodes)
    w.lines.append("</topology>")
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(w.lines) + "\n")


# ---- CPUs ----------------------------------------------------------------

def cores(parent, core_ids, pu_of, nodes, l3_every=None, l3_size=None):
    """Cores (with their PUs) under parent; an L3 per l3_every cores."""
    target = parent
    for n, c in enumerate(core_ids):
        if l3_every and n % l3_every == 0:
            group = core_ids[n:n + l3_every]
            target = parent.add(Obj("L3Cache", {
                "os_index": str(c // l3_every), "cache_size": str(l3_size), "depth": "3",
                "cache_linesize": "64", "cache_associativity": "16", "cache_type": "0"},
                cpus=[p for g in group for p in pu_of(g)], nodes=nodes))
        core = target.add(Obj("Core", {"os_index": str(c)}, cpus=pu_of(c), nodes=nodes))
        for p in pu_of(c):
            core.add(Obj("PU", {"os_index": str(p)}, cpus=[p], nodes=nodes))


def numa(parent, os_index, cpus, mem_gib):
    return parent.add(Obj("NUMANode", {"os_index": str(os_index),
                                       "local_memory": str(mem_gib << 30)},
                          cpus=cpus, nodes=[os_index]))


# ---- PCI -------------------------------------------------------------------

def pci_type(cls, vendor, device, sub="0000:0000", rev="00"):
    return "%04x [%04x:%04x] [%s] %s" % (cls, vendor, device, sub, rev)


def dev(bus, cls, vendor, device, sub="0000:0000", rev="00", osdevs=(), fn=0, slot=0):
    o = Obj("PCIDev", {"pci_busid": "0000:%02x:%02x.%x" % (bus, slot, fn),
                       "pci_type": pci_type(cls, vendor, device, sub, rev),
                       "pci_link_speed": "31.507692"})
    for name, t in osdevs:
        o.add(Obj("OSDev", {"name": name, "osdev_type": str(t)}))
    return o


def buses(o):
    if o.type == "PCIDev":
        return [int(o.attrs["pci_busid"][5:7], 16)]
    return [b for c in o.children for b in buses(c)]


def switch(upstream_bus, devices, vendor=0x1000, device=0xc030):
    """A PCIe switch: an upstream port at upstream_bus, one downstream port
    per device (each device on its own bus)."""
    up = Obj("Bridge", {"bridge_type": "1-1", "depth": "1",
                        "pci_busid": "0000:%02x:00.0" % upstream_bus,
                        "pci_type": pci_type(0x0604, vendor, device),
                        "pci_link_speed": "31.507692"})
    for i, d in enumerate(devices):
        b = buses(d)
        down = up.add(Obj("Bridge", {"bridge_type": "1-1", "depth": "2",
                                     "pci_busid": "0000:%02x:%02x.0" % (upstream_bus + 1, i),
                                     "pci_type": pci_type(0x0604, vendor, device),
                                     "pci_link_speed": "31.507692",
                                     "bridge_pci": "0000:[%02x-%02x]" % (min(b), max(b))}))
        down.add(d)
    b = buses(up) + [upstream_bus + 1]
    up.attrs["bridge_pci"] = "0000:[%02x-%02x]" % (upstream_bus + 1, max(b))
    return up


def hostbridge(children, lo=None):
    hb = Obj("Bridge", {"bridge_type": "0-1", "depth": "0"})
    allb = []
    for c in children:
        hb.add(c)
        allb += buses(c)
        if c.type == "Bridge" and "pci_busid" in c.attrs:
            allb.append(int(c.attrs["pci_busid"][5:7], 16))
    hb.attrs["bridge_pci"] = "0000:[%02x-%02x]" % (lo if lo is not None else min(allb), max(allb))
    return hb


def rootport(bus, device_obj, vendor=0x1022, device=0x1483):
    """A CPU root port leading to one device."""
    b = buses(device_obj)
    rp = Obj("Bridge", {"bridge_type": "1-1", "depth": "1",
                        "pci_busid": "0000:%02x:01.1" % bus,
                        "pci_type": pci_type(0x0604, vendor, device),
                        "pci_link_speed": "31.507692",
                        "bridge_pci": "0000:[%02x-%02x]" % (min(b), max(b))})
    rp.add(device_obj)
    return rp


H100 = dict(cls=0x0302, vendor=0x10de, device=0x2330, sub="10de:16c1", rev="a1")
A100_SXM = dict(cls=0x0302, vendor=0x10de, device=0x20b0, sub="10de:134f", rev="a1")
A100_PCIE = dict(cls=0x0302, vendor=0x10de, device=0x20b5, sub="10de:1533", rev="a1")
CX7 = dict(cls=0x0207, vendor=0x15b3, device=0x1021, sub="15b3:0041")
CX6 = dict(cls=0x0207, vendor=0x15b3, device=0x101b, sub="15b3:0007")
NVSWITCH = dict(cls=0x0680, vendor=0x10de, device=0x22a3, sub="10de:1796", rev="a1")
ASPEED = dict(cls=0x0300, vendor=0x1a03, device=0x2000, sub="1a03:2000", rev="52")
I210 = dict(cls=0x0200, vendor=0x8086, device=0x1533, sub="8086:0000", rev="03")
X710 = dict(cls=0x0200, vendor=0x8086, device=0x1572, sub="8086:0000", rev="02")

OSDEV_NETWORK, OSDEV_OPENFABRICS = 2, 3


def ib(bus, idx):
    return dev(bus, osdevs=[("ibp%ds0" % bus, OSDEV_NETWORK), ("mlx5_%d" % idx, OSDEV_OPENFABRICS)],
               **CX7)


def machine(cpus, nodes, product, hostname):
    return Obj("Machine", {"os_index": "0"}, cpus=cpus, nodes=nodes,
               infos=[("DMIProductName", product), ("OSName", "Linux"),
                      ("HostName", hostname), ("Architecture", "x86_64"),
                      ("Generator", "tests/topologies/gen.py")])


def package(m, s, cpus, nodes, model):
    return m.add(Obj("Package", {"os_index": str(s)}, cpus=cpus, nodes=nodes,
                     infos=[("CPUModel", model)]))


# ---- the machines ------------------------------------------------------------

def dgx_h100(name, allowed_cpus=None, allowed_nodes=None):
    """DGX H100: 2 x Xeon Platinum 8480C (56 cores, SMT2), one NUMA node per
    socket; 8 H100 SXM, each behind a PCIe switch shared with its
    ConnectX-7 (mlx5_0-7); 4 NVSwitches; 2 storage NICs; BMC VGA."""
    per = 56
    pu_of = lambda c: [c, 2 * per + c]           # noqa: E731 (Linux numbering)
    allc = [p for c in range(2 * per) for p in pu_of(c)]
    m = machine(allc, [0, 1], "DGX H100", "dgx-h100")
    gpu_bus = [[0x1b, 0x43, 0x52, 0x61], [0x9d, 0xc3, 0xd1, 0xdf]]
    nic_bus = [[0x18, 0x40, 0x4f, 0x5e], [0x9a, 0xc0, 0xce, 0xdc]]
    for s in range(2):
        cs = list(range(s * per, (s + 1) * per))
        cpus = [p for c in cs for p in pu_of(c)]
        pk = package(m, s, cpus, [s], "Intel(R) Xeon(R) Platinum 8480C")
        numa(pk, s, cpus, 1024)
        cores(pk, cs, pu_of, [s], l3_every=per, l3_size=110100480)
        for i in range(4):
            g, n = gpu_bus[s][i], nic_bus[s][i]
            pk.add(hostbridge([switch(n - 2, [ib(n, 4 * s + i), dev(g, **H100)])]))
        if s == 0:
            pk.add(hostbridge([rootport(0x04, dev(0x05 + k, **NVSWITCH)) for k in range(1)] +
                              [rootport(0x06 + 2 * k, dev(0x07 + 2 * k, **NVSWITCH)) for k in range(3)]))
            pk.add(hostbridge([rootport(0x02, dev(0x03, osdevs=[("eno3", OSDEV_NETWORK)], **I210)),
                               rootport(0x00, dev(0x01, **ASPEED))], lo=0x00))
        else:
            stor = dev(0xaa, osdevs=[("enp170s0f0np0", OSDEV_NETWORK), ("mlx5_8", OSDEV_OPENFABRICS)],
                       **CX7)
            stor2 = dev(0xaa, fn=1, osdevs=[("enp170s0f1np1", OSDEV_NETWORK),
                                            ("mlx5_9", OSDEV_OPENFABRICS)], **CX7)
            rp = rootport(0xa9, stor)
            rp.add(stor2)
            pk.add(hostbridge([rp]))
    write(name, m, allowed_cpus, allowed_nodes)


def dgx_a100_nps4():
    """DGX A100: 2 x AMD EPYC 7742 (64 cores, SMT2) in NPS4 (4 NUMA nodes
    per socket, 16 cores each, 4-core CCX L3s); 8 A100 SXM in pairs behind
    PCIe switches with their ConnectX-6 (mlx5_0-7) on NUMA nodes 3, 1, 7, 5
    (as nvidia-smi topo -m shows on these machines)."""
    per = 64
    pu_of = lambda c: [c, 2 * per + c]           # noqa: E731
    allc = [p for c in range(2 * per) for p in pu_of(c)]
    m = machine(allc, list(range(8)), "DGXA100 920-23687-2530-000", "dgx-a100")
    # (numa node, gpu buses, nic buses)
    gpus = {3: ([0x07, 0x0f], [0x0c, 0x12]), 1: ([0x47, 0x4e], [0x4b, 0x54]),
            7: ([0x87, 0x90], [0x8d, 0x94]), 5: ([0xb7, 0xbd], [0xba, 0xcc])}
    nic_index = {0x0c: 0, 0x12: 1, 0x4b: 2, 0x54: 3, 0x8d: 4, 0x94: 5, 0xba: 6, 0xcc: 7}
    for s in range(2):
        scpus = [p for c in range(s * per, (s + 1) * per) for p in pu_of(c)]
        pk = package(m, s, scpus, list(range(4 * s, 4 * s + 4)), "AMD EPYC 7742 64-Core Processor")
        for q in range(4):
            nn = 4 * s + q
            cs = list(range(16 * nn, 16 * nn + 16))
            cpus = [p for c in cs for p in pu_of(c)]
            grp = pk.add(Obj("Group", {"os_index": str(nn)}, cpus=cpus, nodes=[nn]))
            numa(grp, nn, cpus, 128)
            cores(grp, cs, pu_of, [nn], l3_every=4, l3_size=16777216)
            if nn in gpus:
                gb, nb = gpus[nn]
                # two second-level switches, each holding a GPU and its NIC
                subs = []
                for k in range(2):
                    lo = min(gb[k], nb[k])
                    subs.append(switch(lo - 2, [ib(nb[k], nic_index[nb[k]]), dev(gb[k], **A100_SXM)]))
                up = switch(min(gb + nb) - 5, subs, vendor=0x1000, device=0xc010)
                grp.add(hostbridge([up]))
            if nn == 0:
                grp.add(hostbridge([rootport(0x62, dev(0x63, **ASPEED))]))
            if nn == 2:
                grp.add(hostbridge([rootport(0x22, dev(0x23, osdevs=[("enp35s0f0", OSDEV_NETWORK)],
                                                        **X710))]))
    write("dgx-a100-epyc-nps4.xml", m)


def single_socket_4gpu():
    """A 4-GPU workstation node: 1 x AMD EPYC 7513 (32 cores, SMT2, NPS1),
    4 A100 PCIe on their own root ports, one ConnectX-6."""
    per = 32
    pu_of = lambda c: [c, per + c]               # noqa: E731
    allc = [p for c in range(per) for p in pu_of(c)]
    m = machine(allc, [0], "Lambda Vector 4-GPU", "ws-4gpu")
    pk = package(m, 0, allc, [0], "AMD EPYC 7513 32-Core Processor")
    numa(pk, 0, allc, 512)
    cores(pk, list(range(per)), pu_of, [0], l3_every=8, l3_size=33554432)
    for bus in (0x01, 0x21, 0x41, 0x61):
        pk.add(hostbridge([rootport(bus - 1 if bus > 1 else 0x00, dev(bus, **A100_PCIE))],
                          lo=bus - 1 if bus > 1 else 0x00))
    pk.add(hostbridge([rootport(0x80, dev(0x81, osdevs=[("ibp129s0", OSDEV_NETWORK),
                                                         ("mlx5_0", OSDEV_OPENFABRICS)], **CX6))]))
    write("single-socket-4gpu.xml", m)


def cpu_2socket():
    """A CPU-only node: 2 x Xeon Gold 6248 (20 cores, SMT2), one NUMA node
    per socket, one 10 GbE X710 port."""
    per = 20
    pu_of = lambda c: [c, 2 * per + c]           # noqa: E731
    allc = [p for c in range(2 * per) for p in pu_of(c)]
    m = machine(allc, [0, 1], "PowerEdge C6420", "cpu-2s")
    for s in range(2):
        cs = list(range(s * per, (s + 1) * per))
        cpus = [p for c in cs for p in pu_of(c)]
        pk = package(m, s, cpus, [s], "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz")
        numa(pk, s, cpus, 192)
        cores(pk, cs, pu_of, [s], l3_every=per, l3_size=28835840)
        if s == 0:
            pk.add(hostbridge([rootport(0x17, dev(0x18, osdevs=[("ens1f0", OSDEV_NETWORK)], **X710))]))
    write("cpu-2socket.xml", m)


def testnode():
    """The test cluster's nodes as the plugin is told to see them (ddp.yaml
    topology:): this build machine's 2 PUs as two packages of one core,
    one NUMA node, and 4 GPUs, two behind each package.  Synthetic: it
    exists so the live tests exercise GPU locality on a machine without
    GPUs; the PU numbers are the machine's own, so binding really applies."""
    m = machine([0, 1], [0], "slurm-ddp test node", "node")
    numa(m, 0, [0, 1], 4)
    for s in range(2):
        pk = package(m, s, [s], [0], "test package")
        cores(pk, [s], lambda c: [c], [0])
        for k in range(2):
            bus = 0x20 + 0x40 * s + 0x10 * k
            pk.add(hostbridge([rootport(bus - 1, dev(bus, **H100))], lo=bus - 1))
    write("testnode.xml", m)


def main():
    dgx_h100("dgx-h100.xml")
    # Slurm's cgroup gives the step half of socket 0: cores 0-27 and their
    # hyperthreads 112-139 (a 4-GPU job on a shared node).
    dgx_h100("dgx-h100-cgroup-half-socket.xml",
             allowed_cpus=list(range(0, 28)) + list(range(112, 140)), allowed_nodes=[0])
    dgx_a100_nps4()
    single_socket_4gpu()
    cpu_2socket()
    testnode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
