/* What a node's sysfs says of the hardware a step trains over: the PCIe
 * links of a task's GPU and NIC against their maxima (a card in a slot
 * that trained to x8, a riser at Gen3), and the InfiniBand/RoCE ports'
 * states and rates (a port down, one node's HCAs at a lower rate).  Read
 * under a sysfs root (DDP_CHECK_SYSFS, else /sys), so that the tests give
 * a crafted tree; what cannot be read is said, never fatal. */
#ifndef CK_HW_H
#define CK_HW_H

#include <stddef.h>

/* A PCIe link: its device, current and maximum speed and width. */
struct ck_link {
	char name[32];                   /* "gpu", or the NIC's name (mlx5_0, ens1f0) */
	char busid[16];                  /* 0000:1b:00.0; "" unknown */
	char cur_speed[32], max_speed[32];   /* as sysfs says: "16.0 GT/s PCIe" */
	int cur_width, max_width;        /* lanes; 0 unknown */
	char err[96];                    /* why it could not be read, "" read */
};

/* busid's link under sysfs (its bus/pci/devices/BUSID). */
void ck_link_read(const char *sysfs, const char *name, const char *busid, struct ck_link *l);

/* The NIC named (an RDMA device, mlx5_0, or a network interface) and its
 * PCI device: its link, or err. */
void ck_nic_link_read(const char *sysfs, const char *nic, struct ck_link *l);

/* "a|b|c|d|e|f|g" and back: a link in a record. */
int ck_link_encode(const struct ck_link *l, char *out, size_t len);
void ck_link_decode(const char *s, struct ck_link *l);

/* The node's RDMA ports, "dev/port:STATE:rate:link layer;..." in the
 * order the directory lists them ("mlx5_0/1:ACTIVE:200 Gb/sec (4X
 * HDR):InfiniBand"), as many as fit. */
void ck_ib_ports(const char *sysfs, char *out, size_t len);

/* The speed's GT/s in a sysfs speed ("16.0 GT/s PCIe"), 0 unknown. */
double ck_link_gts(const char *speed);
/* What a link of gts GT/s and width lanes carries each way, GB/s, after
 * its encoding (8b/10b to 5 GT/s, 128b/130b to 32, Gen6's FLITs at 64);
 * 0 where either is unknown. */
double ck_pcie_gbps(double gts, int width);

#endif
