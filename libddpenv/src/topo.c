/*
 * The topology: "ask the hardware" (hwloc discovery of this machine) or
 * read an hwloc XML export.  Everything after loading is in bind.c and
 * only looks at the hwloc objects, so a plan made from an XML file is the
 * plan the plugin makes on that machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "ddpenv.h"
#include "topo.h"

/* Components that would load a GPU vendor's library (libcuda, libnvidia-ml,
 * OpenCL, ROCm SMI, Level Zero) or talk to an X server.  slurmstepd must
 * never load those: they are slow, and a broken driver would hang it.  PCI
 * discovery through /sys tells us all we need: hwloc's linux component does
 * it, as Debian 12's hwloc always does; "pci" is the libpciaccess plugin of
 * Debian 13's libhwloc-plugins, which finds the same devices and leaks the
 * memory libpciaccess allocates at each load (valgrind_local.bats). */
static const char *const no_components[] = {
	"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl", "pci",
};

int ddpenv_topo_load(const char *xml_path, int this_machine, struct ddpenv_topo **out,
		     char *err, size_t errlen)
{
	struct ddpenv_topo *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t) {
		snprintf(err, errlen, "out of memory loading the topology");
		return -1;
	}
	if (hwloc_topology_init(&t->topo) < 0) {
		snprintf(err, errlen, "hwloc_topology_init failed");
		free(t);
		return -1;
	}
	t->inited = 1;
	for (size_t i = 0; i < sizeof(no_components) / sizeof(no_components[0]); i++)
		hwloc_topology_set_components(t->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
					      no_components[i]);
	/* PCI devices (GPUs, NICs, bridges) and their OS devices (mlx5_0, ib0). */
	hwloc_topology_set_io_types_filter(t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	/* Keep the CPUs the cgroup does not allow, so the plan can say where a
	 * GPU's cores are even when the step may not use them.  An export of
	 * this machine (the admin's topology:) still takes the allowed CPUs
	 * from this process's cgroup, as discovery does: the step's cpuset. */
	hwloc_topology_set_flags(t->topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED |
				 (xml_path && this_machine ? HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
				  HWLOC_TOPOLOGY_FLAG_THISSYSTEM_ALLOWED_RESOURCES : 0));
	/* A file that is no hwloc XML export fails in set_xml (hwloc 2.12)
	 * or only in load (2.9): the same message either way. */
	if (xml_path) {
		snprintf(t->source, sizeof(t->source), "%s", xml_path);
		if (hwloc_topology_set_xml(t->topo, xml_path) < 0)
			goto bad_xml;
	} else {
		snprintf(t->source, sizeof(t->source), "this machine (hwloc)");
		t->thissystem = 1;
	}
	if (hwloc_topology_load(t->topo) < 0) {
		if (xml_path)
			goto bad_xml;
		snprintf(err, errlen, "topology %.200s: hwloc could not load it: %m", t->source);
		goto fail;
	}
	t->thissystem = hwloc_topology_is_thissystem(t->topo);
	if (!(t->allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->topo)))) {
		snprintf(err, errlen, "out of memory loading the topology");
		goto fail;
	}
	*out = t;
	return 0;
bad_xml:
	snprintf(err, errlen, "topology %.200s: cannot be read as an hwloc XML file (lstopo --of xml): %m",
		 xml_path);
fail:
	ddpenv_topo_free(t);
	return -1;
}

void ddpenv_topo_free(struct ddpenv_topo *t)
{
	if (!t)
		return;
	if (t->inited)
		hwloc_topology_destroy(t->topo);
	hwloc_bitmap_free(t->allowed);
	free(t);
}

const char *ddpenv_topo_source(const struct ddpenv_topo *t)
{
	return t ? t->source : "";
}

/* ---- what the planner asks of the topology ------------------------------- */

int ddpenv_topo_is_gpu(hwloc_obj_t o)
{
	unsigned cls;

	if (o->type != HWLOC_OBJ_PCI_DEVICE)
		return 0;
	cls = o->attr->pcidev.class_id;
	/* NVIDIA and AMD compute or display functions; NVSwitches (0x0680),
	 * audio functions and a BMC's VGA (ASPEED, Matrox) are not GPUs. */
	return (o->attr->pcidev.vendor_id == 0x10de || o->attr->pcidev.vendor_id == 0x1002) &&
	       (cls == 0x0300 || cls == 0x0302 || cls == 0x0380 || cls == 0x1200);
}

static int busid_cmp(const void *a, const void *b)
{
	hwloc_obj_t x = *(hwloc_obj_t const *)a, y = *(hwloc_obj_t const *)b;
	const struct hwloc_pcidev_attr_s *p = &x->attr->pcidev, *q = &y->attr->pcidev;

	if (p->domain != q->domain)
		return p->domain < q->domain ? -1 : 1;
	if (p->bus != q->bus)
		return p->bus < q->bus ? -1 : 1;
	if (p->dev != q->dev)
		return p->dev < q->dev ? -1 : 1;
	return (int)p->func - (int)q->func;
}

size_t ddpenv_topo_gpus(const struct ddpenv_topo *t, hwloc_obj_t *out, size_t max)
{
	size_t n = 0;

	for (hwloc_obj_t o = hwloc_get_next_pcidev(t->topo, NULL); o;
	     o = hwloc_get_next_pcidev(t->topo, o))
		if (ddpenv_topo_is_gpu(o) && n < max)
			out[n++] = o;
	qsort(out, n, sizeof(*out), busid_cmp);
	return n;
}

void ddpenv_topo_busid(hwloc_obj_t o, char *out, size_t len)
{
	snprintf(out, len, "%04x:%02x:%02x.%01x", o->attr->pcidev.domain, o->attr->pcidev.bus,
		 o->attr->pcidev.dev, o->attr->pcidev.func);
}

size_t ddpenv_topo_gpu_count(const struct ddpenv_topo *t)
{
	size_t n = 0;

	for (hwloc_obj_t o = hwloc_get_next_pcidev(t->topo, NULL); o; o = hwloc_get_next_pcidev(t->topo, o))
		n += ddpenv_topo_is_gpu(o) != 0;
	return n;
}

hwloc_obj_t ddpenv_topo_locality(hwloc_topology_t topo, hwloc_obj_t gpu, hwloc_const_bitmap_t allowed)
{
	hwloc_obj_t d = gpu ? hwloc_get_non_io_ancestor_obj(topo, gpu) : hwloc_get_root_obj(topo);

	while (d && !hwloc_bitmap_intersects(d->cpuset, allowed))
		d = d->parent;
	return d ? d : hwloc_get_root_obj(topo);
}

/* ---- questions a checker asks (ddp-check) ------------------------------- */

static int list_out(hwloc_const_bitmap_t b, char *out, size_t len, char *err, size_t errlen,
		    const char *what)
{
	if (hwloc_bitmap_list_snprintf(out, len, b) >= (int)len) {
		snprintf(err, errlen, "%s: the CPU list does not fit in %zu bytes", what, len);
		return -1;
	}
	return 0;
}

int ddpenv_topo_allowed(const struct ddpenv_topo *t, char *out, size_t len, char *err, size_t errlen)
{
	return list_out(t->allowed, out, len, err, errlen,
			"allowed CPUs");
}

int ddpenv_topo_gpu_near(const struct ddpenv_topo *t, const char *busid, char *cpus,
			 size_t len, int *numa, char *err, size_t errlen)
{
	unsigned dom, bus, dev, fn;
	char tail;
	hwloc_obj_t g = NULL;

	*numa = -1;
	if (!busid || sscanf(busid, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
		snprintf(err, errlen, "GPU bus id '%.64s': expected DOMAIN:BUS:DEVICE.FUNCTION "
			 "(0000:1b:00.0)", busid ? busid : "");
		return -1;
	}
	for (hwloc_obj_t o = hwloc_get_next_pcidev(t->topo, NULL); o && !g;
	     o = hwloc_get_next_pcidev(t->topo, o))
		if (o->attr->pcidev.domain == dom && o->attr->pcidev.bus == bus &&
		    o->attr->pcidev.dev == dev && o->attr->pcidev.func == fn)
			g = o;
	if (!g) {
		snprintf(err, errlen, "GPU bus id %.64s: no such PCI device in the topology (%.200s)",
			 busid, t->source);
		return -1;
	}
	hwloc_const_bitmap_t allowed = t->allowed;
	hwloc_obj_t d = ddpenv_topo_locality(t->topo, g, allowed);
	hwloc_bitmap_t near = hwloc_bitmap_alloc();
	if (!near) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	hwloc_bitmap_and(near, d->cpuset, allowed);
	int rc = list_out(near, cpus, len, err, errlen, busid);
	hwloc_bitmap_free(near);
	hwloc_obj_t nn = hwloc_get_non_io_ancestor_obj(t->topo, g);
	if (nn && nn->nodeset && hwloc_bitmap_weight(nn->nodeset) == 1)
		*numa = hwloc_bitmap_first(nn->nodeset);
	return rc;
}

int ddpenv_cpulist_parse(struct hwloc_bitmap_s *out, const char *list, unsigned max, char *err,
			 size_t errlen)
{
	const char *s = list;

	hwloc_bitmap_zero(out);
	if (!s) {
		snprintf(err, errlen, "no CPU list: expected a list like 0-3,8");
		return -1;
	}
	while (*s) {
		unsigned long v[2] = { 0, 0 };
		int n = 0;
		for (; n < 2; n++) {
			const char *d = s;
			while (*s >= '0' && *s <= '9' && v[n] <= max)
				v[n] = v[n] * 10 + (unsigned long)(*s++ - '0');
			if (s == d || v[n] > max) {
				snprintf(err, errlen, "CPU list '%.64s': %s at offset %zu: expected a list like 0-3,8 "
					 "of decimal numbers up to %u", list, s == d ? "no number" : "a number too large",
					 (size_t)(d - list), max);
				return -1;
			}
			if (n == 1 || *s != '-')
				break;
			s++;
		}
		if (n == 1 && v[1] < v[0]) {
			snprintf(err, errlen, "CPU list '%.64s': range %lu-%lu runs backwards: expected a list like "
				 "0-3,8", list, v[0], v[1]);
			return -1;
		}
		hwloc_bitmap_set_range(out, (unsigned)v[0], (int)(n == 1 ? v[1] : v[0]));
		if (*s && *s++ != ',') {
			snprintf(err, errlen, "CPU list '%.64s': '%c' at offset %zu: expected a list like 0-3,8", list,
				 s[-1], (size_t)(s - 1 - list));
			return -1;
		}
		if (s > list && s[-1] == ',' && !*s) {
			snprintf(err, errlen, "CPU list '%.64s' ends with ',': expected a list like 0-3,8", list);
			return -1;
		}
	}
	return 0;
}

int ddpenv_topo_numa_of(const struct ddpenv_topo *t, const char *cpulist, char *out,
			size_t len, char *err, size_t errlen)
{
	hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
	int rc = -1;

	if (!cpus || !nodes) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (ddpenv_cpulist_parse(cpus, cpulist, DDPENV_MAX_CPU, err, errlen) < 0)
		goto out;
	hwloc_cpuset_to_nodeset(t->topo, cpus, nodes);
	if (hwloc_bitmap_list_snprintf(out, len, nodes) >= (int)len) {
		snprintf(err, errlen, "NUMA list of %.64s does not fit", cpulist);
		goto out;
	}
	rc = 0;
out:
	hwloc_bitmap_free(cpus);
	hwloc_bitmap_free(nodes);
	return rc;
}
